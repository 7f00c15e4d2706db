"""Session windows written as PySpark: ``groupBy(session_window(ts, gap),
keys).agg(...)`` compiled to one SessionWindowAggregate.

* On a finite DataFrame ``sparkqos.run`` gives Spark's batch rows (nulls in keys, values and
  times, NaN, ±inf, empty strings, empty input, times tied within and across batches) under every
  registered strategy, including ``session_window.start``/``.end`` read above the aggregate.
* On a stream, ``stream()`` + ``finish()`` gives the sessions Spark's own streaming run (append
  mode, watermark) gives, plus the ones still open when the input ends, which Spark never emits.
* A checkpoint taken while sessions are open restores them; late rows are dropped and counted.
* What is not supported (a gap computed per row, months, zero) raises UnsupportedTransform naming it.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

import sparkqos
from sparkqos import schedulers
from sparkqos.errors import UnsupportedTransform
from sparkqos.executor import Executor
from sparkqos.executor.operators import SessionWindowAggregate, WindowAgg
from sparkqos.executor.queues import stamp, with_internal
from sparkqos.spark.transforms import compile_transforms
from tests.conftest import closed_by, examples, replay, spark_streams, strategies, stream_to_end
from tests.test_transforms_stateful import BASE_US, SCHEMA, assert_same, make_df

TS = SCHEMA.field("ts").type

keys = st.one_of(st.none(), st.sampled_from(["a", "b", ""]))
ints = st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1), st.integers(-5, 5))
doubles = st.one_of(st.none(), st.sampled_from([math.nan, math.inf, -math.inf, 0.0, -0.0, 2.5]), st.floats(-1e3, 1e3))
seconds = st.one_of(st.none(), st.integers(0, 40).map(lambda s: s * 1_000_000))  # whole seconds: ties and touching sessions
rows = st.lists(st.tuples(keys, ints, doubles, seconds), max_size=40)


def sessions(df):
    return (
        df.withWatermark("ts", "5 seconds")
        .groupBy(F.session_window("ts", "4 seconds"), "k")
        .agg(
            F.count(F.lit(1)).alias("n"),
            F.count("d").alias("nd"),
            F.sum("i").alias("si"),
            F.sum("d").alias("sd"),
            F.avg("d").alias("ad"),
            F.min("d").alias("lo"),
            F.max("i").alias("imax"),
            F.first("i").alias("fi"),
            F.last("d").alias("ld"),
            F.first("d", ignorenulls=True).alias("fd"),
            F.last("i", ignorenulls=True).alias("li"),
        )
    )


def fields(df):
    """Struct fields of the session read above it, the window renamed, a filter on an aggregate."""
    return (
        df.groupBy(F.session_window("ts", "2 seconds").alias("s"), "k")
        .agg(F.sum("i").alias("si"))
        .select(F.col("s.start").alias("start"), F.col("s.end").alias("e"), "k", "si")
        .where(F.col("si").isNotNull())
    )


def no_keys(df):
    """The gap in another spelling, no grouping keys."""
    return df.groupBy(F.session_window("ts", "interval 3000 milliseconds")).agg(F.max("d").alias("m"), F.count("*").alias("n"))


QUERIES = {"sessions": sessions, "fields": fields}
SMALL_QUERIES = {"sessions": sessions, "no_keys": no_keys}


@given(data=rows, strategy=st.sampled_from(strategies()), batch_rows=st.integers(1, 9))
@settings(max_examples=examples(6), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_session_windows_equal_spark(spark_sql, data, strategy, batch_rows):
    df = make_df(spark_sql, data)
    got = sparkqos.run(df, QUERIES, strategy=strategy, batch_rows=batch_rows, units_between=2)
    for name, transform in QUERIES.items():
        assert_same(got[name], transform(df).toArrow(), name)


SMALL = [
    ("a", 1, 1.0, 0),
    ("a", 2, None, 3),
    ("b", 3, math.nan, 1),
    ("a", 4, 2.0, 20),
    (None, 5, -math.inf, 2),
    ("a", None, 3.0, 7),
]


@pytest.fixture(scope="module")
def small(spark_sql):
    df = make_df(spark_sql, [(k, i, d, s * 1_000_000) for k, i, d, s in SMALL])
    return df, {name: transform(df).toArrow() for name, transform in SMALL_QUERIES.items()}


@pytest.mark.parametrize("strategy", strategies())
def test_every_strategy_gives_sparks_sessions(small, strategy):
    df, want = small
    got = sparkqos.run(df, SMALL_QUERIES, strategy=strategy, batch_rows=2)
    for name in SMALL_QUERIES:
        assert_same(got[name], want[name], f"{name} under {strategy}")
    assert got["sessions"].num_rows == 4  # a: [0, 11) (0, 3, 7 chained), [20, 24); b; null
    assert got["no_keys"].num_rows == 3  # [0, 6) (0, 1, 2, 3 chained), [7, 10), [20, 23)


def test_the_plan_is_one_operator_with_the_gap(spark):
    df = make_df(spark, [("a", 1, 1.0, 0)])
    compiled = compile_transforms(df, {"s": sessions, "f": fields})
    assert compiled.plan.names == ("s/1:session_window", "f/1:session_window", "f/2:select", "f/3:select", "f/4:where")
    op = compiled.operators["s/1:session_window"]
    assert isinstance(op, SessionWindowAggregate) and (op.gap_us, op.delay_us, op.keys) == (4_000_000, None, ["k"])
    text = sparkqos.explain(df, {"s": sessions})
    assert "native  s/1:session_window (aggregate): computes count(*), " in text
    assert " natively; every session is emitted when the input ends (no watermark)" in text


@pytest.mark.parametrize(
    ("gap", "named"),
    [
        (lambda: F.when(F.col("k") == "a", "5 seconds").otherwise("9 seconds"), "gap that is an expression"),
        (lambda: "1 month", "gap '1 month'"),
        (lambda: "0 seconds", "gap of 0"),
        (lambda: "-5 seconds", "gap of -5000000"),
    ],
)
def test_gaps_sparkqos_cannot_run_are_named(spark, gap, named):
    df = make_df(spark, [("a", 1, 1.0, 0)])
    with pytest.raises(UnsupportedTransform, match=named):
        sparkqos.run(df, {"q": lambda d: d.groupBy(F.session_window("ts", gap()), "k").count()})


# -- streams ---------------------------------------------------------------------------------------
def trace(n: int = 90, seed: int = 4) -> pa.Table:
    """Rows in time order at half seconds (so a watermark 2.5 s behind never meets a session's
    end), each key's times distinct, nulls in keys and values: the shape of a click stream."""
    rng = np.random.default_rng(seed)
    names = ["u1", "u2", None, ""]
    seen, data, t = set(), [], 0
    for _ in range(n):
        t += int(rng.choice([0, 1, 1, 2, 4, 9]))
        k = names[int(rng.integers(4))]
        if (k, t) in seen:
            continue
        seen.add((k, t))
        i = None if rng.random() < 0.1 else int(rng.integers(-50, 50))
        d = [math.nan, math.inf, None, float(rng.normal())][int(rng.integers(4))]
        data.append((k, i, d, BASE_US + t * 500_000))
    cols = list(zip(*data, strict=True))
    return pa.table([pa.array(list(c), f.type) for c, f in zip(cols, SCHEMA, strict=True)], schema=SCHEMA)


