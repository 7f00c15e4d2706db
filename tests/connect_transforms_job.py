"""PySpark transforms compiled under Spark Connect (``remote("local[2]")``), checked against Spark.

Run for tests/test_connect_transforms.py by tests/connect_jobs.py, in a process of its own (the
suite's classic session and a Connect session never share a process); ``python
tests/connect_transforms_job.py OUT`` runs it alone. It compiles the transforms of
:func:`transforms` from Connect DataFrames, runs them with ``sparkqos.run`` on a small static
DataFrame (nulls, NaN, ±inf, -0.0, zero divisors) and with ``sparkqos.stream`` over a
``sparkqos.replay`` source of the same rows, and writes the results beside Spark's own (Connect)
results of the same transforms as Parquet files under ``OUT``;
:func:`run` returns a summary (the unsupported transforms' errors, the run times), which ``main``
prints as JSON on its last line.
"""

from __future__ import annotations

import json
import math
import re
import sys
import time
from decimal import Decimal
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

SCHEMA = pa.schema(
    [
        ("i", pa.int32()),
        ("l", pa.int64()),
        ("d", pa.float64()),
        ("s", pa.string()),
        ("f", pa.bool_()),
        ("ts", pa.timestamp("us", tz="UTC")),
    ]
)
ROWS = [
    (1, 10, 2.5, "a", True),
    (0, 0, 0.0, "b", False),
    (-3, -(2**63), -0.0, "", None),
    (None, 7, math.nan, None, True),
    (2**31 - 1, 2**63 - 1, math.inf, "ab", False),
    (5, None, -math.inf, "b", None),
    (2, 3, None, "a", True),
    (-1, -1, 1e308, "c", False),
]


def table() -> pa.Table:
    cols = list(zip(*ROWS, strict=True))
    ts = [1_700_000_000_000_000 + k * 100_000 for k in range(len(ROWS))]
    return pa.table(
        [*(pa.array(list(c), f.type) for c, f in zip(cols, list(SCHEMA)[:-1], strict=True)), pa.array(ts, SCHEMA[-1].type)],
        schema=SCHEMA,
    )


def transforms():
    from pyspark.sql import functions as F

    import sparkqos

    return {
        # three-valued logic: null comparisons drop the row in a filter, OR/AND with nulls
        "tvl": lambda df: df.where((F.col("i") > 0) | (F.col("f") & (F.col("d") < 3))).select("i", "d", "f"),
        "notnull": lambda df: df.where(~(F.col("s") == "a")).select("s", "l"),
        "arith": lambda df: df.select(
            "i",
            (F.col("i") + 1).alias("inc"),
            (F.col("l") * 2 - F.col("i")).alias("mix"),
            (F.col("d") / F.col("i")).alias("ratio"),
            (F.col("i") / 0).alias("by_zero"),
            (F.col("l") % F.col("i")).alias("rem"),
            (-F.col("d")).alias("neg"),
        ),
        "with": lambda df: df.withColumn("half", F.col("d") / 2).withColumn("i", F.col("i") * 10).where(F.col("half") >= 0),
        "when": lambda df: df.select(
            F.when(F.col("d") > 1, F.col("i")).when(F.col("s") == "b", 2.5).otherwise(F.lit(None)).alias("w"),
            F.when(F.col("f"), "yes").alias("y"),
        ),
        "isin": lambda df: df.where(F.col("i").isin(1, 2, 5) | F.col("s").isin("c", None)).select(
            "i", "s", F.col("d").isin(0.0, math.nan).alias("dz")
        ),
        "cast": lambda df: df.select(
            F.col("d").cast("int").alias("di"),
            F.col("i").cast("string").alias("is_"),
            F.col("l").cast("double").alias("ld"),
            "ts",
        ),
        "union": lambda df: df.union(df).where(F.col("l") > 0),
        "rename": lambda df: df.withColumnRenamed("i", "j").drop("ts", "f").where(F.col("j") >= 0),
        "identity": lambda df: df,
        "refs": lambda df: df.where(df["i"] < 3).select(df["i"], F.col("D").alias("dd"), (df.l + 1).alias("l1")),
        "string": lambda df: df.where(F.col("s").startswith("a") | F.col("s").contains("c")).select(
            F.upper("s").alias("u"), F.isnan("d")
        ),
        # Spark's hashes, bit for bit: of strings (cast to binary by the analyzer) and of many columns
        "hashes": lambda df: df.where(F.xxhash64("s") != 0).select(
            "i",
            F.sha2("s", 256).alias("h256"),
            F.sha2(F.col("i").cast("string"), 0).alias("h0"),
            F.md5("s").alias("m"),
            F.sha1("s").alias("s1"),
            F.crc32("s").alias("c"),
            F.xxhash64("i", "l", "d", "s", "f", "ts").alias("xx"),
            F.hash("s", "d").alias("mm"),
        ),
        "synthetic": lambda df: sparkqos.synthetic(df.where(F.col("l") != 0), 0.5, seed=3, key="l").select("l", "s"),
        # struct fields, rounding and a decimal literal, natively
        "nested": lambda df: (
            df.select(
                F.struct("i", F.col("d").alias("x")).alias("s1"),
                F.round("d", 2).alias("r2"),
                F.bround("d", -1).alias("b1"),
                F.round("i", -1).alias("ri"),
                (F.lit(Decimal("1.609")) * F.col("d")).alias("km"),
            )
            .where(F.col("s1.i").isNotNull() & (F.col("km") > F.lit(Decimal("-1.5"))))
            .select(F.col("s1.x"), F.col("s1").getField("i").alias("ii"), "s1", "r2", "b1", "ri", "km")
        ),
        **stateful(),
    }


