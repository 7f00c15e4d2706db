"""KeyedAggregate: Spark's ``groupBy(keys).agg(...)`` without a time window, in update mode.

What a PySpark transform's ``groupBy("k").count()`` or ``.agg(F.avg("v"), F.max("v"))`` compiles
to (:mod:`sparkqos.compile.stateful`): the running aggregates of every key, with the aggregate
functions, types and null rules of :class:`~sparkqos.executor.operators.EventWindowAggregate`
(whose partial aggregates it keeps, one row per key, with no window).

On a stream (Spark's update output mode) each run emits the current value of every key its rows
changed — so a sink holds a changelog whose last row per key is the table so far, and with one run
per trigger what each trigger writes is what Spark's update mode writes. On a finite DataFrame
(``update`` off) nothing comes out before :meth:`flush`, which gives the final table, one row per
key: Spark's batch result. Without keys (``df.agg(...)``) that table has one row even for an
empty input (count 0, the others null), as in Spark. ``__arrival`` / ``__seq`` of an output row
are the largest of the rows that made it change, so its delay counts from the newest of them.
State: one row of partial aggregates per key seen (bounded by the number of keys), serialisable
(Arrow IPC).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from sparkqos.errors import ExpressionError, PlanError
from sparkqos.executor.expressions import ARRIVAL, SEQ
from sparkqos.executor.operators.base import PhysicalOperator, group_codes, normal_key
from sparkqos.executor.operators.event_window import FUNCTIONS, EventWindowAggregate, WindowAgg


class KeyedAggregate(EventWindowAggregate):
    """The aggregates ``aggs`` of each ``keys`` value; ``update``: emit the keys each run changed.

    >>> import pyarrow as pa
    >>> from sparkqos.executor.queues import stamp, with_internal
    >>> op = KeyedAggregate(["k"], [WindowAgg("count_all", None, "n")], update=True)
    >>> _ = op.bind("q/agg", [with_internal(pa.schema([("k", pa.string())]))])
    >>> op.process(stamp(pa.record_batch({"k": ["a", "b", "a"]}), 0.0, 0)).to_pydict()["n"]
    [2, 1]
    >>> op.process(stamp(pa.record_batch({"k": ["b"]}), 1.0, 3)).to_pydict()["n"]
    [2]
    """

    preserves_order = False

    def __init__(self, keys: Sequence[str], aggs: Sequence[WindowAgg], update: bool = True):
        PhysicalOperator.__init__(self)
        self.keys, self.aggs, self.update = list(keys), list(aggs), update
        if not self.aggs:
            raise PlanError("an aggregation needs at least one aggregate")
        for a in self.aggs:
            if a.fn not in FUNCTIONS:
                raise ExpressionError(f"unknown aggregate {a.fn!r}; known: {FUNCTIONS}")
        self.time_col, self.window_name, self.delay_us = None, None, None
        self._state: pa.Table | None = None
        self._max_time: int | None = None
        self._closed_until = 0
        self.late_rows = 0

    def copy(self) -> KeyedAggregate:
        return KeyedAggregate(self.keys, self.aggs, self.update)

    def _window_fields(self, field_type: Any) -> list[pa.Field]:
        return []

    def _window_arrays(self, part: pa.Table) -> list[Any]:
        return []

    def _pairs(self, batch: pa.RecordBatch) -> tuple[pa.Table, int, int | None]:
        """Every row, in one group per key (``__ws`` is 0: no window)."""
        base = {"__ws": pa.array(np.zeros(batch.num_rows, dtype=np.int64))}
        base |= {k: normal_key(batch.column(k)) for k in self.keys}
        base |= self._inputs(batch)
        base[ARRIVAL], base[SEQ] = batch.column(ARRIVAL), batch.column(SEQ)
        return pa.table(base), 0, None

    def process(self, batch: pa.RecordBatch, port: int = 0) -> pa.RecordBatch | None:
        pairs, _, _ = self._pairs(batch)
        if not pairs.num_rows:
            return None
        part = self._aggregate(pairs, combine=False)
        held = self._state
        self._state = part if held is None or not held.num_rows else self._aggregate(pa.concat_tables([held, part]), True)
        if not self.update:
            return None
        state = self._state
        # The keys this batch touched: those of the state whose key code appears among the batch's.
        n = state.num_rows
        codes = group_codes(
            [pa.concat_arrays([state.column(k).combine_chunks(), part.column(k).combine_chunks()]) for k in self.keys],
            n + part.num_rows,
        )
        changed = np.isin(codes[:n], codes[n:])
        out = self._finish(state.filter(pa.array(changed)))
        # The newest of the rows that made each key change, not of every row the key ever had.
        newest = part.select([*self.keys, ARRIVAL, SEQ]) if self.keys else part.select([ARRIVAL, SEQ])
        return _with_newest(out, newest, self.keys)

    def flush(self) -> list[pa.RecordBatch]:
        if self.update:
            return []
        state = self._state
        if state is None or not state.num_rows:
            return [] if self.keys else [self._empty_row()]
        out = self._finish(state)
        return [] if out is None else [out]

    def _empty_row(self) -> pa.RecordBatch:
        """A global aggregate of no rows: count 0, every other aggregate null."""
        arrays = []
        for a, f in zip(self.aggs, list(self.schema)[: len(self.aggs)], strict=True):
            arrays.append(pa.array([0 if a.fn in ("count", "count_all") else None], f.type))
        arrays += [pa.array([0.0], self.schema.field(ARRIVAL).type), pa.array([0], self.schema.field(SEQ).type)]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)


def _with_newest(out: pa.RecordBatch | None, newest: pa.Table, keys: list[str]) -> pa.RecordBatch | None:
    """``out`` with ``__arrival`` / ``__seq`` of the batch's rows of each key (``newest``, one row
    per key in the order of the state's ``group_by``, which is not ``out``'s): joined by key code."""
    if out is None or not out.num_rows:
        return None
    n = out.num_rows
    codes = group_codes(
        [pa.concat_arrays([normal_key(out.column(k)), newest.column(k).combine_chunks()]) for k in keys], n + newest.num_rows
    )
    at = {c: i for i, c in enumerate(codes[n:].tolist())}
    rows = pa.array([at[c] for c in codes[:n].tolist()])
    arrays = [out.column(i) for i in range(out.num_columns - 2)]
    arrays += [newest.column(ARRIVAL).combine_chunks().take(rows), newest.column(SEQ).combine_chunks().take(rows)]
    return pa.RecordBatch.from_arrays(arrays, schema=out.schema)
