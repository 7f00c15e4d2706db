"""Every operator of the executor, under every registered strategy, against Spark's own engine
(the README's test command runs one strategy of each family, CI every one: ``strategies`` in
tests/conftest.py).

For each operator a small query set runs over a finite, seeded input; the executor's output for
each strategy must equal what Spark computes from the same rows (ignoring row order):
scheduling never changes the answer. Spark's answer of a query is asked once and every
strategy's rows are compared with it (``sparkqos.testing.assert_same_rows``: same columns and
types, same rows), so a failure names the strategy and the differing rows.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from sparkqos import schedulers
from sparkqos.compile import QuerySet
from sparkqos.errors import ExpressionError, PlanError
from sparkqos.executor.expressions import avg, col, count, max_, min_, sum_
from sparkqos.executor.loop import replay
from sparkqos.executor.operators import Synthetic, WindowAggregate, WindowJoin
from sparkqos.testing import assert_same_rows
from tests.conftest import strategies

# Strategies that cannot be built without parameters are left out (none at the time of writing;
# the list is printed by test_strategy_roster).
STRATEGIES: list[str] = []
SKIPPED: dict[str, str] = {}
for _name in schedulers.available():
    try:
        schedulers.get(_name)
    except Exception as exc:  # a strategy that needs parameters
        SKIPPED[_name] = f"{type(exc).__name__}: {exc}"
    else:
        STRATEGIES.append(_name)

SENSORS = pa.schema([("id", pa.int64()), ("room", pa.string()), ("temp", pa.float64()), ("d", pa.int64()), ("ts", pa.float64())])
EVENTS = pa.schema([("k", pa.int64()), ("a", pa.int64()), ("ts", pa.float64())])
OTHERS = pa.schema([("k", pa.int64()), ("b", pa.int64()), ("ts", pa.float64())])


def sensor_batches(rows: int = 240, seed: int = 1, stream: str = "sensors", t0: float = 0.0):
    """Batches of 1–40 rows: ids, rooms a–d, temperatures in halves (exact sums), some nulls,
    event times increasing."""
    rng = np.random.default_rng(seed)
    feeds, start, t = [], 0, t0
    while start < rows:
        n = int(rng.integers(1, 41))
        ids = np.arange(start, start + n)
        temp = (rng.integers(0, 200, n) / 2.0).tolist()
        temp = [None if rng.random() < 0.05 else v for v in temp]
        room = [None if rng.random() < 0.03 else "abcd"[i] for i in rng.integers(0, 4, n)]
        ts = np.sort(rng.uniform(t, t + n * 0.25, n)).round(2)
        batch = pa.record_batch({"id": ids, "room": room, "temp": temp, "d": rng.integers(0, 4, n), "ts": ts}, schema=SENSORS)
        feeds.append((t, stream, batch))
        t = float(ts[-1])
        start += n
    return feeds


def keyed_batches(stream: str, schema: pa.Schema, value: str, rows: int, seed: int, keys: int = 5):
    rng = np.random.default_rng(seed)
    feeds, start, t = [], 0, 0.0
    while start < rows:
        n = int(rng.integers(1, 9))
        ts = np.sort(rng.uniform(t, t + n * 0.5, n)).round(2)
        batch = pa.record_batch({"k": rng.integers(0, keys, n), value: np.arange(start, start + n), "ts": ts}, schema=schema)
        feeds.append((float(ts[0]), stream, batch))
        t = float(ts[-1])
        start += n
    return feeds


def interleave(*feed_lists):
    """Merge feeds by arrival time (stable: earlier lists first on ties)."""
    tagged = [(f[0], i, j, f) for i, fl in enumerate(feed_lists) for j, f in enumerate(fl)]
    return [f for *_, f in sorted(tagged, key=lambda x: x[:3])]


def units_for(feeds, seed: int = 3):
    return np.random.default_rng(seed).integers(0, 4, len(feeds)).tolist()


def check_against_spark(spark, compiled, feeds, units=None):
    """Replay ``feeds`` under every strategy (of :func:`strategies`) and compare each query with Spark's answer."""
    from sparkqos.spark.translate import plan_to_spark, stamped_inputs

    units = units_for(feeds) if units is None else units
    results = {}
    for name in (s for s in STRATEGIES if s in strategies()):
        ex = replay(compiled, schedulers.get(name), feeds, units)
        assert ex.state.total_queued == 0, f"{name} left rows queued"
        results[name] = {q: ex.result(q) for q in compiled.roots}
    inputs = stamped_inputs(spark, feeds, compiled.sources)
    for q in compiled.roots:
        assert sum(r[q].num_rows for r in results.values()) > 0, f"query {q} produced nothing; the test input is too small"
        want = plan_to_spark(compiled, q, inputs).toArrow()
        for name, r in results.items():
            assert_same_rows(r[q], want, f"query {q} under {name}")
    return results


