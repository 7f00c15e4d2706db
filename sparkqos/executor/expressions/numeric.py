"""Spark's ``round`` / ``bround`` with a scale, and the decimal types sparkqos computes on.

Spark rounds a double through the decimal it prints: ``BigDecimal(Double.toString(x))
.setScale(scale, HALF_UP | HALF_EVEN).toDouble`` — so ``round(2.675, 2)`` is 2.68, although the
double nearest 2.675 lies below it. :func:`spark_round` computes that from the shortest digits
that read back as the double (Python's ``repr``: what ``Double.toString`` prints on JDK 19 and
later; on JDK 17 an integer-valued double above 2^53 prints its exact digits, see :func:`printed`,
and the session's JDK is part of the plan), NaN and ±inf
stay as they are, a zero result is +0.0 (a BigDecimal has no -0.0), and integers keep their type
(a negative scale rounds them, wrapping around on overflow as Scala's ``BigDecimal.toInt`` does;
a scale of 0 or more leaves them).

Most rows need no decimal arithmetic: with ``r = x·10^s`` (or ``x / 10^-s``), a row whose
fraction is clear of one half by more than the few units in the last place ``r`` may be off by
rounds to the integer N next to ``r`` whichever nearby decimal ``x`` stands for, and ``N /
10^s`` (or ``N·10^-s``) is one correctly rounded operation on exact operands when ``|N| < 2^52``
and ``|s| ≤ 22`` — the nearest double to the decimal result, which is what ``toDouble`` gives.
The other rows (halves, huge values, huge scales) go through Python's :mod:`decimal` one by one.

Decimals: Spark's ``decimal(p, s)`` is Arrow's ``decimal128(p, s)``. :func:`decimal_result` is
Spark's result type of ``+ - *`` on two decimals, where it agrees with Arrow's kernels
(precision at most 38: Spark would reduce the scale beyond, Arrow raises, so the compiler
refuses those).
"""

from __future__ import annotations

import decimal
import math
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkqos.errors import ExpressionError
from sparkqos.executor.expressions.casts import Cast
from sparkqos.executor.expressions.core import Expr, describe, kind

_CONTEXT = decimal.Context(prec=1000, Emax=999_999, Emin=-999_999)
_MODES = {False: decimal.ROUND_HALF_UP, True: decimal.ROUND_HALF_EVEN}
#: Integers below this (2^52) keep every digit of ``x·10^s`` a double can hold apart from a half.
_EXACT = float(2**52)


#: How many low digits JDK 17's Double.toString drops from an integer-valued double of binary
#: exponent e (53 < e < 63), by ``e - 54`` (FloatingDecimal's insignificantDigitsForPow2).
_INSIGNIFICANT = (0, 0, 0, 0, 1, 1, 1, 2, 2)


def printed(x: float, legacy: bool = False) -> decimal.Decimal:
    """The decimal ``Double.toString(x)`` prints: the shortest digits that read back as ``x``
    (JDK 19 and later); with ``legacy`` (JDK 17's FloatingDecimal) an integer-valued double
    between 2^53 and 2^63 prints its exact digits, the lowest few rounded away."""
    if legacy and _EXACT * 2 <= abs(x) < 2.0**63 and x == int(x):
        e = math.frexp(abs(x))[1] - 1
        drop = _INSIGNIFICANT[e - 54] if 1 < e - 54 < len(_INSIGNIFICANT) else 0
        whole, residue = divmod(abs(int(x)), 10**drop)
        whole += residue >= 10**drop // 2 if drop else 0
        return decimal.Decimal(whole if x > 0 else -whole).scaleb(drop)
    return decimal.Decimal(repr(x))


def _round_one(x: float, scale: int, half_even: bool, legacy: bool) -> float:
    d = printed(x, legacy)
    q = d.quantize(decimal.Decimal(1).scaleb(-scale), rounding=_MODES[half_even], context=_CONTEXT)
    out = float(q)
    return 0.0 if out == 0.0 else out


def _round_doubles(v: np.ndarray, scale: int, half_even: bool, legacy: bool) -> np.ndarray:
    out = v.copy()
    finite = np.isfinite(v)
    slow = finite.copy()
    if abs(scale) <= 22:
        p = 10.0 ** abs(scale)
        with np.errstate(over="ignore", invalid="ignore"):
            r = v * p if scale >= 0 else v / p
            a = np.abs(r)
            whole = np.floor(a)
            frac = a - whole
            # r is within two units in the last place of the decimal times 10^s: clear of a half by more
            fast = finite & (a < _EXACT) & (np.abs(frac - 0.5) > 4 * np.spacing(a) + 1e-9)
        n = np.copysign(whole + (frac > 0.5), r)
        with np.errstate(over="ignore", invalid="ignore"):
            rounded = n / p if scale >= 0 else n * p
        out = np.where(fast, rounded + 0.0, out)  # + 0.0: -0.0 becomes 0.0
        slow = finite & ~fast
    for i in np.flatnonzero(slow):
        out[i] = _round_one(float(v[i]), scale, half_even, legacy)
    return out


