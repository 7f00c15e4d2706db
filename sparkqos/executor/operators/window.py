"""WindowAggregate: count/sum/avg/min/max by key over tumbling or sliding event-time windows (thesis §3.2.2).

A window is emitted once the watermark (largest event time seen − ``lateness``) reaches its end,
and every open window at :meth:`~WindowAggregate.flush` (end of input); rows of a window already
emitted are late and dropped (counted in ``late_rows``). Spark's translation groups by the same
windows. State is bounded (one partial aggregate per open window and key) and serialisable
(Arrow IPC bytes).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from sparkqos.errors import ExpressionError, PlanError, check_number
from sparkqos.executor.expressions import ARRIVAL, INTERNAL, SEQ, Agg, as_expr
from sparkqos.executor.operators.base import WindowStateOperator


class WindowAggregate(WindowStateOperator):
    """count/sum/avg/min/max by key over tumbling (``slide`` None) or sliding windows of the
    numeric event-time column ``time_col``; windows are [start, start + size) with start a
    multiple of ``slide``. Output columns: ``window_start``, ``window_end``, the keys, the
    aggregates; ``__arrival`` / ``__seq`` are the largest of the window's rows.

    >>> import pyarrow as pa
    >>> from sparkqos.executor.expressions import count, sum_
    >>> from sparkqos.executor.queues import stamp, with_internal
    >>> op = WindowAggregate(["k"], [count(), sum_("v")], "t", size=10.0)
    >>> _ = op.bind("q/agg", [with_internal(pa.schema([("k", pa.string()), ("v", pa.int64()), ("t", pa.float64())]))])
    >>> op.process(stamp(pa.record_batch({"k": ["a", "a", "b"], "v": [1, 2, 3], "t": [1.0, 2.0, 3.0]}), 0.0, 0))
    >>> out = op.process(stamp(pa.record_batch({"k": ["a"], "v": [5], "t": [12.0]}), 1.0, 3))
    >>> sorted(zip(out.column("k").to_pylist(), out.column("count").to_pylist(), out.column("sum_v").to_pylist()))
    [('a', 2, 3), ('b', 1, 3)]
    >>> op.flush()[0].column("window_start").to_pylist()
    [10.0]
    """

    def __init__(
        self,
        keys: str | Sequence[str],
        aggs: Sequence[Agg],
        time_col: str,
        *,
        size: float,
        slide: float | None = None,
        lateness: float = 0.0,
    ):
        super().__init__()
        if isinstance(keys, str):
            keys = [keys]
        self.keys = list(keys)
        self.aggs = list(aggs)
        if not self.aggs or not all(isinstance(a, Agg) for a in self.aggs):
            raise ExpressionError(f"window_agg() needs aggregates such as count() or sum_('v'), got {aggs!r}")
        check_number("size", size, low=0, low_open=True, error=PlanError, where="window ")
        if slide is None:
            slide = size
        check_number("slide", slide, low=0, low_open=True, high=size, error=PlanError, where="window ")
        check_number("lateness", lateness, low=0, error=PlanError, where="window ")
        self.time_col = time_col
        self.size, self.slide, self.lateness = float(size), float(slide), float(lateness)
        self._copies = int(math.ceil(self.size / self.slide))
        self._state: pa.Table | None = None
        self._max_time: float | None = None
        self._closed_until = -math.inf  # windows ending at or before this were emitted
        self.late_rows = 0

    @property
    def window_copies(self) -> int:
        """How many windows each row can fall in: ceil(size / slide) (1 when tumbling)."""
        return self._copies

    def copy(self) -> WindowAggregate:
        return WindowAggregate(self.keys, self.aggs, self.time_col, size=self.size, slide=self.slide, lateness=self.lateness)

    def _output_schema(self) -> pa.Schema:
        src = self.input_schemas[0]
        t = as_expr(self.time_col).check(src, self.name)
        if not (pa.types.is_integer(t) or pa.types.is_floating(t)):
            raise ExpressionError(f"operator {self.name!r}: time column {self.time_col!r} must be numeric seconds, got {t}")
        fields = [pa.field("window_start", pa.float64()), pa.field("window_end", pa.float64())]
        for k in self.keys:
            fields.append(pa.field(k, as_expr(k).check(src, self.name)))
        names = {"window_start", "window_end", *self.keys}
        for a in self.aggs:
            if a.name in names or a.name in INTERNAL:
                raise ExpressionError(f"operator {self.name!r}: output column {a.name!r} is defined twice")
            names.add(a.name)
            fields.append(pa.field(a.name, a.check(src, self.name)))
        # Partial state: per (window, key) counts, sums, mins, maxes and the largest arrival/seq.
        self._partials: list[tuple[str, str, str]] = []  # (state column, input column or None, fn)
        for i, a in enumerate(self.aggs):
            if a.fn == "count":
                self._partials.append((f"p{i}_n", a.column, "count"))
            elif a.fn in ("sum", "avg"):
                self._partials.append((f"p{i}_s", a.column, "sum"))
                if a.fn == "avg":
                    self._partials.append((f"p{i}_n", a.column, "count"))
            else:
                self._partials.append((f"p{i}_m", a.column, a.fn))
        return pa.schema(fields + [src.field(ARRIVAL), src.field(SEQ)])

    # -- running ---------------------------------------------------------------------------------
    def _expand(self, batch: pa.RecordBatch) -> pa.Table:
        """(row, window) pairs of ``batch`` as a table with a ``__ws`` column."""
        ts = pc.cast(batch.column(self.time_col), pa.float64())
        base = pc.floor(pc.divide(ts, self.slide))
        pieces = []
        for j in range(self._copies):
            ws = pc.multiply(pc.subtract(base, float(j)), self.slide)
            keep = pc.and_(pc.less(ts, pc.add(ws, self.size)), pc.greater(pc.add(ws, self.size), self._closed_until))
            t = pa.table(batch).append_column("__ws", ws).filter(keep)
            if t.num_rows:
                pieces.append(t)
        if pieces:
            return pa.concat_tables(pieces)
        # every row fell behind the closed windows: no pairs, with the pairs' schema
        return pa.table(batch).slice(0, 0).append_column("__ws", pa.array([], pa.float64()))

    def _partial(self, pairs: pa.Table) -> pa.Table:
        aggs = []
        names = []
        for name, column, fn in self._partials:
            if column is None:
                aggs.append(([], "count_all"))
            else:
                aggs.append((column, fn if fn != "count" else "count"))
            names.append(name)
        aggs += [(ARRIVAL, "max"), (SEQ, "max")]
        names += [ARRIVAL, SEQ]
        return self._grouped(pairs, aggs, names)

    def _grouped(self, table: pa.Table, aggs: list, names: list[str]) -> pa.Table:
        group = ["__ws", *self.keys]
        g = table.group_by(group, use_threads=False).aggregate(aggs)
        # pyarrow names aggregate columns "<col>_<fn>" (possibly twice) and places the keys first.
        nk = len(group)
        if g.column_names[:nk] == group:
            cols = [g.column(nk + i) for i in range(len(aggs))] + [g.column(i) for i in range(nk)]
        else:
            cols = [g.column(i) for i in range(len(aggs))] + [g.column(len(aggs) + i) for i in range(nk)]
        return pa.Table.from_arrays(cols, names=names + group)

    def _combine(self, table: pa.Table) -> pa.Table:
        aggs = []
        names = []
        for name, _, fn in self._partials:
            aggs.append((name, "sum" if fn in ("count", "sum") else fn))
            names.append(name)
        aggs += [(ARRIVAL, "max"), (SEQ, "max")]
        names += [ARRIVAL, SEQ]
        return self._grouped(table, aggs, names)

    def process(self, batch: pa.RecordBatch, port: int = 0) -> pa.RecordBatch | None:
        ts = batch.column(self.time_col)
        if batch.num_rows:
            m = pc.max(ts).as_py()
            if m is not None and (self._max_time is None or m > self._max_time):
                self._max_time = float(m)
        pairs = self._expand(batch)
        valid_rows = batch.num_rows - ts.null_count
        if pairs.num_rows:
            part = self._partial(pairs)
            if self._state is None or self._state.num_rows == 0:
                self._state = part
            else:
                self._state = self._combine(pa.concat_tables([self._state, part]))
        if valid_rows and not pairs.num_rows:
            self.late_rows += valid_rows
        if self._max_time is None:
            return None
        return self._emit(self._max_time - self.lateness)

    def _emit(self, watermark: float) -> pa.RecordBatch | None:
        state = self._state
        if state is None or state.num_rows == 0:
            self._closed_until = max(self._closed_until, watermark)
            return None
        ends = pc.add(state.column("__ws"), self.size)
        done = pc.less_equal(ends, watermark)
        self._closed_until = max(self._closed_until, watermark)
        if not pc.any(done).as_py():
            return None
        out = state.filter(done)
        self._state = state.filter(pc.invert(done))
        return self._finish(out)

    def _finish(self, part: pa.Table) -> pa.RecordBatch:
        ws = part.column("__ws")
        arrays = [ws, pc.add(ws, self.size)]
        arrays += [part.column(k) for k in self.keys]
        for i, a in enumerate(self.aggs):
            if a.fn == "count":
                arrays.append(pc.cast(part.column(f"p{i}_n"), pa.int64()))
            elif a.fn == "sum":
                arrays.append(pc.cast(part.column(f"p{i}_s"), self.schema.field(a.name).type))
            elif a.fn == "avg":
                s = pc.cast(part.column(f"p{i}_s"), pa.float64())
                n = pc.cast(part.column(f"p{i}_n"), pa.float64())
                arrays.append(pc.if_else(pc.equal(n, 0.0), pa.scalar(None, pa.float64()), pc.divide(s, n)))
            else:
                arrays.append(part.column(f"p{i}_m"))
        arrays += [part.column(ARRIVAL), part.column(SEQ)]
        table = pa.Table.from_arrays(arrays, schema=self.schema)
        return table.combine_chunks().to_batches()[0]

    def flush(self) -> list[pa.RecordBatch]:
        state = self._state
        if state is None or state.num_rows == 0:
            return []
        self._state = None
        return [self._finish(state)]
