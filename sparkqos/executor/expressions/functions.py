"""Spark's functions the executor computes exactly: the :data:`FUNCTIONS` table, :class:`Call`, and the
functions with literal arguments (:class:`Substring`, :class:`StringMatch`)."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkqos.errors import ExpressionError
from sparkqos.executor import fdlibm
from sparkqos.executor.expressions.casts import float_to_integer
from sparkqos.executor.expressions.core import Expr, as_type, describe, is_float, kind, null_of
from sparkqos.executor.expressions.hashes import DIGESTS, crc32, digest, murmur3, xxhash64
from sparkqos.executor.expressions.sql import spark_compare


def _float_to_long(x: pa.Array | pa.Scalar) -> pa.Array | pa.Scalar:
    return float_to_integer(x, pa.int64())


def _round_half_up(x: pa.Array | pa.Scalar) -> pa.Array | pa.Scalar:
    # round(x) with scale 0: half away from zero (Spark's HALF_UP); NaN and ±inf stay as they are.
    if not is_float(x.type):
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
        return _float_to_long(getattr(pc, fn)(x)) if is_float(x.type) else pc.cast(x, pa.int64())

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
            x = as_type(x, pa.float64())
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
    # Spark's hashes (executor/expressions/hashes.py): md5, sha1, sha224 … sha512 as lowercase
    # hex and crc32 as a long, of a string's UTF-8 bytes or of binary (null → null); xxhash64
    # (long) and hash (Murmur3, int) of any number of atomic values, never null.
    **{name: (functools.partial(digest, name), ("string", "binary")) for name in DIGESTS},
    "crc32": (crc32, ("string", "binary")),
    "xxhash64": (xxhash64, None),
    "hash": (murmur3, None),
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
            if kinds is not None and kind(t) not in (*kinds, "null"):
                raise ExpressionError(f"operator {where!r}: {self.fn}() needs {' or '.join(kinds)}, got {describe(a, t)}")
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
        if kind(t) not in ("string", "null"):
            raise ExpressionError(f"operator {where!r}: substring() needs a string, got {describe(self.child, t)}")
        return pa.string() if pa.types.is_null(t) else t

    def evaluate(self, batch: pa.RecordBatch):
        x = self.child.evaluate(batch)
        if pa.types.is_null(x.type):
            return null_of(pa.string())
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
        if kind(t) not in ("string", "null"):
            raise ExpressionError(f"operator {where!r}: {self.fn}() needs a string, got {describe(self.child, t)}")
        return pa.bool_()

    def evaluate(self, batch: pa.RecordBatch):
        x = self.child.evaluate(batch)
        if self.pattern is None or pa.types.is_null(x.type):
            return null_of(pa.bool_())
        return getattr(pc, self._KERNELS[self.fn])(x, pattern=self.pattern)