def test_strategy_roster():
    assert {"fifo", "chain", "rr", "greedy", "mtiq"} <= set(STRATEGIES)
    print("strategies:", STRATEGIES, "skipped:", SKIPPED)


# -- one operator at a time ---------------------------------------------------------------------


def test_select_matches_spark(spark):
    qs = QuerySet()
    s = qs.stream("sensors", SENSORS)
    s.where(((col("temp") > 50) & ~col("room").isin(["b"])) | col("temp").is_null()).sink("q")
    check_against_spark(spark, qs.build(), sensor_batches())


def test_project_matches_spark(spark):
    qs = QuerySet()
    s = qs.stream("sensors", SENSORS)
    s.select(
        "id",
        (col("temp") * 2 + 1).alias("t2"),
        (col("temp") / col("d")).alias("ratio"),
        (col("room") == "a").alias("is_a"),
        (col("id") - col("d") * 3).alias("n"),
    ).sink("q")
    check_against_spark(spark, qs.build(), sensor_batches())


def test_union_matches_spark(spark):
    qs = QuerySet()
    a = qs.stream("sensors", SENSORS)
    b = qs.stream("backup", SENSORS)
    a.where(col("temp") < 30).union(b.where(col("room") == "c")).sink("q")
    feeds = interleave(sensor_batches(seed=1), sensor_batches(seed=2, stream="backup"))
    check_against_spark(spark, qs.build(), feeds)


def test_tumbling_window_aggregate_matches_spark(spark):
    qs = QuerySet()
    s = qs.stream("sensors", SENSORS)
    s.window_agg(
        "room",
        [count(), count("temp").alias("n_temp"), sum_("temp"), avg("temp"), min_("temp"), max_("id")],
        time_col="ts",
        size=5.0,
    ).sink("q")
    check_against_spark(spark, qs.build(), sensor_batches())


def test_sliding_window_aggregate_matches_spark(spark):
    qs = QuerySet()
    s = qs.stream("sensors", SENSORS)
    s.window_agg(["room", "d"], [count(), sum_("id"), avg("temp")], time_col="ts", size=6.0, slide=2.0).sink("q")
    check_against_spark(spark, qs.build(), sensor_batches())


def _join_plan(**window):
    qs = QuerySet()
    a = qs.stream("events", EVENTS)
    b = qs.stream("others", OTHERS)
    a.select("k", "a", col("ts").alias("ts_a")).join(b.select("k", "b", "ts"), on="k", **window).sink("q")
    return qs.build()


def _join_feeds():
    return interleave(keyed_batches("events", EVENTS, "a", 90, seed=5), keyed_batches("others", OTHERS, "b", 90, seed=6))


def test_tuple_window_join_matches_spark(spark):
    check_against_spark(spark, _join_plan(rows=4), _join_feeds())


def test_time_window_join_on_arrival_matches_spark(spark):
    check_against_spark(spark, _join_plan(seconds=1.5), _join_feeds())


