"""Spark-native equivalents of the executor's expressions, operators and compiled queries.

The executor never imports Spark; this module reads the expressions' and operators' public
properties and builds the Spark ``Column`` / ``DataFrame`` computing the same thing, one
:func:`functools.singledispatch` implementation per class: :func:`expr_to_column`,
:func:`operator_to_spark` and, for a whole query, :func:`plan_to_spark`. On a finite input each
gives the rows the executor's operator gives (``sparkqos.executor.operators`` explains the
semantics); :func:`stamped_inputs` builds the input DataFrames stamped as the executor stamps them.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import reduce, singledispatch
from typing import Any

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from sparkqos.errors import ExpressionError, PlanError
from sparkqos.executor.expressions import (
    ARRIVAL,
    INTERNAL,
    SEQ,
    Agg,
    Alias,
    Arith,
    Col,
    Compare,
    IsIn,
    IsNull,
    Lit,
    Logical,
    Not,
)
from sparkqos.executor.operators import Project, Select, Synthetic, Union, WindowAggregate, WindowJoin
from sparkqos.executor.plan import CompiledPlan
from sparkqos.executor.queues import stamp, with_internal


def _col(name: str) -> Column:
    return F.col("`" + name.replace("`", "``") + "`")


# -- expressions -----------------------------------------------------------------------------------


@singledispatch
def expr_to_column(e: Any) -> Column:
    """The ``pyspark.sql.Column`` computing the expression ``e``."""
    raise ExpressionError(f"no Spark translation for expression {e!r}")


@expr_to_column.register
def _(e: Col) -> Column:
    return _col(e.column)


@expr_to_column.register
def _(e: Lit) -> Column:
    return F.lit(e.value)


@expr_to_column.register
def _(e: Alias) -> Column:
    return expr_to_column(e.child).alias(e.name)


@expr_to_column.register
def _(e: Compare) -> Column:
    a, b = expr_to_column(e.left), expr_to_column(e.right)
    return {"==": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[e.op]


@expr_to_column.register
def _(e: Arith) -> Column:
    a, b = expr_to_column(e.left), expr_to_column(e.right)
    if e.op == "/":
        return F.try_divide(a.cast("double"), b.cast("double"))
    return {"+": a + b, "-": a - b, "*": a * b}[e.op]


@expr_to_column.register
def _(e: Logical) -> Column:
    a, b = expr_to_column(e.left), expr_to_column(e.right)
    return (a & b) if e.op == "and" else (a | b)


@expr_to_column.register
def _(e: Not) -> Column:
    return ~expr_to_column(e.child)


@expr_to_column.register
def _(e: IsIn) -> Column:
    return expr_to_column(e.child).isin(list(e.values))


@expr_to_column.register
def _(e: IsNull) -> Column:
    return expr_to_column(e.child).isNull()


# -- operators ---------------------------------------------------------------------------------------


@singledispatch
def operator_to_spark(op: Any, *dfs: DataFrame) -> DataFrame:
    """The DataFrame of what the bound operator ``op`` outputs given its inputs ``dfs`` (rows with
    the executor's columns)."""
    raise PlanError(f"no Spark translation for operator {op!r}")


@operator_to_spark.register
def _(op: Select, df: DataFrame) -> DataFrame:
    return df.where(expr_to_column(op.predicate))


@operator_to_spark.register
def _(op: Project, df: DataFrame) -> DataFrame:
    cols = [expr_to_column(e).alias(e.name) for e in op.exprs]
    return df.select(*cols, _col(ARRIVAL), _col(SEQ))


@operator_to_spark.register
def _(op: Union, *dfs: DataFrame) -> DataFrame:
    names = op.schema.names
    return reduce(lambda a, b: a.unionByName(b), [d.select(*[_col(n) for n in names]) for d in dfs])


@operator_to_spark.register
def _(op: Synthetic, df: DataFrame) -> DataFrame:
    p = op.MODULUS
    key = _col(op.key)
    seed = F.lit(op.seed % p)
    h = F.pmod(F.pmod(F.abs(key), F.lit(p)) * F.lit(op.A1) + seed, F.lit(p))
    h = F.pmod(h * h + F.lit(op.A2), F.lit(p))
    h = F.pmod(h * h + seed, F.lit(p))
    return df.where(key.isNotNull() & (h < F.lit(op.threshold)))


def _agg_column(a: Agg) -> Column:
    if a.fn == "count":
        c = F.count(F.lit(1)) if a.column is None else F.count(_col(a.column))
    else:
        c = {"sum": F.sum, "avg": F.avg, "min": F.min, "max": F.max}[a.fn](_col(a.column))
    return c.alias(a.name)


@operator_to_spark.register
def _(op: WindowAggregate, df: DataFrame) -> DataFrame:
    ts = _col(op.time_col).cast("double")
    base = F.floor(ts / F.lit(op.slide))
    starts = F.array(*[(base - F.lit(j)) * F.lit(op.slide) for j in range(op.window_copies)])
    pairs = df.withColumn("__ts", ts).withColumn("__ws", F.explode(starts))
    pairs = pairs.where(_col("__ts") < _col("__ws") + F.lit(op.size))
    grouped = pairs.groupBy(_col("__ws"), *[_col(k) for k in op.keys]).agg(
        *[_agg_column(a) for a in op.aggs], F.max(_col(ARRIVAL)).alias(ARRIVAL), F.max(_col(SEQ)).alias(SEQ)
    )
    out = [
        _col("__ws").alias("window_start"),
        (_col("__ws") + F.lit(op.size)).alias("window_end"),
        *[_col(k) for k in op.keys],
        *[_col(a.name) for a in op.aggs],
        _col(ARRIVAL),
        _col(SEQ),
    ]
    return grouped.select(*out)


def _positions(left: DataFrame, right: DataFrame) -> list[DataFrame]:
    """For each row: its rank g in the arrival-order merge of both inputs (ties: left first) and
    its rank i within its own input; g − i rows of the other input came before it."""

    def slim(d: DataFrame, port: int) -> DataFrame:
        return d.select(F.lit(port).alias("__port"), _col(ARRIVAL), _col(SEQ))

    u = slim(left, 0).unionByName(slim(right, 1))
    merged = Window.orderBy(_col(ARRIVAL), _col("__port"), _col(SEQ))
    own = Window.partitionBy(_col("__port")).orderBy(_col(ARRIVAL), _col(SEQ))
    u = u.withColumn("__g", F.row_number().over(merged)).withColumn("__i", F.row_number().over(own))
    return [
        u.where(_col("__port") == port).select(
            _col(ARRIVAL).alias("__pa"),
            _col(SEQ).alias("__ps"),
            _col("__g"),
            _col("__i"),
            (_col("__g") - _col("__i")).alias("__before"),
        )
        for port in (0, 1)
    ]


@operator_to_spark.register
def _(op: WindowJoin, left: DataFrame, right: DataFrame) -> DataFrame:
    lcols, rcols = op.left_columns, op.right_columns
    if op.rows is not None:
        # Row identity on each side is (__arrival, __seq): unique for rows read off one stream.
        lpos, rpos = _positions(left, right)
        left = left.join(lpos, (left[ARRIVAL] == lpos["__pa"]) & (left[SEQ] == lpos["__ps"])).drop("__pa", "__ps")
        right = right.join(rpos, (right[ARRIVAL] == rpos["__pa"]) & (right[SEQ] == rpos["__ps"])).drop("__pa", "__ps")
    l, r = left.alias("l"), right.alias("r")

    def lc(n: str) -> Column:
        return F.col("l.`" + n + "`")

    def rc(n: str) -> Column:
        return F.col("r.`" + n + "`")

    cond = reduce(lambda a, b: a & b, [lc(k) == rc(k) for k in op.on])
    if op.rows is not None:
        n = F.lit(op.rows)
        cond = cond & (
            ((lc("__g") > rc("__g")) & (rc("__i") > lc("__before") - n))
            | ((rc("__g") > lc("__g")) & (lc("__i") > rc("__before") - n))
        )
    else:
        tl, tr = op.time_cols
        cond = cond & (F.abs(lc(tl).cast("double") - rc(tr).cast("double")) <= F.lit(op.seconds))
    out = [lc(c).alias(c) for c in lcols] + [rc(c).alias(c) for c in rcols]
    out += [F.greatest(lc(ARRIVAL), rc(ARRIVAL)).alias(ARRIVAL), lc(SEQ).alias(SEQ)]
    return l.join(r, cond, "inner").select(*out)


# -- whole queries ------------------------------------------------------------------------------------


def plan_to_spark(compiled: CompiledPlan, query: str, inputs: Mapping[str, DataFrame], internal: bool = False) -> DataFrame:
    """``query`` of ``compiled`` on Spark's engine: ``inputs`` maps each stream it reads to a
    DataFrame of its rows with the executor's columns (see :func:`stamped_inputs`); the result
    keeps those columns only when ``internal``."""
    root = compiled.root(query)

    def build(name: str) -> DataFrame:
        if name in compiled.sources:
            if name not in inputs:
                raise PlanError(f"query {query!r} reads stream {name!r}, which is not in inputs {sorted(inputs)}")
            return inputs[name]
        return operator_to_spark(compiled.operators[name], *[build(i) for i in compiled.plan[name].inputs])

    df = build(root)
    if internal:
        return df
    return df.select(*[n for n in df.columns if n not in INTERNAL])


def stamped_inputs(spark: SparkSession, feeds, schemas: dict[str, pa.Schema]) -> dict[str, DataFrame]:
    """One DataFrame per stream of ``feeds`` (``[(arrival, stream, batch), ...]``), stamped
    exactly as :meth:`sparkqos.executor.Executor.ingest` stamps them."""
    seq = {s: 0 for s in schemas}
    parts: dict[str, list[pa.RecordBatch]] = {s: [] for s in schemas}
    for arrival, stream, batch in feeds:
        batch = batch.select(schemas[stream].names)
        parts[stream].append(stamp(batch, float(arrival), seq[stream]))
        seq[stream] += batch.num_rows
    return {s: spark.createDataFrame(pa.Table.from_batches(b, schema=with_internal(schemas[s]))) for s, b in parts.items()}
