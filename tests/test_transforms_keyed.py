"""Per-key state written as PySpark: ``lag(...).over(Window.partitionBy(k).orderBy(t))``
compiled to KeyedLag, and ``dropDuplicates`` / ``dropDuplicatesWithinWatermark``
compiled to Deduplicate.

* On a finite DataFrame ``sparkqos.run`` gives the rows of Spark's batch run of the same transform
  (nulls, NaN, ±inf, -0.0, empty strings, empty input) under every registered strategy. The data
  make Spark's answer unique: lag windows are ordered by (ts, seq) with seq unique, or by ts where
  ts is unique per key; a deduplicated row's other columns are determined by its keys, or every
  column is a key (-0.0 and 0.0 are one key, and Spark keeps either: compared as equal).
  The rows arrive in time order, as a recorded trace replays (KeyedLag's assumption).
* A stream compiled from a streaming DataFrame and fed in several batches, with a checkpoint and
  restore into a fresh executor half way, gives the static result after ``finish()``; the lag
  also end to end through ``sparkqos.stream`` over a replayed trace.
* Out-of-order rows (lag) and late rows (dropDuplicates) are counted; what is not supported
  raises UnsupportedTransform naming it, before any data moves.
"""

from __future__ import annotations

import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F
from pyspark.sql.window import Window

import sparkqos
from sparkqos import schedulers, sources
from sparkqos.errors import UnsupportedTransform
from sparkqos.executor import Executor
from sparkqos.executor.operators import Deduplicate, KeyedLag, Lag
from sparkqos.executor.queues import stamp, with_internal
from sparkqos.spark.transforms import compile_transforms
from sparkqos.testing import assert_same_rows, sorted_rows
from tests.conftest import examples, replay, run_under_each, spark_streams, stream_to_end