def test_time_window_join_on_event_time_matches_spark(spark):
    qs = QuerySet()
    a = qs.stream("events", EVENTS)
    b = qs.stream("others", OTHERS)
    a.join(b.select("k", "b", col("ts").alias("tb")), on="k", seconds=1.0, time_col=("ts", "tb")).sink("q")
    check_against_spark(spark, qs.build(), _join_feeds())


def test_join_column_clash_and_unknown_time_column_are_plan_errors():
    qs = QuerySet()
    a = qs.stream("events", EVENTS)
    b = qs.stream("others", OTHERS)
    a.join(b.select("k", "b", col("ts").alias("tb")), on="k", seconds=1.0, time_col="ts").sink("q")
    with pytest.raises(ExpressionError, match="operator 'q/2:join': unknown column 'ts'"):
        qs.build()
    qs = QuerySet()
    a = qs.stream("events", EVENTS)
    b = qs.stream("others", OTHERS)
    a.join(b, on="k", rows=2).sink("q")
    with pytest.raises(PlanError, match=r"both inputs have column\(s\) \['ts'\]"):
        qs.build()


def test_synthetic_matches_spark(spark):
    qs = QuerySet()
    s = qs.stream("sensors", SENSORS)
    s.synthetic(0.4, cost_s=1e-7, seed=7).synthetic(0.5, cost_s=0.0, seed=11).sink("q")
    results = check_against_spark(spark, qs.build(), sensor_batches())
    kept = results["fifo"]["q"].num_rows
    assert 0.1 * 240 < kept < 0.3 * 240  # σ = 0.4 · 0.5


def test_synthetic_keep_mask_is_sparks_on_nulls_negatives_and_large_keys(spark):
    """The executor's keep/drop hash against Spark evaluating sparkqos.synthetic's condition on the
    same keys: nulls are dropped, |key| is taken before the modulus, large keys stay exact."""
    from pyspark.sql import functions as F

    from sparkqos.executor.operators import Synthetic
    from sparkqos.spark.synthetic import _keep_sql

    keys = [None, 0, 1, -1, 7, -7, 2**31 - 1, 2**31, -(2**40), 2**62, None, *range(100, 400, 7)]
    df = spark.createDataFrame([(i, k) for i, k in enumerate(keys)], "i long, k long")
    for selectivity, seed in ((0.5, 11), (0.1, 3), (1.0, 0)):
        op = Synthetic(selectivity, cost_s=0.0, seed=seed, key="k")
        want = [r["keep"] for r in df.select("i", F.expr(_keep_sql("k", op, is_long=True)).alias("keep")).orderBy("i").collect()]
        got = op.keep_mask(pa.array(keys, pa.int64())).to_pylist()
        assert got == want
        no_nulls = [k for k in keys if k is not None]
        assert op.keep_mask(pa.array(no_nulls, pa.int64())).to_pylist() == [w for k, w in zip(keys, want) if k is not None]


def test_synthetic_burn_spends_at_least_the_declared_cpu():
    """The declared cost is the calling thread's CPU time (a hash that releases the GIL)."""
    import time

    from sparkqos.executor.operators.synthetic import _burn

    for seconds in (0.0, 1e-5, 0.003):
        t0 = time.thread_time()
        _burn(seconds)
        assert time.thread_time() - t0 >= seconds


# -- operator details without Spark ------------------------------------------------------------


def test_window_state_roundtrips_through_ipc():
    op = WindowAggregate(["room"], [count(), sum_("temp")], "ts", size=5.0)
    from sparkqos.executor.queues import stamp, with_internal

    op.bind("q/agg", [with_internal(SENSORS)])
    feeds = sensor_batches(rows=60)
    for _, _, b in feeds[:2]:
        op.process(stamp(b, 0.0, 0))
    saved = op.to_state()
    twin = op.copy()
    twin.bind("q/agg", [with_internal(SENSORS)])
    twin.from_state(saved)
    assert twin.state_rows() == op.state_rows() > 0
    a = pa.Table.from_batches(op.flush()).sort_by([("window_start", "ascending"), ("room", "ascending")])
    b = pa.Table.from_batches(twin.flush()).sort_by([("window_start", "ascending"), ("room", "ascending")])
    assert a.equals(b)


