"""What a run promises each query, trigger after trigger: its latency target and its shedding.

:class:`Service` resolves ``RunConfig.slo`` and ``RunConfig.shed`` (by query or class,
:mod:`sparkqos.runtime.targets`) against the plan, sheds what a query with an age let fall behind
(:class:`~sparkqos.runtime.shedding.Shedder`), reports each trigger's targets met
(``sloTargetS``, ``sloViolations``: rows written later than the target, ``sloMet``) and says once
per query when a target cannot be met (:class:`SloWarning`, with the measured capacity): its own
work needs more than the executor's whole time (its rows per second in, times the executor seconds
one row costs along its operators), or it keeps falling further behind its target although the
targets serve it first (the executor's share the run leaves it — between triggers, beside Spark
and the other targets — is below what its input needs), for :attr:`Service.OVER` triggers in a row.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from sparkqos.errors import RunnerError
from sparkqos.executor.plan import CompiledPlan
from sparkqos.executor.state import ExecutorState
from sparkqos.runtime.shedding import Shedder
from sparkqos.runtime.targets import per_query

__all__ = ["Service", "SloWarning"]


class _Mark(NamedTuple):
    """One trigger of a query past its target, as :meth:`Service.check_capacity` keeps it."""

    time: float  # the record's timestamp
    behind: float  # how old the query's oldest queued row was
    taken: float  # rows its leaves had taken in so far
    busy: float  # its operators' executor seconds in the trigger
    total_busy: float  # the executor's
    rows_in: int  # the trigger's rows in


class SloWarning(UserWarning):
    """A latency target cannot be met: the query's own work exceeds the executor's capacity."""


class Service:
    """Targets and shedding of one run (see the module). ``keeps_dead``: the run has a
    dead-letter table, which shedding needs (shed rows are never silent)."""

    #: Consecutive triggers over capacity before a target is said to be out of reach.
    OVER = 8

    def __init__(self, compiled: CompiledPlan, config: Any, keeps_dead: bool):
        plan = compiled.plan
        self.plan = plan
        classes = {q: query.klass for q, query in plan.queries.items()}
        self.slo = per_query("slo", config.slo, classes)
        ages = per_query("shed", config.shed, classes)
        if ages and not keeps_dead:
            raise RunnerError(
                "shed= writes the rows it drops to the dead-letter table: give output= or dead_letter=",
                parameter="shed",
                value=dict(config.shed),
                expected="a run with a dead-letter table",
            )
        self.shedder = Shedder(compiled, ages) if ages else None
        #: The newest event time taken in (checkpointed): what shedding ages count from.
        self.stream_time = -math.inf
        self._over = dict.fromkeys(self.slo, 0)
        #: Per query with a target, the triggers since its oldest row went past the target.
        self._falling: dict[str, list[_Mark]] = {}
        self._leaves = {q: [op for op in plan.queries[q].operators if plan.is_leaf(op)] for q in self.slo}
        self._said: set[str] = set()
        self._input_rate = math.nan  # rows per second into the stream, smoothed

    def observe(self, newest: float) -> None:
        """A batch's newest event time (or its start, without event times)."""
        if math.isfinite(newest):
            self.stream_time = max(self.stream_time, newest)

    def shed(self, state: ExecutorState, batch_id: int) -> tuple[pa.Table | None, dict[str, int]]:
        """Rows shed in batch ``batch_id`` (dead letters, rows per query); nothing without a policy."""
        if self.shedder is None or not math.isfinite(self.stream_time):
            return None, {}
        return self.shedder.shed(state, self.stream_time, batch_id)

    def slo_columns(self, query: str, delays: np.ndarray) -> dict[str, float]:
        """``sloTargetS``, ``sloViolations`` and ``sloMet`` (1 or 0; NaN without a target or rows)."""
        target = self.slo.get(query)
        if target is None:
            return {"sloTargetS": math.nan, "sloViolations": math.nan, "sloMet": math.nan}
        late = int(np.count_nonzero(delays > target))
        return {"sloTargetS": target, "sloViolations": float(late), "sloMet": math.nan if not delays.size else float(late == 0)}

    def run_s(self, state: ExecutorState, query: str) -> float:
        """Seconds one run of each of ``query``'s operators takes, on their means so far."""
        total = 0.0
        for op in self.plan.queries[query].operators:
            s = state.stats.operator(op)
            if s.runs:
                total += s.busy_time / s.runs
        return total

    def work_s(self, state: ExecutorState, query: str) -> float:
        """Executor seconds one input row of ``query`` costs along its operators (each operator's
        cost per row times the rows that reach it per input row)."""
        plan = self.plan
        total, reach = 0.0, {}
        for op in plan.queries[query].operators:  # leaf to root
            inputs = [reach.get(i, 1.0) for i in plan[op].inputs]
            rows = sum(inputs) / len(inputs) if inputs else 1.0
            total += rows * state.cost(op)
            reach[op] = rows * state.selectivity(op)
        return total

    def check_capacity(self, state: ExecutorState, progress: dict[str, Any]) -> None:
        """Say once per query with a target that the target cannot be met: when its own work
        has needed more than the executor's whole time for :attr:`OVER` triggers (its rows in
        per second times its executor seconds per row), or when for :attr:`OVER` triggers its
        oldest queued row has been older than the target and grown older although latency
        targets put it first (what it could take in is then its capacity, measured)."""
        if not self.slo:
            return
        rate = progress.get("inputRowsPerSecond", math.nan)
        if math.isfinite(rate):
            self._input_rate = rate if math.isnan(self._input_rate) else 0.875 * self._input_rate + 0.125 * rate
        rows = {r["query"]: r for r in progress.get("queries", ())}
        now, total_busy = progress.get("timestamp", math.nan), progress.get("executorBusyS", math.nan)
        for query, target in self.slo.items():
            if query in self._said:
                continue
            if math.isfinite(self._input_rate):
                need = self._input_rate * self.work_s(state, query)  # executor seconds per second
                self._over[query] = self._over[query] + 1 if need > 1.0 else 0
                if self._over[query] >= self.OVER:
                    self._say(
                        query,
                        target,
                        f"its own work needs {need:.2f} executor seconds per second at {self._input_rate:.0f} rows/s "
                        f"in, so it can take at most {self._input_rate / need:.0f} rows/s",
                    )
                    continue
            row = rows.get(query, {})
            behind = row.get("behindS", math.nan)
            taken = sum(state.stats.operator(op).consumed for op in self._leaves[query])
            mark = _Mark(now, behind, taken, row.get("executorBusyS", math.nan), total_busy, progress.get("numInputRows", 0))
            if not (behind > target):  # also NaN: nothing queued
                self._falling.pop(query, None)
                continue
            streak = self._falling.setdefault(query, [])
            streak.append(mark)
            if len(streak) <= self.OVER:
                continue
            first, last = streak.pop(0), streak[-1]
            if not all(m.behind >= first.behind for m in streak) or not last.behind > first.behind:
                continue  # older than the target, but not falling further behind
            span = last.time - first.time
            if not span > 0:
                continue
            took = (last.taken - first.taken) / span
            came = sum(m.rows_in for m in streak) / span
            share = sum(m.busy for m in streak) / max(sum(m.total_busy for m in streak), 1e-9)
            had = f" while its operators had {min(share, 1.0):.0%} of the executor's time" if math.isfinite(share) else ""
            self._say(
                query,
                target,
                f"for {self.OVER} triggers its oldest queued row aged from {first.behind:.1f} s to {last.behind:.1f} s"
                f"{had}; it took in {took:.0f} rows/s of the {came:.0f} rows/s that came in",
            )

    def _say(self, query: str, target: float, why: str) -> None:
        self._said.add(query)
        warnings.warn(
            f"sparkqos: the latency target of query {query!r} ({target * 1000:.0f} ms) cannot be met: {why}; "
            "lower the input rate, add capacity, or let it shed (shed=)",
            SloWarning,
            stacklevel=3,
        )
