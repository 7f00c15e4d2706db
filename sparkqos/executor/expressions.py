"""A small typed expression language for the executor's operators.

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

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkqos.errors import ExpressionError
from sparkqos.executor import fdlibm

#: Columns the executor adds to every row: arrival time (seconds) and a per-stream sequence number.
ARRIVAL = "__arrival"
SEQ = "__seq"
INTERNAL = (ARRIVAL, SEQ)


def _kind(t: pa.DataType) -> str:
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


def _literal_type(value: Any) -> pa.DataType:
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


def _describe(e: Expr, t: pa.DataType) -> str:
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
        self.type = _literal_type(value) if type is None else type
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


class _Binary(Expr):
    op: str

    def __init__(self, op: str, left: Expr, right: Expr):
        self.op, self.left, self.right = op, left, right

    def __repr__(self) -> str:
        return f"({self.left!r} {self.op} {self.right!r})"

    def columns(self) -> set[str]:
        return self.left.columns() | self.right.columns()


_COMPARE = {"==": "equal", "!=": "not_equal", "<": "less", "<=": "less_equal", ">": "greater", ">=": "greater_equal"}
#: The comparison of b with a that answers a op b.
_FLIPPED = {"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


class Compare(_Binary):
    def check(self, schema: pa.Schema, where: str) -> pa.DataType:
        lt, rt = self.left.check(schema, where), self.right.check(schema, where)
        lk, rk = _kind(lt), _kind(rt)
        if lk != rk and "null" not in (lk, rk):
            raise ExpressionError(
                f"operator {where!r}: cannot compare {_describe(self.left, lt)} with {_describe(self.right, rt)}"
            )
        return pa.bool_()

    def evaluate(self, batch: pa.RecordBatch):
        return getattr(pc, _COMPARE[self.op])(self.left.evaluate(batch), self.right.evaluate(batch))

    def to_arrow(self) -> pc.Expression:
        return getattr(pc, _COMPARE[self.op])(self.left.to_arrow(), self.right.to_arrow())


_ARITH = {"+": "add", "-": "subtract", "*": "multiply"}


class Arith(_Binary):
    def check(self, schema: pa.Schema, where: str) -> pa.DataType:
        types = []
        for side in (self.left, self.right):
            t = side.check(schema, where)
            if _kind(t) not in ("numeric", "null"):
                raise ExpressionError(f"operator {where!r}: arithmetic {self.op!r} needs numbers, got {_describe(side, t)}")
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


class Logical(_Binary):
    def check(self, schema: pa.Schema, where: str) -> pa.DataType:
        for side in (self.left, self.right):
            t = side.check(schema, where)
            if _kind(t) not in ("boolean", "null"):
                raise ExpressionError(f"operator {where!r}: {self.op!r} needs booleans, got {_describe(side, t)}")
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
        if _kind(t) not in ("boolean", "null"):
            raise ExpressionError(f"operator {where!r}: '~' needs a boolean, got {_describe(self.child, t)}")
        return pa.bool_()

    def evaluate(self, batch: pa.RecordBatch):
        return pc.invert(self.child.evaluate(batch))

    def to_arrow(self) -> pc.Expression:
        return ~self.child.to_arrow()


class IsIn(Expr):
    def __init__(self, child: Expr, values: Sequence[Any]):
        if not values:
            raise ExpressionError(f"{child!r}.isin() needs at least one value")
        kinds = {_kind(_literal_type(v)) for v in values if v is not None}
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
        vk = _kind(self._set.type)
        if vk != "null" and _kind(t) != vk:
            raise ExpressionError(
                f"operator {where!r}: {_describe(self.child, t)} cannot be tested against {vk} values {list(self.values)!r}"
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


# -- Spark SQL semantics ------------------------------------------------------------------------
# The nodes below are what sparkqos.compile.spark_plan builds from Spark's analyzed plans. Spark has
# already inserted every implicit cast there, so the operands of a binary node have one type and
# each node computes exactly Spark's (non-ANSI) result for it: NaN equals NaN and sorts above every
# other number, integer arithmetic wraps around, division by zero gives null.


def _is_float(t: pa.DataType) -> bool:
    return pa.types.is_floating(t)


def _type_of(x: pa.Array | pa.Scalar) -> pa.DataType:
    return x.type


def _null_of(t: pa.DataType) -> pa.Scalar:
    return pa.scalar(None, type=t)


def _nan(x: pa.Array | pa.Scalar) -> pa.Array | pa.Scalar:
    return pc.is_nan(x) if _is_float(x.type) else pc.if_else(pc.is_null(x), _null_of(pa.bool_()), False)


def _is_number(x: pa.Scalar) -> bool:
    return x.is_valid and (_is_float(x.type) or pa.types.is_integer(x.type))


def spark_compare(op: str, a: pa.Array | pa.Scalar, b: pa.Array | pa.Scalar) -> pa.Array | pa.Scalar:
    """``a op b`` as Spark compares: null if either side is null; on floats NaN = NaN is true and
    NaN is greater than every other value (Arrow's IEEE comparisons say false for both)."""
    if isinstance(a, pa.Scalar) and not isinstance(b, pa.Scalar):
        return spark_compare(_FLIPPED[op], b, a)
    if _is_float(a.type) and isinstance(b, pa.Scalar) and _is_number(b) and not math.isnan(b.as_py()):
        # A number that is not NaN (the usual literal): IEEE's answer is Spark's but where a is
        # NaN, which Spark places above b: a > b is then not(a <= b), a >= b not(a < b) (one
        # kernel call and an inversion instead of the general NaN masks below).
        if op in (">", ">="):
            return pc.invert(getattr(pc, _COMPARE["<=" if op == ">" else "<"])(a, b))
        return getattr(pc, _COMPARE[op])(a, b)
    base = getattr(pc, _COMPARE[op])(a, b)
    if not (_is_float(a.type) or _is_float(b.type)):
        return base
    na, nb = _nan(a), _nan(b)
    both = pc.and_(na, nb)
    if op == "==":
        return pc.or_(base, both)
    if op == "!=":
        return pc.and_(base, pc.invert(both))
    if op in ("<", "<="):
        below = pc.and_(pc.invert(na), nb)  # x < NaN for every x but NaN
        return pc.or_(pc.or_(base, below), both) if op == "<=" else pc.or_(base, below)
    above = pc.and_(na, pc.invert(nb))
    return pc.or_(pc.or_(base, above), both) if op == ">=" else pc.or_(base, above)


class SqlCompare(_Binary):
    """Spark's ``= != < <= > >=`` (``<=>`` with ``null_safe``) on operands of one type."""

    def __init__(self, op: str, left: Expr, right: Expr, null_safe: bool = False):
        if op not in _COMPARE or (null_safe and op != "=="):
            raise ExpressionError(f"unknown comparison {op!r}")
        super().__init__(op, left, right)
        self.null_safe = null_safe

    def __repr__(self) -> str:
        return f"({self.left!r} {'<=>' if self.null_safe else self.op} {self.right!r})"

    def check(self, schema: pa.Schema, where: str) -> pa.DataType:
        return Compare.check(self, schema, where)

    def evaluate(self, batch: pa.RecordBatch):
        a, b = self.left.evaluate(batch), self.right.evaluate(batch)
        out = spark_compare(self.op, a, b)
        if self.null_safe:  # null <=> null is true, null <=> x is false
            an, bn = pc.is_null(a), pc.is_null(b)
            out = pc.if_else(pc.or_(an, bn), pc.and_(an, bn), out)
        return out


class InList(Expr):
    """Spark's ``x IN (v1, v2, ...)``: ``x = v1 OR x = v2 OR ...`` in three-valued logic (true
    if any is true, else null if any is null, else false), with Spark's equality (NaN = NaN,
    -0.0 = 0.0). One kernel call per value, no recursion however long the list."""

    def __init__(self, child: Expr, values: Sequence[Expr]):
        if not values:
            raise ExpressionError(f"{child!r} IN () needs at least one value")
        self.child, self.values = child, tuple(values)

    def __repr__(self) -> str:
        return f"{self.child!r}.isin({list(self.values)!r})"

    def columns(self) -> set[str]:
        return self.child.columns().union(*(v.columns() for v in self.values))

    def check(self, schema: pa.Schema, where: str) -> pa.DataType:
        for v in self.values:
            SqlCompare("==", self.child, v).check(schema, where)
        return pa.bool_()

    def evaluate(self, batch: pa.RecordBatch):
        x = self.child.evaluate(batch)
        out = None
        for v in self.values:
            eq = spark_compare("==", x, v.evaluate(batch))
            out = eq if out is None else pc.or_kleene(out, eq)
        return out


class SqlArith(_Binary):
    """Spark's ``+ - * / % div`` on operands of one type: integers wrap around on overflow
    (pyarrow's unchecked kernels, like the JVM's); ``/`` (always on doubles in Spark's plans),
    ``%`` and ``div`` (integer division of longs, toward zero) give null when the divisor is zero,
    -0.0 included. ``%`` has the sign of the dividend, as the JVM's (C's ``fmod`` on floats)."""

    _KERNELS = {"+": "add", "-": "subtract", "*": "multiply", "/": "divide", "%": "remainder", "div": "div"}

    def __init__(self, op: str, left: Expr, right: Expr):
        if op not in self._KERNELS:
            raise ExpressionError(f"unknown arithmetic operator {op!r}")
        super().__init__(op, left, right)

    def check(self, schema: pa.Schema, where: str) -> pa.DataType:
        lt = self.left.check(schema, where)
        rt = self.right.check(schema, where)
        for side, t in ((self.left, lt), (self.right, rt)):
            if _kind(t) not in ("numeric", "null"):
                raise ExpressionError(f"operator {where!r}: arithmetic {self.op!r} needs numbers, got {_describe(side, t)}")
        if self.op == "div":
            return pa.int64()
        return lt if not pa.types.is_null(lt) else rt

    def evaluate(self, batch: pa.RecordBatch):
        a, b = self.left.evaluate(batch), self.right.evaluate(batch)
        if self.op in ("%", "div"):
            return _remainder_or_div(self.op, a, b)
        if self.op != "/":
            return getattr(pc, self._KERNELS[self.op])(a, b)
        if pa.types.is_null(a.type) or pa.types.is_null(b.type):
            return _null_of(pa.float64())
        a, b = _as_type(a, pa.float64()), _as_type(b, pa.float64())  # Spark's plans divide doubles
        return pc.if_else(pc.equal(b, 0.0), _null_of(pa.float64()), pc.divide(a, b))


def _remainder_or_div(op: str, a: pa.Array | pa.Scalar, b: pa.Array | pa.Scalar) -> pa.Array | pa.Scalar:
    t = a.type if not pa.types.is_null(a.type) else b.type
    if op == "div":
        t = pa.int64()
    if pa.types.is_null(t):
        return _null_of(t)
    a, b = _as_type(a, t), _as_type(b, t)
    zero = pc.equal(b, pa.scalar(0, t))
    if _is_float(t):  # the JVM's % on doubles is C's fmod (NaN for inf % x, x for x % inf)
        x = a.to_numpy(zero_copy_only=False) if isinstance(a, pa.Array) else a.as_py()
        y = b.to_numpy(zero_copy_only=False) if isinstance(b, pa.Array) else b.as_py()
        with np.errstate(invalid="ignore", divide="ignore"):
            r = np.fmod(np.asarray(x if x is not None else np.nan, dtype=float), np.asarray(y if y is not None else np.nan))
        out = pa.array(np.broadcast_to(r, (len(a) if isinstance(a, pa.Array) else len(b),)), t) if r.ndim else pa.scalar(r, t)
        unknown = pc.or_(pc.or_(pc.is_null(a), pc.is_null(b)), zero)
        return pc.if_else(unknown, _null_of(t), out)
    # Integers: Arrow's division truncates toward zero like the JVM's, but MIN / -1 gives 0 there
    # (the JVM: MIN) and a zero divisor raises, so those divisors are taken out first.
    minus_one = pc.equal(b, pa.scalar(-1, t))
    safe = pc.if_else(pc.or_(zero, minus_one), pa.scalar(1, t), b)
    q = pc.if_else(minus_one, pc.negate(a), pc.divide(a, safe))
    out = q if op == "div" else pc.subtract(a, pc.multiply(q, b))
    return pc.if_else(zero, _null_of(t), out)


class Negate(Expr):
    """Spark's unary minus (wraps around for the smallest integer, as the JVM does)."""

    def __init__(self, child: Expr):
        self.child = child

    def __repr__(self) -> str:
        return f"-{self.child!r}"

    def columns(self) -> set[str]:
        return self.child.columns()

    def check(self, schema: pa.Schema, where: str) -> pa.DataType:
        t = self.child.check(schema, where)
        if _kind(t) not in ("numeric", "null"):
            raise ExpressionError(f"operator {where!r}: unary '-' needs a number, got {_describe(self.child, t)}")
        return t

    def evaluate(self, batch: pa.RecordBatch):
        return pc.negate(self.child.evaluate(batch))


class CaseWhen(Expr):
    """``when(c1, v1).when(c2, v2).otherwise(e)``: the value of the first condition that is true
    (null counts as false); ``otherwise`` (null when there is none) if none is."""

    def __init__(self, branches: Sequence[tuple[Expr, Expr]], otherwise: Expr | None, type: pa.DataType):
        if not branches:
            raise ExpressionError("when() needs at least one branch")
        self.branches = [(c, v) for c, v in branches]
        self.otherwise = otherwise
        self.type = type

    def __repr__(self) -> str:
        parts = "".join(f".when({c!r}, {v!r})" for c, v in self.branches)
        return f"case{parts}.otherwise({self.otherwise!r})"

    def columns(self) -> set[str]:
        out = set().union(*(c.columns() | v.columns() for c, v in self.branches))
        return out | (self.otherwise.columns() if self.otherwise is not None else set())

    def check(self, schema: pa.Schema, where: str) -> pa.DataType:
        for cond, value in self.branches:
            t = cond.check(schema, where)
            if _kind(t) not in ("boolean", "null"):
                raise ExpressionError(f"operator {where!r}: a when() condition gives {t}, not a boolean")
            value.check(schema, where)
        if self.otherwise is not None:
            self.otherwise.check(schema, where)
        return self.type

    def evaluate(self, batch: pa.RecordBatch):
        out = _null_of(self.type) if self.otherwise is None else _as_type(self.otherwise.evaluate(batch), self.type)
        for cond, value in reversed(self.branches):  # the first true branch is applied last
            c = pc.fill_null(evaluate_array(cond, batch), False)
            out = pc.if_else(c, _as_type(value.evaluate(batch), self.type), out)
        return out


def _as_type(x: pa.Array | pa.Scalar, t: pa.DataType) -> pa.Array | pa.Scalar:
    return x if x.type == t else pc.cast(x, t)


def _float_to_integer(x: pa.Array | pa.Scalar, to: pa.DataType) -> pa.Array | pa.Scalar:
    """The JVM's ``(int)`` / ``(long)`` of a float: toward zero, NaN → 0, saturating at the
    bounds; byte and short go through int and then wrap (Scala's ``toInt.toByte``, Spark's
    non-ANSI cast)."""
    wide = pa.int64() if to == pa.int64() else pa.int32()
    info = np.iinfo(wide.to_pandas_dtype())
    t = pc.trunc(pc.cast(x, pa.float64()))
    t = pc.if_else(pc.is_nan(t), 0.0, t)
    big, small = pc.greater_equal(t, float(info.max)), pc.less_equal(t, float(info.min))
    inside = pc.cast(pc.if_else(pc.or_(big, small), 0.0, t), wide)
    out = pc.if_else(big, pa.scalar(int(info.max), wide), pc.if_else(small, pa.scalar(int(info.min), wide), inside))
    return out if wide == to else pc.cast(out, to, safe=False)


def cast_supported(src: pa.DataType, to: pa.DataType) -> bool:
    """Whether :class:`Cast` computes Spark's exact result for ``src`` → ``to``: numbers and
    booleans between themselves, timestamps to numbers and booleans, integers and booleans to
    strings, anything to itself and null to anything. (Floats to strings use the JVM's number
    formatting; strings to numbers Spark's own parser: not matched.)"""
    sk, tk = _kind(src), _kind(to)
    if src == to or sk == "null":
        return True
    if tk in ("numeric", "boolean") and sk in ("numeric", "boolean"):
        return not (pa.types.is_decimal(src) or pa.types.is_decimal(to))
    if pa.types.is_timestamp(src) and tk in ("numeric", "boolean"):
        return not pa.types.is_decimal(to)
    if tk == "string":
        return pa.types.is_integer(src) or pa.types.is_boolean(src)
    return False


def spark_cast(x: pa.Array | pa.Scalar, to: pa.DataType) -> pa.Array | pa.Scalar:
    """Spark's non-ANSI ``cast`` for what :func:`cast_supported` accepts."""
    src = x.type
    if src == to:
        return x
    if pa.types.is_null(src):
        return pc.cast(x, to)
    if pa.types.is_timestamp(src):
        # Spark: microseconds since the epoch; to double and float t / 1e6, to integers
        # floorDiv(t, 1e6) (null when it does not fit an int, short or byte), to boolean t != 0
        micros = pc.cast(pc.cast(x, pa.timestamp("us", tz=src.tz)), pa.int64())
        if pa.types.is_boolean(to):
            return pc.not_equal(micros, pa.scalar(0, pa.int64()))
        if pa.types.is_floating(to):
            return pc.cast(pc.divide(pc.cast(micros, pa.float64(), safe=False), pa.scalar(1e6)), to)
        million = pa.scalar(1_000_000, pa.int64())
        truncated = pc.divide(micros, million)  # toward zero
        below = pc.and_(pc.less(micros, pa.scalar(0, pa.int64())), pc.not_equal(pc.multiply(truncated, million), micros))
        seconds = pc.subtract(truncated, pc.cast(below, pa.int64()))
        if to == pa.int64():
            return seconds
        # a narrower integer: null where the seconds do not fit (Spark's non-ANSI timestamp casts)
        info = np.iinfo(to.to_pandas_dtype())
        fits = pc.and_(pc.greater_equal(seconds, pa.scalar(int(info.min))), pc.less_equal(seconds, pa.scalar(int(info.max))))
        return pc.cast(pc.if_else(fits, seconds, pa.scalar(None, pa.int64())), to, safe=False)
    if pa.types.is_boolean(to) and not pa.types.is_boolean(src):
        return pc.not_equal(x, pa.scalar(0, src))  # NaN is true, as in Spark
    if pa.types.is_integer(to) and _is_float(src):
        return _float_to_integer(x, to)
    return pc.cast(x, to, safe=False)  # integers narrow by wrapping around, like the JVM


class Cast(Expr):
    """Spark's ``cast`` (non-ANSI) for the pairs :func:`cast_supported` accepts."""

    def __init__(self, child: Expr, to: pa.DataType):
        self.child, self.to = child, to

    def __repr__(self) -> str:
        return f"{self.child!r}.cast({self.to})"

    def columns(self) -> set[str]:
        return self.child.columns()

    def check(self, schema: pa.Schema, where: str) -> pa.DataType:
        src = self.child.check(schema, where)
        if not cast_supported(src, self.to):
            raise ExpressionError(f"operator {where!r}: cannot cast {_describe(self.child, src)} to {self.to}")
        return self.to

    def evaluate(self, batch: pa.RecordBatch):
        return spark_cast(self.child.evaluate(batch), self.to)


def _float_to_long(x: pa.Array | pa.Scalar) -> pa.Array | pa.Scalar:
    return _float_to_integer(x, pa.int64())


def _round_half_up(x: pa.Array | pa.Scalar) -> pa.Array | pa.Scalar:
    # round(x) with scale 0: half away from zero (Spark's HALF_UP); NaN and ±inf stay as they are.
    if not _is_float(x.type):
        return x
    r = pc.round(x, ndigits=0, round_mode="half_towards_infinity")
    return pc.if_else(pc.equal(r, 0.0), pa.scalar(0.0, r.type), r)  # Spark's BigDecimal has no -0.0


def _greatest(*xs: pa.Array | pa.Scalar, op: str = ">") -> pa.Array | pa.Scalar:
    # Nulls are skipped (null only when every argument is); NaN is the largest value.
    out = xs[0]
    for x in xs[1:]:
        better = pc.fill_null(spark_compare(op, x, out), False)
        out = pc.if_else(pc.is_null(out), x, pc.if_else(better, x, out))
    return out


def _floor_or_ceil(fn: str) -> Any:
    def apply(x: pa.Array | pa.Scalar) -> pa.Array | pa.Scalar:
        # Spark's floor/ceil of a double is a long (NaN → 0, saturating); of a long, itself.
        return _float_to_long(getattr(pc, fn)(x)) if _is_float(x.type) else pc.cast(x, pa.int64())

    return apply


def _is_nan(x: pa.Array | pa.Scalar) -> pa.Array | pa.Scalar:
    return pc.fill_null(pc.is_nan(x), False)  # isnan(null) is false in Spark


def _concat(*xs: pa.Array | pa.Scalar) -> pa.Array | pa.Scalar:
    # Spark's concat: null when any argument is null
    return pc.binary_join_element_wise(*xs, "", null_handling="emit_null")


def _trim(characters: str, how: str):
    kernel = {"both": pc.utf8_trim, "left": pc.utf8_ltrim, "right": pc.utf8_rtrim}[how]
    return lambda x: kernel(x, characters=characters)


def substring(x: pa.Array | pa.Scalar, pos: int, length: int) -> pa.Array | pa.Scalar:
    """Spark's ``substring(str, pos, len)`` (UTF8String.substringSQL) in characters: 1-based
    ``pos``, 0 taken as 1, a negative ``pos`` counts from the end; the end is fixed before a
    start before the beginning is moved up to it; a negative ``length`` gives ''."""
    if pos > 0:
        start, stop = pos - 1, pos - 1 + max(length, 0)
    elif pos == 0:
        start, stop = 0, max(length, 0)
    else:  # start = n + pos and end = start + length, both per row: Python's negative indices
        start = pos
        stop = None if pos + length >= 0 else pos + length
        if length <= 0:
            stop = start  # empty
    if stop is not None and stop == start:
        return pc.utf8_slice_codeunits(x, 0, 0)
    return pc.utf8_slice_codeunits(x, start, stop) if stop is not None else pc.utf8_slice_codeunits(x, start)


def _on_doubles(kernel: Any, null_if: Any = None) -> Any:
    """A function of double arguments computed by ``kernel`` on numpy float64 arrays: null where
    any argument is null, or where ``null_if`` (of the same numpy arguments) holds. All scalars
    give a scalar, as pyarrow's kernels do."""

    def apply(*xs: pa.Array | pa.Scalar) -> pa.Array | pa.Scalar:
        xs = tuple(x.combine_chunks() if isinstance(x, pa.ChunkedArray) else x for x in xs)
        n = max((len(x) for x in xs if isinstance(x, pa.Array)), default=None)
        values, valid = [], np.ones(1 if n is None else n, dtype=bool)
        for x in xs:
            x = _as_type(x, pa.float64())
            if isinstance(x, pa.Scalar):
                valid &= x.is_valid
                values.append(np.full(len(valid), x.as_py() if x.is_valid else np.nan))
            else:
                valid &= x.is_valid().to_numpy(zero_copy_only=False)
                values.append(x.to_numpy(zero_copy_only=False).astype(np.float64))
        out = kernel(*values)
        if null_if is not None:
            valid &= ~null_if(*values)
        if n is None:
            return pa.scalar(float(out[0]) if valid[0] else None, pa.float64())
        return pa.array(out, pa.float64(), mask=~valid)

    return apply


def _logarithm(base: np.ndarray, x: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return fdlibm.log(x) / fdlibm.log(base)  # Spark's Logarithm: StrictMath.log(x) / StrictMath.log(base)


#: Functions :class:`Call` evaluates, by name: their vectorised Spark-exact implementation and
#: the kinds of arguments they take (None: any). The result type is what the implementation
#: gives on the argument types (checked when the plan is built).
FUNCTIONS: dict[str, tuple[Any, tuple[str, ...] | None]] = {
    "abs": (pc.abs, ("numeric",)),
    "sqrt": (pc.sqrt, ("numeric",)),  # sqrt of a negative number is NaN, as in Spark
    "floor": (_floor_or_ceil("floor"), ("numeric",)),
    "ceil": (_floor_or_ceil("ceil"), ("numeric",)),
    "isnan": (_is_nan, ("numeric",)),
    "is_not_null": (lambda x: pc.is_valid(x), None),
    "lower": (pc.utf8_lower, ("string",)),
    "upper": (pc.utf8_upper, ("string",)),
    "length": (pc.utf8_length, ("string",)),
    "concat": (_concat, ("string",)),
    "trim": (_trim(" ", "both"), ("string",)),  # Spark trims spaces only, not tabs or newlines
    "ltrim": (_trim(" ", "left"), ("string",)),
    "rtrim": (_trim(" ", "right"), ("string",)),
    "round": (_round_half_up, ("numeric",)),
    "coalesce": (lambda *xs: pc.coalesce(*xs), None),
    "greatest": (lambda *xs: _greatest(*xs, op=">"), None),
    "least": (lambda *xs: _greatest(*xs, op="<"), None),
    # Spark computes these with the JVM's StrictMath, i.e. fdlibm (see executor/fdlibm.py):
    # exp(x); ln(x), null for x <= 0 (Spark's Log); log(base, x), null for base <= 0 or x <= 0
    # (Spark's Logarithm); pow(x, y). NaN is not <= 0, so a NaN argument gives NaN, not null.
    "exp": (_on_doubles(fdlibm.exp), ("numeric",)),
    "ln": (_on_doubles(fdlibm.log, null_if=lambda x: x <= 0.0), ("numeric",)),
    "log": (_on_doubles(_logarithm, null_if=lambda base, x: (base <= 0.0) | (x <= 0.0)), ("numeric",)),
    "pow": (_on_doubles(fdlibm.pow_), ("numeric",)),
}


class Call(Expr):
    """One of :data:`FUNCTIONS` applied to ``args`` (Spark has made their types agree)."""

    def __init__(self, fn: str, *args: Expr):
        if fn not in FUNCTIONS:
            raise ExpressionError(f"unknown function {fn!r}; functions are {sorted(FUNCTIONS)}")
        if not args:
            raise ExpressionError(f"{fn}() needs at least one argument")
        self.fn, self.args = fn, tuple(args)

    def __repr__(self) -> str:
        return f"{self.fn}({', '.join(repr(a) for a in self.args)})"

    def columns(self) -> set[str]:
        return set().union(*(a.columns() for a in self.args))

    def check(self, schema: pa.Schema, where: str) -> pa.DataType:
        impl, kinds = FUNCTIONS[self.fn]
        types = [a.check(schema, where) for a in self.args]
        for a, t in zip(self.args, types, strict=True):
            if kinds is not None and _kind(t) not in (*kinds, "null"):
                raise ExpressionError(f"operator {where!r}: {self.fn}() needs {' or '.join(kinds)}, got {_describe(a, t)}")
        return impl(*(pa.array([], t) for t in types)).type

    def evaluate(self, batch: pa.RecordBatch):
        return FUNCTIONS[self.fn][0](*(a.evaluate(batch) for a in self.args))


class Substring(Expr):
    """Spark's ``substring(child, pos, length)`` with literal ``pos`` and ``length``
    (:func:`substring`)."""

    def __init__(self, child: Expr, pos: int, length: int):
        self.child, self.pos, self.length = child, int(pos), int(length)

    def __repr__(self) -> str:
        return f"substring({self.child!r}, {self.pos}, {self.length})"

    def columns(self) -> set[str]:
        return self.child.columns()

    def check(self, schema: pa.Schema, where: str) -> pa.DataType:
        t = self.child.check(schema, where)
        if _kind(t) not in ("string", "null"):
            raise ExpressionError(f"operator {where!r}: substring() needs a string, got {_describe(self.child, t)}")
        return pa.string() if pa.types.is_null(t) else t

    def evaluate(self, batch: pa.RecordBatch):
        x = self.child.evaluate(batch)
        if pa.types.is_null(x.type):
            return _null_of(pa.string())
        return substring(x, self.pos, self.length)


class StringMatch(Expr):
    """``contains`` / ``startswith`` / ``endswith`` / ``like`` of a string against a literal
    pattern (null pattern: null). ``like`` uses ``%`` / ``_`` with ``\\`` as escape, as Spark."""

    _KERNELS = {"contains": "match_substring", "startswith": "starts_with", "endswith": "ends_with", "like": "match_like"}

    def __init__(self, fn: str, child: Expr, pattern: str | None):
        if fn not in self._KERNELS:
            raise ExpressionError(f"unknown string match {fn!r}")
        self.fn, self.child, self.pattern = fn, child, pattern

    def __repr__(self) -> str:
        return f"{self.child!r}.{self.fn}({self.pattern!r})"

    def columns(self) -> set[str]:
        return self.child.columns()

    def check(self, schema: pa.Schema, where: str) -> pa.DataType:
        t = self.child.check(schema, where)
        if _kind(t) not in ("string", "null"):
            raise ExpressionError(f"operator {where!r}: {self.fn}() needs a string, got {_describe(self.child, t)}")
        return pa.bool_()

    def evaluate(self, batch: pa.RecordBatch):
        x = self.child.evaluate(batch)
        if self.pattern is None or pa.types.is_null(x.type):
            return _null_of(pa.bool_())
        return getattr(pc, self._KERNELS[self.fn])(x, pattern=self.pattern)


# -- aggregates -------------------------------------------------------------------------------

AGG_FUNCTIONS = ("count", "sum", "avg", "min", "max")


class Agg:
    """One aggregate of a window aggregation: ``count()``, ``sum_("v")``, ``avg("v")``…

    >>> sum_("v").alias("total"), count().name
    (sum_('v').alias('total'), 'count')
    """

    def __init__(self, fn: str, column: str | None, name: str | None = None):
        if fn not in AGG_FUNCTIONS:
            raise ExpressionError(f"unknown aggregate {fn!r}; use one of {list(AGG_FUNCTIONS)}")
        if column is None and fn != "count":
            raise ExpressionError(f"aggregate {fn!r} needs a column")
        self.fn, self.column = fn, column
        self.name = name or (fn if column is None else f"{fn}_{column}")

    def alias(self, name: str) -> Agg:
        return Agg(self.fn, self.column, name)

    def __repr__(self) -> str:
        f = self.fn + ("_" if self.fn in ("sum", "min", "max") else "")
        arg = "" if self.column is None else repr(self.column)
        base = f"{f}({arg})"
        return (
            base
            if self.name == (self.fn if self.column is None else f"{self.fn}_{self.column}")
            else f"{base}.alias({self.name!r})"
        )

    def check(self, schema: pa.Schema, where: str) -> pa.DataType:
        """Output type of the aggregate, as Spark gives it."""
        if self.column is None:
            return pa.int64()
        t = Col(self.column).check(schema, where)
        k = _kind(t)
        if self.fn == "count":
            return pa.int64()
        if self.fn in ("sum", "avg") and k != "numeric":
            raise ExpressionError(f"operator {where!r}: {self.fn} needs a numeric column, got column {self.column!r} ({t})")
        if self.fn == "avg":
            return pa.float64()
        if self.fn == "sum":
            return pa.float64() if pa.types.is_floating(t) else pa.int64()
        if k not in ("numeric", "string", "temporal", "boolean"):
            raise ExpressionError(f"operator {where!r}: {self.fn} cannot order column {self.column!r} ({t})")
        return t


def count(column: str | None = None) -> Agg:
    """Rows (``column`` None) or non-null values of ``column``."""
    return Agg("count", column)


def sum_(column: str) -> Agg:
    return Agg("sum", column)


def avg(column: str) -> Agg:
    return Agg("avg", column)


def min_(column: str) -> Agg:
    return Agg("min", column)


def max_(column: str) -> Agg:
    return Agg("max", column)


__all__ = [
    "ARRIVAL",
    "Agg",
    "Expr",
    "INTERNAL",
    "SEQ",
    "as_expr",
    "avg",
    "col",
    "count",
    "evaluate_array",
    "lit",
    "max_",
    "min_",
    "sum_",
]