def streamed(df):
    return (
        df.withWatermark("ts", "2.5 seconds")
        .groupBy(F.session_window("ts", "3 seconds"), "k")
        .agg(
            F.count("*").alias("n"),
            F.sum("i").alias("si"),
            F.max("d").alias("hi"),
            F.first("i").alias("fi"),
            F.last("d", ignorenulls=True).alias("ld"),
        )
    )


def test_streamed_sessions_equal_sparks_streaming_run(spark_sql, tmp_path):
    table = trace(60)
    path = tmp_path / "clicks.parquet"
    pq.write_table(table, path)
    queries = {"streamed": streamed}
    sink = stream_to_end(replay(spark_sql, path, seconds_per_trigger=30), queries, tmp_path / "sparkqos", strategy="chain")
    spark_run = spark_streams(queries, lambda: replay(spark_sql, path, 30), tmp_path / "spark")["streamed"]
    got = sink.table("streamed")
    closed = closed_by(got, spark_run.watermark, "session_window")
    assert_same(closed, spark_run.rows.cast(got.schema), "streamed")
    assert 0 < closed.num_rows < got.num_rows  # Spark's append mode never emits the open ones
    assert_same(got, streamed(spark_sql.createDataFrame(table)).toArrow(), "all")  # with them, Spark's batch result


