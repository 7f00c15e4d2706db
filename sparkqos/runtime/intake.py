"""Bounded intake: how much a trigger takes in, and how far behind the stream is.

A source bounds what one micro-batch reads (the built-in sources' ``maxRowsPerTrigger``, Kafka's
``maxOffsetsPerTrigger``, a file source's ``maxFilesPerTrigger``). Whatever the source, the trigger
loop bounds what sits in the executor's queues (:class:`Intake`):

* **back-pressure**: a trigger does not ingest while more than ``max_queued_rows`` rows are queued;
  it waits (at most ``wait_s``) for the executor to serve them. Spark starts no new micro-batch
  while ``foreachBatch`` runs, so what is not yet taken in stays in the source (stream time not yet
  read, Kafka offsets not yet consumed) instead of in memory;
* **spill**: queued bytes in memory above ``memory_limit_bytes`` spill to Arrow IPC files
  (:class:`~sparkqos.executor.state.ExecutorState`), so one oversized batch costs disk, not an
  out-of-memory error;
* **a warning** (:class:`BacklogWarning`, at most every ``warn_every_s``) when the executor cannot
  keep up: the wait ran out with the queues still over the bound, or the stream falls further
  behind trigger after trigger.

:class:`BacklogTracker` reads how far behind the stream is from the event times of the batches
(any source with an event-time column): the lag is the wall clock minus the newest event time
taken in; while it exceeds ``catch_up_lag_s`` the stream is catching up, at the speed event time
advances per wall second minus one, so the ETA is lag / (speed − 1), and the rows behind are the
lag times the rows per second of event time the recent batches carried.

This module does not import pyspark.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass
from typing import Any

from sparkqos.errors import RunnerError, check_number
from sparkqos.executor.report import RunReport
from sparkqos.report.console import catch_up_line

__all__ = [
    "Admission",
    "BacklogTracker",
    "BacklogWarning",
    "ClassBacklog",
    "Intake",
    "behind_cause",
    "catch_up_line",
    "warn_backlog",
]


class BacklogWarning(UserWarning):
    """The executor does not keep up with what the stream delivers (see :mod:`sparkqos.runtime.intake`)."""


@dataclass(frozen=True, kw_only=True)
class Intake:
    """What a trigger may take in (see the module docstring).

    ``max_queued_rows``: a trigger waits, up to ``wait_s`` seconds, for the executor to bring the
    rows queued over all queries' queues under this before it ingests (None: never waits); so the
    peak queued is at most this plus one batch times the queries reading the stream.
    Only the top class's queries count (all queries when no class stands above the others): a
    lower class's backlog does not hold a batch back — its bytes beyond ``memory_limit_bytes``
    spill to disk (lower classes first), so after downtime the top class is served across the
    whole backlog, at the speed of its own work. ``max_spilled_bytes`` bounds the disk: beyond it
    the trigger waits as for the top class (None: no bound).
    ``memory_limit_bytes``: queued bytes in memory beyond it spill to disk (None: never; an
    ``executor_args`` value wins). ``catch_up_lag_s``: an event-time lag beyond it is reported as
    catching up. ``warn_every_s``: least seconds between two :class:`BacklogWarning`.

    >>> Intake().max_queued_rows, Intake(max_queued_rows=None).max_queued_rows
    (200000, None)
    """

    max_queued_rows: int | None = 200_000
    wait_s: float = 30.0
    memory_limit_bytes: int | None = 192 << 20
    max_spilled_bytes: int | None = 8 << 30
    catch_up_lag_s: float = 5.0
    warn_every_s: float = 30.0

    def __post_init__(self) -> None:
        check_number("max_queued_rows", self.max_queued_rows, low=1, integer=True, none_ok=True, error=RunnerError)
        check_number("memory_limit_bytes", self.memory_limit_bytes, low=0, integer=True, none_ok=True, error=RunnerError)
        check_number("max_spilled_bytes", self.max_spilled_bytes, low=0, integer=True, none_ok=True, error=RunnerError)
        for name in ("wait_s", "catch_up_lag_s", "warn_every_s"):
            check_number(name, getattr(self, name), low=0, error=RunnerError)


#: The progress fields of :meth:`BacklogTracker.observe`.
BEHIND = ("backlogS", "backlogRows", "catchUpEtaS")


class BacklogTracker:
    """How far behind the stream is, trigger after trigger (module docstring).

    :meth:`observe` takes each batch's wall time, row count and newest event time (epoch seconds;
    NaN when the stream has no event time) and returns ``backlogS`` (0 when the lag is under
    ``catch_up_lag_s``), ``backlogRows`` and ``catchUpEtaS``: finite while the lag shrinks, inf once
    it has grown for :attr:`GROWING` batches in a row, NaN otherwise (a constant lag: event times
    that are merely old, as a trace replayed with its recorded timestamps). Batches without rows
    say nothing about the lag (a quiet source is not behind).

    >>> t = BacklogTracker(catch_up_lag_s=5.0)
    >>> t.observe(1000.0, 500, 700.0)["backlogS"]  # 300 s behind
    300.0
    >>> b = t.observe(1001.0, 500, 710.0)  # 10 s of stream per wall second: 9 s of lag gone
    >>> b["backlogS"], round(b["catchUpEtaS"]), b["backlogRows"]
    (291.0, 32, 14550.0)
    """

    #: Consecutive batches of growing lag after which the stream is falling behind.
    GROWING = 8
    #: Event seconds per wall second above which the lag counts as shrinking.
    CATCHING_UP = 1.05
    #: Smoothing weight of the speed and row-rate estimates (old · w + new · (1 − w), eq 3.1).
    W = 0.75

    def __init__(self, catch_up_lag_s: float = 5.0):
        self.catch_up_lag_s = catch_up_lag_s
        self._last: tuple[float, float] | None = None  # (wall, newest event time)
        self._speed = math.nan  # event seconds per wall second
        self._rate = math.nan  # rows per event second
        self.growing = 0  # consecutive batches after which the lag grew

    def _smooth(self, old: float, new: float) -> float:
        return new if math.isnan(old) else old * self.W + new * (1 - self.W)

    def observe(self, wall: float, rows: int, newest_event: float) -> dict[str, float]:
        if not rows or not math.isfinite(newest_event):
            return {"backlogS": 0.0, "backlogRows": 0.0, "catchUpEtaS": 0.0}
        last = self._last
        if last is not None and newest_event > last[1] and wall > last[0]:
            span = newest_event - last[1]
            self._speed = self._smooth(self._speed, span / (wall - last[0]))
            self._rate = self._smooth(self._rate, rows / span)
            lag_before = last[0] - last[1]
            self.growing = self.growing + 1 if wall - newest_event > lag_before + 1e-9 else 0
        self._last = (wall, max(newest_event, last[1]) if last is not None else newest_event)
        return self._behind(wall)

    def _behind(self, wall: float) -> dict[str, float]:
        assert self._last is not None
        lag = wall - self._last[1]
        if lag < self.catch_up_lag_s:
            return {"backlogS": 0.0, "backlogRows": 0.0, "catchUpEtaS": 0.0}
        rows = lag * self._rate if math.isfinite(self._rate) else math.nan
        if self.growing >= self.GROWING:
            eta = math.inf
        elif self._speed > self.CATCHING_UP:
            eta = lag / (self._speed - 1)
        else:
            eta = math.nan
        return {"backlogS": lag, "backlogRows": rows, "catchUpEtaS": eta}


class ClassBacklog:
    """How far behind each query is, from its own queues: ``behindS`` (the wall clock minus the
    event time of its oldest queued row; 0 with nothing queued) and ``catchUpEtaS`` (its queued
    rows over the rate they shrink, smoothed; inf once they grew :attr:`GROWING` triggers in a
    row, NaN while neither; 0 with nothing queued). Per query, so the top class's ETA is its own,
    and it holds as long as rows are queued, whatever the stream's newest event time says.

    >>> from sparkqos import Operator, Plan
    >>> b = ClassBacklog(Plan([Operator("a", ("s",), 1.0, 1.0, query="q")], streams=["s"]))
    >>> class Q:
    ...     def __init__(self, n): self.n = n
    ...     def queued(self, op): return self.n
    >>> _ = b.observe(10.0, Q(1000), {"q": 0.0})
    >>> b.observe(11.0, Q(800), {"q": 1.0})["q"]
    {'behindS': 10.0, 'catchUpEtaS': 4.0}
    """

    GROWING = BacklogTracker.GROWING
    W = BacklogTracker.W

    def __init__(self, plan: Any):
        self.operators = {q: tuple(query.operators) for q, query in plan.queries.items()}
        self._last: dict[str, tuple[float, float]] = {}  # query -> (wall, rows)
        self._slope: dict[str, float] = {}  # rows per second, smoothed (negative: shrinking)
        self._growing: dict[str, int] = {}

    def observe(self, wall: float, queued: Any, oldest: dict[str, float]) -> dict[str, dict[str, float]]:
        out = {}
        for q, ops in self.operators.items():
            rows = float(sum(queued.queued(op) for op in ops))
            last = self._last.get(q)
            if last is not None and wall > last[0]:
                slope = (rows - last[1]) / (wall - last[0])
                old = self._slope.get(q)
                self._slope[q] = slope if old is None else old * self.W + slope * (1 - self.W)
                self._growing[q] = self._growing.get(q, 0) + 1 if rows > last[1] else 0
            self._last[q] = (wall, rows)
            first = oldest.get(q, math.nan)
            behind = wall - first if rows > 0 and math.isfinite(first) else 0.0
            slope = self._slope.get(q, math.nan)
            if rows <= 0:
                eta = 0.0
            elif self._growing.get(q, 0) >= self.GROWING:
                eta = math.inf
            elif slope < 0:
                eta = rows / -slope
            else:
                eta = math.nan
            out[q] = {"behindS": behind, "catchUpEtaS": eta}
        return out


class Admission:
    """Back-pressure before a trigger takes its batch in (``config.intake``): wait while more than
    ``max_queued_rows`` rows are queued for the top class's queries (all queries without a top
    class), or more than ``max_spilled_bytes`` lie spilled on disk, and the executor can serve
    them — for the continuous worker, or serving them here — for at most ``wait_s``. The lower
    classes' backlog does not hold the batch back: it spills, so the top class is served across
    the whole backlog. :meth:`warn` issues a :class:`BacklogWarning`, at most every ``warn_every_s``."""

    def __init__(self, config: Any, executor: Any, plan: Any, top_class: str | None):
        self.intake = config.intake
        self.name = config.name
        self.executor = executor
        self.top_class = top_class
        #: What the bound counts: the operators of the top class's queries (all without one).
        self.operators = tuple(op for q in plan.queries.values() if top_class in (None, q.klass) for op in q.operators)
        self._warned_at = -math.inf  # time.monotonic() of the last BacklogWarning

    def over(self) -> bool:
        """The top class's queues or the spilled bytes are over their bounds."""
        intake, state = self.intake, self.executor.state
        if intake.max_queued_rows is not None and sum(state.queued(op) for op in self.operators) > intake.max_queued_rows:
            return True
        return intake.max_spilled_bytes is not None and state.spilled_bytes > intake.max_spilled_bytes

    def admit(self, worker: Any, budget_s: float) -> tuple[float, RunReport]:
        """Wait until the batch may come in (see the class); the seconds waited and what was
        served here. Warns when the wait ran out."""
        served = RunReport()
        if not self.over():
            return 0.0, served
        intake, t0 = self.intake, time.monotonic()
        if worker is not None and worker.alive:
            still = worker.wait_while(self.over, intake.wait_s)
        else:
            still = self.over()
            while still and time.monotonic() - t0 < intake.wait_s:
                report = self.executor.run(budget_s)
                served.add(report)
                still = self.over()
                if report.idle:
                    break
        waited = time.monotonic() - t0
        if still and waited >= intake.wait_s:
            state = self.executor.state
            top = sum(state.queued(op) for op in self.operators)
            whose = f"for class {self.top_class}" if self.top_class is not None else "in all"
            self.warn(
                f"{top:.0f} rows still queued {whose} ({state.spilled_bytes / 1e6:.0f} MB spilled) after waiting "
                f"{waited:.0f} s for the executor (Intake.max_queued_rows = {intake.max_queued_rows}, "
                f"max_spilled_bytes = {intake.max_spilled_bytes}); taking the next batch in anyway. Lower the "
                "source's rate or its per-trigger limit (maxRowsPerTrigger), or give the executor more time."
            )
        return waited, served

    def warn(self, message: str) -> None:
        """A :class:`BacklogWarning`, at most every ``Intake.warn_every_s``."""
        now = time.monotonic()
        if now - self._warned_at >= self.intake.warn_every_s:
            self._warned_at = now
            warn_backlog(f"sparkqos {self.name!r}: {message}")


def behind_cause(waited_s: float) -> str:
    """Why a stream falls behind, from what the intake waited for the executor this trigger.

    >>> behind_cause(1.5)
    'the executor does not keep up with the stream (the intake waited 1.5 s for it)'
    >>> behind_cause(0.0).split(":")[0]
    "Spark's micro-batches do not keep up with the stream"
    """
    if waited_s > 0:
        return f"the executor does not keep up with the stream (the intake waited {waited_s:.1f} s for it)"
    return (
        "Spark's micro-batches do not keep up with the stream: the executor did not hold the intake back, so the "
        "rows wait in the source, where no class goes first (reading the source and handing the batch over, "
        "toArrow, and the trigger's own work take longer than the stream time they bring in)"
    )


def warn_backlog(message: str) -> None:
    """Issue a :class:`BacklogWarning` (the caller throttles)."""
    warnings.warn(message, BacklogWarning, stacklevel=3)
