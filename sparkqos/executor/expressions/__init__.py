"""A small typed expression language for the executor's operators, one module per concern:

* :mod:`~sparkqos.executor.expressions.core` — the tree (:class:`Expr`, columns, literals,
  aliases), type kinds, the executor's internal columns, and the builder DSL: the nodes Python's
  operators build (``col("temp") > 50``, ``&``, ``|``, ``~``, ``+ - * /``, ``isin``, ``is_null``);
* :mod:`~sparkqos.executor.expressions.sql` — Spark SQL semantics of the nodes compiled from
  Spark's plans (NaN ordering, wrapping integers, null on division by zero, ``CASE WHEN``);
* :mod:`~sparkqos.executor.expressions.casts` — Spark's non-ANSI ``cast``;
* :mod:`~sparkqos.executor.expressions.functions` — the function table and its calls;
* :mod:`~sparkqos.executor.expressions.hashes` — Spark's ``md5``, ``sha1``, ``sha2``, ``crc32``,
  ``xxhash64`` and ``hash`` (Murmur3), bit for bit (functions of the table);
* :mod:`~sparkqos.executor.expressions.aggregates` — the aggregates of window aggregations;
* :mod:`~sparkqos.executor.expressions.nested` — structs and arrays (struct fields, ``F.struct``,
  ``F.array``, ``split``);
* :mod:`~sparkqos.executor.expressions.numeric` — ``round`` / ``bround`` with a scale, decimals.

Every expression is checked against a schema when a plan is built (:meth:`Expr.check`), evaluated
on Arrow batches with ``pyarrow.compute`` (:meth:`Expr.evaluate`) and translated to a Spark
``Column`` by :mod:`sparkqos.spark.translate`; never ``eval`` of user strings.
"""

from sparkqos.executor.expressions.aggregates import AGG_FUNCTIONS, Agg, avg, count, max_, min_, sum_
from sparkqos.executor.expressions.casts import Cast, cast_supported, spark_cast
from sparkqos.executor.expressions.core import (
    ARRIVAL,
    INTERNAL,
    SEQ,
    Alias,
    Arith,
    Col,
    Compare,
    Expr,
    IsIn,
    IsNull,
    Lit,
    Logical,
    Not,
    as_expr,
    col,
    describe,
    evaluate_array,
    kind,
    lit,
)
from sparkqos.executor.expressions.functions import FUNCTIONS, Call, StringMatch, Substring, substring
from sparkqos.executor.expressions.sql import CaseWhen, InList, Negate, SqlArith, SqlCompare, spark_compare

__all__ = [
    "AGG_FUNCTIONS",
    "ARRIVAL",
    "FUNCTIONS",
    "INTERNAL",
    "SEQ",
    "Agg",
    "Alias",
    "Arith",
    "Call",
    "CaseWhen",
    "Cast",
    "Col",
    "Compare",
    "Expr",
    "InList",
    "IsIn",
    "IsNull",
    "Lit",
    "Logical",
    "Negate",
    "Not",
    "SqlArith",
    "SqlCompare",
    "StringMatch",
    "Substring",
    "as_expr",
    "avg",
    "cast_supported",
    "col",
    "count",
    "describe",
    "evaluate_array",
    "kind",
    "lit",
    "max_",
    "min_",
    "spark_cast",
    "spark_compare",
    "substring",
    "sum_",
]
