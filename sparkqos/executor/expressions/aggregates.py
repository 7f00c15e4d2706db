"""Aggregates of a window aggregation: :class:`Agg` and its builders (``count()``, ``sum_("v")``...)."""

from __future__ import annotations

import pyarrow as pa

from sparkqos.errors import ExpressionError
from sparkqos.executor.expressions.core import Col, kind

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
        k = kind(t)
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
