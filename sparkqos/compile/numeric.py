"""Rounding and decimals in a transform's plan → :mod:`sparkqos.executor.expressions.numeric`.

``F.round(x, 2)`` / ``F.bround(x, -1)`` reach the analyzer as ``Round`` / ``BRound`` with a
literal scale, on integers and floats. Decimal literals (``selectExpr("distance * 1.609")``,
``F.lit(Decimal("1.609"))``) are ``decimal(p, s)`` literals; Spark's analyzer has already made
the operand types agree (a decimal beside a double is cast to double, beside an integer the
integer is cast to a decimal), so what remains is each cast and each operation on decimals:

* runs natively: decimal literals and columns, casts of a decimal to double or float (folded
  once for a literal), of integers to a decimal wide enough, of a decimal to a wider one;
  ``+ - *`` of two decimals (result precision at most 38); comparisons, ``isnull``,
  ``coalesce`` and the like on decimals of one type;
* refused, naming it: decimal division, ``%`` and ``div``; any operation whose result
  precision would pass 38 (Spark then reduces the scale); casts that may overflow or round
  (a double to a decimal, a decimal to an integer or a narrower decimal); ``round`` of a decimal.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from sparkqos.compile.nodes import Node, Rel, spark_type
from sparkqos.executor.expressions import Expr, Lit, SqlArith
from sparkqos.executor.expressions.numeric import (
    DecimalArith,
    DecimalCast,
    Round,
    decimal_cast,
    decimal_cast_supported,
    decimal_result,
)

_ARITHMETIC = {"Add": "+", "Subtract": "-", "Multiply": "*", "Divide": "/", "Remainder": "%", "IntegralDivide": "div"}


def round_(qc: Any, node: Node, rel: Rel) -> Round:
    fn = "bround" if node.cls == "BRound" else "round"
    child, scale = node.children
    if scale.cls != "Literal":
        raise qc.unsupported(f"Spark function {fn!r} with a scale that is not a literal")
    x = qc.expr(child, rel)
    t = x.check(rel.schema, qc.query)
    if pa.types.is_decimal(t):
        raise qc.unsupported(f"Spark function {fn!r} of a decimal", "cast it to double first")
    value = scale.fields.get("value")
    legacy = (qc.context.get("java_version") or 21) < 19  # JDK 17's Double.toString (executor/expressions/numeric.py)
    return Round(x, None if value is None else int(value), half_even=fn == "bround", legacy=legacy)


def arithmetic(qc: Any, node: Node, rel: Rel) -> Expr:
    op = _ARITHMETIC[node.cls]
    a, b = (qc.expr(k, rel) for k in node.children)
    at, bt = a.check(rel.schema, qc.query), b.check(rel.schema, qc.query)
    if not (pa.types.is_decimal(at) or pa.types.is_decimal(bt)):
        return SqlArith(op, a, b)
    if decimal_result(op, at, bt) is None:
        detail = (
            "sparkqos computes + - * on decimals; cast to double for the rest"
            if op not in "+-*"
            else "Spark would reduce the scale of a result above precision 38"
        )
        raise qc.unsupported(f"decimal arithmetic {op!r} of {at} and {bt}", detail)
    return DecimalArith(op, a, b)


def cast(qc: Any, node: Node, rel: Rel) -> Expr:
    """A cast from or to a decimal; any other cast is the compiler's own."""
    to = spark_type(node.fields["dataType"])
    child = qc.expr(node.children[0], rel)
    src = child.check(rel.schema, qc.query)
    if not (pa.types.is_decimal(src) or (to is not None and pa.types.is_decimal(to))):
        return qc.cast(node, rel, child)
    if to is None or not decimal_cast_supported(src, to):
        raise qc.unsupported(
            f"Spark function 'cast' from {src} to {node.fields['dataType']}",
            "sparkqos casts decimals to floats, and integers or decimals to a decimal wide enough",
        )
    if isinstance(child, Lit):  # the analyzer's casts of literals: once here, not on every batch
        return Lit(decimal_cast(pa.scalar(child.value, src), to).as_py(), to)
    return DecimalCast(child, to)
