"""EventWindowAggregate: Spark's ``groupBy(window(ts, size[, slide]), keys).agg(...)`` on event time.

What a PySpark transform's ``withWatermark(...).groupBy(F.window("ts", "10 seconds"), "zone").agg(...)``
compiles to (:mod:`sparkqos.compile.stateful`). Windows are Spark's: a row at event time ``t``
(microseconds) falls in the windows ``[s, s + size)`` with ``s = t − ((t − start) mod slide) − i·slide``
for ``i = 0 … ceil(size / slide) − 1``, keeping those with ``s ≤ t``; rows with a null time are
dropped, as Spark's plan filters them. The output is Spark's: a ``window`` struct
``<start, end>`` of timestamps, the grouping keys, then the aggregates with Spark's types and null
rules (count never null; sum/avg/min/max skip nulls and are null for a group of nulls; NaN is
above every number in min/max; first/last take the first/last row in arrival order); the
statistics, max_by/min_by, collect_list/collect_set, and min/max/first/last of a type pyarrow's
hash kernels do not take (a struct, an array, a decimal) are partials combined with numpy
(:mod:`.partials`). A type a function does not take at all is refused when the operator is bound.
Keys of a type pyarrow cannot hash (a struct, an array) group by code: equal when Spark's ordering
ties them (-0.0 and 0.0, every NaN, inside them too), each group's key taken from its first row.

Streaming (Spark's append mode): with a watermark delay the watermark is the largest event time
seen minus the delay; a window is emitted once the watermark reaches its end, and a (row, window)
pair whose window already ended before the watermark is late: dropped and counted in
``late_rows``. Without a watermark (a finite DataFrame, where Spark ignores ``withWatermark``)
every window is emitted at :meth:`flush`. ``__arrival``/``__seq`` of an output row are the largest
of its window's rows, so its delay counts from the newest row it covers. State (one partial
aggregate per open window and key) is bounded by the watermark and serialisable (Arrow IPC).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkqos.errors import ExpressionError, PlanError, check_number
from sparkqos.executor.expressions import ARRIVAL, INTERNAL, SEQ
from sparkqos.executor.operators.base import WindowStateOperator, group_codes, normal_key
from sparkqos.executor.operators.ordering import orderable
from sparkqos.executor.operators.partials import (
    MOMENTS,
    Collect,
    Moments,
    Partial,
    Pick,
    first_of_groups,
    groupable,
    kernel_accepts,
)

#: Aggregate functions: ``count_all`` (rows), ``count`` (non-null values) and the rest over a
#: column (``max_by`` / ``min_by`` over a column and the column ``by`` that orders it).
FUNCTIONS = (
    "count_all",
    "count",
    "count_if",
    "sum",
    "avg",
    "min",
    "max",
    "first",
    "last",
    *MOMENTS,
    "max_by",
    "min_by",
    "collect_list",
    "collect_set",
)
_TS = pa.timestamp("us", tz="UTC")


@dataclass(frozen=True)
class WindowAgg:
    """One aggregate: ``fn`` of :data:`FUNCTIONS` over ``column`` (None for ``count_all``),
    output column ``name``; ``ignore_nulls`` for first/last and collect_list/collect_set (Spark's
    collect functions skip nulls: ``True`` there); ``by``, the ordering column of max_by/min_by;
    ``null_on_divide``: a sample statistic of one row (or skewness/kurtosis of no spread) is null,
    else NaN (Spark's ``spark.sql.legacy.statisticalAggregate`` off / on); ``nullable``: the
    arrays of collect_list/collect_set are typed as holding nulls even when they hold none (the
    schema Spark gives a streaming aggregation, which it makes nullable throughout)."""

    fn: str
    column: str | None
    name: str
    ignore_nulls: bool = False
    by: str | None = None
    null_on_divide: bool = True
    nullable: bool = False


def _is_float(t: pa.DataType) -> bool:
    return pa.types.is_floating(t)


def _as_type(x: pa.Array, t: pa.DataType) -> pa.Array:
    return x if x.type == t else pc.cast(x, t)


class SkipNulls(pc.ScalarAggregateOptions):
    """``first``/``last``'s options that pickle (pyarrow's do not), so a compiled plan holding
    them travels to Spark Connect's Python worker with foreachBatch's function."""

    def __init__(self, skip_nulls: bool):
        super().__init__(skip_nulls=skip_nulls)
        self.skip = skip_nulls

    def __reduce__(self) -> tuple[Any, tuple[bool]]:
        return SkipNulls, (self.skip,)


class EventWindowAggregate(WindowStateOperator):
    """Aggregates of ``aggs`` by ``keys`` over event-time windows of ``size_us`` microseconds,
    sliding every ``slide_us`` (tumbling when equal), offset ``start_us``, on the timestamp column
    ``time_col``; ``delay_us`` is the watermark delay (None: no watermark, emit at the end).

    >>> import pyarrow as pa
    >>> from sparkqos.executor.queues import stamp, with_internal
    >>> ts = pa.timestamp("us", tz="UTC")
    >>> op = EventWindowAggregate(["k"], [WindowAgg("count_all", None, "n")], "t", 10_000_000, delay_us=0)
    >>> _ = op.bind("q/agg", [with_internal(pa.schema([("k", pa.string()), ("t", ts)]))])
    >>> op.process(stamp(pa.record_batch({"k": ["a", "a"], "t": pa.array([1_000_000, 2_000_000], ts)}), 0.0, 0))
    >>> out = op.process(stamp(pa.record_batch({"k": ["b"], "t": pa.array([12_000_000], ts)}), 1.0, 2))
    >>> out.column("n").to_pylist(), [w["end"].timestamp() for w in out.column("window").to_pylist()]
    ([2], [10.0])
    """

    def __init__(
        self,
        keys: Sequence[str],
        aggs: Sequence[WindowAgg],
        time_col: str,
        size_us: int,
        slide_us: int | None = None,
        start_us: int = 0,
        delay_us: int | None = None,
        window_name: str = "window",
    ):
        super().__init__()
        self.keys = list(keys)
        self.aggs = list(aggs)
        if not self.aggs:
            raise PlanError("a window aggregation needs at least one aggregate")
        for a in self.aggs:
            if a.fn not in FUNCTIONS:
                raise ExpressionError(f"unknown window aggregate {a.fn!r}; known: {FUNCTIONS}")
        check_number("size_us", size_us, integer=True, low=1, error=PlanError, where="window ")
        slide_us = size_us if slide_us is None else slide_us
        check_number("slide_us", slide_us, integer=True, low=1, high=size_us, error=PlanError, where="window ")
        check_number("start_us", start_us, integer=True, error=PlanError, where="window ")
        check_number("delay_us", delay_us, integer=True, low=0, none_ok=True, error=PlanError, where="window ")
        self.time_col, self.window_name = time_col, window_name
        self.size_us, self.slide_us, self.start_us, self.delay_us = int(size_us), int(slide_us), int(start_us), delay_us
        self.copies = int(math.ceil(self.size_us / self.slide_us))
        self._state: pa.Table | None = None
        self._max_time: int | None = None
        self._closed_until = -(2**63)  # windows ending at or before this (µs) were emitted
        self.late_rows = 0

    def copy(self) -> EventWindowAggregate:
        return EventWindowAggregate(
            self.keys, self.aggs, self.time_col, self.size_us, self.slide_us, self.start_us, self.delay_us, self.window_name
        )

    # -- building --------------------------------------------------------------------------------
    def _output_schema(self) -> pa.Schema:
        src = self.input_schemas[0]

        def field_type(name: str) -> pa.DataType:
            i = src.get_field_index(name)
            if i < 0:
                raise ExpressionError(f"operator {self.name!r}: unknown column {name!r}; columns are {src.names}")
            return src.field(i).type

        fields = self._window_fields(field_type) + [pa.field(k, field_type(k)) for k in self.keys]
        for k in self.keys:
            if not (groupable(field_type(k)) or orderable(field_type(k))):
                raise ExpressionError(f"operator {self.name!r}: cannot group by column {k!r} of type {field_type(k)}")
        #: A key pyarrow cannot hash (a struct, an array): rows are grouped by their key's code.
        self._coded = not all(groupable(field_type(k)) for k in self.keys)
        self._partials: list[tuple[str, str | None, str, Any]] = []  # (state column, input, pyarrow fn, options)
        #: Partials pyarrow's hash kernels cannot compute: (aggregate's index, partial, its inputs).
        self._numpy: list[tuple[int, Partial, list[str]]] = []
        for i, a in enumerate(self.aggs):
            t = None if a.column is None else field_type(a.column)
            out = self._partial(i, a, t, field_type)
            fields.append(pa.field(a.name, out))
        # The group_by specs of a batch's partial aggregates and of their combination with the
        # state, and which of its columns becomes which state column, fixed once here.
        self._group = ["__ws", *self.keys]
        self._specs: dict[bool, list[tuple[Any, ...]]] = {}
        self._columns: dict[bool, list[tuple[str, str]]] = {}
        for combine in (False, True):
            specs: list[tuple[Any, ...]] = []
            for name, _, fn, opts in self._partials:
                if combine:
                    fn = {"count_all": "sum", "count": "sum", "count_if": "sum", "nan_count": "sum"}.get(fn, fn)
                else:
                    fn = {"count_all": "count", "count_if": "count", "nan_count": "sum"}.get(fn, fn)
                specs.append((name, fn, opts) if opts is not None else (name, fn))
            specs += [(ARRIVAL, "max"), (SEQ, "max")]
            names = [p[0] for p in self._partials] + [ARRIVAL, SEQ]
            self._specs[combine] = specs
            self._columns[combine] = [(k, k) for k in self._group] + [
                (name, f"{src}_{fn}") for (src, fn, *_), name in zip(specs, names, strict=True)
            ]
        names = [f.name for f in fields]
        dup = {n for n in names if names.count(n) > 1} | (set(names) & set(INTERNAL))
        if dup:
            raise ExpressionError(f"operator {self.name!r}: output column(s) {sorted(dup)} defined twice")
        return pa.schema(fields + [src.field(ARRIVAL), src.field(SEQ)])

    def _partial(self, i: int, a: WindowAgg, t: pa.DataType | None, field_type: Any) -> pa.DataType:
        """Note the partials of aggregate ``i`` (``a``, over a column of type ``t``), each as a
        pyarrow hash aggregate where pyarrow has a kernel for ``t`` and as a
        :class:`~sparkqos.executor.operators.partials.Partial` otherwise; its output type.
        Raises ExpressionError for a type the function does not take (so a query is refused when
        it is compiled, never when its first batch runs)."""
        name, what = f"p{i}", f"operator {self.name!r}: {a.fn} of column {a.column!r} ({t})"
        if a.fn in ("count_all", "count"):
            self._partials.append((name, a.column, "count_all" if a.fn == "count_all" else "count", None))
            return pa.int64()
        if a.fn == "count_if":
            if not pa.types.is_boolean(t):
                raise ExpressionError(f"{what}: count_if needs a boolean")
            self._partials.append((name, a.column, "count_if", None))
            return pa.int64()
        if a.fn in ("sum", "avg"):
            if not (pa.types.is_integer(t) or _is_float(t)):
                raise ExpressionError(f"operator {self.name!r}: {a.fn} needs a numeric column, got {a.column!r} ({t})")
            self._partials.append((name, a.column, "sum", None))
            self._partials.append((f"{name}_n", a.column, "count", None))
            return pa.float64() if a.fn == "avg" or _is_float(t) else pa.int64()
        if a.fn in MOMENTS:
            if not (pa.types.is_integer(t) or _is_float(t) or pa.types.is_decimal(t)):
                raise ExpressionError(f"{what}: {a.fn} needs a numeric column")
            return self._numpy_partial(i, Moments(name, a.fn, a.null_on_divide), [a.column])
        if a.fn in ("min", "max"):
            if not orderable(t):
                raise ExpressionError(f"{what}: Spark does not order values of this type")
            if not kernel_accepts(a.fn, t):
                return self._numpy_partial(i, Pick(name, a.fn, t), [a.column])
            self._partials.append((name, a.column, a.fn, None))
            if _is_float(t):
                self._partials.append((f"{name}_nan", a.column, "nan_count", None))
            return t
        if a.fn in ("first", "last"):
            if not kernel_accepts(a.fn, t):
                return self._numpy_partial(i, Pick(name, a.fn, t, a.ignore_nulls), [a.column])
            self._partials.append((name, a.column, a.fn, SkipNulls(a.ignore_nulls)))
            return t
        if a.fn in ("max_by", "min_by"):
            if a.by is None:
                raise ExpressionError(f"{what}: {a.fn} needs the column that orders it (by)")
            by_t = field_type(a.by)
            if not orderable(by_t):
                raise ExpressionError(f"{what}: Spark does not order {a.by!r} ({by_t})")
            return self._numpy_partial(i, Pick(name, a.fn, t), [a.column, a.by])
        distinct = a.fn == "collect_set"
        if distinct and not orderable(t):
            raise ExpressionError(f"{what}: collect_set cannot compare values of this type")
        return self._numpy_partial(i, Collect(name, t, distinct, a.ignore_nulls, a.nullable), [a.column])

    def _numpy_partial(self, i: int, partial: Partial, inputs: list[str]) -> pa.DataType:
        self._numpy.append((i, partial, inputs))
        return partial.out_type

    def _window_fields(self, field_type: Any) -> list[pa.Field]:
        """The output's window struct (``field_type(name)``: an input column's type)."""
        if not pa.types.is_timestamp(field_type(self.time_col)):
            raise ExpressionError(f"operator {self.name!r}: window time column {self.time_col!r} must be a timestamp")
        self._time_type = field_type(self.time_col)
        return [pa.field(self.window_name, pa.struct([pa.field("start", self._time_type), pa.field("end", self._time_type)]))]

    def _window_arrays(self, part: pa.Table) -> list[Any]:
        ws = part.column("__ws").combine_chunks()
        start = pc.cast(ws, self._time_type)
        end = pc.cast(pc.add(ws, self.size_us), self._time_type)
        return [pa.StructArray.from_arrays([start, end], fields=list(self.schema.field(0).type))]

    # -- running ---------------------------------------------------------------------------------
    def _inputs(self, batch: pa.RecordBatch) -> dict[str, pa.Array]:
        """Per partial: the values it aggregates (NaN → null for min/max of floats, -0.0 kept)."""
        out = {}
        nans: dict[str, pa.Array] = {}  # is_nan of a float column, once for its min, max and NaN count
        for name, column, fn, _ in self._partials:
            if column is None:  # count_all: the non-null values of a column that is never null
                out[name] = batch.column(ARRIVAL)
                continue
            x = batch.column(column)
            if _is_float(x.type):
                if fn == "sum":
                    x = _as_type(x, pa.float64())
                elif fn in ("min", "max", "nan_count"):
                    nan = nans.get(column)
                    if nan is None:
                        nan = nans[column] = pc.is_nan(x)
                    if fn == "nan_count":
                        x = pc.cast(nan, pa.int64())
                    elif nan.true_count:
                        x = pc.if_else(nan, pa.scalar(None, x.type), x)
            elif fn == "sum":
                x = _as_type(x, pa.int64())
            elif fn == "count_if":  # count of the rows where it holds
                x = pc.if_else(x, True, pa.scalar(None, pa.bool_()))
            out[name] = x
        for _, partial, inputs in self._numpy:
            out.update(partial.rows([batch.column(c) for c in inputs]))
        return out

    def _pairs(self, batch: pa.RecordBatch) -> tuple[pa.Table, int, int | None]:
        """(row, window) pairs of ``batch`` not already closed, as a table of window starts,
        keys, partial inputs and the executor's columns; how many rows were late; and the
        largest event time of the batch (µs; None without one)."""
        t = batch.column(self.time_col)
        if t.null_count:
            batch = batch.filter(t.is_valid())
            t = batch.column(self.time_col)
        # A timestamp's values are its count of units since the epoch: read them in place
        us = t.view(pa.int64()).to_numpy(zero_copy_only=False)
        newest = int(us.max()) if len(us) else None
        last_start = us - np.mod(us - self.start_us, self.slide_us)
        base = {k: batch.column(k) for k in self.keys}
        base = {k: normal_key(v) for k, v in base.items()}
        base.update(self._inputs(batch))
        base[ARRIVAL], base[SEQ] = batch.column(ARRIVAL), batch.column(SEQ)
        pieces, order = [], []
        alive = np.zeros(len(us), dtype=bool)
        for i in range(self.copies):
            ws = last_start - i * self.slide_us
            keep = (ws <= us) & (us < ws + self.size_us)
            open_ = keep & (ws + self.size_us > self._closed_until)
            alive |= open_
            if open_.all():  # every row (always so for a tumbling window's rows on time): no copies
                pieces.append(pa.table({"__ws": pa.array(ws)} | base))
                order.append(np.arange(len(us)))
            elif open_.any():
                mask = pa.array(open_)
                cols = {"__ws": pa.array(ws[open_])} | {k: v.filter(mask) for k, v in base.items()}
                pieces.append(pa.table(cols))
                order.append(np.flatnonzero(open_))
        late = int(len(us) - alive.sum())
        if not pieces:
            return pa.table({"__ws": pa.array([], pa.int64())} | {k: v.slice(0, 0) for k, v in base.items()}), late, newest
        if len(pieces) == 1:
            return pieces[0], late, newest
        pairs = pa.concat_tables(pieces)  # back in row order, so first/last see the rows as they came
        return pairs.take(np.argsort(np.concatenate(order), kind="stable")), late, newest

    def _aggregate(self, table: pa.Table, combine: bool) -> pa.Table:
        if not self._numpy and not self._coded:
            g = table.group_by(self._group, use_threads=False).aggregate(self._specs[combine])
            return pa.table({name: g.column(column) for name, column in self._columns[combine]})
        # Each group's code, to place the partials numpy combines by code
        codes = group_codes([table.column(c) for c in self._group], table.num_rows)
        groups = int(codes.max()) + 1 if len(codes) else 0
        table = table.append_column("__g", pa.array(codes))
        g, at = self._grouped(table, self._specs[combine], codes, groups)
        out = {name: g.column(column) for name, column in self._columns[combine]}
        for _, partial, _ in self._numpy:
            out |= {c: v.take(at) for c, v in partial.combine(table, codes, groups).items()}
        return pa.table(out)

    def _grouped(self, table: pa.Table, specs: list[Any], codes: np.ndarray, groups: int) -> tuple[pa.Table, pa.Array]:
        """pyarrow's ``specs`` over the groups of ``table`` (whose ``__g`` column holds their
        ``codes``), with the group columns; and each output row's code. Keys pyarrow cannot hash
        are grouped by code, each group's key taken from its first row."""
        if not self._coded:
            g = table.group_by(self._group, use_threads=False).aggregate([*specs, ("__g", "min")])
            return g, pa.array(g.column("__g_min").to_numpy())
        g = table.group_by(["__g"], use_threads=False).aggregate(specs)
        at = g.column("__g").to_numpy()
        heads = pa.array(first_of_groups(codes, np.arange(len(codes)), groups)[at])
        for k in self._group:
            g = g.append_column(k, table.column(k).take(heads))
        return g, pa.array(at)

    def process(self, batch: pa.RecordBatch, port: int = 0) -> pa.RecordBatch | None:
        pairs, late, newest = self._pairs(batch)
        self.late_rows += late
        if pairs.num_rows:
            part = self._aggregate(pairs, combine=False)
            if self._state is None or self._state.num_rows == 0:
                self._state = part
            else:
                self._state = self._aggregate(pa.concat_tables([self._state, part]), combine=True)
        if newest is not None:
            self._max_time = newest if self._max_time is None else max(self._max_time, newest)
        if self.delay_us is None or self._max_time is None:
            return None
        return self._emit(self._max_time - self.delay_us)

    def _emit(self, watermark: int) -> pa.RecordBatch | None:
        self._closed_until = max(self._closed_until, watermark)
        state = self._state
        if state is None or state.num_rows == 0:
            return None
        done = pc.less_equal(self._ends(state), watermark)
        if not pc.any(done).as_py():
            return None
        self._state = state.filter(pc.invert(done))
        return self._finish(state.filter(done))

    def _ends(self, state: pa.Table) -> pa.ChunkedArray:
        """The end (µs) of each window of ``state``."""
        return pc.add(state.column("__ws"), self.size_us)

    def _finish(self, part: pa.Table) -> pa.RecordBatch:
        arrays: list[Any] = self._window_arrays(part) + [part.column(k) for k in self.keys]
        numpy = {i: partial for i, partial, _ in self._numpy}
        for i, a in enumerate(self.aggs):
            out_t = self.schema.field(a.name).type
            if i in numpy:
                arrays.append(numpy[i].result(part))
                continue
            v = part.column(f"p{i}")
            if a.fn in ("count_all", "count", "count_if"):
                arrays.append(pc.cast(v, pa.int64()))
            elif a.fn in ("sum", "avg"):
                n = part.column(f"p{i}_n")
                none = pc.equal(n, 0)
                if a.fn == "avg":
                    v = pc.divide(pc.cast(v, pa.float64()), pc.cast(n, pa.float64()))
                arrays.append(pc.if_else(none, pa.scalar(None, out_t), pc.cast(v, out_t)))
            elif f"p{i}_nan" in part.column_names:
                nans = pc.greater(part.column(f"p{i}_nan"), 0)
                nan = pa.scalar(math.nan, out_t)
                if a.fn == "max":  # NaN is above every number
                    arrays.append(pc.if_else(nans, nan, v))
                else:  # min: NaN only when nothing else
                    arrays.append(pc.if_else(pc.and_(nans, pc.is_null(v)), nan, v))
            else:
                arrays.append(v)
        arrays += [part.column(ARRIVAL), part.column(SEQ)]
        table = pa.Table.from_arrays(arrays, schema=self.schema)
        return table.combine_chunks().to_batches()[0] if table.num_rows else None

    def flush(self) -> list[pa.RecordBatch]:
        state = self._state
        self._state = None
        if state is None or state.num_rows == 0:
            return []
        out = self._finish(state)
        return [] if out is None else [out]