def _round_integers(x: pa.Array, scale: int, half_even: bool) -> pa.Array:
    bits = x.type.bit_width
    unit = decimal.Decimal(1).scaleb(-scale)
    mode = _MODES[half_even]
    half = 1 << (bits - 1)

    def one(v: int | None) -> int | None:
        if v is None:
            return None
        q = decimal.Decimal(v).quantize(unit, rounding=mode, context=_CONTEXT)
        n = int(q) % (1 << bits)  # the low bits, as the JVM's intValue / longValue
        return n - (1 << bits) if n >= half else n

    return pa.array([one(v) for v in x.to_pylist()], x.type)


def spark_round(x: pa.Array | pa.Scalar, scale: int, half_even: bool = False, legacy: bool = False) -> pa.Array | pa.Scalar:
    """Spark's ``round(x, scale)`` (``bround`` with ``half_even``) on integers and floats; ``legacy``:
    Spark runs on a JDK before 19, whose ``Double.toString`` prints some doubles otherwise (:func:`printed`)."""
    t = x.type
    if pa.types.is_null(t):
        return x
    if isinstance(x, pa.Scalar):
        return spark_round(pa.array([x.as_py()], t), scale, half_even, legacy)[0]
    if isinstance(x, pa.ChunkedArray):
        x = x.combine_chunks()
    if pa.types.is_integer(t):
        return x if scale >= 0 else _round_integers(x, scale, half_even)
    if not pa.types.is_floating(t):
        raise ExpressionError(f"round() needs an integer or a float, got {t}")
    v = pc.fill_null(x, 0.0).to_numpy(zero_copy_only=False).astype(np.float64)
    out = _round_doubles(v, scale, half_even, legacy)
    return pa.array(out, pa.float64(), mask=pc.is_null(x).to_numpy(zero_copy_only=False)).cast(t)


class Round(Expr):
    """``round(child, scale)`` (HALF_UP) or ``bround(child, scale)`` (HALF_EVEN, ``half_even``)
    with a literal scale, as :func:`spark_round` computes it (``legacy``: Spark's JDK is older
    than 19); a null scale gives null."""

    def __init__(self, child: Expr, scale: int | None, half_even: bool = False, legacy: bool = False):
        self.child, self.scale, self.half_even, self.legacy = child, scale, half_even, legacy

    def __repr__(self) -> str:
        return f"{'bround' if self.half_even else 'round'}({self.child!r}, {self.scale})"

    def columns(self) -> set[str]:
        return self.child.columns()

    def check(self, schema: pa.Schema, where: str) -> pa.DataType:
        t = self.child.check(schema, where)
        if kind(t) not in ("numeric", "null") or pa.types.is_decimal(t):
            fn = "bround" if self.half_even else "round"
            raise ExpressionError(f"operator {where!r}: {fn}() needs an integer or a float, got {describe(self.child, t)}")
        return t

    def evaluate(self, batch: pa.RecordBatch) -> pa.Array | pa.Scalar:
        x = self.child.evaluate(batch)
        if self.scale is None:
            return pa.scalar(None, x.type)
        return spark_round(x, self.scale, self.half_even, self.legacy)


# -- decimals ------------------------------------------------------------------------------------

#: Digits an integer type needs as a decimal (Spark's DecimalType.forType: byte 3, short 5, int 10, long 20).
INTEGER_DIGITS = {8: 3, 16: 5, 32: 10, 64: 20}
MAX_PRECISION = 38


def decimal_result(op: str, a: pa.Decimal128Type, b: pa.Decimal128Type) -> pa.Decimal128Type | None:
    """Spark's result type of ``a op b`` for ``+ - *`` on decimals (None: not one sparkqos computes:
    another operator, or a precision above 38, where Spark reduces the scale)."""
    if op in ("+", "-"):
        scale = max(a.scale, b.scale)
        precision = max(a.precision - a.scale, b.precision - b.scale) + scale + 1
    elif op == "*":
        scale, precision = a.scale + b.scale, a.precision + b.precision + 1
    else:
        return None
    return pa.decimal128(precision, scale) if precision <= MAX_PRECISION else None


def decimal_value(text: str, t: pa.Decimal128Type) -> decimal.Decimal:
    """The literal ``text`` (as Spark prints it) at ``t``'s scale."""
    return decimal.Decimal(text).quantize(decimal.Decimal(1).scaleb(-t.scale), context=_CONTEXT)


