"""The executor: multi-query plans under every strategy against Spark, and the executor's own
contract (workload rule fig 4.1, carry units, blocking joins, schema errors, budgets, statistics
publication, event log, checkpoints)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

from sparkqos import schedulers
from sparkqos.compile import QuerySet
from sparkqos.errors import ArgumentError, SchedulerError, SchemaMismatch
from sparkqos.executor.expressions import avg, col, count, max_, sum_
from sparkqos.executor.loop import Executor, replay
from sparkqos.model.state import Unit
from sparkqos.schedulers.base import Scheduler

sys.path.insert(0, str(Path(__file__).parent))  # shared input generators and the Spark oracle
from test_operators import (  # noqa: E402
    EVENTS,
    OTHERS,
    SENSORS,
    _join_feeds,
    check_against_spark,
    interleave,
    sensor_batches,
)


def ticking(step: float = 1e-3):
    t = [0.0]

    def clock() -> float:
        t[0] += step
        return t[0]

    return clock


# -- three multi-query plans ---------------------------------------------------------------------


def filter_chain_plan():
    qs = QuerySet(classes={"H": 4, "M": 2, "L": 1})
    s = qs.stream("sensors", SENSORS)
    s.where(col("temp") > 40).where(col("room").isin(["a", "b"])).select("id", "room", "temp").sink("hot", klass="H")
    s.synthetic(0.6, cost_s=1e-7, seed=3).where(col("d") != 0).select("id", (col("temp") / col("d")).alias("per_d")).sink(
        "sampled", klass="M"
    )
    s.where(col("temp").is_null() | (col("temp") < 10)).synthetic(0.5, cost_s=0.0, seed=9).sink("cold", klass="L")
    return qs.build()


def join_filters_plan():
    qs = QuerySet(classes={"H": 3, "L": 1})
    e = qs.stream("events", EVENTS)
    o = qs.stream("others", OTHERS)
    e.where(col("a") > 10).join(o.where(col("b") < 80).select("k", "b"), on="k", rows=5).where((col("a") + col("b")) > 40).sink(
        "pairs", klass="H"
    )
    e.where(col("k") != 2).select("k", (col("a") * 3).alias("a3")).sink("events_k", klass="L")
    o.join(e.select("k", "a"), on="k", seconds=2.0).where(col("b") > col("a")).sink("recent", klass="L")
    return qs.build()


def aggregate_plan():
    qs = QuerySet(classes={"H": 2, "L": 1})
    s = qs.stream("sensors", SENSORS)
    s.where(col("temp") > 20).window_agg("room", [count(), avg("temp")], time_col="ts", size=5.0).sink("rooms", klass="H")
    s.synthetic(0.7, cost_s=0.0, seed=5).window_agg("d", [sum_("id"), max_("temp")], time_col="ts", size=6.0, slide=3.0).sink(
        "by_d", klass="L"
    )
    s.where(col("room") == "a").select("id", "temp").sink("room_a", klass="L")
    return qs.build()


def test_filter_chain_plan_matches_spark_under_every_strategy(spark):
    check_against_spark(spark, filter_chain_plan(), sensor_batches(rows=300, seed=11))


def test_join_and_filters_plan_matches_spark_under_every_strategy(spark):
    check_against_spark(spark, join_filters_plan(), _join_feeds())


def test_aggregate_plan_matches_spark_under_every_strategy(spark):
    check_against_spark(spark, aggregate_plan(), sensor_batches(rows=300, seed=12))


# -- executor contract, no Spark ------------------------------------------------------------------


class Scripted(Scheduler):
    """Returns the given units in order, then None (a test double of a strategy)."""

    def __init__(self, units=()):
        self.units = list(units)

    def _rebuild(self, state):
        pass

    def _on_enqueue(self, op, state):
        pass

    def _choose(self, state):
        return self.units.pop(0) if self.units else None


def _one_filter(n_rows: int):
    qs = QuerySet()
    s = qs.stream("s", {"v": pa.int64()})
    s.where(col("v") >= 0).select("v").sink("q")
    ex = Executor(qs.build(), Scripted(), clock=ticking(), whole_batches=False)  # fig 4.1's rule, exact
    ex.ingest("s", pa.record_batch({"v": pa.array(range(n_rows), pa.int64())}))
    return ex


def test_workload_rule_fig_4_1_ratio_and_threshold():
    """Thesis fig 4.1: 1000 queued rows → a run takes 300 (RATIO 0.3 > THRESHOLD 50 rows);
    100 queued → A = 30 ≤ 50, so all 100."""
    ex = _one_filter(1000)
    ex.scheduler.units = [Unit("operator", ("q/1:where",))]
    assert ex.run(max_units=1).rows_consumed == 300
    assert ex.state.queued("q/1:where") == 700 and ex.state.queued("q/2:select") == 300
    ex = _one_filter(100)
    ex.scheduler.units = [Unit("operator", ("q/1:where",))]
    assert ex.run(max_units=1).rows_consumed == 100
    ex = Executor(
        _one_filter(0).compiled,
        Scripted([Unit("operator", ("q/1:where",))]),
        clock=ticking(),
        ratio=0.5,
        threshold=10,
        whole_batches=False,
    )
    ex.ingest("s", pa.record_batch({"v": list(range(100))}))
    assert ex.run(max_units=1).rows_consumed == 50


def test_quota_tuples_and_carry_paths():
    ex = _one_filter(1000)
    ex.scheduler.units = [Unit("operator", ("q/1:where",), quota_tuples=7)]
    assert ex.run(max_units=1).rows_consumed == 7
    # carry: the select processes exactly the rows the where produced (Jiang §2.2 FIFO).
    ex.scheduler.units = [Unit("path", ("q/1:where", "q/2:select"), quota_tuples=5, carry=True)]
    r = ex.run(max_units=1)
    assert (r.rows_consumed, r.operator_runs) == (10, 2)
    assert ex.state.queued("q/2:select") == 7 and len(ex.result("q")) == 5
    # no carry: each operator of the path gets its own workload-rule run, bottom-up.
    ex.scheduler.units = [Unit("path", ("q/1:where", "q/2:select"))]
    ex.run(max_units=1)
    assert ex.state.queued("q/1:where") == 988 - 297  # fig 4.1: ceil(0.3 · 988)
    assert len(ex.result("q")) == 5 + 92  # the select then takes ceil(0.3 · (7 + 297))


def test_quota_time_runs_until_the_time_is_used():
    ex = _one_filter(1000)
    ex.scheduler.units = [Unit("operator", ("q/1:where",), quota_time=1.0)]
    ex.run(max_units=1)
    assert ex.state.queued("q/1:where") == 0  # 1 s of fake clock is far more than it needs


def test_blocking_join_waits_for_both_inputs_until_finish():
    compiled = join_filters_plan()
    ex = Executor(compiled, schedulers.get("chain"), clock=ticking())
    ex.ingest("events", pa.record_batch({"k": [1, 1], "a": [50, 60], "ts": [0.0, 0.1]}))
    ex.run()
    join = "pairs/4:join"
    assert ex.state.queued(join) == 2 and not ex.state.runnable(join)
    assert join not in ex.state.runnable_operators()
    ex.finish()
    assert ex.state.total_queued == 0 and len(ex.result("pairs")) == 0 and len(ex.result("events_k")) == 2


def test_schema_mismatch_names_the_column_and_loses_nothing():
    qs = QuerySet()
    qs.stream("sensors", SENSORS).where(col("temp") > 40).sink("hot")
    ex = Executor(qs.build(), schedulers.get("fifo"), clock=ticking())
    feeds = sensor_batches(rows=60, seed=4)
    ex.ingest("sensors", feeds[0][2])
    queued = ex.state.total_queued
    good = feeds[1][2]
    bad = good.set_column(2, "temp", pa.array([str(v) for v in good.column("temp").to_pylist()]))
    with pytest.raises(SchemaMismatch, match="column 'temp' is string, expected double"):
        ex.ingest("sensors", bad)
    with pytest.raises(SchemaMismatch, match="no column 'ts'"):
        ex.ingest("sensors", good.drop_columns(["ts"]))
    with pytest.raises(SchemaMismatch, match=r"unexpected column\(s\) \['extra'\]"):
        ex.ingest("sensors", good.append_column("extra", pa.array([0] * good.num_rows)))
    with pytest.raises(SchemaMismatch, match="unknown stream 'sensor'"):
        ex.ingest("sensor", good)
    assert ex.state.total_queued == queued
    ex.ingest("sensors", good.select(list(reversed(good.schema.names))))  # column order does not matter
    ex.finish()
    rows = feeds[0][2].num_rows + good.num_rows
    assert ex.state.stats.operator("hot/1:where").consumed == rows


def test_budget_leaves_backlog_and_the_answer_is_unchanged():
    feeds = sensor_batches(rows=300, seed=11)
    compiled = filter_chain_plan()
    ex = Executor(compiled.fresh(), schedulers.get("chain"), clock=ticking(1e-3))
    for t, stream, batch in feeds:
        ex.ingest(stream, batch, arrival=t)
    report = ex.run(budget_s=0.02)
    assert not report.idle and ex.state.total_queued > 0 and report.seconds >= 0.02
    ex.finish()
    whole = replay(compiled, schedulers.get("fifo"), feeds)
    for q in compiled.roots:
        assert sorted(ex.result(q).to_pylist(), key=str) == sorted(whole.result(q).to_pylist(), key=str)


def test_finish_reports_the_time_its_drains_took():
    feeds = sensor_batches(rows=120, seed=3)
    ex = Executor(aggregate_plan().fresh(), schedulers.get("chain"), clock=ticking(1e-3))
    for t, stream, batch in feeds:
        ex.ingest(stream, batch, arrival=t)
    report = ex.finish()
    assert report.idle and report.units > 0 and report.rows_consumed > 0
    # Every run reads the (fake) clock at least at its start and end, 1 ms apart or more.
    assert report.seconds >= 1e-3 * report.units


@pytest.mark.parametrize(
    "args, parameter",
    [
        ({"ratio": 0.0}, "ratio"),
        ({"ratio": 1.5}, "ratio"),
        ({"threshold": -1}, "threshold"),
        ({"threshold": 2.5}, "threshold"),
        ({"memory_limit_bytes": -1}, "memory_limit_bytes"),
        ({"memory_limit_bytes": True}, "memory_limit_bytes"),
        ({"cluster_threads": -1}, "cluster_threads"),
        ({"threads": 0}, "threads"),
        ({"threads": 1.5}, "threads"),
        ({"stats_period": 0}, "stats_period"),
        ({"starvation_limit": 0}, "starvation_limit"),
        ({"tolerance": -0.1}, "tolerance"),
    ],
)
def test_executor_arguments_are_checked_and_named(args, parameter):
    with pytest.raises(ArgumentError, match=f"{parameter} must be") as err:
        Executor(filter_chain_plan(), schedulers.get("fifo"), **args)
    assert err.value.parameter == parameter and err.value.value == next(iter(args.values()))
    with pytest.raises(ArgumentError, match="scheduler must be a Scheduler or a registered strategy name"):
        Executor(filter_chain_plan(), object())


def test_statistics_are_published_only_when_they_move():
    feeds = sensor_batches(rows=300, seed=11)
    ex = replay(filter_chain_plan(), schedulers.get("chain"), feeds, [1] * len(feeds), ratio=0.05, threshold=0)
    runs = sum(s.runs for s in ex.state.stats.operators().values())
    assert runs > 50
    assert ex.state.stats_version < runs / 3
    sel = ex.state.selectivity("sampled/1:synthetic")
    assert 0.4 < sel < 0.8  # measured, near the declared 0.6


def test_event_log_and_output_accounting():
    ex = _one_filter(0)
    log = ex.state.subscribe()
    ex.ingest("s", pa.record_batch({"v": [1, 2, 3]}), arrival=0.0)
    assert log == ["q/1:where"]
    ex.scheduler.units = [Unit("path", ("q/1:where", "q/2:select"), carry=True)]
    ex.run(max_units=1)
    assert log == ["q/1:where", "q/2:select"]
    ex.state.unsubscribe(log)
    assert ex.state.output_total == 3
    delays = ex.delays("q").to_pylist()
    assert ex.state.output_delay_total == pytest.approx(sum(delays)) and min(delays) > 0


def test_starving_strategy_is_stopped():
    ex = _one_filter(10)
    ex.scheduler.units = [Unit("operator", ("q/2:select",))] * 200
    with pytest.raises(SchedulerError, match="no work 100 times in a row"):
        ex.run()


def test_checkpoint_mid_run_restores_queues_and_state():
    """Leftover queues, window/join state and sequence numbers survive to_state/load_state."""
    for build, feeds in ((aggregate_plan, sensor_batches(rows=300, seed=12)), (join_filters_plan, _join_feeds())):
        compiled = build()
        half = len(feeds) // 2
        a = Executor(compiled.fresh(), schedulers.get("mtiq"), clock=ticking())
        for t, stream, batch in feeds[:half]:
            a.ingest(stream, batch, arrival=t)
            a.run(max_units=1)
        saved = a.to_state()
        b = Executor(compiled.fresh(), schedulers.get("mtiq"), clock=ticking())
        b.load_state(saved)
        assert b.state.total_queued == a.state.total_queued
        for t, stream, batch in feeds[half:]:
            b.ingest(stream, batch, arrival=t)
        b.finish()
        whole = replay(compiled, schedulers.get("fifo"), feeds)
        for q in compiled.roots:
            got = a.result(q).to_pylist() + b.result(q).to_pylist()
            assert sorted(got, key=str) == sorted(whole.result(q).to_pylist(), key=str), q


def test_unit_kinds_all_answer_the_same():
    """Segment and cluster units (from 'segment' and 'cos') give the same rows as FIFO."""
    feeds = interleave(sensor_batches(rows=120, seed=2))
    compiled = filter_chain_plan()
    base = replay(compiled, schedulers.get("fifo"), feeds)
    for name in ("segment", "cos", "rr"):
        if name not in schedulers.available():
            continue
        other = replay(compiled, schedulers.get(name), feeds, [2] * len(feeds))
        for q in compiled.roots:
            assert sorted(other.result(q).to_pylist(), key=str) == sorted(base.result(q).to_pylist(), key=str)


def test_a_costly_whole_batch_is_cut_to_the_time_left_in_the_budget():
    """whole_batches rounds fig 4.1's amount up to whole queued batches, but never beyond what the
    operator's cost fits in the budget: one 5,000-row batch at 100 µs a row is 0.5 s of work, and
    a 0.05 s budget runs a slice of it (the rest waits for the next trigger, nothing is lost).
    The executor's clock is this thread's CPU time, which the synthetic cost is spent in: a loaded
    machine pausing the thread does not eat the budget."""
    import pyarrow as pa

    qs = QuerySet()
    qs.stream("s", pa.schema([("x", pa.int64())])).synthetic(1.0, cost_s=1e-4, seed=1).sink("q")
    ex = Executor(qs.build(), schedulers.get("fifo"), whole_batches=True, clock=time.thread_time)
    ex.ingest("s", pa.table({"x": list(range(5000))}))
    report = ex.run(budget_s=0.05)
    assert 0 < report.rows_consumed <= 1000
    assert report.seconds < 0.25
    ex.finish()
    assert sum(t.num_rows for t in ex.take_outputs().values()) == 5000


def test_fifo_carries_a_batch_up_its_path_only_as_far_as_the_budget_lets_it():
    """fifo's unit runs each operator on what the one below produced; a costly operator above a
    cheap one is cut to the budget too, and the rest waits in its queue (nothing lost). On this
    thread's CPU clock, as above."""
    import pyarrow as pa

    qs = QuerySet()
    (
        qs.stream("s", pa.schema([("x", pa.int64())]))
        .synthetic(1.0, cost_s=0.0, seed=1)
        .synthetic(1.0, cost_s=1e-4, seed=2)
        .sink("q")
    )
    ex = Executor(qs.build(), schedulers.get("fifo"), whole_batches=True, clock=time.thread_time)
    ex.ingest("s", pa.table({"x": list(range(5000))}))
    ex.run(budget_s=0.01)  # the costly operator's cost gets measured
    report = ex.run(budget_s=0.05)
    assert report.seconds < 0.25
    assert ex.state.total_queued > 0
    ex.finish()
    assert sum(t.num_rows for t in ex.take_outputs().values()) == 5000


