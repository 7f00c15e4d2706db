"""The expression tree: the node protocol, columns, literals, aliases, and the nodes Python's
operators build (the builder DSL: they live with :class:`Expr`, whose operators make them).

Expressions are trees built with Python operators (``col("temp") > 50``, ``&``, ``|``, ``~``,
``+ - * /``, :meth:`Expr.isin`, :meth:`Expr.is_null`), never strings. The same tree is evaluated
on Arrow batches with ``pyarrow.compute`` (:meth:`Expr.evaluate`), compiled to a
``pyarrow.compute.Expression`` (:meth:`Expr.to_arrow`), and translated to a Spark ``Column``
by ``sparkqos.spark.translate.expr_to_column``. :meth:`Expr.check` types an expression
against a schema when a plan is built, so a wrong column or a string compared with a number is
reported before any data flows, naming the operator and the column.

Null handling follows Spark SQL: comparisons and arithmetic with null give null, ``&``/``|`` use
three-valued logic, ``isin`` of a null is null, and division by zero gives null (Spark's non-ANSI
result; with ANSI mode on Spark raises instead). ``/`` always gives a double, as in Spark.

>>> import pyarrow as pa
>>> batch = pa.record_batch({"temp": [40, 55, None], "room": ["a", "b", "c"]})
>>> pred = (col("temp") > 50) | col("room").isin(["a"])
>>> pred.evaluate(batch).to_pylist()
[True, True, None]
>>> (col("temp") / 2).evaluate(batch).to_pylist()
[20.0, 27.5, None]
>>> (col("room") > 3).check(batch.schema, "alerts/where")
Traceback (most recent call last):
...
sparkqos.errors.ExpressionError: operator 'alerts/where': cannot compare column 'room' (string) with 3 (int64)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sparkqos.errors import ExpressionError

#: Columns the executor adds to every row: arrival time (seconds) and a per-stream sequence number.
ARRIVAL = "__arrival"
SEQ = "__seq"
INTERNAL = (ARRIVAL, SEQ)


def kind(t: pa.DataType) -> str:
    """The kind of values of type ``t`` that expressions check operands by: boolean, numeric,
    string, null, temporal, or the type's own name."""
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t):
        return "numeric"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    if pa.types.is_null(t):
        return "null"
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        return "temporal"
    return str(t)


def literal_type(value: Any) -> pa.DataType:
    """The Arrow type of a Python literal (ints as int64)."""
    if value is None:
        return pa.null()
    if isinstance(value, bool):
        return pa.bool_()
    if isinstance(value, int):
        return pa.int64()
    if isinstance(value, float):
        return pa.float64()
    if isinstance(value, str):
        return pa.string()
    raise ExpressionError(f"unsupported literal {value!r} ({type(value).__name__}); use int, float, str, bool or None")


