"""The bar for every construct, under every registered strategy: ``sparkqos.run`` gives the
rows Spark's own engine gives for one transform of each kind — filters and projections, a union,
an event-time window aggregate, a static join, a per-key lag, a deduplication and a pandas UDF —
on rows with nulls, NaN, ±inf, -0.0, empty strings and extreme integers, with the queries in three
classes so class-aware strategies (cqc, class shares) interleave them. The per-construct files
(tests/test_transforms*.py) cover each construct in depth under four strategies; this one makes
sure no strategy's order of work changes an answer.
"""

from __future__ import annotations

import datetime as dt
import math

import pandas as pd
import pyarrow as pa
import pytest
from pyspark.sql import Window
from pyspark.sql import functions as F

import sparkqos
from sparkqos import schedulers
from sparkqos.testing import assert_same_rows

UTC = dt.UTC
T0 = dt.datetime(2024, 1, 1, tzinfo=UTC)
SCHEMA = pa.schema(
    [("k", pa.string()), ("i", pa.int32()), ("l", pa.int64()), ("d", pa.float64()), ("ts", pa.timestamp("us", tz="UTC"))]
)


def table() -> pa.Table:
    keys = ["a", "b", None, "", "a", "b", "c", None]
    ints = [1, -1, None, 2**31 - 1, -(2**31), 0, 7, 3]
    longs = [2**63 - 1, -(2**63), 0, None, 5, 6, -7, 8]
    doubles = [0.5, math.nan, math.inf, -math.inf, -0.0, None, 1e308, 2.5]
    rows = []
    for n in range(96):  # arriving in batches of 16 (batch_rows below), so a backlog forms
        j = n % 8
        rows.append((keys[j], ints[j], longs[j], doubles[(j + n // 8) % 8], T0 + dt.timedelta(seconds=n)))
    cols = list(zip(*rows, strict=True))
    return pa.table([pa.array(list(c), f.type) for c, f in zip(cols, SCHEMA, strict=True)], schema=SCHEMA)


def _scaled(d: pd.Series, i: pd.Series) -> pd.Series:
    return d * 2.0 + i.astype("float64")


def queries(spark):
    scaled = F.pandas_udf(_scaled, "double")  # made once a session exists
    lookup = spark.createDataFrame([("a", 10.0), ("b", 20.0), ("b", 21.0), (None, 0.0)], "k string, w double")
    by_k = Window.partitionBy("k").orderBy("ts")
    return {
        "filter": lambda d: d.where((F.col("d") > 0) | F.col("k").isNull()).select("k", (F.col("i") + 1).alias("i1"), "ts"),
        "union": lambda d: d.where(F.col("i") > 0).select("k", "ts").unionByName(d.where(F.col("l") < 0).select("k", "ts")),
        "windows": lambda d: (
            d.withWatermark("ts", "5 seconds")
            .groupBy(F.window("ts", "10 seconds"), "k")
            .agg(F.count(F.lit(1)).alias("n"), F.max("d").alias("hi"), F.sum("l").alias("sl"))
        ),
        "static_join": lambda d: d.join(lookup, "k", "left").select("k", "ts", "w"),
        "lag": lambda d: d.withColumn("prev_d", F.lag("d").over(by_k)).select("k", "ts", "d", "prev_d"),
        "dedup": lambda d: d.dropDuplicates(["k"]).select("k"),  # which row of a key is kept: not compared
        "udf": lambda d: d.select("k", scaled("d", "i").alias("s")),
    }


CLASSES = {"filter": "H", "union": "H", "udf": "C", "lag": "C", "static_join": "C", "windows": "N", "dedup": "N"}


@pytest.fixture(scope="module")
def oracle(spark_sql):
    df = spark_sql.createDataFrame(table()).coalesce(1)
    qs = queries(spark_sql)
    return df, qs, {name: t(df).toArrow() for name, t in qs.items()}


#: The strategies the default set runs: fifo (arrival order), chain (operator priorities), cqc and
#: class_shares (class-aware interleaving) and adaptive (switching among them), the ones the jobs
#: and the per-construct files run. The slow set runs every other registered strategy.
DEFAULT = ("fifo", "chain", "cqc", "class_shares", "adaptive")


@pytest.mark.parametrize(
    "strategy", [pytest.param(s, marks=() if s in DEFAULT else pytest.mark.slow) for s in schedulers.available()]
)
def test_every_registered_strategy_gives_sparks_rows(oracle, strategy):
    df, qs, want = oracle
    got = sparkqos.run(df, qs, strategy=strategy, classes=CLASSES, priorities={"H": 6, "C": 3, "N": 1}, batch_rows=16)
    for name in qs:
        assert_same_rows(got[name], want[name], f"{name} under {strategy}", rel=1e-12)
