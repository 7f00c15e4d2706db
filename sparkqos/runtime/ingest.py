"""Ingest: a micro-batch's rows checked, stamped with their arrival times and queued.

Each row's arrival is the stream's event-time column when there is one (``ts`` by default), else
the trigger's start (also for a row whose event time is missing). Rows that do not fit the
stream's schema or break its checks (:class:`~sparkqos.io.deadletter.RowChecks`) are set
aside as dead letters with their reason; the rest are queued at the leaves of every query that
reads the stream (each query its own copy).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkqos.errors import SchemaMismatch
from sparkqos.executor.loop import Executor
from sparkqos.executor.plan import CompiledPlan
from sparkqos.io.deadletter import RowChecks
from sparkqos.runtime.decompose import IngestLog

__all__ = ["Ingest", "Ingested", "arrivals", "conform", "epoch_seconds", "ingest"]


def epoch_seconds(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A timestamp or numeric column as float seconds since the epoch (dividing as Spark's
    ``cast(ts as double)`` does, so both engines see the same numbers)."""
    if pa.types.is_timestamp(column.type):
        per_second = {"s": 1.0, "ms": 1e3, "us": 1e6, "ns": 1e9}[column.type.unit]
        return pc.cast(column, pa.int64()).to_numpy(zero_copy_only=False).astype(np.float64) / per_second
    return pc.cast(column, pa.float64()).to_numpy(zero_copy_only=False)


def arrivals(table: pa.Table, arrival_col: str | None, started: float) -> np.ndarray | float:
    """Each row's arrival: its event time in ``arrival_col`` (a missing one is stamped
    ``started``), or ``started`` for every row without an arrival column."""
    if arrival_col is None or table.num_rows == 0:
        return started
    t = epoch_seconds(table.column(arrival_col))
    bad = ~np.isfinite(t)
    if bad.any():
        t = t.copy()
        t[bad] = started  # a missing event time is stamped at ingestion
    return t


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Timestamps become float seconds where ``schema`` declares numbers (the executor's
    windows run on numeric seconds). Other columns stay as they came: the checks cast them,
    and a dead letter keeps the whole original row."""
    for field in schema:
        if field.name in table.column_names:
            i = table.column_names.index(field.name)
            col = table.column(i)
            if pa.types.is_timestamp(col.type) and pa.types.is_floating(field.type):
                table = table.set_column(i, field.name, pa.array(epoch_seconds(col), pa.float64()))
    return table


def ingest(
    executor: Executor,
    compiled: CompiledPlan,
    stream: str,
    checks: RowChecks,
    table: pa.Table,
    batch_id: int,
    arrival_col: str | None,
    started: float,
) -> tuple[pa.Table, float]:
    """Queue ``table``'s rows that pass ``checks`` at the leaves of every query reading ``stream``;
    returns the rejected rows as a dead-letter table (the caller decides where they go) and the
    newest arrival queued (NaN without an arrival column or rows)."""
    good, dead = checks.split(conform(table, compiled.sources[stream]), compiled.sources[stream], batch_id)
    newest = math.nan
    if good.num_rows:
        stamps = arrivals(good, arrival_col, started)
        executor.ingest(stream, good, arrival=stamps)
        if arrival_col is not None:
            newest = float(np.max(stamps))
    return dead, newest


@dataclass
class Ingested:
    """What a batch brought: the rows offered, the dead letters (None without rows) and the newest
    event time taken in (NaN without an event-time column or rows)."""

    rows_in: int
    dead: pa.Table | None
    newest: float


@dataclass
class Ingest:
    """Takes the batches of ``stream`` into ``executor`` (:func:`ingest`). ``keep_dead``: the run
    keeps dead letters; without it a batch with a bad row raises
    :class:`~sparkqos.errors.SchemaMismatch`."""

    executor: Executor
    compiled: CompiledPlan
    stream: str
    arrival_col: str | None
    checks: RowChecks
    keep_dead: bool

    def spark_parts(
        self, parts: dict[str, tuple[pa.Table, float]], started: float, log: IngestLog, batch_start: float
    ) -> dict[str, tuple[int, float]]:
        """Queue the rows of the parts Spark evaluated (higher classes first, as they came), noting
        in ``log`` when; each row's arrival is the input's event time where the part passes that
        column on. Returns query → (rows, seconds Spark took) for the progress record."""
        done: dict[str, tuple[int, float]] = {}
        executor = self.executor
        for stream, (table, seconds) in parts.items():
            part = self.compiled.spark_parts[stream]
            if table.num_rows:
                carried = dict(part.carried).get(self.arrival_col) if self.arrival_col else None
                first = executor.next_seq(stream)
                executor.ingest(stream, table, arrival=arrivals(table, carried, started) if carried else started)
                log.add(stream, first, executor.next_seq(stream) - first, batch_start, started, time.time())
            rows, secs = done.get(part.query, (0, 0.0))
            done[part.query] = (rows + table.num_rows, secs + seconds)
        return done

    def __call__(self, table: pa.Table, batch_id: int, started: float) -> Ingested:
        if not table.num_rows:
            return Ingested(0, None, math.nan)
        dead, newest = ingest(self.executor, self.compiled, self.stream, self.checks, table, batch_id, self.arrival_col, started)
        if dead.num_rows and not self.keep_dead:
            raise SchemaMismatch(
                f"batch {batch_id} of stream {self.stream!r}: {dead.num_rows} bad row(s), first: "
                f"{dead.column('reason')[0].as_py()} (give dead_letter= or output= to keep them)"
            )
        return Ingested(table.num_rows, dead, newest)
