"""Spark SQL semantics: the nodes :mod:`sparkqos.compile.spark_plan` builds from Spark's analyzed plans.

Spark has already inserted every implicit cast there, so the operands of a binary node have one type and
each node computes exactly Spark's (non-ANSI) result for it: NaN equals NaN and sorts above every
other number, integer arithmetic wraps around, division by zero gives null.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkqos.errors import ExpressionError
from sparkqos.executor.expressions.core import (
    COMPARE_KERNELS,
    FLIPPED,
    Binary,
    Compare,
    Expr,
    as_type,
    describe,
    evaluate_array,
    is_float,
    kind,
    null_of,
)


def _nan(x: pa.Array | pa.Scalar) -> pa.Array | pa.Scalar:
    return pc.is_nan(x) if is_float(x.type) else pc.if_else(pc.is_null(x), null_of(pa.bool_()), False)


def _is_number(x: pa.Scalar) -> bool:
    return x.is_valid and (is_float(x.type) or pa.types.is_integer(x.type))


def spark_compare(op: str, a: pa.Array | pa.Scalar, b: pa.Array | pa.Scalar) -> pa.Array | pa.Scalar:
    """``a op b`` as Spark compares: null if either side is null; on floats NaN = NaN is true and
    NaN is greater than every other value (Arrow's IEEE comparisons say false for both)."""
    if isinstance(a, pa.Scalar) and not isinstance(b, pa.Scalar):
        return spark_compare(FLIPPED[op], b, a)
    if is_float(a.type) and isinstance(b, pa.Scalar) and _is_number(b) and not math.isnan(b.as_py()):
        # A number that is not NaN (the usual literal): IEEE's answer is Spark's but where a is
        # NaN, which Spark places above b: a > b is then not(a <= b), a >= b not(a < b) (one
        # kernel call and an inversion instead of the general NaN masks below).
        if op in (">", ">="):
            return pc.invert(getattr(pc, COMPARE_KERNELS["<=" if op == ">" else "<"])(a, b))
        return getattr(pc, COMPARE_KERNELS[op])(a, b)
    base = getattr(pc, COMPARE_KERNELS[op])(a, b)
    if not (is_float(a.type) or is_float(b.type)):
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


class SqlCompare(Binary):
    """Spark's ``= != < <= > >=`` (``<=>`` with ``null_safe``) on operands of one type."""

    def __init__(self, op: str, left: Expr, right: Expr, null_safe: bool = False):
        if op not in COMPARE_KERNELS or (null_safe and op != "=="):
            raise ExpressionError(f"unknown comparison {op!r}")
        super().__init__(op, left, right)
        self.null_safe = null_safe

    def __repr__(self) -> str:
        return f"({self.left!r} {'<=>' if self.null_safe else self.op} {self.right!r})"

    def check(self, schema: pa.Schema, where: str) -> pa.DataType:
        for side in (self.left, self.right):
            t = side.check(schema, where)
            if pa.types.is_nested(t):
                # pyarrow's comparison kernels take no struct, array or map: refused when bound, never on a batch
                raise ExpressionError(f"operator {where!r}: sparkqos does not compare {describe(side, t)} natively")
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


class SqlArith(Binary):
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
            if kind(t) not in ("numeric", "null"):
                raise ExpressionError(f"operator {where!r}: arithmetic {self.op!r} needs numbers, got {describe(side, t)}")
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
            return null_of(pa.float64())
        a, b = as_type(a, pa.float64()), as_type(b, pa.float64())  # Spark's plans divide doubles
        return pc.if_else(pc.equal(b, 0.0), null_of(pa.float64()), pc.divide(a, b))


def _remainder_or_div(op: str, a: pa.Array | pa.Scalar, b: pa.Array | pa.Scalar) -> pa.Array | pa.Scalar:
    t = a.type if not pa.types.is_null(a.type) else b.type
    if op == "div":
        t = pa.int64()
    if pa.types.is_null(t):
        return null_of(t)
    a, b = as_type(a, t), as_type(b, t)
    zero = pc.equal(b, pa.scalar(0, t))
    if is_float(t):  # the JVM's % on doubles is C's fmod (NaN for inf % x, x for x % inf)
        x = a.to_numpy(zero_copy_only=False) if isinstance(a, pa.Array) else a.as_py()
        y = b.to_numpy(zero_copy_only=False) if isinstance(b, pa.Array) else b.as_py()
        with np.errstate(invalid="ignore", divide="ignore"):
            r = np.fmod(np.asarray(x if x is not None else np.nan, dtype=float), np.asarray(y if y is not None else np.nan))
        out = pa.array(np.broadcast_to(r, (len(a) if isinstance(a, pa.Array) else len(b),)), t) if r.ndim else pa.scalar(r, t)
        unknown = pc.or_(pc.or_(pc.is_null(a), pc.is_null(b)), zero)
        return pc.if_else(unknown, null_of(t), out)
    # Integers: Arrow's division truncates toward zero like the JVM's, but MIN / -1 gives 0 there
    # (the JVM: MIN) and a zero divisor raises, so those divisors are taken out first.
    minus_one = pc.equal(b, pa.scalar(-1, t))
    safe = pc.if_else(pc.or_(zero, minus_one), pa.scalar(1, t), b)
    q = pc.if_else(minus_one, pc.negate(a), pc.divide(a, safe))
    out = q if op == "div" else pc.subtract(a, pc.multiply(q, b))
    return pc.if_else(zero, null_of(t), out)


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
        if kind(t) not in ("numeric", "null"):
            raise ExpressionError(f"operator {where!r}: unary '-' needs a number, got {describe(self.child, t)}")
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
            if kind(t) not in ("boolean", "null"):
                raise ExpressionError(f"operator {where!r}: a when() condition gives {t}, not a boolean")
            value.check(schema, where)
        if self.otherwise is not None:
            self.otherwise.check(schema, where)
        return self.type

    def evaluate(self, batch: pa.RecordBatch):
        out = null_of(self.type) if self.otherwise is None else as_type(self.otherwise.evaluate(batch), self.type)
        for cond, value in reversed(self.branches):  # the first true branch is applied last
            c = pc.fill_null(evaluate_array(cond, batch), False)
            out = pc.if_else(c, as_type(value.evaluate(batch), self.type), out)
        return out
