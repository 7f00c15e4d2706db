"""IntervalJoin: Spark's stream–stream inner join on equal keys and an event-time range (Chain §5).

What a PySpark transform joining two branches of the input stream compiles to
(:mod:`sparkqos.compile.joins`), e.g. ``a.join(b, (a.id == b.id) & (b.t2 >= a.t - INTERVAL 2
SECONDS) & (b.t2 <= a.t + INTERVAL 2 SECONDS))``: a left row with event time ``tl`` and a right
row with ``tr`` and equal keys form a pair when ``lower ≤ tr − tl ≤ upper`` (each bound strict or
not). Both inputs' rows are kept in state; a row arriving on one input joins the rows the other
holds, so every pair is emitted once, when its second row arrives. A null key or event time
matches nothing; NaN keys match NaN and -0.0 matches 0.0 (Spark normalises float keys).

Watermark (streaming, Spark's rules): each input's watermark is the largest event time it has
seen minus its delay, and the join's the smaller of the two (Spark's ``min`` policy; an input
without a watermark does not count). A row older than the join's watermark is late: dropped and
counted in ``late_rows``. A left row is evicted once ``tl + upper`` falls below the watermark, a
right row once ``tr − lower`` does: no row that is not late can pair with them any more. Without
any watermark (a finite DataFrame, where Spark ignores ``withWatermark``) nothing is dropped or
evicted. State is serialisable (Arrow IPC).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkqos.errors import ExpressionError, PlanError, check_number
from sparkqos.executor.expressions import ARRIVAL, INTERNAL, SEQ, Expr, as_expr, evaluate_array, kind
from sparkqos.executor.operators.base import SidedStateOperator, user_names
from sparkqos.executor.operators.static_join import as_batch, key_table, match


class IntervalJoin(SidedStateOperator):
    """Inner join of two inputs on ``left_keys[i] == right_keys[i]`` (expressions over each
    side's columns) and ``lower_us ≤ tr − tl ≤ upper_us`` (``<`` where ``*_strict``), with
    ``tl``/``tr`` the timestamp columns ``times``; ``delays_us`` are the two inputs' watermark
    delays (None: no watermark on that input). The output is the left columns, then the right
    ones renamed to ``right_names`` (default: their own names), then ``__arrival`` (the later of
    the pair's) and ``__seq`` (the left row's).

    >>> import pyarrow as pa
    >>> from sparkqos.executor.queues import stamp, with_internal
    >>> ts = pa.timestamp("us", tz="UTC")
    >>> sch = with_internal(pa.schema([("k", pa.int64()), ("t", ts)]))
    >>> op = IntervalJoin(["k"], ["k"], ("t", "t"), -1_000_000, 1_000_000, right_names=["k2", "t2"])
    >>> _ = op.bind("q/join", [sch, sch])
    >>> op.process(stamp(pa.table({"k": [1, 1], "t": pa.array([0, 5_000_000], ts)}).to_batches()[0], 0.0, 0), 0)
    >>> out = op.process(stamp(pa.table({"k": [1], "t": pa.array([500_000], ts)}).to_batches()[0], 1.0, 0), 1)
    >>> [(r["t"].timestamp(), r["t2"].timestamp()) for r in out.to_pylist()]
    [(0.0, 0.5)]
    """

    STATE_VALUES = ("late_rows",)

    kind = "join"
    arity = 2
    selectivity = 1.0

    def __init__(
        self,
        left_keys: Sequence[Expr | str],
        right_keys: Sequence[Expr | str],
        times: tuple[str, str],
        lower_us: int,
        upper_us: int,
        lower_strict: bool = False,
        upper_strict: bool = False,
        delays_us: tuple[int | None, int | None] = (None, None),
        right_names: Sequence[str] | None = None,
    ):
        super().__init__()
        if not left_keys or len(left_keys) != len(right_keys):
            raise PlanError(
                f"an interval join needs as many right keys as left keys, at least one; got {left_keys!r}, {right_keys!r}"
            )
        check_number("lower_us", lower_us, integer=True, error=PlanError, where="interval join ")
        check_number("upper_us", upper_us, integer=True, low=lower_us, error=PlanError, where="interval join ")
        for d in delays_us:
            check_number("delays_us", d, integer=True, low=0, none_ok=True, error=PlanError, where="interval join ")
        self.left_keys = [as_expr(k) for k in left_keys]
        self.right_keys = [as_expr(k) for k in right_keys]
        self.times = (str(times[0]), str(times[1]))
        self.lower_us, self.upper_us = int(lower_us), int(upper_us)
        self.lower_strict, self.upper_strict = bool(lower_strict), bool(upper_strict)
        self.delays_us = (delays_us[0], delays_us[1])
        self.right_names = None if right_names is None else list(right_names)
        self._state: list[pa.Table | None] = [None, None]
        self._max_time: list[int | None] = [None, None]
        self.late_rows = 0

    def copy(self) -> IntervalJoin:
        return IntervalJoin(
            self.left_keys,
            self.right_keys,
            self.times,
            self.lower_us,
            self.upper_us,
            self.lower_strict,
            self.upper_strict,
            self.delays_us,
            self.right_names,
        )

    def _output_schema(self) -> pa.Schema:
        left, right = self.input_schemas
        for side, s, keys, tcol in (
            ("left", left, self.left_keys, self.times[0]),
            ("right", right, self.right_keys, self.times[1]),
        ):
            i = s.get_field_index(tcol)
            if i < 0 or not pa.types.is_timestamp(s.field(i).type):
                raise ExpressionError(
                    f"operator {self.name!r}: the {side} input has no timestamp column {tcol!r}; columns are {user_names(s)}"
                )
            for k in keys:
                k.check(s, self.name)
        for a, b in zip(self.left_keys, self.right_keys, strict=True):
            ta, tb = a.check(left, self.name), b.check(right, self.name)
            if pa.types.is_nested(ta) or pa.types.is_nested(tb):  # pyarrow's hash join takes none
                raise ExpressionError(f"operator {self.name!r}: join key {a!r} is {ta}, a type sparkqos does not join on")
            if kind(ta) != kind(tb):
                raise ExpressionError(
                    f"operator {self.name!r}: join key {a!r} is {ta} on the left but {b!r} is {tb} on the right"
                )
        rnames = user_names(right)
        out_right = rnames if self.right_names is None else self.right_names
        if len(out_right) != len(rnames):
            raise PlanError(f"operator {self.name!r}: right_names {out_right} do not name the right columns {rnames}")
        names = user_names(left) + list(out_right)
        if len(set(names)) != len(names) or set(names) & set(INTERNAL):
            raise PlanError(f"operator {self.name!r}: output columns {names} repeat a name; rename one side first")
        fields = [left.field(n) for n in user_names(left)]
        fields += [right.field(n).with_name(o) for n, o in zip(rnames, out_right, strict=True)]
        return pa.schema(fields + [left.field(ARRIVAL), left.field(SEQ)])

    # -- running ---------------------------------------------------------------------------------
    def runnable(self, ports, final):
        return bool(ports[0] or ports[1])

    def run(self, ports, limit, final=False):
        out: list[pa.RecordBatch] = []
        consumed = 0
        for port in (0, 1):
            if consumed >= limit or not ports[port]:
                continue
            for batch in ports[port].take(limit - consumed):
                consumed += batch.num_rows
                res = self.process(batch, port)
                if res is not None and res.num_rows:
                    out.append(res)
        return consumed, out

    def watermark(self) -> int | None:
        """The join's watermark in µs (None: none yet, or no input has one)."""
        marks = [m - d for m, d in zip(self._max_time, self.delays_us, strict=True) if d is not None and m is not None]
        if not marks or any(d is not None and m is None for m, d in zip(self._max_time, self.delays_us, strict=True)):
            return None
        return min(marks)

    def _rows(self, batch: pa.RecordBatch, port: int) -> pa.Table:
        """``batch``'s rows that can pair with something, with their normalised keys ``__k*``
        and event time ``__t`` (µs) added."""
        keys = [evaluate_array(k, batch) for k in (self.left_keys if port == 0 else self.right_keys)]
        t = pc.cast(batch.column(self.times[port]), pa.int64())
        index = key_table([*keys, t], "__i")
        rows = pa.table(batch).take(index.column("__i"))
        names = index.column_names
        for i, name in enumerate(names[:-2]):
            rows = rows.append_column(name, index.column(i))
        return rows.append_column("__t", index.column(len(names) - 2))

    def process(self, batch: pa.RecordBatch, port: int = 0) -> pa.RecordBatch | None:
        rows = self._rows(batch, port)
        mark = self.watermark()
        if mark is not None and rows.num_rows:
            on_time = pc.greater_equal(rows.column("__t"), mark)
            self.late_rows += rows.num_rows - pc.sum(pc.cast(on_time, pa.int64())).as_py()
            rows = rows.filter(on_time)
        result = None
        other = self._state[1 - port]
        if rows.num_rows and other is not None and other.num_rows:
            result = self._pairs(rows, other) if port == 0 else self._pairs(other, rows)
        if rows.num_rows:
            mine = self._state[port]
            self._state[port] = rows if mine is None or mine.num_rows == 0 else pa.concat_tables([mine, rows]).combine_chunks()
        t = batch.column(self.times[port])
        if len(t) > t.null_count:
            m = int(pc.max(pc.cast(t, pa.int64())).as_py())
            self._max_time[port] = m if self._max_time[port] is None else max(self._max_time[port], m)
        self._evict()
        return result

    def _pairs(self, left: pa.Table, right: pa.Table) -> pa.RecordBatch | None:
        keys = [n for n in left.column_names if n.startswith("__k")]
        lk = pa.table({n: left.column(n) for n in keys}).append_column("__l", pa.array(np.arange(left.num_rows, dtype=np.int64)))
        rk = pa.table({n: right.column(n) for n in keys}).append_column(
            "__r", pa.array(np.arange(right.num_rows, dtype=np.int64))
        )
        pairs = match(lk, rk)
        if pairs.num_rows == 0:
            return None
        li, ri = pairs.column("__l").combine_chunks(), pairs.column("__r").combine_chunks()
        gap = pc.subtract(right.column("__t").take(ri), left.column("__t").take(li))
        low = (pc.greater if self.lower_strict else pc.greater_equal)(gap, self.lower_us)
        high = (pc.less if self.upper_strict else pc.less_equal)(gap, self.upper_us)
        keep = pc.and_(low, high)
        li, ri = li.filter(keep), ri.filter(keep)
        if len(li) == 0:
            return None
        lt, rt = left.take(li), right.take(ri)
        lnames, rnames = user_names(self.input_schemas[0]), user_names(self.input_schemas[1])
        arrays: list[Any] = [lt.column(n) for n in lnames] + [rt.column(n) for n in rnames]
        arrays += [pc.max_element_wise(lt.column(ARRIVAL), rt.column(ARRIVAL)), lt.column(SEQ)]
        return as_batch(pa.Table.from_arrays(arrays, schema=self.schema))

    def _evict(self) -> None:
        mark = self.watermark()
        if mark is None:
            return
        for port, reach in ((0, self.upper_us), (1, -self.lower_us)):
            st = self._state[port]
            if st is not None and st.num_rows:
                # tl + upper < watermark (left), tr - lower < watermark (right): nothing on time pairs
                self._state[port] = st.filter(pc.greater_equal(pc.add(st.column("__t"), reach), mark))

    def flush(self) -> list[pa.RecordBatch]:
        return []
