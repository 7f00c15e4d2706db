"""Event-time window aggregation written as PySpark: ``withWatermark`` +
``groupBy(window(ts, size[, slide]), keys).agg(...)`` compiled to one EventWindowAggregate.

* On a finite DataFrame ``sparkqos.run`` gives Spark's rows (nulls, NaN, ±inf in the values and
  keys, empty input) under every registered strategy; float sums and means are compared to 1e-12
  relative, because Spark's own result depends on the order it adds in (its partitioning).
* On a stream, windows are emitted as the watermark passes their end, late rows are dropped and
  counted, and after ``finish()`` the result is the static one.
* What is not supported raises UnsupportedTransform naming it, before any data moves.
"""

from __future__ import annotations

import math

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

import sparkqos
from sparkqos.errors import UnsupportedTransform
from sparkqos.executor.operators import EventWindowAggregate, KeyedAggregate, WindowAgg
from sparkqos.executor.queues import stamp, with_internal
from sparkqos.spark.transforms import compile_transforms
from sparkqos.testing import assert_same_rows, sorted_rows
from tests.conftest import examples, run_under_each

STRATEGIES = ("fifo", "chain", "cqc", "adaptive")
BASE_US = 1_700_000_000_000_000
SCHEMA = pa.schema([("k", pa.string()), ("i", pa.int32()), ("d", pa.float64()), ("ts", pa.timestamp("us", tz="UTC"))])
EXAMPLES = settings(max_examples=examples(6), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

keys = st.one_of(st.none(), st.sampled_from(["a", "b", ""]))
ints = st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1), st.integers(-5, 5))
doubles = st.one_of(st.none(), st.sampled_from([math.nan, math.inf, -math.inf, 0.0, -0.0, 2.5]), st.floats(-1e3, 1e3))
offsets = st.one_of(st.none(), st.integers(0, 40_000_000))  # 40 s of event time, some rows without one
rows = st.lists(st.tuples(keys, ints, doubles, offsets), max_size=40)


def make_df(spark, data):
    cols = list(zip(*data, strict=True)) if data else [[], [], [], []]
    ts = [None if o is None else BASE_US + o for o in cols[3]]
    arrays = [pa.array(list(cols[0]), pa.string()), pa.array(list(cols[1]), pa.int32()), pa.array(list(cols[2]), pa.float64())]
    table = pa.table([*arrays, pa.array(ts, SCHEMA.field("ts").type)], schema=SCHEMA)
    return spark.createDataFrame(table).coalesce(1)  # one partition: first/last are Spark's row order


def tumbling(df):
    return (
        df.withWatermark("ts", "5 seconds")
        .groupBy(F.window("ts", "10 seconds"), "k")
        .agg(
            F.count(F.lit(1)).alias("n"),
            F.count("d").alias("nd"),
            F.sum("i").alias("si"),
            F.sum("d").alias("sd"),
            F.avg("i").alias("ai"),
            F.avg("d").alias("ad"),
            F.min("d").alias("lo"),
            F.max("d").alias("hi"),
            F.min("k").alias("kmin"),
            F.max("i").alias("imax"),
        )
    )


def sliding(df):
    return df.groupBy(F.window("ts", "10 seconds", "4 seconds", "1 second"), "k").agg(
        F.first("i").alias("fi"),
        F.last("d").alias("ld"),
        F.first("d", ignorenulls=True).alias("fd"),
        F.last("i", ignorenulls=True).alias("li"),
        F.count("*").alias("n"),
    )


def reordered(df):
    return (
        df.groupBy(F.window("ts", "5 seconds").alias("w"), F.col("k").alias("key"))
        .agg(F.sum(F.col("i") * 2).alias("twice"), F.max(F.abs("d")).alias("m"))
        .select("twice", "w", "key", "m")
        .where(F.col("twice").isNotNull())
    )


def no_keys(df):
    return df.groupBy(F.window("ts", "20 seconds")).count()


QUERIES = {"tumbling": tumbling, "sliding": sliding, "reordered": reordered, "no_keys": no_keys}


@given(data=rows)
@EXAMPLES
def test_window_aggregates_equal_spark_under_every_strategy(spark_sql, data):
    df = make_df(spark_sql, data)
    runs = run_under_each(df, QUERIES, STRATEGIES, batch_rows=7, units_between=2)
    for name, transform in QUERIES.items():
        want = transform(df).toArrow()
        for strategy, got in runs.items():
            assert_same(got[name], want, f"{name} under {strategy}")


def test_aggregate_plan_is_one_operator(spark):
    df = make_df(spark, [("a", 1, 1.0, 0)])
    compiled = compile_transforms(df, {"t": tumbling, "r": reordered})
    # r: a select computing i * 2, the aggregate, a select naming its columns w and key, the
    # user's select and where
    assert compiled.plan.names == ("t/1:window_agg", "r/1:select", "r/2:window_agg", "r/3:select", "r/4:select", "r/5:where")
    op = compiled.operators["t/1:window_agg"]
    assert (op.size_us, op.slide_us, op.start_us, op.delay_us) == (10_000_000, 10_000_000, 0, None)  # static: no watermark