def test_tuple_join_state_is_bounded_by_the_window():
    from sparkqos.executor.queues import BatchQueue, stamp, with_internal

    others = pa.schema([("k", pa.int64()), ("b", pa.int64())])
    op = WindowJoin("k", rows=3)
    op.bind("q/join", [with_internal(EVENTS), with_internal(others)])
    left, right = BatchQueue(with_internal(EVENTS)), BatchQueue(with_internal(others))
    for i, (_, stream, b) in enumerate(_join_feeds()):
        if stream == "events":
            left.push(stamp(b, float(i), 0))
        else:
            right.push(stamp(b.select(["k", "b"]), float(i), 0))
    op.run([left, right], 10_000, final=True)
    assert op.state_rows() == 6
    restored = WindowJoin("k", rows=3)
    restored.bind("q/join", op.input_schemas)
    restored.from_state(op.to_state())
    assert restored.state_rows() == 6


def test_synthetic_declares_its_statistics_to_the_plan():
    qs = QuerySet()
    qs.stream("sensors", SENSORS).synthetic(0.25, cost_s=0.002, seed=1).sink("q")
    plan = qs.build().plan
    (op,) = plan.operators
    assert (op.selectivity, op.cost, op.kind) == (0.25, 0.002, "filter")
    with pytest.raises(PlanError, match="synthetic selectivity must be a finite number >= 0 and <= 1, got 1.5") as err:
        Synthetic(1.5)
    assert (err.value.parameter, err.value.value) == ("selectivity", 1.5)


def test_window_and_join_parameters_are_checked():
    with pytest.raises(PlanError, match="window slide must be a finite number > 0 and <= 5, got 6"):
        WindowAggregate("k", [count()], "ts", size=5, slide=6)
    with pytest.raises(PlanError, match="exactly one window"):
        WindowJoin("k")
    qs = QuerySet()
    qs.stream("sensors", SENSORS).window_agg("room", [sum_("room")], time_col="ts", size=5).sink("q")
    with pytest.raises(ExpressionError, match="operator 'q/1:window_agg': sum needs a numeric column, got column 'room'"):
        qs.build()


def test_translation_reads_public_properties():
    """What sparkqos.spark.translate needs from an operator is public and read-only."""
    from sparkqos.executor.queues import with_internal

    syn = Synthetic(0.25, cost_s=0.0, seed=3)
    assert syn.threshold == int(0.25 * Synthetic.MODULUS)
    assert WindowAggregate("k", [count()], "ts", size=6.0, slide=2.5).window_copies == 3
    assert WindowAggregate("k", [count()], "ts", size=5.0).window_copies == 1
    join = WindowJoin("k", rows=2)
    with pytest.raises(PlanError, match="not bound"):
        _ = join.left_columns
    others = pa.schema([("k", pa.int64()), ("b", pa.int64()), ("tb", pa.float64())])
    join.bind("q/join", [with_internal(EVENTS), with_internal(others)])
    assert (join.left_columns, join.right_columns) == (("k", "a", "ts"), ("b", "tb"))
    with pytest.raises(AttributeError):
        join.left_columns = ("k",)


def test_translation_names_what_it_cannot_translate():
    from sparkqos.executor.operators import PhysicalOperator
    from sparkqos.spark.translate import expr_to_column, operator_to_spark

    with pytest.raises(ExpressionError, match="no Spark translation for expression"):
        expr_to_column(object())
    with pytest.raises(PlanError, match="no Spark translation for operator"):
        operator_to_spark(PhysicalOperator())
