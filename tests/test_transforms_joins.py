"""Joins written as PySpark: ``stream_df.join(static_df, ...)`` compiled to one
StaticJoin, two branches of the stream joined on keys and an event-time range compiled to one
IntervalJoin.

* On a finite DataFrame ``sparkqos.run`` gives Spark's rows (null keys, NaN and -0.0 keys, empty
  strings, duplicated static keys, empty input and empty static tables) under every strategy.
* On a stream the result after ``finish()`` is the static one; the interval join's state is
  evicted by the watermark and survives a checkpoint taken mid-stream.
* What is not supported raises UnsupportedTransform naming it, before any data moves.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

import sparkqos
from sparkqos import schedulers
from sparkqos.errors import UnsupportedTransform
from sparkqos.executor import Executor
from sparkqos.executor.operators import IntervalJoin, StaticJoin
from sparkqos.spark.static_tables import MAX_ROWS_CONF
from sparkqos.spark.transforms import compile_transforms
from sparkqos.testing import assert_same_rows, sorted_rows
from tests.conftest import examples, replay, run_under_each, stream_to_end

STRATEGIES = ("fifo", "chain", "cqc", "adaptive")
BASE_US = 1_700_000_000_000_000
TS = pa.timestamp("us", tz="UTC")
SCHEMA = pa.schema([("k", pa.int32()), ("s", pa.string()), ("d", pa.float64()), ("ts", TS)])
STATIC = pa.schema([("k", pa.int64()), ("name", pa.string()), ("w", pa.float64())])
EXAMPLES = settings(max_examples=examples(5), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

small_keys = st.one_of(st.none(), st.integers(-1, 3))
strings = st.one_of(st.none(), st.sampled_from(["a", "b", ""]))
doubles = st.one_of(st.none(), st.sampled_from([math.nan, math.inf, -math.inf, 0.0, -0.0, 2.5]))
offsets = st.one_of(st.none(), st.integers(0, 12).map(lambda s: s * 500_000))  # 6 s of event time
stream_rows = st.lists(st.tuples(small_keys, strings, doubles, offsets), max_size=30)
static_rows = st.lists(st.tuples(small_keys, strings, doubles), max_size=8)  # small keys: duplicates


def make_df(spark, data):
    cols = list(zip(*data, strict=True)) if data else [[], [], [], []]
    ts = [None if o is None else BASE_US + o for o in cols[3]]
    arrays = [pa.array(list(c), f.type) for c, f in zip(cols[:3], SCHEMA, strict=False)]
    return spark.createDataFrame(pa.table([*arrays, pa.array(ts, TS)], schema=SCHEMA))


def make_static(spark, data):
    cols = list(zip(*data, strict=True)) if data else [[], [], []]
    return spark.createDataFrame(pa.table([pa.array(list(c), f.type) for c, f in zip(cols, STATIC, strict=True)], schema=STATIC))


def static_queries(lookup):
    """Joins of the stream with ``lookup`` (a static DataFrame of STATIC's columns)."""
    named = lookup.select(F.col("k"), F.col("name").alias("s"), F.col("w"))
    return {
        "inner_using": lambda d: d.join(lookup, "k"),
        "left_using": lambda d: d.join(lookup, on=["k"], how="left"),
        "left_outer_cond": lambda d: d.join(lookup, (d.k == lookup.k) & (d.d == lookup.w), "left_outer").drop(lookup.k),
        "two_keys": lambda d: d.join(named, ["k", "s"], "inner"),
        "then_filter": lambda d: d.where(F.col("d") != 0).join(lookup, "k").where(F.col("w").isNull()).select("s", "name"),
        "static_first": lambda d: lookup.join(d, lookup.k == d.k, "inner").drop(d.k),
        # conditions on one side's columns alone, as Spark's optimizer pushes them down
        "side_conditions": lambda d: d.join(lookup, (d.k == lookup.k) & (d.d > 0) & (lookup.w > 0)).drop(lookup.k),
        "side_conditions_left": lambda d: d.join(lookup, (d.k == lookup.k) & (d.d > 0) & (lookup.w > 0), "left").drop(lookup.k),
        "right_using": lambda d: lookup.join(d, "k", "right_outer"),
    }


def _branches(d):
    a = d.withWatermark("ts", "5 seconds")
    b = (
        d.where(F.col("d").isNull() | (F.col("d") > 0))
        .select(F.col("k").alias("k2"), F.col("ts").alias("ts2"), F.col("s").alias("s2"))
        .withWatermark("ts2", "5 seconds")
    )
    return a, b


def range_join(d):
    a, b = _branches(d)
    cond = (a.k == b.k2) & (b.ts2 >= a.ts - F.expr("INTERVAL 2 SECONDS")) & (b.ts2 <= a.ts + F.expr("INTERVAL 1 SECONDS"))
    return a.join(b, cond, "inner")


def renamed_join(d):
    """The watermark set first, then the event-time column renamed by a select on each side:
    Spark carries the watermark through the alias."""
    marked = d.withWatermark("ts", "5 seconds")
    a = marked.select("k", "s", F.col("ts").alias("t"))
    b = marked.where(F.col("d").isNull() | (F.col("d") > 0)).select(F.col("k").alias("k2"), F.col("ts").alias("t2"))
    return a.join(b, (a.k == b.k2) & (b.t2 >= a.t - F.expr("INTERVAL 2 SECONDS")) & (b.t2 <= a.t + F.expr("INTERVAL 1 SECONDS")))


def between_join(d):
    a, b = _branches(d)
    return a.join(b, F.expr("s = s2 AND k = k2 AND ts2 BETWEEN ts - INTERVAL 1 SECOND AND ts + INTERVAL 500 MILLISECONDS"))


def strict_join(d):
    a, b = _branches(d)
    # written the other way round (a's time bounded by b's), strict on both ends
    cond = (b.k2 == a.k) & (a.ts > b.ts2 - F.expr("INTERVAL 1 SECOND")) & (a.ts < b.ts2 + F.expr("INTERVAL 1500 MILLISECONDS"))
    return a.join(b, cond).select("s", "s2", "ts", "ts2")


STREAM_JOINS = {"range": range_join, "between": between_join, "strict": strict_join}


@given(data=stream_rows, lookup=static_rows)
@EXAMPLES
def test_static_joins_equal_spark_under_every_strategy(spark_sql, data, lookup):
    df = make_df(spark_sql, data)
    queries = static_queries(make_static(spark_sql, lookup))
    runs = run_under_each(df, queries, STRATEGIES, batch_rows=4, units_between=2)
    for name, transform in queries.items():
        want = transform(df).toArrow()
        for strategy, got in runs.items():
            assert_same(got[name], want, f"{name} under {strategy}")


@given(data=stream_rows)
@EXAMPLES
def test_stream_stream_joins_equal_spark_under_every_strategy(spark_sql, data):
    df = make_df(spark_sql, data)
    runs = run_under_each(df, STREAM_JOINS, STRATEGIES, batch_rows=4, units_between=2)
    for name, transform in STREAM_JOINS.items():
        want = transform(df).toArrow()
        for strategy, got in runs.items():
            assert_same(got[name], want, f"{name} under {strategy}")


def test_join_plans_are_one_operator_per_spark_operator(spark_sql):
    df = make_df(spark_sql, [(1, "a", 1.0, 0)])
    lookup = make_static(spark_sql, [(1, "x", 2.0), (1, "y", None)])
    compiled = compile_transforms(df, {"c": static_queries(lookup)["left_outer_cond"], "r": range_join})
    # c: the join, then the drop; r: b's where and select, the join (a's withWatermark is a no-op here)
    assert compiled.plan.names == ("c/1:join", "c/2:select", "r/1:where", "r/2:select", "r/3:join")
    join = compiled.operators["c/1:join"]
    assert isinstance(join, StaticJoin) and join.how == "left" and join.table.num_rows == 2
    ij = compiled.operators["r/3:join"]
    assert isinstance(ij, IntervalJoin)
    assert (ij.times, ij.lower_us, ij.upper_us, ij.delays_us) == (("ts", "ts2"), -2_000_000, 1_000_000, (None, None))


def test_static_table_over_the_row_limit_is_refused(spark_sql):
    df = make_df(spark_sql, [(1, "a", 1.0, 0)])
    lookup = make_static(spark_sql, [(1, "x", 2.0), (2, "y", None), (3, "z", 0.0)])
    spark_sql.conf.set(MAX_ROWS_CONF, "2")
    try:
        with pytest.raises(UnsupportedTransform, match="static DataFrame of more than 2 rows.*maxStaticRows"):
            sparkqos.run(df, {"q": lambda d: d.join(lookup, "k")})
    finally:
        spark_sql.conf.unset(MAX_ROWS_CONF)


def test_static_join_operator_keeps_the_executor_columns():
    from sparkqos.executor.queues import stamp, with_internal

    zones = pa.table({"zone": ["n", "n", None], "city": ["Oslo", "Bergen", "Nowhere"]})
    op = StaticJoin(zones, ["z"], ["zone"], how="inner")
    schema = op.bind("q/join", [with_internal(pa.schema([("z", pa.string())]))])
    assert schema.names == ["z", "zone", "city", "__arrival", "__seq"]
    out = op.process(stamp(pa.record_batch({"z": ["n", None, "s"]}), 7.0, 40))
    assert out.column("__arrival").to_pylist() == [7.0, 7.0] and out.column("__seq").to_pylist() == [40, 40]
    assert op.copy().table is zones  # each query's copy shares the one static table


# -- streams -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    """A stream in event-time order (nothing late), with null keys and repeated keys."""
    n = 300
    rng = np.random.default_rng(5)
    ts = BASE_US + np.sort(rng.integers(0, 6_000_000, n))
    k = [None if i % 17 == 0 else int(x) for i, x in enumerate(rng.integers(0, 6, n))]
    d = rng.normal(0, 1, n)
    d[::11] = np.nan
    table = pa.table(
        {
            "k": pa.array(k, pa.int32()),
            "s": pa.array([["a", "b", "", None][i % 4] for i in range(n)]),
            "d": pa.array(d),
            "ts": pa.array(ts.astype("int64"), TS),
        }
    )
    path = tmp_path_factory.mktemp("joins") / "trace.parquet"
    pq.write_table(table, path)
    return path


def test_stream_equals_spark_on_the_static_data(spark_sql, trace, tmp_path):
    lookup = make_static(spark_sql, [(0, "zero", 0.0), (1, "one", 1.0), (1, "uno", math.nan), (None, "none", None), (4, "", 4.0)])
    queries = {
        "enrich": static_queries(lookup)["left_using"],
        "range": range_join,
        "strict": strict_join,
        "renamed": renamed_join,
    }
    sink = stream_to_end(
        replay(spark_sql, trace, seconds_per_trigger=1),
        queries,
        tmp_path / "ckpt",
        timeout_s=120,
        strategy="chain",
        budget_s=0.001,
    )
    static = spark_sql.read.parquet(str(trace))
    for name, transform in queries.items():
        want = transform(static).toArrow()
        got = sink.table(name)
        assert got.num_rows > 0, name
        assert rows_of(got.cast(want.schema)) == rows_of(want), name


def test_a_watermark_reaches_the_join_through_a_renaming_select(spark_sql, trace):
    """``withWatermark("ts")`` then ``select(col("ts").alias("t"))``: the join's state is
    bounded by the watermark on ``t``, as in Spark (the stream's run is checked against Spark in
    test_stream_equals_spark_on_the_static_data)."""
    compiled = compile_transforms(replay(spark_sql, trace, seconds_per_trigger=1), {"renamed": renamed_join})
    (join,) = [op for op in compiled.operators.values() if isinstance(op, IntervalJoin)]
    assert (join.times, join.delays_us) == (("t", "t2"), (5_000_000, 5_000_000))


def test_interval_join_state_is_evicted_and_survives_a_checkpoint(spark_sql, trace):
    """The stream's compiled join (watermarks of 5 s on both sides) driven batch by batch: state
    stays bounded by the watermark, a checkpoint taken mid-stream restores into a fresh
    executor, and the rows before plus after it are Spark's batch join."""
    compiled = compile_transforms(replay(spark_sql, trace, seconds_per_trigger=1), {"range": range_join})
    (join,) = [op for op in compiled.operators.values() if isinstance(op, IntervalJoin)]
    assert join.delays_us == (5_000_000, 5_000_000)
    table = pq.read_table(trace)
    batches = table.to_batches(max_chunksize=20)
    ticks = iter(range(1, 1 << 40))

    def clock():
        return next(ticks) * 1e-3

    def executor():
        return Executor(compiled.fresh(), schedulers.get("chain"), clock=clock)

    ex = executor()
    half = len(batches) // 2
    for i, b in enumerate(batches[:half]):
        ex.ingest("input", b, arrival=float(i))
        ex.run(max_units=3)
    state = ex.to_state()
    before = ex.result("range")
    name = next(n for n, op in compiled.operators.items() if isinstance(op, IntervalJoin))
    held = ex._ops[name].state_rows()
    assert 0 < held < table.num_rows  # some rows are held, the oldest are already evicted
    again = executor()
    again.load_state(state)
    for i, b in enumerate(batches[half:], start=half):
        again.ingest("input", b, arrival=float(i))
        again.run(max_units=3)
    again.finish()
    assert again._ops[name].late_rows == 0
    got = pa.concat_tables([before, again.result("range")])
    assert_same(got, range_join(spark_sql.read.parquet(str(trace))).toArrow(), "range")


# -- what is refused -------------------------------------------------------------------------------


def _refused_static(lookup):
    return [
        (lambda d: d.join(lookup, "k", "right"), "right outer join with a static DataFrame"),
        (lambda d: d.join(lookup, "k", "full"), "full outer join with a static DataFrame"),
        (lambda d: d.join(lookup, "k", "left_semi"), "left semi join"),
        (lambda d: d.join(lookup, d.k < lookup.k), "non-equality condition"),
        (lambda d: d.join(lookup, (d.k == lookup.k) & (d.d > lookup.w)), "non-equality condition"),
        (lambda d: d.join(lookup, d.k.eqNullSafe(lookup.k)), "null-safe equality"),
        (lambda d: d.crossJoin(lookup), "cross join"),
        (lambda d: lookup.join(d, "k", "left"), "left join with a static DataFrame.*stream on the right"),
        (lambda d: d.join(lookup, d.s == lookup.name), "output columns with the same name"),
    ]


def test_refused_static_joins_name_the_operation(spark_sql):
    df = make_df(spark_sql, [(1, "a", 1.0, 0)])
    lookup = make_static(spark_sql, [(1, "x", 2.0)])
    for transform, named in _refused_static(lookup):
        with pytest.raises(UnsupportedTransform, match=named):
            sparkqos.run(df, {"q": transform})


def _refused_stream_joins():
    def both(d):
        return _branches(d)

    def outer(d):
        a, b = both(d)
        return a.join(b, (a.k == b.k2) & (b.ts2 >= a.ts) & (b.ts2 <= a.ts + F.expr("INTERVAL 1 SECOND")), "left_outer")

    def no_range(d):
        a, b = both(d)
        return a.join(b, a.k == b.k2)

    def one_bound(d):
        a, b = both(d)
        return a.join(b, (a.k == b.k2) & (b.ts2 >= a.ts))

    def no_keys(d):
        a, b = both(d)
        return a.join(b, (b.ts2 >= a.ts) & (b.ts2 <= a.ts + F.expr("INTERVAL 1 SECOND")))

    def other_condition(d):
        a, b = both(d)
        return a.join(b, (a.k == b.k2) & (b.ts2 >= a.ts) & (b.ts2 <= a.ts) & (a.s < b.s2))

    def aggregate_side(d):
        # the running aggregate compiles (a keyed aggregate); joining the stream with it is a
        # stream–stream join with no event-time range, refused as such
        return d.join(d.groupBy("k").count(), "k")

    return [
        (outer, "left stream–stream join"),
        (no_range, "without a range condition on event time"),
        (one_bound, "without a range condition on event time"),
        (no_keys, "without equal keys"),
        (other_condition, "not an event-time range"),
        (aggregate_side, "stream–stream join without a range condition on event time"),
    ]


def test_refused_stream_joins_name_the_operation(spark_sql):
    df = make_df(spark_sql, [(1, "a", 1.0, 0)])
    for transform, named in _refused_stream_joins():
        with pytest.raises(UnsupportedTransform, match=named):
            sparkqos.run(df, {"q": transform})


def test_stream_joins_need_a_watermark_and_a_static_side_that_does_not_stream(spark_sql, trace, tmp_path):
    stream = replay(spark_sql, trace, seconds_per_trigger=1)

    def unwatermarked(d):
        b = d.select(F.col("k").alias("k2"), F.col("ts").alias("ts2"))
        return d.join(b, (d.k == b.k2) & (b.ts2 >= d.ts) & (b.ts2 <= d.ts + F.expr("INTERVAL 1 SECOND")))

    with pytest.raises(UnsupportedTransform, match="stream–stream join on a stream without withWatermark"):
        sparkqos.stream(stream, {"q": unwatermarked}, checkpoint=tmp_path)
    other = spark_sql.readStream.format("sparkqos.bursty").load().select(F.col("sensor_id").alias("k"))
    with pytest.raises(UnsupportedTransform, match="static DataFrame that is itself streaming"):
        sparkqos.stream(stream, {"q": lambda d: d.join(other, "k")}, checkpoint=tmp_path)
    assert not spark_sql.streams.active


def test_a_join_as_spark_connect_writes_it_is_refused():
    """Spark Connect's plan rewrite (sparkqos.spark.connect_plan) writes a join as a bare ``Join``
    node over its inputs, without its condition or type: refused, naming it."""
    from sparkqos.compile.spark_plan import compile_plans

    source = [{"class": "org.apache.spark.sql.execution.LogicalRDD", "num-children": 0}]
    static = {"class": "org.apache.spark.sql.catalyst.plans.logical.LocalRelation", "num-children": 0}
    plan = [{"class": "Join", "num-children": 2}, *source, static]
    with pytest.raises(UnsupportedTransform, match="'Join'.*not supported under Spark Connect"):
        compile_plans({"q": plan}, source, [], pa.schema([("k", pa.int32())]))


def test_interval_join_drops_late_rows_and_evicts_by_the_watermark():
    from sparkqos.executor.queues import stamp, with_internal

    sch = with_internal(pa.schema([("k", pa.int64()), ("t", TS)]))
    op = IntervalJoin(["k"], ["k"], ("t", "t"), -1_000_000, 1_000_000, delays_us=(0, 2_000_000), right_names=["k2", "t2"])
    op.bind("q/join", [sch, sch])

    def rows(ks, secs):
        return stamp(pa.table({"k": ks, "t": pa.array([BASE_US + int(s * 1e6) for s in secs], TS)}).to_batches()[0], 0.0, 0)

    assert op.process(rows([1, 1], [0, 10]), 0) is None
    out = op.process(rows([1, 1], [10.5, 9.5]), 1)  # both pair with the left row at 10 s
    assert sorted(r["t2"].timestamp() - BASE_US / 1e6 for r in out.to_pylist()) == [9.5, 10.5]
    # watermark min(10 - 0, 10.5 - 2) = 8.5 s: the left row at 0 s (0 + 1 < 8.5) is gone
    assert op.watermark() == BASE_US + 8_500_000 and op.state_rows() == 3
    assert op.process(rows([1], [0.5]), 1) is None and op.late_rows == 1
    again = IntervalJoin(["k"], ["k"], ("t", "t"), -1_000_000, 1_000_000, delays_us=(0, 2_000_000), right_names=["k2", "t2"])
    again.bind("q/join", [sch, sch])
    again.from_state(op.to_state())
    assert again.state_rows() == 3 and again.late_rows == 1 and again.watermark() == op.watermark()


def test_static_side_read_from_parquet(spark_sql, tmp_path):
    lookup = pa.table({"k": pa.array([1, 1, None, 4], pa.int64()), "name": ["x", "y", "z", ""], "w": [0.5, math.nan, 1.0, None]})
    pq.write_table(lookup, tmp_path / "lookup.parquet")
    static = spark_sql.read.parquet(str(tmp_path / "lookup.parquet")).where(F.col("name") != "y")
    df = make_df(spark_sql, [(1, "a", 1.0, 0), (None, "b", 2.0, 1), (4, "", math.nan, 2), (2, None, None, None)])
    queries = {"inner": lambda d: d.join(static, "k"), "left": lambda d: d.join(static, "k", "left")}
    got = sparkqos.run(df, queries, strategy="chain", batch_rows=2)
    for name, transform in queries.items():
        assert_same(got[name], transform(df).toArrow(), name)


def rows_of(table: pa.Table) -> list[tuple]:
    return sorted_rows(table)


def assert_same(got: pa.Table, want: pa.Table, name: str) -> None:
    assert_same_rows(got, want, name)