def _op(delay_us=2_000_000):
    op = EventWindowAggregate(["k"], [WindowAgg("count_all", None, "n")], "ts", 10_000_000, delay_us=delay_us)
    op.bind("q/agg", [with_internal(pa.schema([("k", pa.string()), ("ts", SCHEMA.field("ts").type)]))])
    return op


def _batch(keys_, secs, seq=0):
    ts = pa.array([BASE_US + int(s * 1e6) for s in secs], SCHEMA.field("ts").type)
    return stamp(pa.record_batch({"k": keys_, "ts": ts}), 0.0, seq)


def test_windows_close_with_the_watermark_and_late_rows_are_counted():
    op = _op()
    assert op.process(_batch(["a", "a", "b"], [1, 3, 9])) is None  # watermark 7 s: nothing ends before it
    out = op.process(_batch(["a"], [13], 3))  # watermark 11 s >= the end of [0, 10)
    assert sorted(zip(out.column("k").to_pylist(), out.column("n").to_pylist())) == [("a", 2), ("b", 1)]
    assert op.process(_batch(["a", "a"], [5, 12], 4)) is None  # 5 s falls in a closed window: late
    assert op.late_rows == 1
    state = op.to_state()
    again = _op()
    again.from_state(state)
    (rest,) = again.flush()
    assert rest.column("n").to_pylist() == [2] and again.late_rows == 1


def test_stream_window_needs_a_watermark_and_a_keyed_aggregate_updates(spark, tmp_path):
    from sparkqos import sources

    sources.register(spark)
    stream = spark.readStream.format("sparkqos.bursty").load()
    with pytest.raises(UnsupportedTransform, match="without withWatermark"):
        sparkqos.stream(stream, {"q": lambda d: d.groupBy(F.window("ts", "10 seconds")).count()}, checkpoint=tmp_path)
    # Without a time window a stream aggregates in Spark's update mode (tests/test_transforms_native.py).
    by_zone = {"q": lambda d: d.withWatermark("ts", "1 second").groupBy("location").count()}
    (op,) = [o for o in compile_transforms(stream, by_zone).operators.values() if isinstance(o, KeyedAggregate)]
    assert op.update and op.keys == ["location"]
    assert not spark.streams.active


#: Aggregates sparkqos has no native version of: Spark computes them (tests/test_spark_aggregates.py)
#: unless the placement is native, which refuses them by name.
_NATIVE = {"placement": "native"}


@pytest.mark.parametrize(
    ("transform", "named", "options"),
    [
        (
            lambda d: d.groupBy(F.window("ts", "10 seconds")).agg(F.approx_count_distinct("i")),
            "approximate aggregate function 'approx_count_distinct'",
            _NATIVE,
        ),
        (lambda d: d.groupBy(F.window("ts", "10 seconds")).agg(F.median("i")), "aggregate function 'median'", _NATIVE),
        (lambda d: d.groupBy(F.window("ts", "10 seconds")).agg(F.countDistinct("i")), "distinct", {}),
        (
            lambda d: d.groupBy(F.window("ts", "10 seconds")).agg((F.sum("i") + 1).alias("x")),
            "expression over aggregates",
            {},
        ),
        (lambda d: d.groupBy(F.window("ts", "10 seconds"), F.hour("ts")).count(), "hour", {}),
        (
            lambda d: d.groupBy(F.session_window("ts", F.when(F.col("k") == "a", "5 seconds").otherwise("9 seconds"))).count(),
            "session_window with a gap that is an expression",
            {},
        ),
    ],
)
def test_unsupported_aggregations_name_what(spark, transform, named, options):
    df = make_df(spark, [("a", 1, 1.0, 0)])
    with pytest.raises(UnsupportedTransform, match=named):
        sparkqos.run(df, {"q": transform}, **options)


def test_timestamp_casts_give_sparks_values(spark_sql):
    """``cast`` of a timestamp to double/float (seconds with fraction), to integers (floor of the
    seconds, then narrowed) and to boolean: what event-time arithmetic in a transform needs."""
    micros = [None, 0, 1, -1, 999_999, -999_999, 1_500_000, -1_500_000, -2_000_000, BASE_US + 123_456, -(2**62), 2**62]
    table = pa.table({"ts": pa.array(micros, SCHEMA.field("ts").type)})
    df = spark_sql.createDataFrame(table)

    def casts(d):
        t = F.col("ts")
        return d.select(
            t.cast("double").alias("dbl"),
            t.cast("float").alias("flt"),
            t.cast("long").alias("lng"),
            t.cast("int").alias("int"),
            t.cast("short").alias("sht"),
            t.cast("boolean").alias("bool"),
            (t.cast("double") - F.lit(1.5)).alias("arith"),
        )

    for strategy in ("fifo", "chain"):
        assert_same(sparkqos.run(df, {"q": casts}, strategy=strategy)["q"], casts(df).toArrow(), strategy)


def rows_of(table: pa.Table) -> list[tuple]:
    return sorted_rows(table)


def assert_same(got: pa.Table, want: pa.Table, name: str) -> None:
    assert_same_rows(got, want, name, rel=1e-12)
