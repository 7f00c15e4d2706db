"""Aggregates sparkqos has no native version of — approximate sketches (``approx_count_distinct``,
``percentile_approx``), pandas UDAFs, an aggregate with a ``FILTER`` clause — are computed by
Spark over each group's buffered rows when the group is emitted, so the result is Spark's by
construction.

* On a finite DataFrame ``sparkqos.run`` gives Spark's batch rows, in windowed, running and
  session-window aggregations, beside native aggregates of the same ``agg()``.
* ``explain()`` says which aggregates run natively and which Spark computes, in a Spark user's words.
* On a stream (Parquet files read one per micro-batch, available-now, then ``finish()``) the rows
  equal Spark's own streaming run of the same transform (the last row per key of the running
  aggregate's changelog); a crash after the sink write of a middle batch, and the restart from
  the checkpoint, keep the buffered rows of the windows still open.
"""

from __future__ import annotations

import math
import os

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType

import sparkqos
from sparkqos.errors import UnsupportedTransform
from sparkqos.io.sinks import MemorySink
from tests.conftest import stream_through_a_crash, stream_to_end
from tests.test_transforms_native import last_per_key, spark_update_mode

BASE_US = 1_700_000_000_000_000
SCHEMA = pa.schema([("k", pa.string()), ("i", pa.int32()), ("d", pa.float64()), ("ts", pa.timestamp("us", tz="UTC"))])


def trace(n: int = 48) -> pa.Table:
    """``n`` rows 0.7 s apart over three keys, with nulls, NaN and repeated values."""
    rows = []
    for r in range(n):
        k = ["a", "b", "c"][(r * 5) % 3]
        i = None if r % 7 == 3 else (r * 37) % 11 - 5
        d = [0.5 * (r % 9), math.nan, None, -0.0, 2.5, 1e3 / (r + 1)][r % 6]
        rows.append((k, i, d, BASE_US + r * 700_000))
    cols = list(zip(*rows, strict=True))
    return pa.table([pa.array(list(c), f.type) for c, f in zip(cols, SCHEMA, strict=True)], schema=SCHEMA)


def mean_of(v: pd.Series) -> float:
    return float(v.mean())


mean_udaf = F.pandas_udf(mean_of, DoubleType())


def windowed(df):
    return (
        df.withWatermark("ts", "2 seconds")
        .groupBy(F.window("ts", "5 seconds"), "k")
        .agg(
            F.approx_count_distinct("d").alias("ndv"),
            F.count("*").alias("n"),
            F.percentile_approx(F.col("i") * 2, 0.5).alias("p50"),
            F.expr("count(i) FILTER (WHERE i > 0)").alias("pos"),
            F.max("d").alias("top"),
        )
    )


def running(df):
    return df.groupBy("k").agg(F.approx_count_distinct("d").alias("ndv"), F.sum("i").alias("si"))


def sessions(df):
    return (
        df.withWatermark("ts", "2 seconds")
        .groupBy(F.session_window("ts", "2 seconds"), "k")
        .agg(F.approx_count_distinct("i").alias("ndv"), F.count("*").alias("n"))
    )


def pandas_windowed(df):
    return df.withWatermark("ts", "2 seconds").groupBy(F.window("ts", "5 seconds"), "k").agg(mean_udaf("i").alias("mean_i"))


QUERIES = {"windowed": windowed, "running": running, "sessions": sessions, "pandas_windowed": pandas_windowed}


def equal(spark, got: pa.Table, want) -> None:
    """chispa's comparison of sparkqos's rows with Spark's DataFrame ``want``, in any row order."""
    got_df = spark.createDataFrame(got.select(want.columns).cast(want.toArrow().schema), want.schema)
    assert_df_equality(got_df, want, ignore_row_order=True, ignore_nullable=True, allow_nan_equality=True)


def test_aggregates_without_a_native_version_equal_sparks_batch_answer(spark_sql):
    df = spark_sql.createDataFrame(trace()).coalesce(1)
    equal(spark_sql, sparkqos.run(df, {"q": windowed}, strategy="chain", batch_rows=8)["q"], windowed(df))


@pytest.mark.slow
def test_in_every_aggregation_they_equal_sparks_batch_answer(spark_sql):
    """Windowed, running and session aggregations, and a pandas UDAF."""
    df = spark_sql.createDataFrame(trace()).coalesce(1)
    out = sparkqos.run(df, QUERIES, strategy="chain", batch_rows=8)
    for name, transform in QUERIES.items():
        equal(spark_sql, out[name], transform(df))


