"""Spark-native equivalents of the executor's expressions and operators.

The only module of the executor side that imports pyspark (DESIGN.md's dependency rule); the
operators' ``to_spark`` methods import it inside the function. Each function gives, on a finite
input, the rows the executor's operator gives (sparkqos.executor.operators explains the semantics).
"""

from __future__ import annotations

from functools import reduce

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from sparkqos.executor.expressions import ARRIVAL, INTERNAL, SEQ, Agg, Alias, Arith, Col, Compare, Expr, IsIn, IsNull, Lit, Logical, Not


def _col(name: str) -> Column:
    return F.col("`" + name.replace("`", "``") + "`")


def expr_to_column(e: Expr) -> Column:
    """The ``pyspark.sql.Column`` computing ``e``."""
    if isinstance(e, Col):
        return _col(e.column)
    if isinstance(e, Lit):
        return F.lit(e.value)
    if isinstance(e, Alias):
        return expr_to_column(e.child).alias(e.name)
    if isinstance(e, Compare):
        a, b = expr_to_column(e.left), expr_to_column(e.right)
        return {"==": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[e.op]
    if isinstance(e, Arith):
        a, b = expr_to_column(e.left), expr_to_column(e.right)
        if e.op == "/":
            return F.try_divide(a.cast("double"), b.cast("double"))
        return {"+": a + b, "-": a - b, "*": a * b}[e.op]
    if isinstance(e, Logical):
        a, b = expr_to_column(e.left), expr_to_column(e.right)
        return (a & b) if e.op == "and" else (a | b)
    if isinstance(e, Not):
        return ~expr_to_column(e.child)
    if isinstance(e, IsIn):
        return expr_to_column(e.child).isin(list(e.values))
    if isinstance(e, IsNull):
        return expr_to_column(e.child).isNull()
    raise TypeError(f"no Spark translation for expression {e!r}")


def stamped_frame(spark: SparkSession, table: pa.Table | pa.RecordBatch) -> DataFrame:
    """A DataFrame of rows that already carry ``__arrival`` / ``__seq`` (``queues.stamp``)."""
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    return spark.createDataFrame(table)


def select_to_spark(op, df: DataFrame) -> DataFrame:
    return df.where(expr_to_column(op.predicate))


def project_to_spark(op, df: DataFrame) -> DataFrame:
    cols = [expr_to_column(e).alias(e.name) for e in op.exprs]
    return df.select(*cols, _col(ARRIVAL), _col(SEQ))


def union_to_spark(op, *dfs: DataFrame) -> DataFrame:
    names = op.schema.names
    return reduce(lambda a, b: a.unionByName(b), [d.select(*[_col(n) for n in names]) for d in dfs])


def synthetic_to_spark(op, df: DataFrame) -> DataFrame:
    p = op.MODULUS
    key = _col(op.key)
    seed = F.lit(op.seed % p)
    h = F.pmod(F.pmod(F.abs(key), F.lit(p)) * F.lit(op.A1) + seed, F.lit(p))
    h = F.pmod(h * h + F.lit(op.A2), F.lit(p))
    h = F.pmod(h * h + seed, F.lit(p))
    return df.where(key.isNotNull() & (h < F.lit(op._threshold)))


def _agg_column(a: Agg) -> Column:
    if a.fn == "count":
        c = F.count(F.lit(1)) if a.column is None else F.count(_col(a.column))
    else:
        c = {"sum": F.sum, "avg": F.avg, "min": F.min, "max": F.max}[a.fn](_col(a.column))
    return c.alias(a.name)


def window_agg_to_spark(op, df: DataFrame) -> DataFrame:
    ts = _col(op.time_col).cast("double")
    base = F.floor(ts / F.lit(op.slide))
    starts = F.array(*[(base - F.lit(j)) * F.lit(op.slide) for j in range(op._copies)])
    pairs = df.withColumn("__ts", ts).withColumn("__ws", F.explode(starts))
    pairs = pairs.where(_col("__ts") < _col("__ws") + F.lit(op.size))
    grouped = pairs.groupBy(_col("__ws"), *[_col(k) for k in op.keys]).agg(
        *[_agg_column(a) for a in op.aggs], F.max(_col(ARRIVAL)).alias(ARRIVAL), F.max(_col(SEQ)).alias(SEQ)
    )
    out = [
        _col("__ws").alias("window_start"), (_col("__ws") + F.lit(op.size)).alias("window_end"),
        *[_col(k) for k in op.keys], *[_col(a.name) for a in op.aggs], _col(ARRIVAL), _col(SEQ),
    ]
    return grouped.select(*out)


def _positions(left: DataFrame, right: DataFrame):
    """For each row: its rank g in the arrival-order merge of both inputs (ties: left first) and
    its rank i within its own input; g − i rows of the other input came before it."""
    slim = lambda d, port: d.select(F.lit(port).alias("__port"), _col(ARRIVAL), _col(SEQ))  # noqa: E731
    u = slim(left, 0).unionByName(slim(right, 1))
    merged = Window.orderBy(_col(ARRIVAL), _col("__port"), _col(SEQ))
    own = Window.partitionBy(_col("__port")).orderBy(_col(ARRIVAL), _col(SEQ))
    u = u.withColumn("__g", F.row_number().over(merged)).withColumn("__i", F.row_number().over(own))
    return [
        u.where(_col("__port") == port).select(
            _col(ARRIVAL).alias("__pa"), _col(SEQ).alias("__ps"), _col("__g"), _col("__i"),
            (_col("__g") - _col("__i")).alias("__before"),
        )
        for port in (0, 1)
    ]


def join_to_spark(op, left: DataFrame, right: DataFrame) -> DataFrame:
    lcols, rcols = op._left_cols, op._right_cols
    if op.rows is not None:
        # Row identity on each side is (__arrival, __seq): unique for rows read off one stream.
        lpos, rpos = _positions(left, right)
        left = left.join(lpos, (left[ARRIVAL] == lpos["__pa"]) & (left[SEQ] == lpos["__ps"])).drop("__pa", "__ps")
        right = right.join(rpos, (right[ARRIVAL] == rpos["__pa"]) & (right[SEQ] == rpos["__ps"])).drop("__pa", "__ps")
    l, r = left.alias("l"), right.alias("r")
    lc = lambda n: F.col("l.`" + n + "`")  # noqa: E731
    rc = lambda n: F.col("r.`" + n + "`")  # noqa: E731
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


def drop_internal(df: DataFrame) -> DataFrame:
    return df.select(*[_col(n) for n in df.columns if n not in INTERNAL])


def stamped_inputs(spark: SparkSession, feeds, schemas: dict[str, pa.Schema]) -> dict[str, DataFrame]:
    """One DataFrame per stream of ``feeds`` (``[(arrival, stream, batch), ...]``), stamped
    exactly as :meth:`sparkqos.executor.Executor.ingest` stamps them."""
    from sparkqos.executor.queues import stamp, with_internal

    seq = {s: 0 for s in schemas}
    parts: dict[str, list[pa.RecordBatch]] = {s: [] for s in schemas}
    for arrival, stream, batch in feeds:
        batch = batch.select(schemas[stream].names)
        parts[stream].append(stamp(batch, float(arrival), seq[stream]))
        seq[stream] += batch.num_rows
    return {
        s: spark.createDataFrame(pa.Table.from_batches(b, schema=with_internal(schemas[s])))
        for s, b in parts.items()
    }