def test_an_idle_cluster_thread_takes_units_of_another_threads_clusters():
    """COS's clusters are rarely equal in work: a thread whose clusters have nothing runnable
    takes the next unit of another thread's cluster instead of waiting (the cos experiment: one
    thread's clusters held 79% of the work, and the other thread sat idle). Here every operator
    is in cluster 0 and cluster 1 is empty, so the second thread has only what it takes; every
    row is still accounted for and the outputs are the serial run's."""
    from sparkqos.schedulers.base import LazyHeap
    from sparkqos.schedulers.cos import Cos

    class AllInOne(Cos):  # T = 1: one cluster of every operator, plus an empty one
        def _rebuild(self, state):
            if self._clusters and self._clusters[-1] == ():  # clusters kept from the last time
                self._clusters.pop()
            super()._rebuild(state)
            self._clusters.append(())
            self._heaps.append(LazyHeap(lambda op: 0, state.runnable))

    def plan():
        qs = QuerySet()
        s = qs.stream("sensors", SENSORS)
        s.synthetic(0.9, cost_s=2e-4, seed=1).synthetic(0.9, cost_s=2e-4, seed=2).synthetic(0.9, cost_s=2e-4, seed=3).sink("q")
        return qs.build()

    feeds = sensor_batches(rows=2_000, seed=5)
    serial = Executor(plan(), schedulers.get("chain"))
    for _, stream, batch in feeds:
        serial.ingest(stream, batch)
    serial.finish()
    ex = Executor(plan(), AllInOne(T=1.0), cluster_threads=2)
    try:
        for _, stream, batch in feeds:
            ex.ingest(stream, batch)
            ex.run(0.01)
        ex.finish()
        assert len(ex.scheduler.clusters) == 2 and ex.scheduler.clusters[1] == ()
        assert ex.stolen_units > 0
        assert ex.state.total_queued == 0
        assert sorted(ex.result("q").column("id").to_pylist()) == sorted(serial.result("q").column("id").to_pylist())
    finally:
        ex.close()
        serial.close()


