"""The papers' synthetic operator inside a PySpark transform: ``sparkqos.synthetic(df, ...)``.

The papers' experiments (thesis §3.2.2; Chain §6; Jiang §5) use a generic operator of declared
selectivity and per-row cost. :func:`synthetic` writes it as ordinary PySpark code: a ``where``
whose condition is the executor's keep/drop hash (:class:`~sparkqos.executor.operators.Synthetic`,
64-bit integer arithmetic Spark computes natively, so Spark's own run keeps the same rows) joined
to a marker literal carrying the operator's parameters. :mod:`sparkqos.compile.spark_plan` reads the
marker and runs the executor's Synthetic operator, which spends the declared CPU per row. So that
Spark's own run of the same transform (the FAIR-pools benchmark's) does the same work, a declared
cost adds a pandas UDF to the condition that spends it per row in Spark's Python workers; the
executor never calls it. Use it for experiments; real queries are real code.
"""

from __future__ import annotations

import json

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from sparkqos.compile.spark_plan import SYNTHETIC_MARKER
from sparkqos.errors import ArgumentError, PlanError, check_number
from sparkqos.executor.operators import Synthetic

__all__ = ["synthetic"]


def _keep(key: Column, op: Synthetic) -> Column:
    p = F.lit(op.MODULUS)
    seed = F.lit(op.seed % op.MODULUS)
    h = F.pmod(F.pmod(F.abs(key.cast("long")), p) * F.lit(op.A1) + seed, p)
    h = F.pmod(h * h + F.lit(op.A2), p)
    h = F.pmod(h * h + seed, p)
    return key.isNotNull() & (h < F.lit(op.threshold))


def _spend(cost_s: float):
    """A pandas UDF that spends ``cost_s`` seconds of CPU per row and keeps every row."""
    from pyspark.sql.functions import pandas_udf

    def spend(key):  # pandas Series in, Series out
        from sparkqos.executor.operators.synthetic import _burn

        _burn(cost_s * len(key))
        return key.notna() | key.isna()

    return pandas_udf(spend, "boolean")


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
    if not isinstance(key, str) or key not in df.columns:
        raise ArgumentError(
            f"synthetic needs key= naming an integer column of the DataFrame, got {key!r}; columns are {df.columns}",
            parameter="key",
            value=key,
        )
    op = Synthetic(selectivity, cost_s, seed, key)
    marker = SYNTHETIC_MARKER + json.dumps({"selectivity": selectivity, "cost_s": cost_s, "seed": seed, "key": key})
    keep = _keep(F.col(key), op)
    if cost_s > 0:
        keep = keep & _spend(cost_s)(F.col(key))
    return df.where(keep & F.lit(marker).isNotNull())