STRATEGIES = ("fifo", "chain", "cqc", "adaptive")
BASE_US = 1_700_000_000_000_000
TS = pa.timestamp("us", tz="UTC")
SCHEMA = pa.schema(
    [("k", pa.string()), ("seq", pa.int32()), ("lat", pa.float64()), ("lon", pa.float64()), ("t", pa.int64()), ("ts", TS)]
)
EXAMPLES = settings(max_examples=examples(5), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

keys = st.one_of(st.none(), st.sampled_from(["a", "b", ""]))
doubles = st.one_of(st.none(), st.sampled_from([math.nan, math.inf, -math.inf, 0.0, -0.0, 1e308, -1e308]), st.floats(-90, 90))
buckets = st.one_of(st.none(), st.sampled_from([math.nan, 0.0, -0.0, 1.5]))  # lon as a partition key
offsets = st.one_of(st.none(), st.integers(0, 60))  # seconds of event time, some rows without one
track = st.lists(st.tuples(keys, doubles, buckets, offsets), max_size=30)


def track_table(data) -> pa.Table:
    """Rows in time order (null times first, as Spark sorts them), seq numbering them: a trace."""
    data = sorted(data, key=lambda r: (r[3] is not None, r[3] or 0))
    cols = list(zip(*data, strict=True)) if data else [[], [], [], []]
    t = [None if o is None else 1_700_000_000 + o for o in cols[3]]
    return pa.table(
        [
            pa.array(list(cols[0]), pa.string()),
            pa.array(range(len(data)), pa.int32()),
            pa.array(list(cols[1]), pa.float64()),
            pa.array(list(cols[2]), pa.float64()),
            pa.array(t, pa.int64()),
            pa.array([None if s is None else s * 1_000_000 for s in t], TS),
        ],
        schema=SCHEMA,
    )


def frame(spark, table: pa.Table):
    return spark.createDataFrame(table).coalesce(1)


# -- lag --------------------------------------------------------------------------------------------
def by_time():
    """Each vessel's rows in time order (seq breaks ties and orders the null times)."""
    return Window.partitionBy("k").orderBy("ts", "seq")


def speed(df):
    """The vessel job's shape: the previous position of the same vessel, then a speed and a filter on it."""
    w = by_time()
    return (
        df.withColumn("prev_lat", F.lag("lat").over(w))
        .withColumn("prev_t", F.lag("t").over(w))
        .withColumn("speed", F.abs(F.col("lat") - F.col("prev_lat")) / (F.col("t") - F.col("prev_t")))
        .where(F.col("speed").isNull() | (F.col("speed") < 10))
    )


def deeper(df):
    """Offsets 1 and 2 with defaults, over the event time alone (unique per key once nulls go)."""
    w = Window.partitionBy("k").orderBy("ts")
    return df.where(F.col("ts").isNotNull()).select(
        "k",
        "ts",
        F.lag("lat", 2).over(w).alias("lat2"),
        F.lag("seq", 1, -1).over(w).alias("prev_seq"),
        F.lag(F.col("lat") * 2, 1, 0.5).over(w).alias("twice"),
    )


def replaced(df):
    """A lag replacing its own column, partitioned by a float column (NaN, -0.0, null keys)."""
    return df.withColumn("lat", F.lag("lat").over(Window.partitionBy("lon").orderBy("seq")))


def one_partition(df):
    return df.select("seq", F.lag("k", 3).over(Window.orderBy("seq")).alias("k3"))


def by_expression(df):
    """Keys and arguments that are expressions: Spark computes them in a Project below the Window."""
    return df.select("seq", F.lag(F.col("lat") + 1).over(Window.partitionBy(F.col("seq") % 3).orderBy("seq")).alias("p"))


LAGS = {"speed": speed, "deeper": deeper, "replaced": replaced, "one_partition": one_partition, "by_expression": by_expression}


@given(data=track)
@EXAMPLES
def test_lag_equals_spark_under_every_strategy(spark_sql, data):
    df = frame(spark_sql, track_table(data))
    runs = run_under_each(df, LAGS, STRATEGIES, batch_rows=4, units_between=2)
    for name, transform in LAGS.items():
        want = transform(df).toArrow()
        for strategy, got in runs.items():
            assert_same(got[name], want, f"{name} under {strategy}")


def test_lag_plan(spark):
    df = frame(spark, track_table([("a", 1.0, 0.0, 1)]))
    compiled = compile_transforms(df, {"speed": speed, "replaced": replaced})
    lags = [n for n in compiled.plan.names if n.endswith(":lag")]
    assert lags == ["speed/1:lag", "speed/2:lag", "replaced/2:lag"]  # replaced/1: the select putting lat last
    op = compiled.operators["speed/1:lag"]
    assert (op.keys, op.order, op.lags) == (["k"], ["ts", "seq"], [Lag("lat", 1, "prev_lat")])


def _lag_op():
    op = KeyedLag(["k"], ["t"], [Lag("v", 1, "prev"), Lag("v", 2, "prev2", -1)])
    op.bind("q/lag", [with_internal(pa.schema([("k", pa.string()), ("t", pa.int64()), ("v", pa.int64())]))])
    return op


def _lag_batch(k, t, v, seq):
    return stamp(pa.record_batch({"k": k, "t": pa.array(t, pa.int64()), "v": pa.array(v, pa.int64())}), 0.0, seq)


def test_lag_state_survives_a_checkpoint_and_out_of_order_rows_are_counted():
    op = _lag_op()
    out = op.process(_lag_batch(["a", "a", "b"], [2, 1, 5], [20, 10, 50], 0))  # sorted within the batch
    assert out.column("prev").to_pylist() == [10, None, None] and out.column("prev2").to_pylist() == [-1, -1, -1]
    again = _lag_op()
    again.from_state(op.to_state())
    assert again.state_rows() == 3  # a's two rows (offset 2), b's one
    with pytest.warns(RuntimeWarning, match="q/lag.*1 row.*may differ from Spark"):
        out = again.process(_lag_batch(["a", "b", "a"], [3, 4, 4], [30, 40, 40], 3))
    # b at t=4 is before b's t=5 of the earlier batch: out of order, emitted with the values b had
    # before this batch, and it does not enter the state
    assert out.column("prev").to_pylist() == [20, 50, 30] and out.column("prev2").to_pylist() == [10, -1, 20]
    assert again.out_of_order_rows == 1
    out = again.process(_lag_batch(["b"], [6], [60], 6))
    assert out.column("prev").to_pylist() == [50] and again.out_of_order_rows == 1


# -- dropDuplicates ------------------------------------------------------------------------------------
sensors = st.one_of(st.none(), st.sampled_from(["s1", "s2", ""]))
small = st.one_of(st.none(), st.sampled_from([math.nan, 0.0, -0.0, math.inf, -1e308]))
readings = st.lists(st.tuples(sensors, small, small, st.one_of(st.none(), st.integers(0, 6))), max_size=30)


def reading_table(data) -> pa.Table:
    """Sensor readings in time order; ``lat`` (small domain, for whole-row duplicates) and ``lon``
    (a function of the sensor: determined by a key)."""
    data = sorted(data, key=lambda r: (r[3] is not None, r[3] or 0))
    cols = list(zip(*data, strict=True)) if data else [[], [], [], []]
    lon = [None if s is None else (math.nan if s == "" else float(len(s) * 1e300)) for s in cols[0]]
    t = [None if o is None else 1_700_000_000 + o for o in cols[3]]
    return pa.table(
        [
            pa.array(list(cols[0]), pa.string()),
            pa.array([0] * len(data), pa.int32()),
            pa.array(list(cols[1]), pa.float64()),
            pa.array(lon, pa.float64()),
            pa.array(t, pa.int64()),
            pa.array([None if s is None else s * 1_000_000 for s in t], TS),
        ],
        schema=SCHEMA,
    )


def by_sensor_and_time(df):
    return df.withWatermark("ts", "5 seconds").dropDuplicates(["k", "ts"]).select("k", "ts", "t", "lon")


def whole_rows(df):
    return df.drop("lon").withWatermark("ts", "5 seconds").dropDuplicates()


def within_watermark(df):
    return df.withWatermark("ts", "5 seconds").dropDuplicatesWithinWatermark(["k"]).select("k", "lon")


def then_filtered(df):
    return df.dropDuplicates(["lat", "k"]).where(F.col("k").isNotNull()).select("k", "lat")


DEDUPS = {"by_sensor_and_time": by_sensor_and_time, "whole_rows": whole_rows}
STATIC_DEDUPS = DEDUPS | {"then_filtered": then_filtered, "distinct": lambda d: d.select("k", "lat").distinct()}


@given(data=readings)
@EXAMPLES
def test_drop_duplicates_equals_spark_under_every_strategy(spark_sql, data):
    df = frame(spark_sql, reading_table(data))
    runs = run_under_each(df, STATIC_DEDUPS, STRATEGIES, batch_rows=4, units_between=2)
    for name, transform in STATIC_DEDUPS.items():
        want = transform(df).toArrow()
        for strategy, got in runs.items():
            assert_same(got[name], want, f"{name} under {strategy}")


# -- streams ------------------------------------------------------------------------------------------
def _stream_of(spark, table: pa.Table, path, seconds_per_trigger: int | None = None):
    pq.write_table(table, path)
    return replay(spark, path, seconds_per_trigger)


def _replay_with_checkpoint(compiled, table: pa.Table, batch_rows: int):
    """Feed ``table`` in batches to a fresh executor of ``compiled``; half way, take what it has
    delivered, checkpoint it and go on in another fresh executor restored from the checkpoint.
    Returns every query's rows and the plan the second executor ran."""
    schema = compiled.sources["input"]
    batches = table.cast(schema).to_batches(max_chunksize=batch_rows)
    plan = compiled.fresh()
    ex = Executor(plan, schedulers.get("chain"))
    delivered: dict[str, list[pa.Table]] = {q: [] for q in compiled.roots}
    for i, batch in enumerate(batches):
        if i == len(batches) // 2:
            for q in compiled.roots:
                delivered[q].append(ex.result(q))
            state = ex.to_state()
            plan = compiled.fresh()
            ex = Executor(plan, schedulers.get("chain"))
            ex.load_state(state)
        ex.ingest("input", batch, arrival=float(i))
        ex.run(max_units=4)
    ex.finish()
    results = {q: pa.concat_tables([*parts, ex.result(q)]) for q, parts in delivered.items()}
    assert any(parts[0].num_rows for parts in delivered.values()), "the checkpoint came before any output"
    return results, plan


def _time_ordered_track(n: int) -> pa.Table:
    data = [(["v1", "v2", None, ""][i % 4], 10.0 + i * 0.01 * (i % 3), 1.5, i) for i in range(n)]
    return track_table(data)


def test_streamed_lag_with_a_checkpoint_equals_the_static_result(spark_sql, tmp_path):
    table = _time_ordered_track(40)
    stream = _stream_of(spark_sql, table, tmp_path / "track.parquet")
    compiled = compile_transforms(stream, LAGS)
    results, plan = _replay_with_checkpoint(compiled, table, batch_rows=6)
    static = frame(spark_sql, table)
    for name, transform in LAGS.items():
        assert_same(results[name], transform(static).toArrow(), name)
    lags = [op for op in plan.operators.values() if isinstance(op, KeyedLag)]
    assert len(lags) == 6 and all(op.out_of_order_rows == 0 for op in lags)  # deeper: one Window, 3 lags
    assert lags[0].state_rows() == 4  # one row per vessel (v1, v2, null, "")


def test_streamed_drop_duplicates_with_a_checkpoint_equals_the_static_result(spark_sql, tmp_path):
    # Reports of three sensors, each repeated up to 3 s later (within the 5 s watermark delay).
    data = [(["s1", "s2", ""][i % 3], 0.0, None, i // 3) for i in range(30)]
    data += [(k, 0.0, None, t) for k, _, _, t in data[::4]]
    table = reading_table(data)
    stream = _stream_of(spark_sql, table, tmp_path / "readings.parquet")
    compiled = compile_transforms(stream, DEDUPS)
    dedup = compiled.operators["by_sensor_and_time/1:dedup"]
    assert (dedup.time_col, dedup.delay_us) == ("ts", 5_000_000)
    results, plan = _replay_with_checkpoint(compiled, table, batch_rows=5)
    assert plan.operators["by_sensor_and_time/1:dedup"].late_rows == 0
    static = frame(spark_sql, table)
    for name, transform in DEDUPS.items():
        assert_same(results[name], transform(static).toArrow(), name)


def test_lag_through_sparkqos_stream(spark_sql, tmp_path):
    table = _time_ordered_track(60)
    stream = _stream_of(spark_sql, table, tmp_path / "track.parquet", seconds_per_trigger=10)
    sink = stream_to_end(stream, {"speed": speed}, tmp_path / "ckpt", timeout_s=120, strategy="fifo")
    want = speed(frame(spark_sql, table)).toArrow()
    got = sink.table("speed")
    assert got.num_rows == want.num_rows > 0
    assert rows_of(got.cast(want.schema)) == rows_of(want)


def test_drop_duplicates_within_watermark_streams_like_spark(spark_sql, tmp_path):
    """dropDuplicatesWithinWatermark runs on streams only: its oracle is Spark's streaming run of
    the same transform. A sensor that repeats itself within the delay comes out once, and again
    once the watermark has long passed its first row; every other row has a key of its own, so
    the result does not depend on where either engine cuts its batches."""
    data = [(f"u{t}", 0.0, None, t) for t in range(60)]
    data += [("a", 0.0, None, t) for t in (1, 2, 3, 40, 41)] + [("b", 0.0, None, t) for t in (10, 12)]
    table = reading_table(data)
    path = tmp_path / "readings.parquet"
    stream = _stream_of(spark_sql, table, path)
    compiled = compile_transforms(stream, {"within": within_watermark})
    results, plan = _replay_with_checkpoint(compiled, table, batch_rows=7)
    streamed = spark_streams({"within": within_watermark}, lambda: replay(spark_sql, path, 7), tmp_path / "spark", timeout_s=120)
    spark_rows = streamed["within"].rows.cast(results["within"].schema)
    assert_same(results["within"], spark_rows, "within")
    assert rows_of(results["within"]).count(("a", 1e300)) == 2 and plan.operators["within/1:dedup"].late_rows == 0


def _dedup_op(within=False):
    op = Deduplicate(["k"] if within else ["k", "ts"], "ts", 2_000_000, within_watermark=within)
    op.bind("q/dedup", [with_internal(pa.schema([("k", pa.string()), ("ts", TS)]))])
    return op


def _dedup_batch(k, secs, seq):
    ts = pa.array([None if s is None else BASE_US + s * 1_000_000 for s in secs], TS)
    return stamp(pa.record_batch({"k": k, "ts": ts}), 0.0, seq)


def test_dedup_forgets_keys_behind_the_watermark_and_counts_late_rows():
    op = _dedup_op()
    out = op.process(_dedup_batch(["a", "a", "b", "a"], [1, 1, 1, None], 0))
    assert out.column("k").to_pylist() == ["a", "b", "a"]
    assert op.state_rows() == 3  # watermark -1 s: nothing forgotten yet
    out = op.process(_dedup_batch(["a", "c"], [4, 4], 4))  # watermark 2 s afterwards: (a, 1), (b, 1) go
    assert out.column("k").to_pylist() == ["a", "c"] and op.state_rows() == 3  # (a, null) is kept for good
    again = _dedup_op()
    again.from_state(op.to_state())
    out = again.process(_dedup_batch(["a", "a", "a", "c"], [1, None, 3, 4], 6))  # (a, 1) late, (c, 4) seen
    assert out.column("ts").to_pylist() == [pa.scalar(BASE_US + 3_000_000, TS).as_py()]
    assert again.late_rows == 1


def test_dedup_within_watermark_forgets_a_key_delay_after_its_first_row():
    op = _dedup_op(within=True)
    assert op.process(_dedup_batch(["a", "a"], [1, 2], 0)).num_rows == 1  # (a) expires at 3 s
    assert op.process(_dedup_batch(["b", "a"], [4, 4], 2)).column("k").to_pylist() == ["b"]  # watermark 2 s
    assert op.process(_dedup_batch(["c"], [6], 4)).num_rows == 1  # watermark 4 s ≥ 3 s: a is forgotten
    assert op.process(_dedup_batch(["a", "b"], [7, 7], 5)).column("k").to_pylist() == ["a"]


def unbounded(df):
    """dropDuplicates on a stream without a watermark: Spark keeps every key for good."""
    return df.dropDuplicates(["k"]).select("k", "lon")


def test_stream_deduplication_without_a_watermark_runs_with_a_warning_and_streams_like_spark(spark_sql, tmp_path):
    """Spark allows a deduplication whose keys no watermark bounds; sparkqos runs it too, warning
    that its state grows (the operator's state_rows() is the keys held), and writes Spark's rows."""
    data = [(["s1", "s2", "", None][i % 4], 0.0, None, i) for i in range(24)] + [("s9", 0.0, None, 30)]
    table = reading_table(data)
    path = tmp_path / "readings.parquet"
    stream = _stream_of(spark_sql, table, path, seconds_per_trigger=5)
    with pytest.warns(sparkqos.GrowingStateWarning, match=r"dropDuplicates\(\['k'\]\) on a stream without withWatermark"):
        compiled = compile_transforms(stream, {"unbounded": unbounded})
    with pytest.warns(sparkqos.GrowingStateWarning, match="leave out the watermarked column 'ts'"):
        compile_transforms(stream, {"q": lambda d: d.withWatermark("ts", "1 second").dropDuplicates(["k"])})
    dedup = compiled.operators["unbounded/1:dedup"]
    assert (dedup.keys, dedup.time_col, dedup.delay_us) == (["k"], None, None)
    with pytest.warns(sparkqos.GrowingStateWarning):
        sink = stream_to_end(_stream_of(spark_sql, table, path, 5), {"unbounded": unbounded}, tmp_path / "ckpt", strategy="chain")
    streamed = spark_streams({"unbounded": unbounded}, lambda: replay(spark_sql, path, 5), tmp_path / "spark", timeout_s=120)
    got = sink.table("unbounded")
    assert_same(got, streamed["unbounded"].rows.cast(got.schema), "unbounded")
    assert got.num_rows == 5  # s1, s2, "", null and s9, each once


def test_dropping_duplicates_within_the_watermark_needs_one(spark, tmp_path):
    sources.register(spark)
    stream = spark.readStream.format("sparkqos.bursty").load()
    with pytest.raises(UnsupportedTransform, match="dropDuplicatesWithinWatermark on a stream without withWatermark"):
        compile_transforms(stream, {"q": lambda d: d.dropDuplicatesWithinWatermark(["location"])})


# -- refused --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("transform", "named"),
    [
        (lambda d: d.select("k", F.row_number().over(by_time()).alias("n")), "window function 'row_number'"),
        (lambda d: d.select("k", F.rank().over(by_time()).alias("n")), "window function 'rank'"),
        (lambda d: d.select("k", F.lead("lat").over(by_time()).alias("n")), "window function 'lead'"),
        (lambda d: d.select("k", F.sum("lat").over(by_time()).alias("n")), "window function 'sum over a window'"),
        (
            lambda d: d.select("k", F.sum("lat").over(Window.partitionBy("k").orderBy("t").rangeBetween(-5, 0)).alias("n")),
            "window function 'sum over a window'",
        ),
        (lambda d: d.select("k", F.lag("lat", -1).over(by_time()).alias("n")), "window function 'lead'|lag with offset"),
        (lambda d: d.select(F.lag("lat").over(Window.partitionBy("k").orderBy(F.desc("ts"))).alias("n")), "descending"),
        (lambda d: d.select(F.lag("lat").over(Window.partitionBy("k").orderBy("k")).alias("n")), "ordered by 'k'"),
        (
            lambda d: d.select(F.lag("lat").over(Window.partitionBy("k").orderBy(F.asc_nulls_last("ts"))).alias("n")),
            "nulls last",
        ),
    ],
)
def test_unsupported_windows_name_what(spark, transform, named):
    df = frame(spark, track_table([("a", 1.0, 0.0, 1)]))
    with pytest.raises(UnsupportedTransform, match=named):
        sparkqos.run(df, {"q": transform})


@pytest.mark.parametrize(("node", "named"), [("Window", "window functions"), ("Deduplicate", "dropDuplicates")])
def test_spark_connect_plans_are_refused_naming_the_operation(spark, node, named):
    """Spark Connect's plan rewrite (sparkqos.spark.connect_plan) writes these nodes without their
    fields: refused, naming the operation, until the rewrite carries them."""
    import json

    from sparkqos.compile.spark_plan import compile_plans

    df = frame(spark, track_table([("a", 1.0, 0.0, 1)]))
    analyzed = df._jdf.queryExecution().analyzed()
    source = json.loads(analyzed.toJSON())
    output = analyzed.output()
    ids = [int(output.apply(i).exprId().id()) for i in range(output.size())]
    plan = [{"class": node, "num-children": 1}, *source]
    with pytest.raises(UnsupportedTransform, match=f"Spark operation '{node}'.*{named}.*Spark Connect"):
        compile_plans({"q": plan}, source, ids, SCHEMA)


def rows_of(table: pa.Table) -> list[tuple]:
    return sorted_rows(table)


def assert_same(got: pa.Table, want: pa.Table, name: str) -> None:
    assert_same_rows(got, want, name)