def test_a_checkpoint_keeps_the_open_sessions(spark_sql, tmp_path):
    """Half way through a stream the executor is checkpointed while sessions are open, and goes
    on in a fresh executor restored from it: the sessions spanning the cut come out whole."""
    table = trace(60, seed=5)
    path = tmp_path / "clicks.parquet"
    pq.write_table(table, path)
    compiled = compile_transforms(replay(spark_sql, path), {"streamed": streamed})
    batches = table.cast(compiled.sources["input"]).to_batches(max_chunksize=5)
    plan = compiled.fresh()
    ex = Executor(plan, schedulers.get("fifo"))
    parts, cut = [], len(batches) // 2
    for i, batch in enumerate(batches):
        if i == cut:
            parts.append(ex.result("streamed"))
            op = next(o for o in plan.operators.values() if isinstance(o, SessionWindowAggregate))
            assert op.state_rows() > 0 and parts[0].num_rows > 0  # open sessions and closed ones
            state = ex.to_state()
            ex = Executor(compiled.fresh(), schedulers.get("fifo"))
            ex.load_state(state)
        ex.ingest("input", batch, arrival=float(i))
        ex.run(max_units=4)
    ex.finish()
    got = pa.concat_tables([*parts, ex.result("streamed")])
    assert_same(got, streamed(spark_sql.createDataFrame(table)).toArrow(), "restored")
    cut_us = batches[cut].column("ts").view(pa.int64())[0].as_py()
    spans = got.column("session_window").combine_chunks()
    starts, ends = spans.field("start").view(pa.int64()), spans.field("end").view(pa.int64())
    # a session with rows on both sides of the cut (its last row at least a gap before its end)
    assert pc.any(pc.and_(pc.less(starts, cut_us), pc.greater_equal(ends, cut_us + 3_000_000))).as_py()


# -- the operator alone ----------------------------------------------------------------------------
def _op():
    aggs = [WindowAgg("count_all", None, "n"), WindowAgg("last", "v", "lv")]
    op = SessionWindowAggregate(["k"], aggs, "ts", 5_000_000, delay_us=10_000_000)
    op.bind("q/session", [with_internal(pa.schema([("k", pa.string()), ("v", pa.int64()), ("ts", TS)]))])
    return op


def _batch(k, v, secs, seq=0):
    ts = pa.array([None if s is None else BASE_US + int(s * 1e6) for s in secs], TS)
    return stamp(pa.record_batch({"k": pa.array(k, pa.string()), "v": pa.array(v, pa.int64()), "ts": ts}), 0.0, seq)


def _rows(out):
    out = pa.Table.from_batches([out])
    span = out.column("session_window").combine_chunks()
    starts = [(x - BASE_US) // 1_000_000 for x in span.field("start").view(pa.int64()).to_pylist()]
    ends = [(x - BASE_US) // 1_000_000 for x in span.field("end").view(pa.int64()).to_pylist()]
    return sorted(zip(out.column("k").to_pylist(), starts, ends, out.column("n").to_pylist(), out.column("lv").to_pylist()))


def test_a_row_bridging_two_sessions_merges_them_and_late_rows_are_counted():
    """Gap 5 s, watermark 10 s behind; the checkpoint is taken with two sessions of a open."""
    op = _op()
    assert op.process(_batch([], [], [])) is None  # an empty batch
    out = op.process(_batch(["a", "b", "a", "a"], [1, 3, 2, 4], [0, 1, 12, 20]))  # watermark 10 s
    assert _rows(out) == [("a", 0, 5, 1, 1), ("b", 1, 6, 1, 3)]
    assert op.state_rows() == 2  # a [12, 17) and a [20, 25)
    again = _op()
    again.from_state(op.to_state())
    # a at 3 s is late (its session [3, 8) ended before the watermark); a at 16 s bridges [12, 17)
    # and [20, 25); a row without a time is dropped, not late.
    assert again.process(_batch(["a", "a", "a"], [5, 6, 7], [3, 16, None], 4)) is None
    assert again.late_rows == 1 and again.state_rows() == 1
    (rest,) = again.flush()
    assert _rows(rest) == [("a", 12, 25, 3, 4)]  # last() is the row of the latest time (20 s), not the last to arrive