def decimal_to_float(value: Any, to: pa.DataType) -> float | None:
    """A decimal literal as the double (or float) Spark's cast gives: the nearest one."""
    if value is None:
        return None
    out = float(decimal.Decimal(value))
    return float(np.float32(out)) if to == pa.float32() and math.isfinite(out) else out


def _decimal_to_double(x: pa.Array, to: pa.DataType) -> pa.Array:
    """Decimals to the nearest double (then float): ``unscaled / 10^scale`` is one correctly
    rounded division where both are exact (|unscaled| < 2^53, scale ≤ 22); other rows go through
    Python's decimal."""
    t = x.type
    digits = [None if v is None else v for v in x.to_pylist()]
    if t.precision <= 15 and t.scale <= 22:
        unscaled = np.array([0 if v is None else int(v.scaleb(t.scale)) for v in digits], dtype=np.float64)
        out = unscaled / 10.0**t.scale
    else:
        out = np.array([0.0 if v is None else float(v) for v in digits], dtype=np.float64)
    mask = np.array([v is None for v in digits], dtype=bool)
    return pa.array(out, pa.float64(), mask=mask).cast(to)


def decimal_cast_supported(src: pa.DataType, to: pa.DataType) -> bool:
    """The casts with a decimal that :class:`DecimalCast` computes exactly: decimal to double or
    float, integers to a decimal with room for all their digits, a decimal to a decimal with
    as many integer digits and at least the scale."""
    if pa.types.is_decimal(src) and pa.types.is_floating(to):
        return True
    if pa.types.is_integer(src) and pa.types.is_decimal(to):
        return to.precision - to.scale >= INTEGER_DIGITS[src.bit_width]
    if pa.types.is_decimal(src) and pa.types.is_decimal(to):
        return to.scale >= src.scale and to.precision - to.scale >= src.precision - src.scale
    return pa.types.is_null(src)


def decimal_cast(x: pa.Array | pa.Scalar, to: pa.DataType) -> pa.Array | pa.Scalar:
    """Spark's cast for what :func:`decimal_cast_supported` accepts (none of them can overflow)."""
    if isinstance(x, pa.Scalar):
        return decimal_cast(pa.array([x.as_py()], x.type), to)[0]
    if isinstance(x, pa.ChunkedArray):
        x = x.combine_chunks()
    if pa.types.is_decimal(x.type) and pa.types.is_floating(to):
        return _decimal_to_double(x, to)
    return pc.cast(x, to)


class DecimalCast(Cast):
    """``cast`` from or to a decimal, as :func:`decimal_cast` computes it."""

    def check(self, schema: pa.Schema, where: str) -> pa.DataType:
        src = self.child.check(schema, where)
        if not decimal_cast_supported(src, self.to):
            raise ExpressionError(f"operator {where!r}: cannot cast {describe(self.child, src)} to {self.to}")
        return self.to

    def evaluate(self, batch: pa.RecordBatch) -> pa.Array | pa.Scalar:
        return decimal_cast(self.child.evaluate(batch), self.to)


class DecimalArith(Expr):
    """``+ - *`` on two decimals, typed as Spark types them (:func:`decimal_result`), which is
    what Arrow's kernels give; the result has room for every digit, so nothing overflows."""

    _KERNELS = {"+": "add", "-": "subtract", "*": "multiply"}

    def __init__(self, op: str, left: Expr, right: Expr):
        if op not in self._KERNELS:
            raise ExpressionError(f"decimal arithmetic {op!r} is not one sparkqos computes")
        self.op, self.left, self.right = op, left, right

    def __repr__(self) -> str:
        return f"({self.left!r} {self.op} {self.right!r})"

    def columns(self) -> set[str]:
        return self.left.columns() | self.right.columns()

    def check(self, schema: pa.Schema, where: str) -> pa.DataType:
        lt, rt = self.left.check(schema, where), self.right.check(schema, where)
        out = decimal_result(self.op, lt, rt) if pa.types.is_decimal(lt) and pa.types.is_decimal(rt) else None
        if out is None:
            raise ExpressionError(f"operator {where!r}: decimal {self.op!r} of {lt} and {rt} is not one sparkqos computes")
        return out

    def evaluate(self, batch: pa.RecordBatch) -> pa.Array | pa.Scalar:
        a, b = self.left.evaluate(batch), self.right.evaluate(batch)
        out = getattr(pc, self._KERNELS[self.op])(a, b)
        want = decimal_result(self.op, a.type, b.type)
        return out if out.type == want else pc.cast(out, want)
