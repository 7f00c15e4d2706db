"""StaticJoin: each stream row joined with a stored table on equal keys (Chain §5, joins with
stored relations, whose selectivity may exceed 1).

What a PySpark transform's ``stream_df.join(static_df, on=keys, how="inner" | "left")`` compiles
to (:mod:`sparkqos.compile.joins`). The static table is read once, when the plan is compiled, and
travels with the plan; each stream batch is hash-joined against it with pyarrow. Spark's rules:
a null key never matches (Spark's ``=`` is null there), NaN keys match NaN and -0.0 matches 0.0
(Spark normalises floating-point join keys), every duplicate of a key on the static side gives
its own output row, and a left outer join keeps a stream row without a match, its static columns
null. The output is the stream's columns, then the static table's (or the other way round),
then ``__arrival``/``__seq`` of the stream row; rows come out in the order of the stream rows they extend.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkqos.errors import ExpressionError, PlanError, check_choice, check_number
from sparkqos.executor.expressions import ARRIVAL, INTERNAL, SEQ, Expr, as_expr, evaluate_array, kind
from sparkqos.executor.operators.base import PhysicalOperator, user_names

#: Default largest static table a join holds (rows); larger ones are refused when the plan is built.
MAX_STATIC_ROWS = 1_000_000
#: Join types of :class:`StaticJoin` (Spark's ``how``, its outer aliases mapped to these).
HOWS = ("inner", "left")


def normal_key(x: pa.Array) -> pa.Array:
    """A join key as Spark compares it: every NaN one value and -0.0 the same as 0.0."""
    if not pa.types.is_floating(x.type):
        return x
    return pc.if_else(pc.is_nan(x), pa.scalar(math.nan, x.type), pc.add(x, pa.scalar(0.0, x.type)))


def key_table(keys: Sequence[pa.Array], index: str) -> pa.Table:
    """The rows of ``keys`` whose keys are all non-null, as a table of the normalised keys
    ``__k0, __k1, …`` and each row's position (column ``index``)."""
    n = len(keys[0])
    cols = {f"__k{i}": normal_key(k) for i, k in enumerate(keys)}
    cols[index] = pa.array(np.arange(n, dtype=np.int64))
    table = pa.table(cols)
    if any(k.null_count for k in keys):
        valid = functools.reduce(pc.and_, [k.is_valid() for k in keys])
        table = table.filter(valid)
    return table


def match(left: pa.Table, right: pa.Table, how: str = "inner") -> pa.Table:
    """The pairs of positions (``__l``, ``__r``) of :func:`key_table` rows with equal keys, in the
    order of ``__l`` then ``__r`` (``how="left"``: unmatched ``__l`` rows too, ``__r`` null)."""
    keys = [n for n in left.column_names if n.startswith("__k")]
    pairs = left.join(right, keys=keys, join_type="inner" if how == "inner" else "left outer", use_threads=False)
    pairs = pairs.select([n for n in pairs.column_names if not n.startswith("__k")])
    return pairs.sort_by([("__l", "ascending"), ("__r", "ascending")])


def as_batch(table: pa.Table) -> pa.RecordBatch:
    """``table`` as one record batch (an empty one keeps the schema)."""
    if table.num_rows == 0:
        return pa.RecordBatch.from_pylist([], schema=table.schema)
    return table.combine_chunks().to_batches()[0]


