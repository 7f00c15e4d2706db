"""Early writes: the one exception to "only a trigger writes".

After a slice, the continuous worker writes what the queries of every class above the lowest
produced as a *part* of the batch the next trigger will commit
(:meth:`~sparkqos.io.sinks.PartedSink.write_part`), so a class-H or class-C row waits for the
sink's file write, not for the next trigger. That trigger keeps those
parts and writes the rest of the batch; a crash before it commits leaves parts that no checkpoint
covers, and the replayed batch replaces them (its first write, part or whole, removes every file
of that batch id), as it replaces the files of a batch whose trigger crashed after its sink write.
The sink's final content is the same: each batch exactly its last attempt. Rows written early
count their delay from their own write. An update-mode aggregate's rows never come out between
triggers (they are due at the trigger's end: :meth:`~sparkqos.executor.loop.Executor.end_trigger`),
so a batch's parts and its trigger's write hold each changed key once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from sparkqos.executor.expressions import ARRIVAL, INTERNAL
from sparkqos.executor.loop import EMIT, Executor, RunReport
from sparkqos.io.sinks import Sink

__all__ = ["EarlyParts", "EarlyWriter", "above_the_lowest", "sink_tables"]


def sink_tables(outputs: Mapping[str, pa.Table]) -> dict[str, pa.Table]:
    """Outputs as the sink gets them: without the executor's internal columns."""
    return {q: t.drop_columns([c for c in t.column_names if c in INTERNAL or c == EMIT]) for q, t in outputs.items()}


def above_the_lowest(plan: Any) -> tuple[str, ...]:
    """The queries of ``plan`` whose class stands above the lowest priority: those written early."""
    lowest = min(plan.classes[q.klass] for q in plan.queries.values())
    return tuple(q.name for q in plan.queries.values() if plan.classes[q.klass] > lowest)


class EarlyParts:
    """What the worker wrote early of one batch: rows and delays (seconds) per query, and each
    part's rows with the executor's columns and its write time (``tables``: where the delays went,
    :mod:`sparkqos.runtime.decompose`)."""

    def __init__(self) -> None:
        self.rows: dict[str, int] = {}
        self.delays: dict[str, list[np.ndarray]] = {}
        self.tables: list[tuple[str, pa.Table, float]] = []

    def add(self, query: str, table: pa.Table, written: float) -> None:
        self.rows[query] = self.rows.get(query, 0) + table.num_rows
        self.delays.setdefault(query, []).append(written - table.column(ARRIVAL).to_numpy(zero_copy_only=False))
        self.tables.append((query, table.select([c for c in table.column_names if c in INTERNAL or c == EMIT]), written))


class EarlyWriter:
    """Writes the new outputs of ``queries`` (every class above the lowest) from the worker's
    thread, at most every ``every_s`` seconds (at once when a slice found nothing more to run: the worker is about to
    wait for the next trigger), as parts of the batch after the last one committed.
    ``written(batch_id)`` is called after each part (the crash point ``after_early_write``);
    ``phase_s["earlyWrite"]`` adds up the time spent."""

    def __init__(
        self,
        executor: Executor,
        sink: Sink,
        queries: tuple[str, ...],
        every_s: float,
        phase_s: dict[str, float],
        written: Callable[[int], None],
    ):
        self.executor, self.sink, self.queries, self.every_s = executor, sink, queries, every_s
        self.phase_s = phase_s
        self.written = written
        #: The batch the parts go to: the one after the last commit.
        self.parts_batch = 0
        self._batch: int | None = None  # the batch the parts written since the last commit belong to
        self._parts = EarlyParts()
        self._at = 0.0  # time.monotonic() of the last early write

    def after_slice(self, report: RunReport) -> None:
        """On the worker's thread, after a slice: write what the top class produced since the last
        write as a part of the next batch, when it is time."""
        if not report.idle and time.monotonic() - self._at < self.every_s:
            return
        self.write_now()

    def write_now(self) -> None:
        """Write what the top class produced since the last write as a part of the next batch (by
        the thread that holds the executor: the worker after a slice, or a trigger that has served
        the top class and has slower work ahead)."""
        outputs = {q: t for q, t in self.executor.take_outputs(self.queries).items() if t.num_rows}
        if not outputs:
            return
        batch_id = self.parts_batch
        first = self._batch != batch_id
        t0 = time.perf_counter()
        self.sink.write_part(batch_id, sink_tables(outputs), first=first)
        at = time.time()
        self._at = time.monotonic()
        if first:
            self._batch, self._parts = batch_id, EarlyParts()
        for q, t in outputs.items():
            self._parts.add(q, t, at)
        self.phase_s["earlyWrite"] += time.perf_counter() - t0
        self.written(batch_id)

    def commit(self, batch_id: int) -> EarlyParts | None:
        """Batch ``batch_id`` is being committed (the worker is paused): the parts written of it
        (None: none, so its write replaces anything an earlier attempt left); later parts go to
        the next batch."""
        parts = self._parts if self._batch == batch_id else None
        self._batch, self._parts = None, EarlyParts()
        self.parts_batch = batch_id + 1
        return parts