# -- a row-wise run cut into slices on several threads ---------------------------------------------


def _scored_plan(seen_threads: set[str], fail_at: int | None = None, safe: bool = True):
    """One stream; a pandas UDF (recording the threads it ran on, raising on id ``fail_at``;
    declared thread-safe with ``safe``) then a filter, and a filter alone: row-wise operators
    whose runs threads=3 cuts into slices."""
    import threading

    from sparkqos.executor.threadsafe import thread_safe
    from sparkqos.executor.udf import PythonUdf

    def score(ids, temp):
        seen_threads.add(threading.current_thread().name)
        if fail_at is not None and (ids == fail_at).any():
            raise ValueError(f"bad reading {fail_at}")
        return temp * 2 + ids % 7

    if safe:
        thread_safe(score)
    qs = QuerySet(classes={"H": 2, "L": 1})
    s = qs.stream("s", {"id": pa.int64(), "temp": pa.float64()})
    scored = PythonUdf("score", score, [col("id"), col("temp")], pa.float64(), "pandas", "scored")
    s.select("id", scored.alias("score")).where(col("score") > 50).sink("scored", klass="L")
    s.where(col("temp") > 90).sink("hot", klass="H")
    return qs.build()


def _readings(rows: int, seed: int = 4) -> pa.RecordBatch:
    import numpy as np

    rng = np.random.default_rng(seed)
    return pa.record_batch({"id": np.arange(rows), "temp": rng.uniform(0, 100, rows).round(1)})


