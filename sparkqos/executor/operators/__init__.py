"""Physical operators of the executor, on pyarrow compute (thesis §3.2.2; Chain §5 for joins).

Each operator is bound to its input schemas when a plan is built (:meth:`PhysicalOperator.bind`,
which type-checks its expressions and returns the output schema) and then runs on the rows the
executor hands it from its input queues (:meth:`PhysicalOperator.run`). Every row carries the
executor's columns ``__arrival`` and ``__seq`` through every operator. Window and join state is
bounded and serialisable (:meth:`to_state` / :meth:`from_state`, Arrow IPC bytes), and every
operator has a Spark equivalent (:meth:`to_spark`, in ``sparkqos.spark.translate``) that gives the
same answer on a finite input:

* window aggregation emits a window once the watermark (largest event time seen − ``lateness``)
  reaches its end, and every open window at :meth:`flush` (end of input); rows of a window already
  emitted are late and dropped (counted in ``late_rows``); Spark groups by the same windows;
* the symmetric hash join merges its inputs in arrival order (ties: the first input), waiting
  while one input is empty (Chain §5). A row joins the rows of the other input that are within the
  window when it arrives: the last ``rows`` rows (tuple-based) or those whose time differs by at
  most ``seconds`` (time-based, over ``time_col`` or the arrival time). Output arrival = the later
  of the pair. Time-based windows on an event-time column assume that column does not decrease
  along each input, as a watermark with no delay would.
"""

from __future__ import annotations

import io
import math
import time
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkqos.errors import ExpressionError, PlanError
from sparkqos.executor.expressions import ARRIVAL, INTERNAL, SEQ, Agg, Expr, _kind, as_expr, evaluate_array
from sparkqos.executor.queues import BatchQueue, merge


def _user_names(schema: pa.Schema) -> list[str]:
    return [n for n in schema.names if n not in INTERNAL]


