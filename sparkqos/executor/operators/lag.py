"""KeyedLag: Spark's ``lag(col, n[, default]).over(Window.partitionBy(keys).orderBy(order...))`` on a stream.

What a PySpark transform's ``withColumn("prev_lat", F.lag("lat").over(w))`` compiles to
(:mod:`sparkqos.compile.keyed`): every row comes out with the values of the row ``n`` places
before it among the rows of its key, ordered by the order columns (ascending, nulls first, NaN
above every number, as Spark sorts), or ``default`` when there is no such row.

Streaming assumption: **the rows of a key arrive in the order of the order columns** (a
time-ordered replay, a sensor's or a vessel's reports as it sends them). Within one batch rows
are sorted by (key, order columns, arrival sequence), so a batch may hold its rows in any order;
across batches the operator keeps, per key, the last ``n`` rows' order and lag columns as state.
A row whose order value is below its key's last row of an earlier batch is *out of order*: it is
still emitted, its lag values taken from the key's rows before that batch (Spark's batch run
would place it earlier and may give other values), it does not enter the state (so the rows
after it get Spark's values), and it is counted in ``out_of_order_rows`` (the first time, a
RuntimeWarning names the operator: never a different answer without saying so). Rows with equal order
values are taken in arrival order (Spark's order among them is not deterministic).

State is at most ``n`` rows per key: it grows with the number of distinct keys, not with time,
and is serialisable (Arrow IPC).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkqos.errors import ExpressionError, PlanError, check_number
from sparkqos.executor.expressions import ARRIVAL, INTERNAL, SEQ
from sparkqos.executor.operators.base import TableStateOperator, group_codes, user_names


@dataclass(frozen=True)
class Lag:
    """One lagged column: ``column``'s value ``offset`` rows back, output as ``name``;
    ``default`` (None: null) when the key has fewer rows before."""

    column: str
    offset: int
    name: str
    default: Any = None


def _sortable(x: pa.Array) -> list[np.ndarray]:
    """Sort keys (most significant first) putting ``x`` in Spark's ascending order: nulls first,
    then numbers (-0.0 equal to 0.0), then NaN."""
    keys = [x.is_valid().to_numpy(zero_copy_only=False).astype(np.int8)]
    if pa.types.is_floating(x.type):
        v = pc.cast(x, pa.float64())
        nan = pc.fill_null(pc.is_nan(v), False)
        keys.append(nan.to_numpy(zero_copy_only=False).astype(np.int8))
        value = pc.fill_null(pc.if_else(nan, 0.0, pc.add(v, 0.0)), 0.0)
        keys.append(value.to_numpy(zero_copy_only=False))
    else:
        keys.append(pc.fill_null(pc.cast(x, pa.int64()), 0).to_numpy(zero_copy_only=False))
    return keys


class KeyedLag(TableStateOperator):
    """``lags`` over the rows of each ``keys`` value ordered by ``order`` (columns, ascending).

    >>> import pyarrow as pa
    >>> from sparkqos.executor.queues import stamp, with_internal
    >>> op = KeyedLag(["k"], ["t"], [Lag("v", 1, "prev")])
    >>> _ = op.bind("q/lag", [with_internal(pa.schema([("k", pa.string()), ("t", pa.int64()), ("v", pa.int64())]))])
    >>> first = stamp(pa.record_batch({"k": ["a", "b", "a"], "t": [2, 1, 1], "v": [20, 10, 11]}), 0.0, 0)
    >>> op.process(first).column("prev").to_pylist()
    [11, None, None]
    >>> op.process(stamp(pa.record_batch({"k": ["a"], "t": [3], "v": [30]}), 1.0, 3)).column("prev").to_pylist()
    [20]
    """

    STATE_TABLE = "last_rows"
    STATE_VALUES = ("out_of_order_rows",)

    kind = "map"
    preserves_order = True

    def __init__(self, keys: Sequence[str], order: Sequence[str], lags: Sequence[Lag]):
        super().__init__()
        self.keys, self.order, self.lags = list(keys), list(order), list(lags)
        if not self.order:
            raise PlanError("a lag needs at least one order column")
        if not self.lags:
            raise PlanError("a lag operator needs at least one lagged column")
        for lag in self.lags:
            check_number("offset", lag.offset, integer=True, low=1, error=PlanError, where=f"lag of {lag.column!r} ")
        self.depth = max(lag.offset for lag in self.lags)
        self._state: pa.Table | None = None
        self.out_of_order_rows = 0

    def copy(self) -> KeyedLag:
        return KeyedLag(self.keys, self.order, self.lags)

    # -- building --------------------------------------------------------------------------------
    def _output_schema(self) -> pa.Schema:
        src = self.input_schemas[0]
        for name in [*self.keys, *self.order, *(lag.column for lag in self.lags)]:
            if src.get_field_index(name) < 0:
                raise ExpressionError(f"operator {self.name!r}: unknown column {name!r}; columns are {src.names}")
        for name in self.order:
            t = src.field(name).type
            if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_timestamp(t)):
                raise ExpressionError(f"operator {self.name!r}: order column {name!r} must be numeric or a timestamp, got {t}")
        fields = [src.field(n) for n in user_names(src)]
        for lag in self.lags:
            fields.append(pa.field(lag.name, src.field(lag.column).type))
        names = [f.name for f in fields]
        dup = {n for n in names if names.count(n) > 1} | (set(names) & set(INTERNAL))
        if dup:
            raise ExpressionError(f"operator {self.name!r}: output column(s) {sorted(dup)} defined twice")
        self._kept = list(dict.fromkeys([*self.keys, *self.order, *(lag.column for lag in self.lags)]))
        self._defaults = [pa.scalar(lag.default, src.field(lag.column).type) for lag in self.lags]
        return pa.schema(fields + [src.field(ARRIVAL), src.field(SEQ)])

    # -- running ---------------------------------------------------------------------------------
    def process(self, batch: pa.RecordBatch, port: int = 0) -> pa.RecordBatch | None:
        n = batch.num_rows
        if n == 0:
            return None
        state = self._state
        held = 0 if state is None else state.num_rows
        cols = {c: batch.column(c) for c in self._kept}
        if held:
            cols = {c: pa.concat_arrays([state.column(c).combine_chunks(), a]) for c, a in cols.items()}
        total = held + n
        group = group_codes([cols[k] for k in self.keys], total)
        fresh = np.r_[np.zeros(held, np.int8), np.ones(n, np.int8)]
        seq = np.r_[np.zeros(held, np.int64), batch.column(SEQ).to_numpy(zero_copy_only=False).astype(np.int64)]
        # Sorted by key, order columns, then state rows before new rows, then arrival.
        sort_keys = [group, *(k for c in self.order for k in _sortable(cols[c])), fresh, seq]
        perm = np.lexsort(sort_keys[::-1])
        g_sorted, fresh_sorted = group[perm], fresh[perm]
        position = np.arange(total)
        last_held = np.full(int(group.max()) + 1, -1)
        np.maximum.at(last_held, g_sorted[fresh_sorted == 0], position[fresh_sorted == 0])
        late_sorted = (fresh_sorted == 1) & (position < last_held[g_sorted])
        late = perm[late_sorted]
        kept = perm[~late_sorted]
        g_kept = group[kept]
        m = len(kept)
        # The held row of each key that is latest in order, as a position in ``kept``.
        held_kept = np.full(len(last_held), -1)
        is_held = fresh[kept] == 0
        np.maximum.at(held_kept, g_kept[is_held], np.arange(m)[is_held])
        arrays = [batch.column(c) for c in user_names(batch.schema)]
        for lag, default in zip(self.lags, self._defaults, strict=True):
            k = lag.offset
            source = np.full(total, -1)  # per row of ``cols``: the row whose value it takes
            before = np.arange(m) - k
            ok = before >= 0
            ok[ok] = g_kept[before[ok]] == g_kept[ok]
            source[kept[ok]] = kept[before[ok]]
            if len(late):
                g_late = group[late]
                back = held_kept[g_late] - (k - 1)
                has = (held_kept[g_late] >= 0) & (back >= 0)
                has[has] = g_kept[back[has]] == g_late[has]
                source[late[has]] = kept[back[has]]
            mine = source[held:]
            missing = mine < 0
            values = cols[lag.column].take(pa.array(np.where(missing, 0, mine), mask=missing))
            if default.is_valid and missing.any():
                values = pc.if_else(pa.array(missing), default, values)
            arrays.append(values)
        if len(late) and not self.out_of_order_rows:
            warnings.warn(
                f"operator {self.name!r}: {len(late)} row(s) arrived after a later row of their key; their lag "
                "values come from the rows before their batch and may differ from Spark's batch run "
                "(sparkqos assumes each key's rows arrive in order; see out_of_order_rows)",
                RuntimeWarning,
                stacklevel=2,
            )
        self.out_of_order_rows += len(late)
        # The last ``depth`` rows in order of each key are the new state.
        tail = np.ones(m, dtype=bool)
        if m > self.depth:
            tail[: m - self.depth] = g_kept[self.depth :] != g_kept[: m - self.depth]
        rows = pa.array(kept[tail])
        self._state = pa.table({c: a.take(rows) for c, a in cols.items()})
        arrays += [batch.column(ARRIVAL), batch.column(SEQ)]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)
