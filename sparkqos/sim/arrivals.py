"""Arrival patterns for the simulator, as ``[(time, amount), ...]`` lists.

``on_off_pareto``: the self-similar traffic of Jiang §5.1 and Chain §6 — a superposition of
flows alternating Pareto-distributed ON (a = 1.4) and OFF (a = 1.2) periods, sending with
exponential inter-arrival times while ON. ``poisson_shifting``: thesis §6.1 — Poisson arrivals
whose mean is redrawn every few time units, with occasional bursts at about twice the mean.
Both bin arrivals into parcels of width ``resolution`` stamped at the start of the bin.
"""

from __future__ import annotations

import math

import numpy as np

from sparkqos.errors import WorkloadError

#: Pareto shapes of the ON and OFF periods (Jiang §5.1).
ON_SHAPE = 1.4
OFF_SHAPE = 1.2


def _check(name: str, value: float, low: float = 0.0, strict: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise WorkloadError(f"{name} must be a finite number, got {value!r}")
    if value < low or (strict and value == low):
        raise WorkloadError(f"{name} must be {'>' if strict else '>='} {low}, got {value!r}")
    return float(value)


def _bin(times: np.ndarray, until: float, resolution: float) -> list[tuple[float, float]]:
    times = times[(times >= 0) & (times < until)]
    if times.size == 0:
        return []
    idx = np.floor(times / resolution).astype(np.int64)
    bins, counts = np.unique(idx, return_counts=True)
    return [(round(float(b) * resolution, 9), float(c)) for b, c in zip(bins, counts)]


def on_off_pareto(
    mean_rate: float,
    until: float,
    flows: int = 64,
    on_scale: float = 1.0,
    resolution: float = 1.0,
    seed: int | None = None,
) -> list[tuple[float, float]]:
    """Bursty arrivals averaging ``mean_rate`` tuples per time unit over a long run.

    Each of ``flows`` flows starts at a random phase, then alternates ON periods
    (Pareto a = 1.4, minimum ``on_scale``) and OFF periods (Pareto a = 1.2, scaled so a flow is
    ON 3.5 / 9.5 of the time); while ON it sends at the rate that makes the flows' sum average
    ``mean_rate``. Heavy tails make the empirical mean of a short run vary a lot.

    >>> a = on_off_pareto(10.0, 200, seed=1)
    >>> a[:2]
    [(0.0, 8.0), (1.0, 14.0)]
    """
    mean_rate = _check("mean_rate", mean_rate)
    until = _check("until", until)
    resolution = _check("resolution", resolution)
    on_scale = _check("on_scale", on_scale)
    if not isinstance(flows, int) or flows < 1:
        raise WorkloadError(f"flows must be an integer >= 1, got {flows!r}")
    rng = np.random.default_rng(seed)
    mean_on = ON_SHAPE * on_scale / (ON_SHAPE - 1)
    mean_off = OFF_SHAPE * on_scale / (OFF_SHAPE - 1)
    on_rate = mean_rate / flows * (mean_on + mean_off) / mean_on
    chunks = []
    for _ in range(flows):
        t = -rng.uniform(0, mean_on + mean_off)  # random phase so flows do not start together
        on = rng.random() < mean_on / (mean_on + mean_off)
        while t < until:
            if on:
                length = on_scale * (1 + rng.pareto(ON_SHAPE))
                # heavy tails: an ON period can outlast the horizon by far; draw only what falls inside
                lo, hi = max(t, 0.0), min(t + length, until)
                if hi > lo:
                    n = rng.poisson(on_rate * (hi - lo))
                    if n:
                        chunks.append(rng.uniform(lo, hi, n))
            else:
                length = on_scale * (1 + rng.pareto(OFF_SHAPE))
            t += length
            on = not on
    times = np.concatenate(chunks) if chunks else np.empty(0)
    return _bin(times, until, resolution)


def poisson_shifting(
    mean_rate: float,
    until: float,
    period: float = 5.0,
    spread: float = 0.3,
    burst_probability: float = 0.25,
    burst_factor: float = 2.0,
    resolution: float = 1.0,
    seed: int | None = None,
) -> list[tuple[float, float]]:
    """Poisson arrivals whose mean is redrawn every ``period`` time units (thesis §6.1).

    Each period's mean is ``mean_rate`` × U(1 − spread, 1 + spread); with probability
    ``burst_probability`` the period is a burst at ``burst_factor`` × that mean.

    >>> a = poisson_shifting(5.0, 20, seed=3)
    >>> len(a), a[0][0]
    (20, 0.0)
    """
    mean_rate = _check("mean_rate", mean_rate)
    until = _check("until", until)
    period = _check("period", period)
    resolution = _check("resolution", resolution)
    spread = _check("spread", spread, 0.0, strict=False)
    burst_factor = _check("burst_factor", burst_factor)
    if not 0 <= burst_probability <= 1:
        raise WorkloadError(f"burst_probability must be within [0, 1], got {burst_probability!r}")
    if spread >= 1:
        raise WorkloadError(f"spread must be < 1, got {spread!r}")
    rng = np.random.default_rng(seed)
    out: list[tuple[float, float]] = []
    n_bins = int(math.ceil(until / resolution - 1e-9))
    rate = mean_rate
    for k in range(n_bins):
        t = k * resolution
        if k == 0 or math.floor(t / period + 1e-9) != math.floor((t - resolution) / period + 1e-9):
            rate = mean_rate * rng.uniform(1 - spread, 1 + spread)
            if rng.random() < burst_probability:
                rate *= burst_factor
        n = rng.poisson(rate * resolution)
        if n:
            out.append((round(t, 9), float(n)))
    return out
