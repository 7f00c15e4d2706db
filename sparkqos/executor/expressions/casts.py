"""Spark's non-ANSI ``cast`` between the types whose result sparkqos computes exactly."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkqos.errors import ExpressionError
from sparkqos.executor.expressions.core import Expr, describe, is_float, kind


def float_to_integer(x: pa.Array | pa.Scalar, to: pa.DataType) -> pa.Array | pa.Scalar:
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
    strings, strings to binary (their UTF-8 bytes), anything to itself and null to anything.
    (Floats to strings use the JVM's number formatting; strings to numbers Spark's own parser:
    not matched.)"""
    sk, tk = kind(src), kind(to)
    if src == to or sk == "null":
        return True
    if tk in ("numeric", "boolean") and sk in ("numeric", "boolean"):
        return not (pa.types.is_decimal(src) or pa.types.is_decimal(to))
    if pa.types.is_timestamp(src) and tk in ("numeric", "boolean"):
        return not pa.types.is_decimal(to)
    if tk == "string":
        return pa.types.is_integer(src) or pa.types.is_boolean(src)
    if pa.types.is_binary(to):
        return sk == "string"
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
    if pa.types.is_integer(to) and is_float(src):
        return float_to_integer(x, to)
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
            raise ExpressionError(f"operator {where!r}: cannot cast {describe(self.child, src)} to {self.to}")
        return self.to

    def evaluate(self, batch: pa.RecordBatch):
        return spark_cast(self.child.evaluate(batch), self.to)
