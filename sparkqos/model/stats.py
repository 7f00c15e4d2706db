"""Statistics gathered while a plan runs (thesis §3.3).

Per operator: selectivity (eq 3.2), output rate (eq 3.3), cost per tuple (the inverse of eq 3.4's
rate), throughput (eq 3.5). Per plan: throughput and output rate (eq 3.6–3.7), queued tuples
(eq 3.8), tuple delay. Rates and ratios are smoothed with eq 3.1,
``avg ← old·w + new·(1 − w)``, w = 0.875 by default.

Engines feed it; schedulers read the smoothed values through their state. Nothing here knows
about Arrow, Spark or clocks: callers pass durations and timestamps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sparkqos.errors import CheckpointError, check_number

DEFAULT_WEIGHT = 0.875


def smooth(old: float | None, new: float, w: float = DEFAULT_WEIGHT) -> float:
    """Eq 3.1: the weighted average of the previous average and a new value (None: no history).

    >>> smooth(None, 4.0), smooth(4.0, 12.0)
    (4.0, 5.0)
    """
    return new if old is None or not math.isfinite(old) else old * w + new * (1.0 - w)


@dataclass
class OperatorStats:
    """Running totals and smoothed estimates for one operator."""

    runs: int = 0
    consumed: float = 0.0  # O(n^p_total): input tuples processed
    produced: float = 0.0  # O(n^o_total): output tuples
    busy_time: float = 0.0  # O(t^r_total): time spent running
    selectivity: float | None = None  # smoothed σ
    cost: float | None = None  # smoothed time per input tuple
    output_rate: float | None = None  # smoothed output tuples per unit of running time

    @property
    def throughput(self) -> float:
        """Eq 3.5: tuples output so far."""
        return self.produced


@dataclass
class PlanStats:
    """Plan-level totals and smoothed estimates."""

    output_total: float = 0.0  # Q(t_q), eq 3.6
    delay_total: float = 0.0  # Σ amount × delay over outputs
    output_rate: float | None = None  # smoothed outputs per time unit (eq 3.7 over windows)
    queued: float | None = None  # smoothed queued tuples (eq 3.8)
    delay: float | None = None  # smoothed mean tuple delay of outputs
    age: float | None = None  # smoothed mean age of queued tuples (eq 3.9)
    last_window_end: float | None = None


class StatisticsGatherer:
    """Collects per-operator and per-plan statistics; smoothing weight ``w`` (eq 3.1).

    ``record_run`` after each operator run; ``record_output`` for each parcel leaving a root;
    ``close_window`` at the end of each statistics period (thesis: every second) with the queued
    tuples and their mean age at that moment, which folds the period's rate and delay into the
    smoothed plan statistics. ``start`` is when the first period began (None: the first
    period only sets the clock).

    >>> g = StatisticsGatherer()
    >>> g.record_run("O1", consumed=10, produced=2, seconds=0.5)
    >>> g.operator("O1").selectivity, g.operator("O1").cost
    (0.2, 0.05)
    >>> g.record_output(2, delay=0.25)
    >>> g.close_window(now=1.0, queued=8, mean_age=0.1).output_rate
    2.0
    """

    def __init__(self, w: float = DEFAULT_WEIGHT, start: float | None = 0.0):
        self.w = float(check_number("w", w, low=0, high=1, high_open=True, where="smoothing weight "))
        self._ops: dict[str, OperatorStats] = {}
        self.plan = PlanStats()
        self._window_output = 0.0
        self._window_delay = 0.0
        self._window_start: float | None = start
        self.version = 0

    def operator(self, name: str) -> OperatorStats:
        stats = self._ops.get(name)
        if stats is None:
            stats = self._ops[name] = OperatorStats()
        return stats

    def operators(self) -> dict[str, OperatorStats]:
        return dict(self._ops)

    def record_run(self, op: str, consumed: float, produced: float, seconds: float) -> None:
        """One run of ``op``: it consumed/produced that many tuples in ``seconds`` of work."""
        where = f"run statistics of {op!r}: "
        check_number("consumed", consumed, low=0, where=where)
        check_number("produced", produced, low=0, where=where)
        check_number("seconds", seconds, low=0, where=where)
        s = self.operator(op)
        s.runs += 1
        s.consumed += consumed
        s.produced += produced
        s.busy_time += seconds
        if consumed > 0:
            s.selectivity = smooth(s.selectivity, produced / consumed, self.w)
            if seconds > 0:
                s.cost = smooth(s.cost, seconds / consumed, self.w)
        if seconds > 0:
            s.output_rate = smooth(s.output_rate, produced / seconds, self.w)

    def record_output(self, amount: float, delay: float) -> None:
        """``amount`` tuples left a query root ``delay`` after they arrived."""
        self.plan.output_total += amount
        self.plan.delay_total += amount * delay
        self._window_output += amount
        self._window_delay += amount * delay

    def close_window(self, now: float, queued: float, mean_age: float | None = None) -> PlanStats:
        """End a statistics period at time ``now``; returns the updated plan statistics."""
        p = self.plan
        start = self._window_start if self._window_start is not None else p.last_window_end
        if start is not None and now > start:
            p.output_rate = smooth(p.output_rate, self._window_output / (now - start), self.w)
        if self._window_output > 0:
            p.delay = smooth(p.delay, self._window_delay / self._window_output, self.w)
        p.queued = smooth(p.queued, float(queued), self.w)
        if mean_age is not None:
            p.age = smooth(p.age, float(mean_age), self.w)
        p.last_window_end = now
        self._window_start = now
        self._window_output = 0.0
        self._window_delay = 0.0
        self.version += 1
        return p

    def to_dict(self) -> dict:
        """Serialisable snapshot (for checkpoints)."""
        return {
            "w": self.w,
            "operators": {k: vars(v).copy() for k, v in self._ops.items()},
            "plan": vars(self.plan).copy(),
            "window": [self._window_output, self._window_delay, self._window_start],
            "version": self.version,
        }

    @classmethod
    def from_dict(cls, d: dict) -> StatisticsGatherer:
        """Restore :meth:`to_dict`; a snapshot that does not fit raises :class:`CheckpointError`
        naming what does not."""
        keys = {"w", "operators", "plan", "window", "version"}
        if not isinstance(d, dict) or set(d) != keys:
            got = sorted(d) if isinstance(d, dict) else type(d).__name__
            raise CheckpointError(f"statistics state must have keys {sorted(keys)}, got {got}")
        where = "statistics state: "
        g = cls(check_number("w", d["w"], low=0, high=1, high_open=True, error=CheckpointError, where=where))
        try:
            g._ops = {k: OperatorStats(**v) for k, v in d["operators"].items()}
            g.plan = PlanStats(**d["plan"])
            g._window_output, g._window_delay, g._window_start = d["window"]
        except (AttributeError, TypeError, ValueError) as exc:
            raise CheckpointError(f"{where}does not fit this version of sparkqos: {exc}") from None
        g.version = check_number("version", d["version"], low=0, integer=True, error=CheckpointError, where=where)
        return g