def _table_to_ipc(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue()


def _ipc_to_table(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(data).read_all()


def _batches_of(table: pa.Table) -> list[pa.RecordBatch]:
    if table.num_rows == 0:
        return []
    return [table.combine_chunks().to_batches()[0]]


class PhysicalOperator:
    """Base of the executor's operators.

    ``kind`` is the plan kind (``filter``, ``map``, ``union``, ``join``, ``aggregate``);
    ``selectivity`` / ``cost_s`` are the initial estimates the plan starts from before the
    statistics gatherer measures them.
    """

    kind = "filter"
    arity = 1
    selectivity = 1.0
    cost_s = 1e-6
    #: Output rows keep the order of input rows (so arrival order survives).
    preserves_order = False

    def __init__(self) -> None:
        self.name = "?"
        self.input_schemas: list[pa.Schema] = []
        self.schema: pa.Schema | None = None

    # -- building ------------------------------------------------------------------------------
    def bind(self, name: str, input_schemas: Sequence[pa.Schema]) -> pa.Schema:
        """Type-check against the input schemas (with the executor's columns) and return the
        output schema. Raises :class:`ExpressionError` / :class:`PlanError` naming ``name``."""
        if len(input_schemas) != self.arity:
            raise PlanError(f"operator {name!r} takes {self.arity} input(s), got {len(input_schemas)}")
        self.name = name
        self.input_schemas = list(input_schemas)
        self.schema = self._output_schema()
        return self.schema

    def _output_schema(self) -> pa.Schema:
        return self.input_schemas[0]

    def copy(self) -> PhysicalOperator:
        """A fresh, unbound operator with the same parameters (each query gets its own)."""
        raise NotImplementedError

    # -- running -------------------------------------------------------------------------------
    def runnable(self, ports: Sequence[BatchQueue], final: bool) -> bool:
        """Whether :meth:`run` can consume something; ``final``: no more input can reach the
        empty ports."""
        return any(ports)

    def run(self, ports: Sequence[BatchQueue], limit: int, final: bool = False) -> tuple[int, list[pa.RecordBatch]]:
        """Consume up to ``limit`` rows from the input queues; returns (rows consumed, output)."""
        taken = ports[0].take(limit)
        if not taken:
            return 0, []
        # One kernel call per run: copying a few slices together is cheaper than calling every
        # kernel once per slice.
        batch = taken[0] if len(taken) == 1 else pa.concat_batches(taken)
        res = self.process(batch)
        return batch.num_rows, ([] if res is None or res.num_rows == 0 else [res])

    def process(self, batch: pa.RecordBatch, port: int = 0) -> pa.RecordBatch | None:
        raise NotImplementedError

    def flush(self) -> list[pa.RecordBatch]:
        """End of input: whatever the operator still holds back."""
        return []

    # -- state ---------------------------------------------------------------------------------
    def to_state(self) -> dict[str, Any]:
        return {}

    def from_state(self, state: dict[str, Any]) -> None:
        if state:
            raise ValueError(f"operator {self.name!r} holds no state, got {sorted(state)}")

    def state_rows(self) -> int:
        return 0

    def to_spark(self, *dfs):
        raise NotImplementedError


class Select(PhysicalOperator):
    """Rows for which ``predicate`` is true (null counts as false, as in SQL ``WHERE``).

    >>> import pyarrow as pa
    >>> from sparkqos.executor.expressions import col
    >>> from sparkqos.executor.queues import stamp, with_internal
    >>> op = Select(col("v") > 1)
    >>> _ = op.bind("q/where", [with_internal(pa.schema([("v", pa.int64())]))])
    >>> op.process(stamp(pa.record_batch({"v": [1, 2, 3]}), 0.0, 0)).column("v").to_pylist()
    [2, 3]
    """

    kind = "filter"
    selectivity = 0.5
    preserves_order = True

    def __init__(self, predicate: Expr):
        super().__init__()
        if not isinstance(predicate, Expr):
            raise ExpressionError(f"where() needs an expression such as col('x') > 1, got {predicate!r}")
        self.predicate = predicate

    def copy(self) -> Select:
        return Select(self.predicate)

    def _output_schema(self) -> pa.Schema:
        t = self.predicate.check(self.input_schemas[0], self.name)
        if _kind(t) not in ("boolean", "null"):
            raise ExpressionError(f"operator {self.name!r}: the predicate {self.predicate!r} gives {t}, not a boolean")
        return self.input_schemas[0]

    def process(self, batch: pa.RecordBatch, port: int = 0) -> pa.RecordBatch:
        return batch.filter(evaluate_array(self.predicate, batch))

    def to_spark(self, df):
        from sparkqos.spark.translate import select_to_spark

        return select_to_spark(self, df)


class Project(PhysicalOperator):
    """Computed columns (``select``/``map``); the executor's columns ride along.

    >>> import pyarrow as pa
    >>> from sparkqos.executor.expressions import col
    >>> from sparkqos.executor.queues import stamp, with_internal
    >>> op = Project(["id", (col("v") * 2).alias("v2")])
    >>> op.bind("q/select", [with_internal(pa.schema([("id", pa.string()), ("v", pa.int64())]))]).names
    ['id', 'v2', '__arrival', '__seq']
    """

    kind = "map"
    preserves_order = True

    def __init__(self, exprs: Sequence[Expr | str]):
        super().__init__()
        if not exprs:
            raise ExpressionError("select() needs at least one column or expression")
        self.exprs = [as_expr(e) for e in exprs]

    def copy(self) -> Project:
        return Project(self.exprs)

    def _output_schema(self) -> pa.Schema:
        src = self.input_schemas[0]
        fields = []
        seen: set[str] = set()
        empty = pa.RecordBatch.from_pylist([], schema=src)
        for e in self.exprs:
            e.check(src, self.name)
            name = e.name
            if name in INTERNAL:
                raise ExpressionError(f"operator {self.name!r}: column {name!r} is reserved for the executor")
            if name in seen:
                raise ExpressionError(f"operator {self.name!r}: two output columns are named {name!r}; use .alias()")
            seen.add(name)
            t = evaluate_array(e, empty).type  # exactly what pyarrow will produce
            fields.append(pa.field(name, t))
        return pa.schema(fields + [src.field(ARRIVAL), src.field(SEQ)])

    def process(self, batch: pa.RecordBatch, port: int = 0) -> pa.RecordBatch:
        arrays = [evaluate_array(e, batch) for e in self.exprs]
        arrays += [batch.column(ARRIVAL), batch.column(SEQ)]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def to_spark(self, df):
        from sparkqos.spark.translate import project_to_spark

        return project_to_spark(self, df)


class Union(PhysicalOperator):
    """Rows of all inputs (same column names and types), oldest head first."""

    kind = "union"

    def __init__(self, arity: int = 2):
        super().__init__()
        if arity < 2:
            raise PlanError(f"a union needs at least two inputs, got {arity}")
        self.arity = arity

    def copy(self) -> Union:
        return Union(self.arity)

    def _output_schema(self) -> pa.Schema:
        first = self.input_schemas[0]
        for i, s in enumerate(self.input_schemas[1:], start=1):
            if set(s.names) != set(first.names):
                raise PlanError(
                    f"operator {self.name!r}: input {i} has columns {_user_names(s)}, input 0 has {_user_names(first)}"
                )
            for f in first:
                if s.field(f.name).type != f.type:
                    raise PlanError(
                        f"operator {self.name!r}: column {f.name!r} is {f.type} in input 0 but {s.field(f.name).type} in input {i}"
                    )
        return first

    def run(self, ports, limit, final=False):
        out, consumed = [], 0
        names = self.schema.names
        while consumed < limit:
            live = [p for p in ports if p]
            if not live:
                break
            port = min(live, key=lambda p: p.head_arrival)
            head_rows = port._batches[0][1]
            for b in port.take(min(limit - consumed, head_rows)):
                consumed += b.num_rows
                out.append(b if b.schema.names == names else b.select(names))
        return consumed, out

    def process(self, batch: pa.RecordBatch, port: int = 0) -> pa.RecordBatch:
        return batch.select(self.schema.names)

    def to_spark(self, *dfs):
        from sparkqos.spark.translate import union_to_spark

        return union_to_spark(self, *dfs)


class Synthetic(PhysicalOperator):
    """The papers' generic operator: keeps a fraction ``selectivity`` of rows and spends
    ``cost_s`` seconds of CPU per input row (thesis §3.2.2; Chain §6; Jiang §5).

    Keep/drop is a deterministic hash of the integer column ``key`` (default the sequence
    number) and ``seed``, so Spark reproduces it with 64-bit integer arithmetic that never
    overflows: with P = 2³¹ − 1, h = ((|key| mod P)·48271 + seed) mod P, then two squaring
    rounds h ← (h² + 69621) mod P and h ← (h² + seed) mod P (the squares decorrelate operators
    that differ only in their seed), keep when h < selectivity·P.

    >>> import pyarrow as pa
    >>> from sparkqos.executor.queues import stamp, with_internal
    >>> op = Synthetic(0.5, cost_s=0.0, seed=1)
    >>> _ = op.bind("q/syn", [with_internal(pa.schema([("v", pa.int64())]))])
    >>> kept = op.process(stamp(pa.record_batch({"v": list(range(10_000))}), 0.0, 0)).num_rows
    >>> 4800 < kept < 5200
    True
    """

    kind = "filter"
    preserves_order = True
    MODULUS = 2_147_483_647
    A1, A2 = 48_271, 69_621

    def __init__(self, selectivity: float, cost_s: float = 1e-6, seed: int = 0, key: str = SEQ):
        super().__init__()
        if isinstance(selectivity, bool) or not isinstance(selectivity, (int, float)) or not 0 <= selectivity <= 1:
            raise PlanError(f"synthetic selectivity must be a number in [0, 1], got {selectivity!r}")
        if isinstance(cost_s, bool) or not isinstance(cost_s, (int, float)) or not (cost_s >= 0 and math.isfinite(cost_s)):
            raise PlanError(f"synthetic cost_s must be a finite number >= 0, got {cost_s!r}")
        if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
            raise PlanError(f"synthetic seed must be an int >= 0, got {seed!r}")
        self.selectivity = float(selectivity)
        self.cost_s = float(cost_s) if cost_s > 0 else 1e-7
        self.work_s = float(cost_s)
        self.seed = seed
        self.key = key
        self._threshold = int(self.selectivity * self.MODULUS)

    def copy(self) -> Synthetic:
        return Synthetic(self.selectivity, self.work_s, self.seed, self.key)

    def _output_schema(self) -> pa.Schema:
        src = self.input_schemas[0]
        if src.get_field_index(self.key) < 0:
            raise ExpressionError(f"operator {self.name!r}: unknown key column {self.key!r}; columns are {src.names}")
        t = src.field(self.key).type
        if not pa.types.is_integer(t):
            raise ExpressionError(f"operator {self.name!r}: key column {self.key!r} must be an integer, got {t}")
        return src

    def keep_mask(self, keys: pa.Array) -> pa.Array:
        p = self.MODULUS
        valid = keys.is_valid()
        x = np.abs(keys.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)) % p
        seed = self.seed % p
        h = (x * self.A1 + seed) % p
        h = (h * h + self.A2) % p
        h = (h * h + seed) % p
        return pc.and_(pa.array(h < self._threshold), valid)

    def process(self, batch: pa.RecordBatch, port: int = 0) -> pa.RecordBatch:
        if self.work_s > 0:
            _burn(self.work_s * batch.num_rows)
        return batch.filter(self.keep_mask(batch.column(self.key)))

    def to_spark(self, df):
        from sparkqos.spark.translate import synthetic_to_spark

        return synthetic_to_spark(self, df)


def _burn(seconds: float) -> None:
    """Spend ``seconds`` of CPU (the declared per-row cost of a synthetic operator)."""
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        x += 1


class WindowAggregate(PhysicalOperator):
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

    kind = "aggregate"
    selectivity = 0.1

    def __init__(self, keys: Sequence[str], aggs: Sequence[Agg], time_col: str, size: float,
                 slide: float | None = None, lateness: float = 0.0):
        super().__init__()
        if isinstance(keys, str):
            keys = [keys]
        self.keys = list(keys)
        self.aggs = list(aggs)
        if not self.aggs or not all(isinstance(a, Agg) for a in self.aggs):
            raise ExpressionError(f"window_agg() needs aggregates such as count() or sum_('v'), got {aggs!r}")
        for v, what in ((size, "size"), (slide if slide is not None else size, "slide"), (lateness, "lateness")):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise PlanError(f"window {what} must be a finite number >= 0, got {v!r}")
        if size <= 0:
            raise PlanError(f"window size must be > 0, got {size!r}")
        slide = size if slide is None else slide
        if not 0 < slide <= size:
            raise PlanError(f"window slide must be in (0, size={size}], got {slide!r}")
        self.time_col = time_col
        self.size, self.slide, self.lateness = float(size), float(slide), float(lateness)
        self._copies = int(math.ceil(self.size / self.slide))
        self._state: pa.Table | None = None
        self._max_time: float | None = None
        self._closed_until = -math.inf  # windows ending at or before this were emitted
        self.late_rows = 0

    def copy(self) -> WindowAggregate:
        return WindowAggregate(self.keys, self.aggs, self.time_col, self.size, self.slide, self.lateness)

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
        return pa.concat_tables(pieces) if pieces else pa.table(batch).append_column("__ws", pa.array([], pa.float64())).slice(0, 0)

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

    def state_rows(self) -> int:
        return 0 if self._state is None else self._state.num_rows

    def to_state(self) -> dict[str, Any]:
        return {
            "partials": None if self._state is None else _table_to_ipc(self._state),
            "max_time": self._max_time,
            "closed_until": self._closed_until,
            "late_rows": self.late_rows,
        }

    def from_state(self, state: dict[str, Any]) -> None:
        self._state = None if state["partials"] is None else _ipc_to_table(state["partials"])
        self._max_time = state["max_time"]
        self._closed_until = state["closed_until"]
        self.late_rows = state["late_rows"]

    def to_spark(self, df):
        from sparkqos.spark.translate import window_agg_to_spark

        return window_agg_to_spark(self, df)


class WindowJoin(PhysicalOperator):
    """Sliding-window symmetric hash join on equal ``on`` keys (Chain §5; Jiang §2.1).

    Exactly one of ``rows`` (tuple-based window: the last ``rows`` rows of the other input) and
    ``seconds`` (time-based: |t_left − t_right| ≤ ``seconds`` over ``time_col``, by default the
    arrival time; a ``(left, right)`` pair names a different column on each side). Output: the left columns, then the right columns other than the keys.

    >>> import pyarrow as pa
    >>> from sparkqos.executor.queues import BatchQueue, stamp, with_internal
    >>> sch = with_internal(pa.schema([("k", pa.int64()), ("a", pa.int64())]))
    >>> sch2 = with_internal(pa.schema([("k", pa.int64()), ("b", pa.int64())]))
    >>> op = WindowJoin("k", rows=1)
    >>> _ = op.bind("q/join", [sch, sch2])
    >>> left, right = BatchQueue(sch), BatchQueue(sch2)
    >>> left.push(stamp(pa.record_batch({"k": [1, 1], "a": [10, 11]}), 0.0, 0))
    >>> right.push(stamp(pa.record_batch({"k": [1, 1], "b": [20, 21]}), 1.0, 0))
    >>> op.runnable([left, BatchQueue(sch2)], final=False)
    False
    >>> n, out = op.run([left, right], 10, final=True)
    >>> n, sorted(pa.Table.from_batches(out).select(["a", "b"]).to_pylist(), key=str)
    (4, [{'a': 11, 'b': 20}, {'a': 11, 'b': 21}])
    """

    kind = "join"
    arity = 2

    def __init__(self, on: str | Sequence[str], rows: int | None = None, seconds: float | None = None,
                 time_col: str | tuple[str, str] | None = None):
        super().__init__()
        self.on = [on] if isinstance(on, str) else list(on)
        if not self.on:
            raise PlanError("join() needs at least one key column in on=")
        if (rows is None) == (seconds is None):
            raise PlanError(f"join() needs exactly one window: rows=N or seconds=W (got rows={rows!r}, seconds={seconds!r})")
        if rows is not None and (isinstance(rows, bool) or not isinstance(rows, int) or rows <= 0):
            raise PlanError(f"join window rows must be an int > 0, got {rows!r}")
        if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, (int, float))
                                    or not math.isfinite(seconds) or seconds < 0):
            raise PlanError(f"join window seconds must be a finite number >= 0, got {seconds!r}")
        if time_col is not None and seconds is None:
            raise PlanError("time_col= applies to time-based windows (seconds=W) only")
        self.rows = rows
        self.seconds = None if seconds is None else float(seconds)
        if time_col is None:
            time_col = ARRIVAL
        if isinstance(time_col, str):
            time_col = (time_col, time_col)
        if not (isinstance(time_col, (tuple, list)) and len(time_col) == 2 and all(isinstance(c, str) for c in time_col)):
            raise PlanError(f"join time_col is a column name or a (left, right) pair of names, got {time_col!r}")
        self.time_cols: tuple[str, str] = tuple(time_col)
        self._state: list[pa.Table | None] = [None, None]
        self._max_time: list[float | None] = [None, None]

    def copy(self) -> WindowJoin:
        return WindowJoin(self.on, self.rows, self.seconds, None if self.time_cols == (ARRIVAL, ARRIVAL) else self.time_cols)

    def _output_schema(self) -> pa.Schema:
        left, right = self.input_schemas
        for side, s, tcol in (("left", left, self.time_cols[0]), ("right", right, self.time_cols[1])):
            for k in self.on:
                if s.get_field_index(k) < 0:
                    raise ExpressionError(f"operator {self.name!r}: unknown key column {k!r} in the {side} input; columns are {_user_names(s)}")
            if self.seconds is not None:
                t = as_expr(tcol).check(s, self.name)
                if not (pa.types.is_integer(t) or pa.types.is_floating(t)):
                    raise ExpressionError(f"operator {self.name!r}: time column {tcol!r} must be numeric, got {t}")
        for k in self.on:
            lk, rk = left.field(k).type, right.field(k).type
            if _kind(lk) != _kind(rk):
                raise ExpressionError(f"operator {self.name!r}: key column {k!r} is {lk} on the left but {rk} on the right")
        lnames = _user_names(left)
        rnames = [n for n in _user_names(right) if n not in self.on]
        clash = sorted(set(lnames) & set(rnames))
        if clash:
            raise PlanError(f"operator {self.name!r}: both inputs have column(s) {clash}; rename one side with select() first")
        self._left_cols, self._right_cols = lnames, rnames
        fields = [left.field(n) for n in lnames] + [right.field(n) for n in rnames]
        fields += [left.field(ARRIVAL), left.field(SEQ)]
        return pa.schema(fields)

    # -- merge of the inputs in arrival order ----------------------------------------------------
    def runnable(self, ports, final):
        if ports[0] and ports[1]:
            return True
        return final and bool(ports[0] or ports[1])

    def run(self, ports, limit, final=False):
        out: list[pa.RecordBatch] = []
        consumed = 0
        while consumed < limit:
            a, b = ports[0], ports[1]
            if a and b:
                ha, hb = a.head_arrival, b.head_arrival
                if ha <= hb:
                    port, chunk = 0, a.take_before(hb, True, limit - consumed)
                else:
                    port, chunk = 1, b.take_before(ha, False, limit - consumed)
            elif final and (a or b):
                port = 0 if a else 1
                chunk = ports[port].take(limit - consumed)
            else:
                break
            for batch in chunk:
                consumed += batch.num_rows
                res = self.process(batch, port)
                if res is not None and res.num_rows:
                    out.append(res)
        return consumed, out

    def _pair(self, left: pa.Table, right: pa.Table) -> pa.Table:
        lt = left.rename_columns([n if n in self.on else "l:" + n for n in left.column_names])
        rt = right.rename_columns([n if n in self.on else "r:" + n for n in right.column_names])
        joined = lt.join(rt, keys=self.on, join_type="inner", use_threads=False)
        if self.seconds is not None and joined.num_rows:
            tl = pc.cast(joined.column("l:" + self.time_cols[0]), pa.float64())
            tr = pc.cast(joined.column("r:" + self.time_cols[1]), pa.float64())
            joined = joined.filter(pc.less_equal(pc.abs(pc.subtract(tl, tr)), self.seconds))
        return joined

    def process(self, batch: pa.RecordBatch, port: int = 0) -> pa.RecordBatch | None:
        chunk = pa.table(batch)
        other = self._state[1 - port]
        result = None
        if other is not None and other.num_rows:
            joined = self._pair(chunk, other) if port == 0 else self._pair(other, chunk)
            if joined.num_rows:
                arrays = [joined.column(n if n in self.on else "l:" + n) for n in self._left_cols]
                arrays += [joined.column("r:" + n) for n in self._right_cols]
                arrays.append(pc.max_element_wise(joined.column("l:" + ARRIVAL), joined.column("r:" + ARRIVAL)))
                arrays.append(joined.column("l:" + SEQ))
                result = pa.Table.from_arrays(arrays, schema=self.schema).combine_chunks().to_batches()[0]
        mine = chunk if self._state[port] is None else pa.concat_tables([self._state[port], chunk])
        if self.rows is not None:
            if mine.num_rows > self.rows:
                mine = mine.slice(mine.num_rows - self.rows)
            self._state[port] = mine
        else:
            m = pc.max(batch.column(self.time_cols[port])).as_py()
            if m is not None and (self._max_time[port] is None or m > self._max_time[port]):
                self._max_time[port] = float(m)
            self._state[port] = mine
            for side in (0, 1):
                bound = self._max_time[1 - side]
                st = self._state[side]
                if bound is not None and st is not None and st.num_rows:
                    t = pc.cast(st.column(self.time_cols[side]), pa.float64())
                    self._state[side] = st.filter(pc.greater_equal(t, bound - self.seconds))
        if self._state[port] is not None and self._state[port].num_columns and len(self._state[port].column(0).chunks) > 8:
            self._state[port] = self._state[port].combine_chunks()
        return result

    def state_rows(self) -> int:
        return sum(0 if s is None else s.num_rows for s in self._state)

    def to_state(self) -> dict[str, Any]:
        return {
            "state": [None if s is None else _table_to_ipc(s) for s in self._state],
            "max_time": list(self._max_time),
        }

    def from_state(self, state: dict[str, Any]) -> None:
        self._state = [None if s is None else _ipc_to_table(s) for s in state["state"]]
        self._max_time = list(state["max_time"])

    def to_spark(self, left, right):
        from sparkqos.spark.translate import join_to_spark

        return join_to_spark(self, left, right)


__all__ = ["PhysicalOperator", "Project", "Select", "Synthetic", "Union", "WindowAggregate", "WindowJoin", "merge"]
