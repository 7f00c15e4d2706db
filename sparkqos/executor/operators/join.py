"""WindowJoin: the sliding-window symmetric hash join of two inputs (Chain §5; Jiang §2.1).

The join merges its inputs in arrival order (ties: the first input), waiting while one input is
empty (Chain §5). A row joins the rows of the other input that are within the window when it
arrives: the last ``rows`` rows (tuple-based) or those whose time differs by at most ``seconds``
(time-based, over ``time_col`` or the arrival time). Output arrival = the later of the pair.
Time-based windows on an event-time column assume that column does not decrease along each
input, as a watermark with no delay would. State is bounded by the window and serialisable
(Arrow IPC bytes).
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from sparkqos.errors import ExpressionError, PlanError, check_number
from sparkqos.executor.expressions import ARRIVAL, SEQ, as_expr, kind
from sparkqos.executor.operators.base import SidedStateOperator, user_names


class WindowJoin(SidedStateOperator):
    """Sliding-window symmetric hash join on equal ``on`` keys (Chain §5; Jiang §2.1).

    Exactly one of ``rows`` (tuple-based window: the last ``rows`` rows of the other input) and
    ``seconds`` (time-based: |t_left − t_right| ≤ ``seconds`` over ``time_col``, by default the
    arrival time; a ``(left, right)`` pair names a different column on each side). Output: the
    left columns (:attr:`left_columns`), then the right columns other than the keys
    (:attr:`right_columns`).

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

    def __init__(
        self,
        on: str | Sequence[str],
        rows: int | None = None,
        seconds: float | None = None,
        time_col: str | tuple[str, str] | None = None,
    ):
        super().__init__()
        self.on = [on] if isinstance(on, str) else list(on)
        if not self.on:
            raise PlanError("join() needs at least one key column in on=")
        if (rows is None) == (seconds is None):
            raise PlanError(f"join() needs exactly one window: rows=N or seconds=W (got rows={rows!r}, seconds={seconds!r})")
        if rows is not None:
            check_number("rows", rows, integer=True, low=0, low_open=True, error=PlanError, where="join window ")
        else:
            check_number("seconds", seconds, low=0, error=PlanError, where="join window ")
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
        self._left_cols: list[str] | None = None  # set by bind()
        self._right_cols: list[str] | None = None

    @property
    def left_columns(self) -> tuple[str, ...]:
        """The output's columns taken from the left input (all its columns but the executor's)."""
        return tuple(self._bound(self._left_cols))

    @property
    def right_columns(self) -> tuple[str, ...]:
        """The output's columns taken from the right input (its columns but the keys and the executor's)."""
        return tuple(self._bound(self._right_cols))

    def _bound(self, columns: list[str] | None) -> list[str]:
        if columns is None:
            raise PlanError(f"join {self.name!r} is not bound to its inputs yet")
        return columns

    def copy(self) -> WindowJoin:
        return WindowJoin(self.on, self.rows, self.seconds, None if self.time_cols == (ARRIVAL, ARRIVAL) else self.time_cols)

    def _output_schema(self) -> pa.Schema:
        left, right = self.input_schemas
        for side, s, tcol in (("left", left, self.time_cols[0]), ("right", right, self.time_cols[1])):
            for k in self.on:
                if s.get_field_index(k) < 0:
                    raise ExpressionError(
                        f"operator {self.name!r}: unknown key column {k!r} in the {side} input; columns are {user_names(s)}"
                    )
            if self.seconds is not None:
                t = as_expr(tcol).check(s, self.name)
                if not (pa.types.is_integer(t) or pa.types.is_floating(t)):
                    raise ExpressionError(f"operator {self.name!r}: time column {tcol!r} must be numeric, got {t}")
        for k in self.on:
            lk, rk = left.field(k).type, right.field(k).type
            if kind(lk) != kind(rk):
                raise ExpressionError(f"operator {self.name!r}: key column {k!r} is {lk} on the left but {rk} on the right")
        lnames = user_names(left)
        rnames = [n for n in user_names(right) if n not in self.on]
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
