"""The runner's progress reporter: one progress record per trigger, in memory and in the metrics table.

A trigger's record has one shape, built in one place (:meth:`ProgressReporter.report`):

* Spark's ``StreamingQueryProgress`` keys for the whole plan — ``id``, ``batchId``, ``timestamp``,
  ``numInputRows``, ``numOutputRows``, ``inputRowsPerSecond``, ``processedRowsPerSecond``,
  ``durationMs.triggerExecution`` — and ours: ``processedRows`` and ``deadLetteredRows`` (their
  sum is ``numInputRows``), ``queuedRows``, ``queuedBytes``, ``delayMsMean/P50/P99/Max``,
  ``strategy`` (in force at the end of the trigger) and ``scores`` (adaptive's, else ``{}``),
  ``executorRows`` (rows the executor consumed since the last record), ``executorBusyS``
  (seconds it served units since the last record: inside the trigger, and between triggers with
  the continuous worker), ``executorBusyFraction`` (that over the wall time since the last
  record — the first: since the trigger started), ``executorCpuS`` (CPU seconds the executor's
  threads used meanwhile: with COS's cluster threads, more than one per second),
  ``executorCores`` (that over the same wall time), and how far behind the stream is:
  ``backlogS``, ``backlogRows``, ``catchUpEtaS``, ``intakeWaitS`` (:mod:`sparkqos.runtime.intake`). With the continuous worker
  ``processedRowsPerSecond`` is ``executorRows`` over that wall time too (the rows were not all
  served inside the trigger);
* ``queries``: one row per query, exactly the row the metrics table stores
  (:data:`sparkqos.report.metrics.SCHEMA`: ``query``, ``klass``, ``rowsOut``, ``queuedRows``,
  ``queuedBytes``, ``delayP99_s``…).

The metrics table gets the ``queries`` rows plus the plan row (``query = "*"``) the top-level keys
are read from, so what a callback sees and what the report plots are the same numbers.

Inside, the record is typed: the reporter builds a frozen :class:`Progress` (the plan's
:class:`ProgressRow` and one per query, a field per metrics column), and it becomes dicts only
where it leaves the runtime — :meth:`Progress.to_json` for the record above (``lastProgress``,
``recentProgress``, ``on_progress``, what a trigger returns), :meth:`ProgressRow.as_row` for the
metrics table and the record's ``queries``.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from sparkqos.executor.report import RunReport
from sparkqos.model.plan import Plan
from sparkqos.model.state import SchedulerState
from sparkqos.report import metrics
from sparkqos.report.console import NO_STRATEGY_YET
from sparkqos.schedulers.base import Scheduler

__all__ = ["NO_STRATEGY_YET", "Progress", "ProgressReporter", "ProgressRow", "read_progress", "record", "strategy_in_force"]

#: Progress records kept in memory (``recentProgress``), like Spark's default.
KEEP = 100


def strategy_in_force(scheduler: Scheduler) -> tuple[str, dict[str, float]]:
    """The strategy running now and its scores (:meth:`~sparkqos.schedulers.base.Scheduler.in_force`):
    a selector such as ``adaptive`` reports the candidate in force and its last decision's scores
    (:data:`NO_STRATEGY_YET` before its first pick: no strategy has run yet); class shares report
    the strategy inside each class."""
    return scheduler.in_force()


class QueuedSizes:
    """What the progress record reads of the executor's queues: rows and bytes per operator,
    taken while the executor is still (the record is written after the worker went on), or
    summed over the shards of the sharded lane."""

    def __init__(self, rows: dict[str, float], nbytes: dict[str, float], busy: dict[str, float] | None = None):
        self._rows = rows
        self._bytes = nbytes
        self._busy = busy
        self.total_queued = float(sum(rows.values()))
        self.total_queued_bytes = float(sum(nbytes.values()))

    @classmethod
    def of(cls, state: Any, plan: Any) -> QueuedSizes:
        """The sizes of ``state``'s queues now, and each operator's busy seconds so far, for
        every operator of ``plan``."""
        sizes = cls(
            {op: state.queued(op) for op in plan.names},
            {op: state.queued_bytes(op) for op in plan.names},
            {op: state.stats.operator(op).busy_time for op in plan.names},
        )
        sizes.total_queued, sizes.total_queued_bytes = state.total_queued, state.total_queued_bytes
        return sizes

    def queued(self, op: str) -> float:
        return self._rows[op]

    def queued_bytes(self, op: str) -> float:
        return self._bytes[op]

    def busy_s(self, op: str) -> float:
        """Seconds the executor has run ``op`` (NaN: not taken, as for the sharded lane's sums)."""
        return math.nan if self._busy is None else self._busy[op]


def _busy_s(state: Any, op: str) -> float:
    """Seconds the executor has run ``op``: read from the live state or from its sizes' snapshot."""
    return state.busy_s(op) if isinstance(state, QueuedSizes) else state.stats.operator(op).busy_time


@dataclass(frozen=True, slots=True)
class ProgressRow:
    """One row of a trigger's progress: one query's numbers, or the whole plan's (``query`` is
    ``"*"``). A field per column of the metrics table, in its order (:data:`sparkqos.report.metrics.SCHEMA`
    says what each holds); NaN where a number was not measured, ``scores`` as JSON."""

    run: str = ""
    batchId: int = 0
    time_s: float = math.nan
    query: str = ""
    klass: str = ""
    rowsIn: float = math.nan
    rowsOut: float = math.nan
    queuedRows: float = math.nan
    queuedBytes: float = math.nan
    delayMean_s: float = math.nan
    delayP50_s: float = math.nan
    delayP99_s: float = math.nan
    delayMax_s: float = math.nan
    strategy: str = ""
    scores: str = "{}"
    durationMs: float = math.nan
    inputRowsPerSecond: float = math.nan
    processedRowsPerSecond: float = math.nan
    deadLetteredRows: float = math.nan
    executorRows: float = math.nan
    executorBusyS: float = math.nan
    executorBusyFraction: float = math.nan
    executorCpuS: float = math.nan
    executorCores: float = math.nan
    backlogS: float = math.nan
    backlogRows: float = math.nan
    catchUpEtaS: float = math.nan
    intakeWaitS: float = math.nan
    sparkRows: float = math.nan
    sparkS: float = math.nan
    shedRows: float = math.nan
    sloTargetS: float = math.nan
    sloViolations: float = math.nan
    sloMet: float = math.nan
    delayPartWait_s: float = math.nan
    delayPartSpark_s: float = math.nan
    delayPartTrigger_s: float = math.nan
    delayPartQueue_s: float = math.nan
    delayPartRun_s: float = math.nan
    delayPartSink_s: float = math.nan
    behindS: float = math.nan
    queuedMemoryBytes: float = math.nan
    spilledBytes: float = math.nan

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> ProgressRow:
        """The row a metrics-table row (a dict, as read back) holds; columns it lacks take their
        defaults, as :func:`sparkqos.report.metrics.row` gives them."""
        return cls(**metrics.row(**{k: row[k] for k in COLUMNS if k in row}))

    def as_row(self) -> dict[str, Any]:
        """The row as the metrics table stores it, and as the record's ``queries`` hold it."""
        return {name: getattr(self, name) for name in COLUMNS}


#: The metrics columns, in the table's order: :class:`ProgressRow`'s fields.
COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(ProgressRow))