#: The update-mode queries of :func:`stateful` (a stream's sink holds a changelog): their keys.
UPDATE_KEYS = {
    **dict.fromkeys(("keyed", "keyed_agg", "udf_above", "sql_above"), ["s"]),
    **{"total": [], "select_agg": [], "explode_above": ["f", "pos"], "sql_agg": ["f"]},
    **{"stats_agg": ["s"], "spark_agg": ["s"], "udaf": ["f"]},
}


def stateful():
    """Aggregations with and without a time window (tumbling, sliding, session), lag,
    dropDuplicates, explode and split, UDFs (a pandas UDF too) and SQL strings, natively under
    Spark Connect as under classic."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import DoubleType, StringType
    from pyspark.sql.window import Window

    # Types as objects: the test module lists these transforms before any session exists.
    @F.pandas_udf(DoubleType())
    def half(x: pd.Series) -> pd.Series:
        return x / 2

    @F.udf(StringType())
    def shout(s):
        return None if s is None else s.upper() + "!"

    @F.pandas_udf(DoubleType())
    def mean_of(x: pd.Series) -> float:
        return float(x.mean())

    def wm(df):
        return df.withWatermark("ts", "1 second")

    return {
        "keyed": lambda df: df.groupBy("s").count(),
        "keyed_agg": lambda df: df.groupBy("s").agg(
            F.avg("d"), F.max("i"), F.sum(F.col("i") + 1).alias("x"), F.first("d", True), F.last("l"), F.mean("i")
        ),
        "total": lambda df: df.agg(F.sum("l").alias("sl"), F.count("*").alias("n"), F.min("d")),
        "select_agg": lambda df: df.select(F.max("i"), F.min("s").alias("first_s")),
        "windowed": lambda df: (
            wm(df)
            .groupBy(F.window("ts", "200 milliseconds"), "f")
            .agg(F.count("*").alias("n"), F.max("d").alias("mx"))
            .select(F.col("window.start").alias("start"), F.col("window.end"), "f", "n", "mx")
        ),
        "sliding": lambda df: (
            wm(df)
            .groupBy(F.window("ts", "400 milliseconds", "200 milliseconds"))
            .agg(F.sum("l").alias("sl"))
            .select("window.start", "window.end", "sl")
        ),
        "session": lambda df: (
            wm(df)
            .groupBy(F.session_window("ts", "150 milliseconds"), "f")
            .agg(F.count("*").alias("n"), F.sum("i").alias("si"))
            .select("session_window.start", "session_window.end", "f", "n", "si")
        ),
        "lag": lambda df: df.withColumn("prev_d", F.lag("d").over(Window.partitionBy("f").orderBy("ts"))),
        "lag2": lambda df: df.withColumn("p2", F.lag("i", 2, 0).over(Window.partitionBy("s").orderBy("ts"))).select(
            "i", "ts", "p2"
        ),
        "lag_expr": lambda df: df.withColumn("p", F.lag(F.col("i") + 1).over(Window.partitionBy("f").orderBy("ts"))),
        "dedup": lambda df: wm(df).dropDuplicates(["f", "ts"]).select("f", "ts", "i"),
        "distinct": lambda df: wm(df).select("f", "ts").distinct(),
        "explode": lambda df: df.select("i", F.explode(F.split("s", "b")).alias("w")).where(F.col("w") != ""),
        "explode_outer": lambda df: df.withColumn("p", F.explode_outer(F.array("i", "l"))).select("p", "s"),
        "explode_above": lambda df: (
            df.groupBy("f")
            .agg(F.min("i").alias("mn"), F.max("i").alias("mx"))
            .select("f", F.posexplode(F.array("mn", "mx")).alias("pos", "v"))
        ),
        "udfs": lambda df: df.select("i", half("d").alias("h"), shout("s").alias("t")).where(F.col("i") != 0),
        "udf_above": lambda df: (
            df.groupBy("s").agg(F.max("d").alias("m")).select("s", half("m").alias("h"), shout("s").alias("t"))
        ),
        # SQL strings, read on the client where the server confirms the reading
        "sql_native": lambda df: df.where("i > 0 AND s IS NOT NULL OR NOT f").selectExpr(
            "d * 1.609 AS km", "i + 1 AS j", "CASE WHEN i > 1 THEN 'big' WHEN i IS NULL THEN NULL ELSE 'small' END AS c", "s"
        ),
        "between": lambda df: df.where("i BETWEEN 1 AND 3 OR d NOT BETWEEN -1 AND 2.5").select("i", "d"),
        "sql_above": lambda df: df.groupBy("s").count().where("count > 1"),
        "sql_agg": lambda df: df.groupBy("f").agg(F.expr("max(i)").alias("m"), F.expr("count(*)").alias("n")),
        # natively: statistics (over a long's extremes, cast to double as Spark's analyzer does),
        # conditions, orderings and collections
        "stats_agg": lambda df: df.groupBy("s").agg(
            F.stddev("d").alias("sd"),
            F.var_pop("d"),
            F.kurtosis("l").alias("k"),
            F.count_if(F.col("i") > 0).alias("ci"),
            F.bool_and("f").alias("ba"),
            F.max_by("i", "d").alias("mb"),
            F.collect_list("i").alias("cl"),
        ),
        # by Spark over each group's rows: sketches, exact percentiles and a pandas UDAF
        "spark_agg": lambda df: df.groupBy("s").agg(
            F.approx_count_distinct("i").alias("a"),
            F.percentile_approx("d", 0.5).alias("p"),
            F.median(df["d"]).alias("med"),
            F.sum("l").alias("sl"),
        ),
        "udaf": lambda df: df.groupBy("f").agg(mean_of("d").alias("m")),
        "windowed_spark": lambda df: (
            wm(df)
            .groupBy(F.window("ts", "400 milliseconds"))
            .agg(F.approx_count_distinct("s").alias("a"), F.count("*").alias("n"))
            .select("window.start", "a", "n")
        ),
    }


#: Transforms whose row-wise part Spark evaluates: SQL strings, UDFs, JSON and regex.
SPARK_PARTS = ("sql_where", "pandas_udf", "py_udf", "json_regex", "log", "lag_regex", "map_in_pandas", "map_in_arrow")


def upper_s(frames):
    """``mapInPandas``: the rows with a positive ``i``, ``s`` upper-cased."""
    for pdf in frames:
        pdf = pdf[pdf["i"] > 0]
        yield pdf.assign(s=pdf["s"].str.upper())[["i", "s"]]


def doubled(batches):
    """``mapInArrow``: ``d`` doubled."""
    import pyarrow.compute as pc

    for b in batches:
        yield pa.record_batch({"d2": pc.multiply(b.column("d"), 2.0)})


def spark_parts():
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    # UDFs over numbers and strings run natively (stateful()); over a timestamp, Spark runs them.
    @F.pandas_udf("double")
    def seconds(t: pd.Series) -> pd.Series:
        return t.dt.second + t.dt.microsecond / 1e6

    @F.udf("string")
    def stamp(t):
        return None if t is None else t.isoformat()

    parts = {
        # SQL strings sparkqos does not read (||): Spark evaluates them
        "sql_where": lambda df: df.where("i > 0 AND s IS NOT NULL").selectExpr("i", "upper(s) || '!' AS u", "ts"),
        "pandas_udf": lambda df: df.select("i", seconds("ts").alias("h")).where(F.col("i") != 0),
        "py_udf": lambda df: df.select(stamp("ts").alias("t"), "l"),
        "json_regex": lambda df: df.select(F.to_json(F.struct("i", "s")).alias("j"), "l").select(
            F.get_json_object("j", "$.s").alias("s"), F.regexp_replace("j", "[0-9]", "#").alias("r"), "l"
        ),
        "log": lambda df: df.select(F.log("d").alias("ln")),
        # below a lag: the select computing its argument (the analyzer's _w0)
        "lag_regex": lambda df: df.withColumn(
            "p", F.lag(F.regexp_replace("s", "a", "#")).over(Window.partitionBy("f").orderBy("ts"))
        ),
        # a Python function over each partition's rows: Spark runs it in the micro-batch
        "map_in_pandas": lambda df: df.mapInPandas(upper_s, "i long, s string").where(F.col("s") != "B"),
        "map_in_arrow": lambda df: df.mapInArrow(doubled, "d2 double"),
    }
    assert tuple(parts) == SPARK_PARTS
    return parts


def unsupported():
    from pyspark.sql import functions as F
    from pyspark.sql.streaming import StatefulProcessor
    from pyspark.sql.window import Window

    class Passing(StatefulProcessor):
        def init(self, handle):
            pass

        def handleInputRows(self, key, rows, timerValues):  # noqa: N802,N803 - PySpark's names
            yield from rows

        def close(self):
            pass

    return {
        "count": lambda df: df.groupBy("s").agg(F.countDistinct("i")),
        "mixed": lambda df: df.where(F.col("s") == 1),  # Spark would cast the string: not reproduced
        "log": lambda df: df.select(F.log("d")),
        "sql_string": lambda df: df.where("s || 'x' = 'ax'"),  # a SQL string sparkqos does not read
        "total": lambda df: df.select(F.percentile_approx("d", 0.5)),  # native placement: no native version
        "sql_above": lambda df: df.groupBy("s").count().where("count || '' = '2'"),  # no Spark part above an aggregate
        "sql_agg_unread": lambda df: df.selectExpr("max(i) FILTER (WHERE i > 0) AS m"),
        "window": lambda df: df.select("i", F.row_number().over(Window.orderBy("i")).alias("n")),
        "processor": lambda df: df.groupBy("s").transformWithStateInPandas(Passing(), "s string", "append", "None"),
    }


def describe(compiled) -> dict[str, str]:
    """Each operator of a compiled plan with its inputs and expressions: equal for classic and
    Connect compilations of the same transforms (up to no-op casts of strings to string)."""
    out = {}
    for name, op in compiled.operators.items():
        inputs = next(o.inputs for o in compiled.plan.operators if o.name == name)
        body = op.predicate if hasattr(op, "predicate") else getattr(op, "exprs", None)
        # Classic's analyzer wraps the string operands of IN in a cast to string (a no-op).
        text = re.sub(r"(col\('s'\)|lit\('[^']*'\))\.cast\(string\)", r"\1", repr(body))
        out[name] = f"{type(op).__name__}{list(inputs)}: {text}"
    return out


def run(spark, out: str) -> dict:
    """The job on ``spark``, a Connect session (its ANSI mode switched off): the summary."""
    import sparkqos
    from sparkqos import sources
    from sparkqos.errors import UnsupportedTransform
    from sparkqos.spark.transforms import compile_transforms

    spark.conf.set("spark.sql.ansi.enabled", "false")  # sparkqos gives Spark's non-ANSI results
    spark.conf.set("spark.sql.shuffle.partitions", "2")  # Spark's own aggregations of a few rows: not 200 tasks
    started = time.monotonic()
    base = Path(out)
    data = table()
    df = spark.createDataFrame(data)
    queries = transforms()
    parts = spark_parts()
    got = sparkqos.run(df, {**queries, **parts}, strategy="chain", batch_rows=3)
    compiled = compile_transforms(df, queries)
    (base / "compiled.json").write_text(json.dumps(describe(compiled)))
    for name, transform in {**queries, **parts}.items():
        pq.write_table(got[name], base / f"run_{name}.parquet")
        pq.write_table(transform(df).toArrow(), base / f"spark_{name}.parquet")
    ran = time.monotonic()
    errors = {}
    for name, transform in unsupported().items():
        try:
            sparkqos.run(df, {name: transform}, placement="native")  # what sparkqos's own operators refuse
            errors[name] = None
        except UnsupportedTransform as e:
            errors[name] = str(e)
    trace = base / "trace.parquet"
    pq.write_table(data, trace)
    sources.register(spark)
    stream = spark.readStream.format("sparkqos.replay").option("path", str(trace)).option("speed", "max").load()
    handle = sparkqos.stream(
        stream,
        {**queries, **parts},
        strategy="fifo",
        trigger=sparkqos.Trigger(availableNow=True),
        checkpoint=base / "ckpt",
        output=base / "out",
    )
    handle.start().awaitTermination()
    handle.finish()
    spark_streams = sorted(handle.loop.compiled.spark_parts)
    done = time.monotonic()
    return {"errors": errors, "spark_streams": spark_streams, "run_s": ran - started, "stream_s": done - ran}


def main(out: str) -> None:
    t0 = time.monotonic()
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.remote("local[2]").getOrCreate()
    assert type(spark).__module__.startswith("pyspark.sql.connect"), type(spark)
    started = time.monotonic()
    print(json.dumps({**run(spark, out), "start_s": started - t0}))
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1])
