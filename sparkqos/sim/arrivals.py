"""Arrival patterns for the simulator, as ``[(time, amount), ...]`` lists.

``on_off_pareto``: the self-similar traffic of Jiang §5.1 and Chain §6 — a superposition of
flows alternating Pareto-distributed ON (a = 1.4) and OFF (a = 1.2) periods, sending with
exponential inter-arrival times while ON. ``poisson_shifting``: thesis §6.1 — Poisson arrivals
whose mean is redrawn every few time units, with occasional bursts at about twice the mean.
Both bin arrivals into parcels of width ``resolution`` stamped at the start of the bin.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

from sparkqos.errors import WorkloadError, check_number

#: Pareto shapes of the ON and OFF periods (Jiang §5.1).
ON_SHAPE = 1.4
OFF_SHAPE = 1.2


def flow_periods(
    rng: np.random.Generator,
    on_scale: float = 1.0,
    until: float = math.inf,
    off_scale: float | None = None,
    stationary: bool = False,
) -> Iterator[tuple[float, float, bool]]:
    """``(start, end, on)`` periods of one ON/OFF flow up to ``until`` (endless by default).

    ON lengths are Pareto a = 1.4 with minimum ``on_scale``, OFF lengths Pareto a = 1.2 with
    minimum ``off_scale`` (default ``on_scale``). The flow starts in ON with probability equal to
    its long-run ON fraction. By default it starts at a random phase with a fresh period; with
    ``stationary`` it starts at 0 inside a period drawn from the residual-life distribution, so the
    expected ON fraction is the long-run one at every instant (a fresh start is ON too often for a
    long while, because the heavy OFF tail is under-represented early). The caller may draw from
    ``rng`` between periods: the draws are interleaved in a fixed order, so a seed fixes the sequence.

    >>> p = flow_periods(np.random.default_rng(0), 1.0)
    >>> [(round(a, 2), round(b, 2), on) for a, b, on in (next(p), next(p))]
    [(-6.05, -5.04, True), (-5.04, -4.03, False)]
    """
    off_scale = on_scale if off_scale is None else off_scale
    mean_on, mean_off = _mean_periods(on_scale, off_scale)
    if stationary:
        t = 0.0
        on = rng.random() < mean_on / (mean_on + mean_off)
        shape, scale = (ON_SHAPE, on_scale) if on else (OFF_SHAPE, off_scale)
        # residual life of Pareto(a, b): U(0, b) with probability (a - 1)/a, else Pareto(a - 1, b)
        if rng.random() < (shape - 1) / shape:
            first = scale * rng.random()
        else:
            first = scale * (1 + rng.pareto(shape - 1))
        if t < until:
            yield t, t + first, on
        t += first
        on = not on
    else:
        t = -rng.uniform(0, mean_on + mean_off)
        on = rng.random() < mean_on / (mean_on + mean_off)
    while t < until:
        length = on_scale * (1 + rng.pareto(ON_SHAPE)) if on else off_scale * (1 + rng.pareto(OFF_SHAPE))
        yield t, t + length, on
        t += length
        on = not on


def _mean_periods(on_scale: float, off_scale: float | None = None) -> tuple[float, float]:
    off_scale = on_scale if off_scale is None else off_scale
    return ON_SHAPE * on_scale / (ON_SHAPE - 1), OFF_SHAPE * off_scale / (OFF_SHAPE - 1)


def flow_on_rate(mean_rate: float, flows: int, on_scale: float = 1.0, off_scale: float | None = None) -> float:
    """Sending rate of one flow while ON so that ``flows`` flows together average ``mean_rate``.

    >>> round(flow_on_rate(95.0, 10), 6)  # ON 3.5 of every 9.5 time units on average
    25.785714
    """
    mean_on, mean_off = _mean_periods(on_scale, off_scale)
    return mean_rate / flows * (mean_on + mean_off) / mean_on


def shifted_rate(
    rng: np.random.Generator, mean_rate: float, spread: float, burst_probability: float, burst_factor: float
) -> float:
    """One period's Poisson mean (thesis §6.1): ``mean_rate`` × U(1 ± spread), × ``burst_factor``
    with probability ``burst_probability``.

    >>> shifted_rate(np.random.default_rng(0), 10.0, 0.0, 1.0, 2.0)
    20.0
    """
    rate = mean_rate * rng.uniform(1 - spread, 1 + spread)
    if rng.random() < burst_probability:
        rate *= burst_factor
    return rate


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
    *,
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
    for name, value in (("mean_rate", mean_rate), ("until", until), ("resolution", resolution), ("on_scale", on_scale)):
        check_number(name, value, low=0, low_open=True, error=WorkloadError)
    check_number("flows", flows, low=1, integer=True, error=WorkloadError)
    mean_rate, until, resolution, on_scale = float(mean_rate), float(until), float(resolution), float(on_scale)
    rng = np.random.default_rng(seed)
    rate = flow_on_rate(mean_rate, flows, on_scale)
    chunks = []
    for _ in range(flows):
        for start, end, on in flow_periods(rng, on_scale, until):
            if on:
                # heavy tails: an ON period can outlast the horizon by far; draw only what falls inside
                lo, hi = max(start, 0.0), min(end, until)
                if hi > lo:
                    n = rng.poisson(rate * (hi - lo))
                    if n:
                        chunks.append(rng.uniform(lo, hi, n))
    times = np.concatenate(chunks) if chunks else np.empty(0)
    return _bin(times, until, resolution)


def poisson_shifting(
    mean_rate: float,
    until: float,
    *,
    seed: int | None = None,
    period: float = 5.0,
    spread: float = 0.3,
    burst_probability: float = 0.25,
    burst_factor: float = 2.0,
    resolution: float = 1.0,
) -> list[tuple[float, float]]:
    """Poisson arrivals whose mean is redrawn every ``period`` time units (thesis §6.1).

    Each period's mean is ``mean_rate`` × U(1 − spread, 1 + spread); with probability
    ``burst_probability`` the period is a burst at ``burst_factor`` × that mean.

    >>> a = poisson_shifting(5.0, 20, seed=3)
    >>> len(a), a[0][0]
    (20, 0.0)
    """
    for name, value in (
        ("mean_rate", mean_rate),
        ("until", until),
        ("period", period),
        ("resolution", resolution),
        ("burst_factor", burst_factor),
    ):
        check_number(name, value, low=0, low_open=True, error=WorkloadError)
    check_number("spread", spread, low=0, high=1, high_open=True, error=WorkloadError)
    check_number("burst_probability", burst_probability, low=0, high=1, error=WorkloadError)
    mean_rate, until, period, resolution = float(mean_rate), float(until), float(period), float(resolution)
    spread, burst_factor = float(spread), float(burst_factor)
    rng = np.random.default_rng(seed)
    out: list[tuple[float, float]] = []
    n_bins = int(math.ceil(until / resolution - 1e-9))
    rate = mean_rate
    for k in range(n_bins):
        t = k * resolution
        if k == 0 or math.floor(t / period + 1e-9) != math.floor((t - resolution) / period + 1e-9):
            rate = shifted_rate(rng, mean_rate, spread, burst_probability, burst_factor)
        n = rng.poisson(rate * resolution)
        if n:
            out.append((round(t, 9), float(n)))
    return out