@dataclass(frozen=True, slots=True)
class Progress:
    """A trigger's progress: the plan's row, from which the record's top-level numbers are read,
    and one row per query. :meth:`to_json` is the record (see the module), :meth:`rows` the
    metrics table's rows."""

    plan: ProgressRow
    queries: tuple[ProgressRow, ...]

    @classmethod
    def of(cls, plan_row: Mapping[str, Any], per_query: Iterable[Mapping[str, Any]]) -> Progress:
        """The progress of a trigger's metrics-table rows: its plan row and one per query."""
        return cls(ProgressRow.of(plan_row), tuple(ProgressRow.of(r) for r in per_query))

    def rows(self) -> list[dict[str, Any]]:
        """The metrics table's rows: the queries', then the plan's."""
        return [*(q.as_row() for q in self.queries), self.plan.as_row()]

    def to_json(self) -> dict[str, Any]:
        """The progress record: Spark's ``StreamingQueryProgress`` keys, ours, and ``queries``."""
        p = self.plan
        rows_in, dead = _count(p.rowsIn), _count(p.deadLetteredRows)
        return {
            "id": p.run,
            "batchId": int(p.batchId),
            "timestamp": p.time_s,
            "numInputRows": rows_in,
            "numOutputRows": _count(p.rowsOut),
            "processedRows": rows_in - dead,
            "deadLetteredRows": dead,
            "inputRowsPerSecond": p.inputRowsPerSecond,
            "processedRowsPerSecond": p.processedRowsPerSecond,
            "durationMs": {"triggerExecution": p.durationMs},
            "queuedRows": p.queuedRows,
            "queuedBytes": p.queuedBytes,
            "delayMsMean": p.delayMean_s * 1000.0,
            "delayMsP50": p.delayP50_s * 1000.0,
            "delayMsP99": p.delayP99_s * 1000.0,
            "delayMsMax": p.delayMax_s * 1000.0,
            "strategy": p.strategy,
            "scores": json.loads(p.scores),
            "executorRows": _count(p.executorRows),
            "executorBusyS": p.executorBusyS,
            "executorBusyFraction": p.executorBusyFraction,
            "executorCpuS": p.executorCpuS,
            "executorCores": p.executorCores,
            "backlogS": p.backlogS,
            "backlogRows": p.backlogRows,
            "catchUpEtaS": p.catchUpEtaS,
            "intakeWaitS": p.intakeWaitS,
            "sparkRows": p.sparkRows,
            "sparkS": p.sparkS,
            "shedRows": _count(p.shedRows),
            "sloMet": p.sloMet,
            "sloViolations": _count(p.sloViolations),
            "queuedMemoryBytes": p.queuedMemoryBytes,
            "spilledBytes": p.spilledBytes,
            "queries": [q.as_row() for q in self.queries],
        }


