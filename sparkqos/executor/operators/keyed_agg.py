"""KeyedAggregate: Spark's ``groupBy(keys).agg(...)`` without a time window, in update mode.

What a PySpark transform's ``groupBy("k").count()`` or ``.agg(F.avg("v"), F.max("v"))`` compiles
to (:mod:`sparkqos.compile.stateful`): the running aggregates of every key, with the aggregate
functions, types and null rules of :class:`~sparkqos.executor.operators.EventWindowAggregate`
(whose partial aggregates it keeps, one row per key, with no window).

On a stream (``update``: Spark's update output mode) a run folds its rows into the state and
emits nothing; it notes which keys changed. At the end of the trigger
(:meth:`~sparkqos.executor.operators.base.TriggerEndOperator.end_trigger`, called by the
executor once per trigger) it emits each key changed since the last trigger's end exactly once,
with its aggregates as they stand then — however many times the strategy ran it meanwhile, in
the trigger or on the continuous worker between triggers. So a trigger writes one row per key
that changed, its value at the trigger's end; with every row of the micro-batch served in the
trigger, that is the row set Spark's update mode writes for that micro-batch, and the sink holds a
changelog whose last row per key is the table so far. An early write (the continuous worker's
parts of the top class) never holds these rows: they are due at the trigger's end, and the
trigger's own write holds them. On a finite DataFrame (``update`` off) nothing comes out before
:meth:`flush`, which gives the final table, one row per key: Spark's batch result. Without keys
(``df.agg(...)``) that table has one row even for an empty input (count 0, the others null), as in
Spark. ``__arrival`` / ``__seq`` of an output row are the largest of the rows that changed it
since the last trigger's end, so its delay counts from the newest of them. State: one row of
partial aggregates per key seen and the keys changed since the last trigger's end (both bounded
by the number of keys), serialisable (Arrow IPC).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from sparkqos.errors import ExpressionError, PlanError
from sparkqos.executor.expressions import ARRIVAL, SEQ
from sparkqos.executor.operators.base import (
    PhysicalOperator,
    TriggerEndOperator,
    group_codes,
    ipc_to_table,
    normal_key,
    table_to_ipc,
)
from sparkqos.executor.operators.event_window import FUNCTIONS, EventWindowAggregate, WindowAgg


class KeyedAggregate(EventWindowAggregate, TriggerEndOperator):
    """The aggregates ``aggs`` of each ``keys`` value; ``update``: at each trigger's end, emit
    every key changed since the last one, once, with its aggregates then.

    >>> import pyarrow as pa
    >>> from sparkqos.executor.queues import stamp, with_internal
    >>> op = KeyedAggregate(["k"], [WindowAgg("count_all", None, "n")], update=True)
    >>> _ = op.bind("q/agg", [with_internal(pa.schema([("k", pa.string())]))])
    >>> op.process(stamp(pa.record_batch({"k": ["a", "b", "a"]}), 0.0, 0))  # runs emit nothing
    >>> op.process(stamp(pa.record_batch({"k": ["b"]}), 1.0, 3))
    >>> [(r["k"], r["n"]) for r in op.end_trigger()[0].to_pylist()]  # a trigger's end: each key once
    [('a', 2), ('b', 2)]
    >>> op.process(stamp(pa.record_batch({"k": ["b"]}), 2.0, 4))
    >>> [(r["k"], r["n"]) for r in op.end_trigger()[0].to_pylist()], op.end_trigger()
    ([('b', 3)], [])
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
        #: The keys changed since the last trigger's end, with the newest ``__arrival`` /
        #: ``__seq`` of the rows that changed each (update mode; None: none).
        self._pending: pa.Table | None = None
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
        if self.update:
            self._note_changed(part.select([*self._group, ARRIVAL, SEQ]))
        return None

    def _note_changed(self, newest: pa.Table) -> None:
        """Add the keys of ``newest`` (one row per key, with the newest ``__arrival`` / ``__seq``
        of its rows) to those changed since the last trigger's end."""
        held = self._pending
        if held is None or not held.num_rows:
            self._pending = newest
            return
        both = pa.concat_tables([held, newest])
        newest_of = [(ARRIVAL, "max"), (SEQ, "max")]
        if self._coded:  # keys pyarrow cannot hash: grouped by code
            codes = group_codes([both.column(k) for k in self._group], both.num_rows)
            both = both.append_column("__g", pa.array(codes))
            merged, _ = self._grouped(both, newest_of, codes, int(codes.max()) + 1)
        else:
            merged = both.group_by(self._group, use_threads=False).aggregate(newest_of)
        columns = {k: merged.column(k) for k in self._group}
        self._pending = pa.table(columns | {ARRIVAL: merged.column(f"{ARRIVAL}_max"), SEQ: merged.column(f"{SEQ}_max")})

    def end_trigger(self) -> list[pa.RecordBatch]:
        """Every key changed since the last trigger's end, once, with its aggregates now."""
        pending, self._pending = self._pending, None
        state = self._state
        if pending is None or not pending.num_rows or state is None:
            return []
        n = state.num_rows
        codes = group_codes(
            [pa.concat_arrays([state.column(k).combine_chunks(), pending.column(k).combine_chunks()]) for k in self.keys],
            n + pending.num_rows,
        )
        out = self._finish(state.filter(pa.array(np.isin(codes[:n], codes[n:]))))
        # The newest of the rows that changed each key since the last trigger's end, not of every row it had.
        out = _with_newest(out, pending, self.keys)
        return [] if out is None else [out]

    def flush(self) -> list[pa.RecordBatch]:
        if self.update:
            return self.end_trigger()
        state = self._state
        if state is None or not state.num_rows:
            return [] if self.keys else [self._empty_row()]
        out = self._finish(state)
        return [] if out is None else [out]

    def state_rows(self) -> int:
        return super().state_rows() + (0 if self._pending is None else self._pending.num_rows)

    def to_state(self) -> dict[str, Any]:
        return {**super().to_state(), "pending": None if self._pending is None else table_to_ipc(self._pending)}

    def from_state(self, state: dict[str, Any]) -> None:
        super().from_state(state)
        blob = state.get("pending")  # a checkpoint without it has no keys pending
        self._pending = None if blob is None else ipc_to_table(blob)

    def _empty_row(self) -> pa.RecordBatch:
        """A global aggregate of no rows: count 0, every other aggregate null."""
        arrays = []
        empty = {i: partial.empty for i, partial, _ in self._numpy}
        for i, (a, f) in enumerate(zip(self.aggs, list(self.schema)[: len(self.aggs)], strict=True)):
            arrays.append(pa.array([0 if a.fn in ("count", "count_all", "count_if") else empty.get(i)], f.type))
        arrays += [pa.array([0.0], self.schema.field(ARRIVAL).type), pa.array([0], self.schema.field(SEQ).type)]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)


def _with_newest(out: pa.RecordBatch | None, newest: pa.Table, keys: list[str]) -> pa.RecordBatch | None:
    """``out`` with ``__arrival`` / ``__seq`` of the rows that changed each key (``newest``, one row
    per key, in another order than ``out``'s): joined by key code."""
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