@pytest.mark.parametrize("strategy", ["fifo", "chain", "cqc"])
def test_a_row_wise_run_on_several_threads_gives_one_threads_rows_in_order(strategy):
    """threads=3 cuts each run of a select or a projection into slices computed at once: the same
    runs, the same rows in the same order as on one thread, and the UDF ran on the pool too."""
    results, runs = {}, {}
    for threads in (1, 3):
        seen: set[str] = set()
        compiled = _scored_plan(seen)
        ex = Executor(compiled.fresh(), schedulers.get(strategy), clock=ticking(), threads=threads)
        for i in range(4):
            ex.ingest("s", _readings(30_000, seed=i))
            ex.run(max_units=3)
        ex.finish()
        results[threads] = {q: ex.result(q, internal=True).drop_columns(["__emit"]).to_pylist() for q in compiled.roots}
        runs[threads] = {n: s.runs for n, s in ex.state.stats.operators().items()}
        ex.close()
        assert (len(seen) > 1) == (threads > 1), seen
    assert results[3] == results[1]
    assert runs[3] == runs[1]


def test_an_operator_calling_a_udf_not_declared_thread_safe_runs_on_one_thread():
    """threads=3: the filter alone is cut into slices, the UDF's select never (its function may
    keep state its author never meant two threads to share); the rows are one thread's."""
    import pickle

    from sparkqos.executor.threadsafe import is_thread_safe, thread_safe, unsafe_udfs

    seen: set[str] = set()
    compiled = _scored_plan(seen, safe=False)
    ex = Executor(compiled.fresh(), schedulers.get("fifo"), clock=ticking(), threads=3)
    udf_op = next(n for n in compiled.plan.names if n.startswith("scored/1"))
    assert udf_op not in ex.dispatcher.sliceable and any(n.startswith("hot/") for n in ex.dispatcher.sliceable)
    assert unsafe_udfs(ex.dispatcher.ops[udf_op]) == ["score"]
    for i in range(3):
        ex.ingest("s", _readings(30_000, seed=i))
        ex.run(max_units=3)
    ex.finish()
    ex.close()
    assert len(seen) == 1, seen
    # the mark is an attribute of the function: it survives pickling, and on a UDF it marks its .func
    marked = pickle.loads(pickle.dumps(thread_safe(_module_level_score)))
    assert is_thread_safe(marked)

    class Udf:  # what PySpark's F.pandas_udf returns: a wrapper keeping the function as .func
        def __init__(self, func):
            self.func = func

        def __call__(self, *cols):
            return self.func(*cols)

    def f(x):
        return x

    assert thread_safe(Udf(f)).func is f and is_thread_safe(f)
    import sparkqos

    assert sparkqos.thread_safe is thread_safe
    with pytest.raises(sparkqos.ExpressionError, match="thread_safe takes a function or a UDF, got 42"):
        thread_safe(42)