def _count(v: float | None) -> int:
    """A count of the plan row as the record gives it: an int, 0 when not measured."""
    return 0 if v is None or math.isnan(v) else int(v)


class ProgressReporter:
    """Builds each trigger's progress record, writes its metrics rows (under ``output``, when
    given), keeps the newest :data:`KEEP` records in ``recent`` and calls ``on_progress``."""

    def __init__(
        self, name: str, plan: Plan, output: Path | None = None, on_progress: Callable[[dict[str, Any]], None] | None = None
    ):
        self.name = name
        self.plan = plan
        self.output = output
        self.on_progress = on_progress
        self.recent: list[dict[str, Any]] = []
        self._metrics = metrics.MetricsWriter(output, name) if output is not None else None
        self._last_start: float | None = None
        self._last_report: float | None = None
        self._busy: dict[str, float] = {}  # each operator's busy seconds at the last record

    def baseline(self, state: SchedulerState) -> None:
        """Count each query's executor seconds from here (a restored checkpoint's statistics
        hold the seconds served before it)."""
        self._busy = {op: _busy_s(state, op) for op in self.plan.names}

    def _query_busy(self, state: SchedulerState) -> dict[str, float]:
        """Per query, the seconds the executor ran its operators since the last record."""
        now = {op: _busy_s(state, op) for op in self.plan.names}
        ran = {op: t - self._busy.get(op, 0.0) for op, t in now.items()}
        self._busy = now
        return {q: float(sum(ran[op] for op in query.operators)) for q, query in self.plan.queries.items()}

    @property
    def last(self) -> dict[str, Any] | None:
        return self.recent[-1] if self.recent else None

    def report(
        self,
        batch_id: int,
        started: float,
        *,
        rows_in: int,
        dead_rows: int,
        served: RunReport,
        rows_out: Mapping[str, int],
        delays: Mapping[str, np.ndarray],
        state: SchedulerState,
        strategy: tuple[str, dict[str, float]],
        continuous: bool = False,
        backlog: Mapping[str, float] | None = None,
        spark_parts: Mapping[str, tuple[int, float]] | None = None,
        query_columns: Mapping[str, Mapping[str, float]] | None = None,
    ) -> dict[str, Any]:
        """The record of trigger ``batch_id`` that started at ``started`` (epoch seconds):
        ``rows_in`` rows offered, ``dead_rows`` of them dead-lettered, ``served``: what the
        executor did since the last record (``continuous``: also between triggers; the rows it
        consumed, its busy seconds and the CPU seconds its threads used), ``rows_out`` and
        ``delays`` (seconds per output row) per query, the queues left in ``state``;
        ``strategy``: the strategy in force and its scores (:func:`strategy_in_force`, taken while
        the executor was still);
        ``backlog``: ``backlogS``, ``backlogRows``, ``catchUpEtaS`` and ``intakeWaitS``
        (:mod:`sparkqos.runtime.intake`); ``spark_parts``: query → (rows, seconds) of its parts Spark
        evaluated in this trigger; ``query_columns``: further columns of each query's row (shed
        rows, latency target met, the parts of the delay, how far behind: see the metrics
        schema), summed or combined into the plan row."""
        spark_parts = spark_parts or {}
        query_columns = query_columns or {}
        consumed, busy_s, cpu_s = served.rows_consumed, served.seconds, served.cpu_s
        common, wall = self._common(batch_id, started, rows_in, consumed, continuous, strategy)
        busy_of = self._query_busy(state)
        per_query = tuple(
            ProgressRow(
                query=qname,
                klass=query.klass,
                rowsOut=float(rows_out[qname]),
                queuedRows=float(sum(state.queued(op) for op in query.operators)),
                queuedBytes=float(sum(state.queued_bytes(op) for op in query.operators)),
                executorBusyS=busy_of[qname],
                **metrics.delay_summary(delays[qname]),
                **_spark_columns([spark_parts[qname]] if qname in spark_parts else []),
                **query_columns.get(qname, {}),
                **common,
            )
            for qname, query in self.plan.queries.items()
        )
        all_delays = [d for d in delays.values() if d.size]
        total_out = int(sum(rows_out.values()))
        plan_row = ProgressRow(
            query=metrics.PLAN_ROW,
            klass=metrics.PLAN_ROW,
            rowsOut=float(total_out),
            queuedRows=float(state.total_queued),
            queuedBytes=float(state.total_queued_bytes),
            deadLetteredRows=float(dead_rows),
            executorRows=float(consumed),
            executorBusyS=float(busy_s),
            executorBusyFraction=min(1.0, busy_s / wall) if wall > 0 else math.nan,
            executorCpuS=float(cpu_s),
            executorCores=cpu_s / wall if wall > 0 else math.nan,
            **dict(backlog or {}),
            **_spark_columns(list(spark_parts.values())),
            **_service_columns(per_query),
            **metrics.delay_summary(np.concatenate(all_delays) if all_delays else []),
            **common,
        )
        return self._publish(batch_id, Progress(plan_row, per_query))

    def _common(
        self, batch_id: int, started: float, rows_in: int, consumed: float, continuous: bool, strategy: tuple[str, dict]
    ) -> tuple[dict[str, Any], float]:
        """The columns every row of a trigger's record shares, and the wall time since the last
        record (the first: since the trigger started)."""
        now = time.time()
        duration = now - started
        since = now - self._last_start if self._last_start is not None else duration
        wall = now - (self._last_report if self._last_report is not None else started)
        served_in = wall if continuous else duration
        self._last_start = started
        self._last_report = now
        name, scores = strategy
        common = dict(
            run=self.name,
            batchId=batch_id,
            time_s=now,
            strategy=name,
            scores=scores if isinstance(scores, str) else json.dumps(scores, sort_keys=True),
            durationMs=duration * 1000.0,
            rowsIn=float(rows_in),
            inputRowsPerSecond=rows_in / since if since > 0 else math.nan,
            processedRowsPerSecond=consumed / served_in if served_in > 0 else math.nan,
        )
        return common, wall

    def _publish(self, batch_id: int, typed: Progress) -> dict[str, Any]:
        """Write the trigger's metrics rows, keep its record among the recent ones and hand it to
        ``on_progress``; the record."""
        if self._metrics is not None:
            self._metrics.write(batch_id, typed.rows())
        progress = typed.to_json()
        # a batch run again (stopped after its report but before Spark committed it) replaces its
        # record, as it replaces its metrics file and its outputs
        self.recent[:] = [p for p in self.recent if p["batchId"] != batch_id]
        self.recent.append(progress)
        del self.recent[:-KEEP]
        if self.on_progress is not None:
            self.on_progress(progress)
        return progress


