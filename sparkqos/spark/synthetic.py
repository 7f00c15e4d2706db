"""The papers' synthetic operator inside a PySpark transform: ``sparkqos.synthetic(df, ...)``.

The papers' experiments (thesis §3.2.2; Chain §6; Jiang §5) use a generic operator of declared
selectivity and per-row cost. :func:`synthetic` writes it as ordinary PySpark code: a ``where``
whose condition is the executor's keep/drop hash (:class:`~sparkqos.executor.operators.Synthetic`,
64-bit integer arithmetic Spark computes natively, so Spark's own run keeps the same rows) joined
to a marker literal carrying the operator's parameters. :mod:`sparkqos.compile.spark_plan` reads the
marker and runs the executor's Synthetic operator, which spends the declared CPU per row. So that
Spark's own run of the same transform (the FAIR-pools benchmark's) does the same work, a declared
cost adds a pandas UDF to the condition that spends it per row in Spark's Python workers; the
executor never calls it. The condition is one SQL expression (the UDF registered once per session
as :data:`SPEND_FUNCTION`), so each operator costs one expression and one ``where`` to build.
Use it for experiments; real queries are real code.
"""

from __future__ import annotations

import functools
import json

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType

from sparkqos.compile.spark_plan import SYNTHETIC_MARKER
from sparkqos.errors import ArgumentError, PlanError, check_number
from sparkqos.executor.operators import Synthetic

__all__ = ["synthetic"]


def _keep_sql(key: str, op: Synthetic, is_long: bool = False) -> str:
    """The executor's keep/drop hash over column ``key`` as SQL text. Its integer literals are
    bigints (``L``), as the hash's arithmetic is: with int literals Spark's analysis wraps each in
    a cast, which makes every where() and the plan read from it larger. ``is_long``: the column is
    a bigint already (no cast)."""
    p, seed = op.MODULUS, op.seed % op.MODULUS
    name = _quoted(key)
    x = name if is_long else f"CAST({name} AS BIGINT)"
    h = f"pmod(pmod(abs({x}), {p}L) * {op.A1}L + {seed}L, {p}L)"
    h = f"pmod({h} * {h} + {op.A2}L, {p}L)"
    h = f"pmod({h} * {h} + {seed}L, {p}L)"
    return f"{name} IS NOT NULL AND {h} < {op.threshold}L"


def _quoted(key: str) -> str:
    return "`" + key.replace("`", "``") + "`"


def _burn_rows(key, cost_s):  # pandas Series in (the key, the cost per row), Series out
    from sparkqos.executor.operators.synthetic import _burn

    if len(key):
        _burn(float(cost_s.iloc[0]) * len(key))
    return key.notna() | key.isna()


#: The SQL name of the pandas UDF spending a declared CPU time per row (:func:`_spend`).
SPEND_FUNCTION = "sparkqos_synthetic_spend"


@functools.lru_cache(maxsize=4)
def _spend(session: SparkSession) -> str:
    """The SQL name of a pandas UDF spending its second argument's seconds of CPU per row and
    keeping every row, registered once per session for every operator: a condition naming it is
    one SQL expression, one call into the JVM (built from Column objects, the UDF call and the
    ``&`` joining it took about 60 round trips per operator)."""
    from pyspark.sql.functions import pandas_udf

    session.udf.register(SPEND_FUNCTION, pandas_udf(_burn_rows, "boolean"))
    return SPEND_FUNCTION


def synthetic(df: DataFrame, selectivity: float, cost_s: float = 0.0, seed: int = 0, key: str = "") -> DataFrame:
    """``df`` through the papers' synthetic operator: keeps a ``selectivity`` share of rows by a
    hash of the integer column ``key`` and ``seed``, spending ``cost_s`` seconds of CPU per row
    when sparkqos runs it.

    Example (inside a transform)::

        def anomaly(df):
            return sparkqos.synthetic(df.where(F.col("temperature") > 29), 0.5, cost_s=150e-6, seed=11, key="sensor_id")
    """
    check_number("selectivity", selectivity, low=0, high=1, error=PlanError, where="synthetic ")
    check_number("cost_s", cost_s, low=0, error=PlanError, where="synthetic ")
    check_number("seed", seed, integer=True, low=0, error=PlanError, where="synthetic ")
    fields = {f.name: f.dataType for f in df.schema.fields}
    if not isinstance(key, str) or key not in fields:
        raise ArgumentError(
            f"synthetic needs key= naming an integer column of the DataFrame, got {key!r}; columns are {list(fields)}",
            parameter="key",
            value=key,
        )
    op = Synthetic(selectivity, cost_s, seed, key)
    marker = SYNTHETIC_MARKER + json.dumps({"selectivity": selectivity, "cost_s": cost_s, "seed": seed, "key": key})
    keep = _keep_sql(key, op, isinstance(fields[key], LongType))
    if cost_s > 0:  # a double literal (D), as F.lit(float) gives
        keep = f"({keep}) AND {_spend(df.sparkSession)}({_quoted(key)}, {float(cost_s)!r}D)"
    if "'" in marker or "\\" in marker:  # a key SQL text would have to escape: the marker as a Column
        return df.where(F.expr(keep) & F.lit(marker).isNotNull())
    # parenthesised: Spark parses a chain of ANDs into a balanced tree, and the compiler finds the
    # marker as the right side of the top And
    return df.where(F.expr(f"({keep}) AND '{marker}' IS NOT NULL"))
