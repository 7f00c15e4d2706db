"""The runner's progress reporter: one progress record per trigger, in memory and in the metrics table.

A trigger's record has one shape, built in one place (:meth:`ProgressReporter.report`):

* Spark's ``StreamingQueryProgress`` keys for the whole plan — ``id``, ``batchId``, ``timestamp``,
  ``numInputRows``, ``numOutputRows``, ``inputRowsPerSecond``, ``processedRowsPerSecond``,
  ``durationMs.triggerExecution`` — and ours: ``processedRows`` and ``deadLetteredRows`` (their
  sum is ``numInputRows``), ``queuedRows``, ``queuedBytes``, ``delayMsMean/P50/P99/Max``,
  ``strategy`` (in force at the end of the trigger) and ``scores`` (adaptive's, else ``{}``);
* ``queries``: one row per query, exactly the row the metrics table stores
  (:data:`sparkqos.report.metrics.SCHEMA`: ``query``, ``klass``, ``rowsOut``, ``queuedRows``,
  ``queuedBytes``, ``delayP99_s``…).

The metrics table gets the ``queries`` rows plus the plan row (``query = "*"``) the top-level keys
are read from, so what a callback sees and what the report plots are the same numbers.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from sparkqos.model.plan import Plan
from sparkqos.model.state import SchedulerState
from sparkqos.report import metrics
from sparkqos.schedulers.base import Scheduler

__all__ = ["ProgressReporter", "strategy_in_force"]

#: Progress records kept in memory (``recentProgress``), like Spark's default.
KEEP = 100


def strategy_in_force(scheduler: Scheduler) -> tuple[str, dict[str, float]]:
    """The strategy running now and its scores: a selector (one with a ``current`` member name,
    such as ``adaptive``) reports the member and its last decision's scores."""
    current = getattr(scheduler, "current", None)
    if isinstance(current, str):
        decisions = getattr(scheduler, "decisions", [])
        return current, dict(decisions[-1]["scores"]) if decisions else {}
    return scheduler.name or type(scheduler).__name__, {}


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
        self._last_start: float | None = None

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
        consumed: int,
        rows_out: Mapping[str, int],
        delays: Mapping[str, np.ndarray],
        state: SchedulerState,
        scheduler: Scheduler,
    ) -> dict[str, Any]:
        """The record of trigger ``batch_id`` that started at ``started`` (epoch seconds):
        ``rows_in`` rows offered, ``dead_rows`` of them dead-lettered, ``consumed`` rows the
        executor served, ``rows_out`` and ``delays`` (seconds per output row) per query, and
        the queues left in ``state``."""
        now = time.time()
        duration = now - started
        since = now - self._last_start if self._last_start is not None else duration
        self._last_start = started
        strategy, scores = strategy_in_force(scheduler)
        common = dict(
            run=self.name,
            batchId=batch_id,
            time_s=now,
            strategy=strategy,
            scores=scores,
            durationMs=duration * 1000.0,
            rowsIn=float(rows_in),
            inputRowsPerSecond=rows_in / since if since > 0 else math.nan,
            processedRowsPerSecond=consumed / duration if duration > 0 else math.nan,
        )
        per_query = [
            metrics.row(
                query=qname,
                klass=query.klass,
                rowsOut=float(rows_out[qname]),
                queuedRows=float(sum(state.queued(op) for op in query.operators)),
                queuedBytes=float(sum(state.queued_bytes(op) for op in query.operators)),
                **metrics.delay_summary(delays[qname]),
                **common,
            )
            for qname, query in self.plan.queries.items()
        ]
        all_delays = [d for d in delays.values() if d.size]
        total_out = int(sum(rows_out.values()))
        plan_row = metrics.row(
            query=metrics.PLAN_ROW,
            klass=metrics.PLAN_ROW,
            rowsOut=float(total_out),
            queuedRows=float(state.total_queued),
            queuedBytes=float(state.total_queued_bytes),
            **metrics.delay_summary(np.concatenate(all_delays) if all_delays else []),
            **common,
        )
        if self.output is not None:
            metrics.write_batch(self.output, self.name, batch_id, [*per_query, plan_row])
        progress = {
            "id": self.name,
            "batchId": batch_id,
            "timestamp": now,
            "numInputRows": rows_in,
            "numOutputRows": total_out,
            "processedRows": rows_in - dead_rows,
            "deadLetteredRows": dead_rows,
            "inputRowsPerSecond": plan_row["inputRowsPerSecond"],
            "processedRowsPerSecond": plan_row["processedRowsPerSecond"],
            "durationMs": {"triggerExecution": plan_row["durationMs"]},
            "queuedRows": plan_row["queuedRows"],
            "queuedBytes": plan_row["queuedBytes"],
            "delayMsMean": plan_row["delayMean_s"] * 1000.0,
            "delayMsP50": plan_row["delayP50_s"] * 1000.0,
            "delayMsP99": plan_row["delayP99_s"] * 1000.0,
            "delayMsMax": plan_row["delayMax_s"] * 1000.0,
            "strategy": strategy,
            "scores": scores,
            "queries": per_query,
        }
        self.recent.append(progress)
        del self.recent[:-KEEP]
        if self.on_progress is not None:
            self.on_progress(progress)
        return progress