def _service_columns(per_query: tuple[ProgressRow, ...]) -> dict[str, float]:
    """The plan row's shed rows (summed), latency targets met (1 when every query with a target
    and rows met it, 0 when one missed, NaN without) and violations (summed)."""
    shed = [r.shedRows for r in per_query if not math.isnan(r.shedRows)]
    met = [r.sloMet for r in per_query if not math.isnan(r.sloMet)]
    late = [r.sloViolations for r in per_query if not math.isnan(r.sloViolations)]
    return {
        "shedRows": float(sum(shed)) if shed else math.nan,
        "sloMet": float(min(met)) if met else math.nan,
        "sloViolations": float(sum(late)) if late else math.nan,
    }


def _spark_columns(parts: list[tuple[int, float]]) -> dict[str, float]:
    if not parts:
        return {}
    return {"sparkRows": float(sum(r for r, _ in parts)), "sparkS": float(sum(s for _, s in parts))}


def record(plan_row: Mapping[str, Any], per_query: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """A trigger's progress record from its metrics rows: the plan row (``query = "*"``) and one
    row per query — so a record rebuilt from the metrics table equals the one reported live."""
    return Progress.of(plan_row, per_query).to_json()


def read_progress(output: str | Path, name: str) -> list[dict[str, Any]]:
    """The progress records of run ``name`` from the metrics table under ``output``, oldest first
    (the newest :data:`KEEP`): how a client follows a run whose triggers execute in another
    process — Spark Connect runs foreachBatch in the server's Python worker. [] before the first."""
    try:
        table = metrics.read(output, run=name, newest=KEEP)
    except FileNotFoundError:
        return []
    rows = [r for r in table.to_pylist() if r["run"] == name]
    by_batch: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        by_batch.setdefault(r["batchId"], []).append(r)
    out = []
    for batch_id in sorted(by_batch)[-KEEP:]:
        plan = [r for r in by_batch[batch_id] if r["query"] == metrics.PLAN_ROW]
        if plan:
            out.append(record(plan[0], [r for r in by_batch[batch_id] if r["query"] != metrics.PLAN_ROW]))
    return out