class Expr:
    """Base of every expression node."""

    __hash__ = object.__hash__

    # -- building -----------------------------------------------------------------------------
    def __and__(self, other: Any) -> Expr:
        return Logical("and", self, _wrap(other))

    def __rand__(self, other: Any) -> Expr:
        return Logical("and", _wrap(other), self)

    def __or__(self, other: Any) -> Expr:
        return Logical("or", self, _wrap(other))

    def __ror__(self, other: Any) -> Expr:
        return Logical("or", _wrap(other), self)

    def __invert__(self) -> Expr:
        return Not(self)

    def __eq__(self, other: Any) -> Expr:  # type: ignore[override]
        return Compare("==", self, _wrap(other))

    def __ne__(self, other: Any) -> Expr:  # type: ignore[override]
        return Compare("!=", self, _wrap(other))

    def __lt__(self, other: Any) -> Expr:
        return Compare("<", self, _wrap(other))

    def __le__(self, other: Any) -> Expr:
        return Compare("<=", self, _wrap(other))

    def __gt__(self, other: Any) -> Expr:
        return Compare(">", self, _wrap(other))

    def __ge__(self, other: Any) -> Expr:
        return Compare(">=", self, _wrap(other))

    def __add__(self, other: Any) -> Expr:
        return Arith("+", self, _wrap(other))

    def __radd__(self, other: Any) -> Expr:
        return Arith("+", _wrap(other), self)

    def __sub__(self, other: Any) -> Expr:
        return Arith("-", self, _wrap(other))

    def __rsub__(self, other: Any) -> Expr:
        return Arith("-", _wrap(other), self)

    def __mul__(self, other: Any) -> Expr:
        return Arith("*", self, _wrap(other))

    def __rmul__(self, other: Any) -> Expr:
        return Arith("*", _wrap(other), self)

    def __truediv__(self, other: Any) -> Expr:
        return Arith("/", self, _wrap(other))

    def __rtruediv__(self, other: Any) -> Expr:
        return Arith("/", _wrap(other), self)

    def __neg__(self) -> Expr:
        return Arith("-", Lit(0), self)

    def __bool__(self) -> bool:
        raise ExpressionError(f"expression {self!r} has no truth value; combine predicates with & | ~ instead of and/or/not")

    def isin(self, values: Iterable[Any]) -> Expr:
        return IsIn(self, tuple(values))

    def is_null(self) -> Expr:
        return IsNull(self)

    def alias(self, name: str) -> Expr:
        return Alias(self, name)

    # -- using ----------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        """The output column name when the expression is selected."""
        return repr(self)

    def columns(self) -> set[str]:
        return set()

    def check(self, schema: pa.Schema, where: str) -> pa.DataType:
        """The result type on ``schema``; raises :class:`ExpressionError` naming ``where``."""
        raise NotImplementedError

    def evaluate(self, batch: pa.RecordBatch) -> pa.Array | pa.Scalar:
        raise NotImplementedError

    def to_arrow(self) -> pc.Expression:
        raise NotImplementedError


def _wrap(value: Any) -> Expr:
    return value if isinstance(value, Expr) else Lit(value)


def describe(e: Expr, t: pa.DataType) -> str:
    """``e`` of type ``t`` as an error message names it: ``column 'room' (string)``, ``3 (int64)``."""
    if isinstance(e, Col):
        return f"column {e.column!r} ({t})"
    if isinstance(e, Lit):
        return f"{e.value!r} ({t})"
    return f"{e!r} ({t})"


class Col(Expr):
    def __init__(self, column: str):
        if not isinstance(column, str) or not column:
            raise ExpressionError(f"column names are non-empty strings, got {column!r}")
        self.column = column

    @property
    def name(self) -> str:
        return self.column

    def __repr__(self) -> str:
        return f"col({self.column!r})"

    def columns(self) -> set[str]:
        return {self.column}

    def check(self, schema: pa.Schema, where: str) -> pa.DataType:
        idx = schema.get_field_index(self.column)
        if idx < 0:
            visible = [n for n in schema.names if n not in INTERNAL]
            raise ExpressionError(f"operator {where!r}: unknown column {self.column!r}; columns are {visible}")
        return schema.field(idx).type

    def evaluate(self, batch: pa.RecordBatch) -> pa.Array:
        return batch.column(self.column)

    def to_arrow(self) -> pc.Expression:
        return pc.field(self.column)


class Lit(Expr):
    """A literal; ``type`` (default: inferred, ints as int64) gives it an exact Arrow type, as
    literals read from Spark's plans carry Spark's own type (an int literal is int32 there)."""

    _scalar: pa.Scalar | None = None  # made at the first evaluation, then reused

    def __init__(self, value: Any, type: pa.DataType | None = None):
        self.type = literal_type(value) if type is None else type
        self.value = value

    def __repr__(self) -> str:
        return f"lit({self.value!r})"

    def check(self, schema: pa.Schema, where: str) -> pa.DataType:
        return self.type

    def evaluate(self, batch: pa.RecordBatch) -> pa.Scalar:
        if self._scalar is None:
            self._scalar = pa.scalar(self.value, type=self.type)
        return self._scalar

    def to_arrow(self) -> pc.Expression:
        return pc.scalar(pa.scalar(self.value, type=self.type))


class Alias(Expr):
    def __init__(self, child: Expr, name: str):
        if not isinstance(name, str) or not name:
            raise ExpressionError(f"alias names are non-empty strings, got {name!r}")
        if name.startswith("__"):
            raise ExpressionError(f"alias {name!r}: names starting with '__' are reserved for the executor")
        self.child = child
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    def __repr__(self) -> str:
        return f"{self.child!r}.alias({self._name!r})"

    def columns(self) -> set[str]:
        return self.child.columns()

    def check(self, schema: pa.Schema, where: str) -> pa.DataType:
        return self.child.check(schema, where)

    def evaluate(self, batch: pa.RecordBatch):
        return self.child.evaluate(batch)

    def to_arrow(self) -> pc.Expression:
        return self.child.to_arrow()


