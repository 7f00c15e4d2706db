"""Nested values: Spark's structs (``F.struct``, ``col("s.a")``, ``getField``, a window's
``window.start``) and arrays (``F.array``, ``split``), on Arrow's struct and list arrays.

* :class:`GetField` is Spark's ``GetStructField``: field ``ordinal`` of a struct, null where
  the struct is null.
* :class:`MakeStruct` is ``CreateNamedStruct`` (``F.struct``): never null itself; each field
  says whether it may hold nulls as Spark's plan does, so the Arrow type equals Spark's.
* :class:`MakeArray` is ``CreateArray`` (``F.array``) of values Spark has made one type.
* :class:`Split` is ``split(str, pattern[, limit])`` for a pattern that is a plain string (no
  regular-expression metacharacter, not empty): Java's ``String.split`` with a negative limit
  keeps trailing empty strings and splits ``''`` into ``['']``, as Arrow's ``split_pattern``
  does; a limit above 0 gives at most that many parts. Anything else is refused by the compiler.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from sparkqos.errors import ExpressionError
from sparkqos.executor.expressions.core import Expr, describe, evaluate_array, kind

#: Characters that make a ``split`` pattern a regular expression rather than a plain string.
REGEX_META = frozenset(".$|()[]{}^?*+\\")


def _combined(x: pa.Array | pa.ChunkedArray | pa.Scalar) -> pa.Array | pa.Scalar:
    return x.combine_chunks() if isinstance(x, pa.ChunkedArray) else x


class GetField(Expr):
    """Field ``ordinal`` (named ``field``) of the struct ``child``."""

    def __init__(self, child: Expr, ordinal: int, field: str):
        self.child, self.ordinal, self.field = child, int(ordinal), field

    def __repr__(self) -> str:
        return f"{self.child!r}.getField({self.field!r})"

    def columns(self) -> set[str]:
        return self.child.columns()

    def check(self, schema: pa.Schema, where: str) -> pa.DataType:
        t = self.child.check(schema, where)
        if not pa.types.is_struct(t) or not 0 <= self.ordinal < t.num_fields or t.field(self.ordinal).name != self.field:
            raise ExpressionError(f"operator {where!r}: no struct field {self.field!r} in {describe(self.child, t)}")
        return t.field(self.ordinal).type

    def evaluate(self, batch: pa.RecordBatch) -> pa.Array | pa.Scalar:
        x = _combined(self.child.evaluate(batch))
        if isinstance(x, pa.Scalar):
            value = x.as_py()
            t = x.type.field(self.ordinal).type
            return pa.scalar(None if value is None else value[self.field], t)
        return pc.struct_field(x, [self.ordinal])  # null where the struct is


class MakeStruct(Expr):
    """A struct of ``values`` named ``names``; ``nullable[i]``: whether field i may be null."""

    def __init__(self, names: Sequence[str], values: Sequence[Expr], nullable: Sequence[bool]):
        if not values or len(names) != len(values) or len(nullable) != len(values):
            raise ExpressionError("struct() needs one name and one nullability per value, and at least one value")
        self.names, self.values, self.nullable = list(names), list(values), list(nullable)

    def __repr__(self) -> str:
        return f"struct({', '.join(f'{n}={v!r}' for n, v in zip(self.names, self.values, strict=True))})"

    def columns(self) -> set[str]:
        return set().union(*(v.columns() for v in self.values))

    def _type(self, types: Sequence[pa.DataType]) -> pa.StructType:
        return pa.struct([pa.field(n, t, nullable=f) for n, t, f in zip(self.names, types, self.nullable, strict=True)])

    def check(self, schema: pa.Schema, where: str) -> pa.DataType:
        return self._type([v.check(schema, where) for v in self.values])

    def evaluate(self, batch: pa.RecordBatch) -> pa.Array:
        arrays = [evaluate_array(v, batch) for v in self.values]
        t = self._type([a.type for a in arrays])
        return pa.StructArray.from_arrays(arrays, fields=list(t))


class MakeArray(Expr):
    """An array of ``values`` (one type, Spark's analyzer cast them); ``contains_null`` as Spark's type says."""

    def __init__(self, values: Sequence[Expr], contains_null: bool):
        self.values, self.contains_null = list(values), contains_null

    def __repr__(self) -> str:
        return f"array({', '.join(repr(v) for v in self.values)})"

    def columns(self) -> set[str]:
        return set().union(*(v.columns() for v in self.values))

    def _type(self, t: pa.DataType) -> pa.ListType:
        return pa.list_(pa.field("element", t, nullable=self.contains_null))

    def check(self, schema: pa.Schema, where: str) -> pa.DataType:
        types = {v.check(schema, where) for v in self.values}
        known = {t for t in types if not pa.types.is_null(t)}
        if len(known) > 1:
            raise ExpressionError(f"operator {where!r}: array() of values of types {sorted(map(str, known))}")
        return self._type(known.pop() if known else pa.null())

    def evaluate(self, batch: pa.RecordBatch) -> pa.Array:
        arrays = [evaluate_array(v, batch) for v in self.values]
        t = self._type(next((a.type for a in arrays if not pa.types.is_null(a.type)), pa.null()))
        n, k = batch.num_rows, len(arrays)
        if not k:
            return pa.array([[] for _ in range(n)], t)
        # Row i's values are values[0][i], values[1][i], ...: interleave, then cut every k.
        flat = pa.concat_arrays([a.cast(t.value_type) for a in arrays])
        order = pa.array([j * n + i for i in range(n) for j in range(k)], pa.int64())
        offsets = pa.array(range(0, n * k + 1, k), pa.int32())
        return pa.ListArray.from_arrays(offsets, flat.take(order), type=t)


class Split(Expr):
    """``split(child, pattern, limit)`` with a plain-string ``pattern`` (see the module docstring)."""

    RESULT = pa.list_(pa.field("element", pa.string(), nullable=False))

    def __init__(self, child: Expr, pattern: str, limit: int = -1):
        if not pattern or REGEX_META & set(pattern):
            raise ExpressionError(f"split() runs natively on a plain, non-empty string pattern, got {pattern!r}")
        self.child, self.pattern, self.limit = child, pattern, int(limit)

    def __repr__(self) -> str:
        return f"split({self.child!r}, {self.pattern!r}, {self.limit})"

    def columns(self) -> set[str]:
        return self.child.columns()

    def check(self, schema: pa.Schema, where: str) -> pa.DataType:
        t = self.child.check(schema, where)
        if kind(t) not in ("string", "null"):
            raise ExpressionError(f"operator {where!r}: split() needs a string, got {describe(self.child, t)}")
        return self.RESULT

    def evaluate(self, batch: pa.RecordBatch) -> pa.Array | pa.Scalar:
        x = _combined(self.child.evaluate(batch))
        if pa.types.is_null(x.type):
            return pa.scalar(None, self.RESULT)
        if isinstance(x, pa.Scalar):
            x = pa.array([x.as_py()], x.type)
            return self._split(x)[0]
        return self._split(x)

    def _split(self, x: pa.Array) -> pa.Array:
        max_splits = self.limit - 1 if self.limit > 0 else None
        return pc.split_pattern(x.cast(pa.string()), self.pattern, max_splits=max_splits).cast(self.RESULT)