class StaticJoin(PhysicalOperator):
    """Stream rows joined with the rows of ``table`` where each of ``stream_keys`` (expressions
    over the stream's columns) equals the matching one of ``static_keys`` (over ``table``'s);
    ``how`` is ``"inner"`` or ``"left"`` (outer: every stream row is kept). ``table`` holds at
    most ``max_rows`` rows. The output has the stream's columns, then ``table``'s (the other way
    round with ``static_first``, as ``static_df.join(stream_df)`` gives them).

    >>> import pyarrow as pa
    >>> from sparkqos.executor.queues import stamp, with_internal
    >>> zones = pa.table({"zone": ["n", "n", "s"], "city": ["Oslo", "Bergen", "Rome"]})
    >>> op = StaticJoin(zones, ["z"], ["zone"], how="left")
    >>> _ = op.bind("q/join", [with_internal(pa.schema([("z", pa.string())]))])
    >>> out = op.process(stamp(pa.record_batch({"z": ["n", None, "x"]}), 0.0, 0))
    >>> [(r["z"], r["city"]) for r in out.select(["z", "city"]).to_pylist()]
    [('n', 'Oslo'), ('n', 'Bergen'), (None, None), ('x', None)]
    """

    kind = "join"
    preserves_order = True
    row_wise = True

    def __init__(
        self,
        table: pa.Table,
        stream_keys: Sequence[Expr | str],
        static_keys: Sequence[Expr | str],
        how: str = "inner",
        max_rows: int = MAX_STATIC_ROWS,
        static_first: bool = False,
    ):
        super().__init__()
        if not isinstance(table, pa.Table):
            raise PlanError(f"a static join needs a pyarrow Table, got {type(table).__name__}")
        check_choice("how", how, HOWS, error=PlanError)
        check_number("max_rows", max_rows, integer=True, low=0, error=PlanError, where="static join ")
        if not stream_keys or len(stream_keys) != len(static_keys):
            raise PlanError(
                f"a static join needs one static key per stream key, at least one; got {len(stream_keys)} and {len(static_keys)}"
            )
        if table.num_rows > max_rows:
            raise PlanError(
                f"the static side of a join has {table.num_rows} rows, more than max_rows={max_rows}; "
                "filter or aggregate it first, or raise the limit"
            )
        self.table = table
        self.stream_keys = [as_expr(k) for k in stream_keys]
        self.static_keys = [as_expr(k) for k in static_keys]
        self.how = how
        self.max_rows = int(max_rows)
        self.static_first = bool(static_first)
        self._index: pa.Table | None = None  # set by bind(): the static keys as key_table()

    def copy(self) -> StaticJoin:
        return StaticJoin(self.table, self.stream_keys, self.static_keys, self.how, self.max_rows, self.static_first)

    def _output_schema(self) -> pa.Schema:
        src = self.input_schemas[0]
        clash = sorted((set(user_names(src)) | set(INTERNAL)) & set(self.table.column_names))
        if clash or len(set(self.table.column_names)) != self.table.num_columns:
            raise PlanError(
                f"operator {self.name!r}: the static table's columns {self.table.column_names} repeat a name "
                f"or one of the stream's {user_names(src)}"
            )
        static = as_batch(self.table)
        keys = []
        for mine, theirs in zip(self.stream_keys, self.static_keys, strict=True):
            t = mine.check(src, self.name)
            s = theirs.check(static.schema, self.name)
            if kind(t) != kind(s):
                raise ExpressionError(f"operator {self.name!r}: join key {mine!r} is {t} but the static key {theirs!r} is {s}")
            k = evaluate_array(theirs, static)
            keys.append(k if k.type == t else pc.cast(k, t))
        self._index = key_table(keys, "__r")
        fields = [src.field(n) for n in user_names(src)]
        fields = list(self.table.schema) + fields if self.static_first else fields + list(self.table.schema)
        return pa.schema(fields + [src.field(ARRIVAL), src.field(SEQ)])

    def process(self, batch: pa.RecordBatch, port: int = 0) -> pa.RecordBatch | None:
        if self._index is None:
            raise PlanError(f"join {self.name!r} is not bound to its input yet")
        keys = [evaluate_array(k, batch) for k in self.stream_keys]
        pairs = match(key_table(keys, "__l"), self._index, self.how)
        if self.how == "left":
            # Stream rows with a null key are not in the key table: they match nothing.
            kept = np.zeros(batch.num_rows, dtype=bool)
            kept[pairs.column("__l").to_numpy()] = True
            lost = np.flatnonzero(~kept)
            if len(lost):
                extra = pa.table({"__l": pa.array(lost, pa.int64()), "__r": pa.nulls(len(lost), pa.int64())})
                pairs = pa.concat_tables([pairs, extra]).sort_by([("__l", "ascending"), ("__r", "ascending")])
        if pairs.num_rows == 0:
            return None
        left = batch.take(pairs.column("__l").combine_chunks())
        right = self.table.take(pairs.column("__r").combine_chunks())
        mine: list[Any] = [left.column(n) for n in user_names(batch.schema)]
        theirs: list[Any] = [right.column(i).combine_chunks() for i in range(right.num_columns)]
        arrays = theirs + mine if self.static_first else mine + theirs
        arrays += [left.column(ARRIVAL), left.column(SEQ)]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)