class Binary(Expr):
    op: str

    def __init__(self, op: str, left: Expr, right: Expr):
        self.op, self.left, self.right = op, left, right

    def __repr__(self) -> str:
        return f"({self.left!r} {self.op} {self.right!r})"

    def columns(self) -> set[str]:
        return self.left.columns() | self.right.columns()


COMPARE_KERNELS = {"==": "equal", "!=": "not_equal", "<": "less", "<=": "less_equal", ">": "greater", ">=": "greater_equal"}
#: The comparison of b with a that answers a op b.
FLIPPED = {"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


class Compare(Binary):
    def check(self, schema: pa.Schema, where: str) -> pa.DataType:
        lt, rt = self.left.check(schema, where), self.right.check(schema, where)
        lk, rk = kind(lt), kind(rt)
        if lk != rk and "null" not in (lk, rk):
            raise ExpressionError(f"operator {where!r}: cannot compare {describe(self.left, lt)} with {describe(self.right, rt)}")
        return pa.bool_()

    def evaluate(self, batch: pa.RecordBatch):
        return getattr(pc, COMPARE_KERNELS[self.op])(self.left.evaluate(batch), self.right.evaluate(batch))

    def to_arrow(self) -> pc.Expression:
        return getattr(pc, COMPARE_KERNELS[self.op])(self.left.to_arrow(), self.right.to_arrow())


_ARITH = {"+": "add", "-": "subtract", "*": "multiply"}


class Arith(Binary):
    def check(self, schema: pa.Schema, where: str) -> pa.DataType:
        types = []
        for side in (self.left, self.right):
            t = side.check(schema, where)
            if kind(t) not in ("numeric", "null"):
                raise ExpressionError(f"operator {where!r}: arithmetic {self.op!r} needs numbers, got {describe(side, t)}")
            types.append(t)
        if self.op == "/" or any(pa.types.is_floating(t) for t in types):
            return pa.float64()
        return pa.int64()

    def evaluate(self, batch: pa.RecordBatch):
        a, b = self.left.evaluate(batch), self.right.evaluate(batch)
        if self.op != "/":
            return getattr(pc, _ARITH[self.op])(a, b)
        a, b = pc.cast(a, pa.float64()), pc.cast(b, pa.float64())
        return pc.if_else(pc.equal(b, 0.0), pa.scalar(None, pa.float64()), pc.divide(a, b))

    def to_arrow(self) -> pc.Expression:
        a, b = self.left.to_arrow(), self.right.to_arrow()
        if self.op != "/":
            return getattr(pc, _ARITH[self.op])(a, b)
        a, b = a.cast(pa.float64()), b.cast(pa.float64())
        return pc.if_else(pc.equal(b, pc.scalar(0.0)), pc.scalar(pa.scalar(None, pa.float64())), pc.divide(a, b))


class Logical(Binary):
    def check(self, schema: pa.Schema, where: str) -> pa.DataType:
        for side in (self.left, self.right):
            t = side.check(schema, where)
            if kind(t) not in ("boolean", "null"):
                raise ExpressionError(f"operator {where!r}: {self.op!r} needs booleans, got {describe(side, t)}")
        return pa.bool_()

    def evaluate(self, batch: pa.RecordBatch):
        f = pc.and_kleene if self.op == "and" else pc.or_kleene
        return f(self.left.evaluate(batch), self.right.evaluate(batch))

    def to_arrow(self) -> pc.Expression:
        f = pc.and_kleene if self.op == "and" else pc.or_kleene
        return f(self.left.to_arrow(), self.right.to_arrow())


class Not(Expr):
    def __init__(self, child: Expr):
        self.child = child

    def __repr__(self) -> str:
        return f"~{self.child!r}"

    def columns(self) -> set[str]:
        return self.child.columns()

    def check(self, schema: pa.Schema, where: str) -> pa.DataType:
        t = self.child.check(schema, where)
        if kind(t) not in ("boolean", "null"):
            raise ExpressionError(f"operator {where!r}: '~' needs a boolean, got {describe(self.child, t)}")
        return pa.bool_()

    def evaluate(self, batch: pa.RecordBatch):
        return pc.invert(self.child.evaluate(batch))

    def to_arrow(self) -> pc.Expression:
        return ~self.child.to_arrow()


class IsIn(Expr):
    def __init__(self, child: Expr, values: Sequence[Any]):
        if not values:
            raise ExpressionError(f"{child!r}.isin() needs at least one value")
        kinds = {kind(literal_type(v)) for v in values if v is not None}
        if len(kinds) > 1:
            raise ExpressionError(f"{child!r}.isin({list(values)!r}) mixes value types {sorted(kinds)}")
        self.child, self.values = child, tuple(values)
        self._set = pa.array([v for v in values if v is not None])

    def __repr__(self) -> str:
        return f"{self.child!r}.isin({list(self.values)!r})"

    def columns(self) -> set[str]:
        return self.child.columns()

    def check(self, schema: pa.Schema, where: str) -> pa.DataType:
        t = self.child.check(schema, where)
        vk = kind(self._set.type)
        if vk != "null" and kind(t) != vk:
            raise ExpressionError(
                f"operator {where!r}: {describe(self.child, t)} cannot be tested against {vk} values {list(self.values)!r}"
            )
        return pa.bool_()

    def _has_null(self) -> bool:
        return any(v is None for v in self.values)

    def evaluate(self, batch: pa.RecordBatch):
        x = self.child.evaluate(batch)
        found = pc.is_in(x, value_set=self._set.cast(x.type) if len(self._set) else self._set)
        # SQL: NULL IN (...) is NULL; x IN (..., NULL) is NULL when x is not found.
        unknown = pc.is_null(x)
        if self._has_null():
            unknown = pc.or_(unknown, pc.invert(found))
        return pc.if_else(unknown, pa.scalar(None, pa.bool_()), found)

    def to_arrow(self) -> pc.Expression:
        x = self.child.to_arrow()
        found = pc.is_in(x, value_set=self._set)
        unknown = pc.is_null(x)
        if self._has_null():
            unknown = unknown | ~found
        return pc.if_else(unknown, pc.scalar(None), found)


class IsNull(Expr):
    def __init__(self, child: Expr):
        self.child = child

    def __repr__(self) -> str:
        return f"{self.child!r}.is_null()"

    def columns(self) -> set[str]:
        return self.child.columns()

    def check(self, schema: pa.Schema, where: str) -> pa.DataType:
        self.child.check(schema, where)
        return pa.bool_()

    def evaluate(self, batch: pa.RecordBatch):
        return pc.is_null(self.child.evaluate(batch))

    def to_arrow(self) -> pc.Expression:
        return pc.is_null(self.child.to_arrow())


def col(name: str) -> Col:
    """A column reference."""
    return Col(name)


def lit(value: Any) -> Lit:
    """A literal (int, float, str, bool or None)."""
    return Lit(value)


def as_expr(value: Any) -> Expr:
    """Column names become :func:`col`, expressions pass through."""
    if isinstance(value, str):
        return Col(value)
    if isinstance(value, Expr):
        return value
    raise ExpressionError(f"expected a column name or an expression, got {value!r}")


def evaluate_array(expr: Expr, batch: pa.RecordBatch) -> pa.Array:
    """Evaluate ``expr`` to an array of ``batch``'s length (literals are broadcast)."""
    out = expr.evaluate(batch)
    if isinstance(out, pa.ChunkedArray):
        out = out.combine_chunks()
    if isinstance(out, pa.Scalar):
        out = pa.repeat(out, batch.num_rows)
    return out


def is_float(t: pa.DataType) -> bool:
    """Whether ``t`` is a floating-point type (where Spark's NaN rules apply)."""
    return pa.types.is_floating(t)


def null_of(t: pa.DataType) -> pa.Scalar:
    """A null of type ``t``."""
    return pa.scalar(None, type=t)


def as_type(x: pa.Array | pa.Scalar, t: pa.DataType) -> pa.Array | pa.Scalar:
    """``x`` cast to ``t`` unless it has that type already."""
    return x if x.type == t else pc.cast(x, t)
