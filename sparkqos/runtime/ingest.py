"""Ingest: a micro-batch's rows checked, stamped with their arrival times and queued.

Each row's arrival is the stream's event-time column when there is one (``ts`` by default), else
the trigger's start (also for a row whose event time is missing). Rows that do not fit the
stream's schema or break its checks (:class:`~sparkqos.runtime.deadletter.RowChecks`) are set
aside as dead letters with their reason; the rest are queued at the leaves of every query that
reads the stream (each query its own copy).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkqos.errors import SchemaMismatch
from sparkqos.executor.loop import Executor
from sparkqos.runtime.deadletter import RowChecks

__all__ = ["Ingest", "Ingested", "epoch_seconds"]


def epoch_seconds(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A timestamp or numeric column as float seconds since the epoch (dividing as Spark's
    ``cast(ts as double)`` does, so both engines see the same numbers)."""
    if pa.types.is_timestamp(column.type):
        per_second = {"s": 1.0, "ms": 1e3, "us": 1e6, "ns": 1e9}[column.type.unit]
        return pc.cast(column, pa.int64()).to_numpy(zero_copy_only=False).astype(np.float64) / per_second
    return pc.cast(column, pa.float64()).to_numpy(zero_copy_only=False)


@dataclass
class Ingested:
    """What a batch brought: the rows offered, the dead letters (None without rows) and the newest
    event time taken in (NaN without an event-time column or rows)."""

    rows_in: int
    dead: pa.Table | None
    newest: float


@dataclass
class Ingest:
    """Takes the batches of ``stream`` (schema ``schema``) into ``executor``. ``keep_dead``: the
    run keeps dead letters; without it a batch with a bad row raises
    :class:`~sparkqos.errors.SchemaMismatch`."""

    executor: Executor
    stream: str
    schema: pa.Schema
    arrival_col: str | None
    checks: RowChecks
    keep_dead: bool

    def __call__(self, table: pa.Table, batch_id: int, started: float) -> Ingested:
        rows_in = table.num_rows
        if not rows_in:
            return Ingested(0, None, math.nan)
        good, dead = self.checks.split(self._conform(table), self.schema, batch_id)
        if dead.num_rows and not self.keep_dead:
            raise SchemaMismatch(
                f"batch {batch_id} of stream {self.stream!r}: {dead.num_rows} bad row(s), first: "
                f"{dead.column('reason')[0].as_py()} (give dead_letter= or output= to keep them)"
            )
        newest = math.nan
        if good.num_rows:
            arrivals = self._arrivals(good, started)
            self.executor.ingest(self.stream, good, arrival=arrivals)
            if self.arrival_col is not None:
                newest = float(np.max(arrivals))
        return Ingested(rows_in, dead, newest)

    def _arrivals(self, table: pa.Table, started: float) -> np.ndarray | float:
        if self.arrival_col is None or table.num_rows == 0:
            return started
        t = epoch_seconds(table.column(self.arrival_col))
        bad = ~np.isfinite(t)
        if bad.any():
            t = t.copy()
            t[bad] = started  # a missing event time is stamped at ingestion
        return t

    def _conform(self, table: pa.Table) -> pa.Table:
        """Timestamps become float seconds where the plan declares numbers (the executor's
        windows run on numeric seconds). Other columns stay as they came: the checks cast them,
        and a dead letter keeps the whole original row."""
        for field in self.schema:
            if field.name in table.column_names:
                i = table.column_names.index(field.name)
                col = table.column(i)
                if pa.types.is_timestamp(col.type) and pa.types.is_floating(field.type):
                    table = table.set_column(i, field.name, pa.array(epoch_seconds(col), pa.float64()))
        return table