def _module_level_score(ids, temp):
    return temp


def test_a_slice_that_raises_puts_the_whole_run_back():
    """An error in one slice (here the last) raises once every slice has ended, and every row of
    the run is queued again, in order."""
    from sparkqos.errors import UdfError

    compiled = _scored_plan(set(), fail_at=29_000)
    ex = Executor(compiled.fresh(), schedulers.get("fifo"), clock=ticking(), threads=3)
    ex.ingest("s", _readings(30_000))
    udf_op = next(n for n in compiled.plan.names if n.startswith("scored/1"))
    with pytest.raises(UdfError, match="bad reading 29000"):
        ex.serve([udf_op])
    (port,) = ex.state.ports[udf_op]
    assert port.rows == 30_000
    assert pa.Table.from_batches(port.take(30_000)).column("id").to_pylist() == list(range(30_000))
    ex.close()


def test_cluster_threads_and_slices_together_give_one_threads_rows():
    """COS's cluster threads each cutting their runs into slices on the one pool: the same rows."""
    compiled = _scored_plan(set())
    results = []
    for options in ({}, {"cluster_threads": 2, "threads": 2}):
        ex = Executor(compiled.fresh(), schedulers.get("cos"), clock=ticking(), **options)
        for i in range(3):
            ex.ingest("s", _readings(20_000, seed=i))
            ex.run(max_units=4)
        ex.finish()
        results.append({q: sorted(ex.result(q).to_pylist(), key=str) for q in compiled.roots})
        ex.close()
    assert results[0] == results[1]