def test_a_global_aggregate_of_no_rows_gives_sparks_empty_answer(spark_sql):
    df = spark_sql.createDataFrame(trace()).coalesce(1)

    def nothing(d):
        return d.where("i > 100").agg(F.approx_count_distinct("d").alias("ndv"), F.percentile_approx("d", 0.5).alias("p"))

    equal(spark_sql, sparkqos.run(df, {"q": nothing})["q"], nothing(df))


def test_explain_says_which_aggregates_spark_computes(spark_sql):
    df = spark_sql.createDataFrame(trace()).coalesce(1)
    text = sparkqos.explain(df, {"windowed": windowed})
    assert "computes count(*), max(d) natively and keeps each group's rows for the aggregates Spark computes" in text
    assert (
        "sparkqos has no native version of approx_count_distinct(d), percentile_approx(i), count(i) with a FILTER clause; "
        "Spark computes them over each group's rows when the group is emitted, in the micro-batch"
    ) in text
    refused = sparkqos.explain(df, {"windowed": windowed}, placement="native")
    assert "refused" in refused and "approx_count_distinct" in refused
    with pytest.raises(UnsupportedTransform, match="approx_count_distinct"):
        sparkqos.run(df, {"windowed": windowed}, placement="native")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """The trace as 6 Parquet files of 8 rows, read one per micro-batch."""
    path = tmp_path_factory.mktemp("spark_aggregates") / "trace"
    path.mkdir()
    table = trace()
    for b, start in enumerate(range(0, table.num_rows, 8)):
        pq.write_table(table.slice(start, 8), path / f"part-{b:03d}.parquet")
        os.utime(path / f"part-{b:03d}.parquet", (1_700_000_000 + b, 1_700_000_000 + b))  # oldest first
    return path


def file_stream(spark, folder):
    return spark.readStream.schema(spark.read.parquet(str(folder)).schema).option("maxFilesPerTrigger", 1).parquet(str(folder))


@pytest.fixture(scope="module")
def sparks_stream(spark_sql, folder, tmp_path_factory) -> dict[str, pa.Table]:
    """Spark's own streaming run of each query over the same files: append mode for windows and
    sessions (every one closes by the end: finish() flushes the rest, Spark's batch answer has
    them), the table a running aggregate's changelog leaves. Computed once for the module: every
    stream below reads the same files, under another strategy or through a crash."""
    static = spark_sql.createDataFrame(trace()).coalesce(1)
    want = {name: QUERIES[name](static) for name in ("windowed", "sessions", "pandas_windowed")}
    changelog = spark_update_mode(running, file_stream(spark_sql, folder), tmp_path_factory.mktemp("spark_running"))
    want["running"] = spark_sql.createDataFrame(last_per_key(changelog, ["k"]), running(static).schema)
    return want


def test_a_running_aggregation_on_a_stream_warns_that_its_buffered_rows_grow(spark_sql, folder):
    from sparkqos.spark.transforms import compile_transforms

    with pytest.warns(
        sparkqos.GrowingStateWarning, match=r"approx_count_distinct\(d\)\) on a stream keeps every row of each key"
    ):
        compile_transforms(file_stream(spark_sql, folder), {"running": running})


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["chain", "adaptive", "fifo"])
def test_streamed_aggregates_equal_sparks_on_the_same_rows(spark_sql, folder, sparks_stream, tmp_path, strategy):
    sink = stream_to_end(file_stream(spark_sql, folder), QUERIES, tmp_path / "ckpt", timeout_s=240, strategy=strategy)
    for name, want in sparks_stream.items():
        got = sink.table(name)
        if name == "running":
            got = last_per_key(got.select(want.columns), ["k"])
        equal(spark_sql, got, want)


@pytest.mark.slow
def test_a_crash_in_the_middle_keeps_the_buffered_rows(spark_sql, folder, sparks_stream, tmp_path, monkeypatch):
    """Batch 2's outputs reach the sink, its checkpoint does not; the restart replays it from
    batch 1's checkpoint, whose windows still hold their buffered rows, and the end result is
    Spark's."""
    sink = MemorySink()

    def attempt(**fault):
        return sparkqos.stream(
            file_stream(spark_sql, folder),
            QUERIES,
            trigger=sparkqos.Trigger(availableNow=True),
            checkpoint=tmp_path / "ckpt",
            sink=sink,
            strategy="chain",
            **fault,
        )

    stream_through_a_crash(monkeypatch, attempt, "after_sink:2", timeout_s=240)
    for name, want in sparks_stream.items():
        got = sink.table(name)
        if name == "running":
            got = last_per_key(got.select(want.columns), ["k"])
        equal(spark_sql, got, want)
