"""The sharded lane: per-shard executors in Spark tasks, their state in Spark's state store.

* Compile-time shardability: queries whose stateful operators are keyed by the shard key run,
  the others are refused up front naming the query and the operator.
* One shard's work without Spark (:class:`~sparkqos.runtime.shard.ShardWork`): the vessel job's
  five per-vessel queries and the main job's per-sensor ones, served shard by shard over several
  micro-batches (state restored from its blob every time), give Spark's rows and the driver
  lane's under fifo, chain, cqc and adaptive.
* ``sparkqos.stream(..., shards=2, shard_by="mmsi")`` on Spark (local[2]): after the replay ends
  and ``finish()`` drains, every query's rows are Spark's; the progress folds the shards.
* On two executor JVMs (``local-cluster[2,1,1024]``, in a process of its own: one SparkContext
  per process, and the other tests share a local[2] one): the shards run in both, a shard's
  Python worker killed mid-batch loses and duplicates nothing. It starts three JVMs, so it runs
  only with ``SPARKQOS_CLUSTER_TESTS=1``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F

import sparkqos
from sparkqos.compile.shardable import shard_report
from sparkqos.errors import NotShardable, RunnerError
from sparkqos.io.sinks import MemorySink
from sparkqos.runtime.config import DEFAULT_TRIGGER_S, SHARDED_TRIGGER_S, RunConfig, Trigger
from sparkqos.runtime.shard import ShardWork
from sparkqos.spark.sharded import mean_scores
from sparkqos.spark.transforms import compile_transforms
from sparkqos.testing import assert_same_rows
from sparkqos.workloads.sensor_transforms import SENSOR_QUERY_CLASSES, sensor_transforms
from sparkqos.workloads.sensors import SENSOR_CLASSES, sensor_trace
from sparkqos.workloads.vessels import VESSEL_PRIORITIES, VESSEL_QUERY_CLASSES, vessel_transforms
from tests.conftest import ROOT, replay, run_connect_job, stream_to_end
from tests.test_vessels import handmade

PER_VESSEL = ("geofence", "speeding", "turning", "loitering", "archive")
PER_SENSOR = ("fire", "anomaly", "archive")


def vessel_queries(spark):
    return {name: t for name, t in vessel_transforms(spark).items() if name in PER_VESSEL}


def test_shardability_follows_the_shard_key(spark_sql):
    df = spark_sql.createDataFrame(handmade())
    compiled = compile_transforms(df, vessel_transforms(spark_sql), VESSEL_QUERY_CLASSES, VESSEL_PRIORITIES)
    report = shard_report(compiled, "mmsi")
    assert {q for q, r in report.items() if r is None} == set(PER_VESSEL)
    refused = report["area_counts"]
    assert refused.query == "area_counts" and refused.kind == "EventWindowAggregate", refused
    # keyed by anything but the vessel, the per-vessel state is refused too; stateless queries never are
    by_track = shard_report(compiled, "track")
    assert by_track["geofence"] is None and by_track["archive"] is None
    assert {by_track[q].kind for q in ("speeding", "turning", "loitering")} == {"KeyedLag", "EventWindowAggregate"}


def test_the_sharded_lane_has_its_own_default_trigger(spark_sql, tmp_path):
    """Unless told otherwise, sharded micro-batches come every SHARDED_TRIGGER_S (their floor is
    about half a second), the driver lane's every DEFAULT_TRIGGER_S; a trigger given is kept."""
    df = replay(spark_sql, _trace(tmp_path))
    queries = vessel_queries(spark_sql)

    def interval(**options):
        return sparkqos.stream(df, queries, checkpoint=tmp_path / "c", **options).config.interval_s

    assert interval(shards=2, shard_by="mmsi") == SHARDED_TRIGGER_S != DEFAULT_TRIGGER_S == interval()
    assert interval(shards=2, shard_by="mmsi", trigger_s=1.0) == 1.0
    assert interval(shards=2, shard_by="mmsi", trigger=Trigger(processingTime="2 seconds")) == 2.0


def test_the_sharded_lane_refuses_what_it_cannot_run(spark_sql, tmp_path):
    df = replay(spark_sql, _trace(tmp_path))
    with pytest.raises(NotShardable, match=r"query 'area_counts' cannot run sharded by 'mmsi': operator 'area_counts/"):
        sparkqos.stream(df, vessel_transforms(spark_sql), shards=2, shard_by="mmsi", checkpoint=tmp_path / "c", trigger_s=0.5)
    with pytest.raises(RunnerError, match="shard_by is missing"):
        sparkqos.stream(df, vessel_queries(spark_sql), shards=2, checkpoint=tmp_path / "c")
    with pytest.raises(RunnerError, match="once=True runs one micro-batch"):
        sparkqos.stream(
            df, vessel_queries(spark_sql), shards=2, shard_by="mmsi", checkpoint=tmp_path / "c", trigger=Trigger(once=True)
        )
    with pytest.raises(RunnerError, match="shard_by must name a column"):
        sparkqos.stream(df, vessel_queries(spark_sql), shards=2, shard_by="nope", checkpoint=tmp_path / "c", trigger_s=0.5)


def _serve_in_shards(compiled, table: pa.Table, key: str, strategy: str, shards: int = 3, steps: int = 4) -> dict[str, pa.Table]:
    """``table`` split by ``key`` into ``shards`` and each shard's rows into ``steps`` micro-batches
    in order, each served by a :class:`ShardWork` restored from the blob of the one before, with
    a budget so small that work is left queued across micro-batches; then every shard drained.
    Returns every query's rows over all shards."""
    work = ShardWork(compiled, RunConfig(checkpoint="/unused", strategy=strategy, trigger_s=0.25, budget_s=1e-4), shards)
    shard_of = pc.cast(table.column(key), pa.int64()).to_numpy() % shards
    got: dict[str, list[pa.Table]] = {q: [] for q in compiled.roots}
    for s in range(shards):
        mine = table.filter(pa.array(shard_of == s))
        bounds = [round(i * mine.num_rows / steps) for i in range(steps + 1)]
        blob = None
        for lo, hi in zip(bounds, bounds[1:], strict=False):
            step = work.step(s, blob, [mine.slice(lo, hi - lo)])
            blob = step.state
            for q, t in step.outputs.items():
                got[q].append(t)
        for q, t in work.finish(s, blob).outputs.items():
            got[q].append(t)
    return {q: pa.concat_tables(ts).select(compiled.output_schema(q).names) for q, ts in got.items()}


@pytest.fixture(scope="module")
def vessels(spark_sql):
    """The hand-made reports, the per-vessel queries compiled, and Spark's rows of each."""
    table = handmade()
    df = spark_sql.createDataFrame(table).coalesce(1)
    queries = vessel_queries(spark_sql)
    compiled = compile_transforms(df, queries, {q: VESSEL_QUERY_CLASSES[q] for q in queries}, VESSEL_PRIORITIES)
    return table.sort_by("ts"), df, queries, compiled, {name: t(df).toArrow() for name, t in queries.items()}


@pytest.fixture(scope="module")
def sensors(spark_sql, tmp_path_factory):
    """A sensor trace, the per-sensor queries compiled, and Spark's rows of each."""
    path = tmp_path_factory.mktemp("sensors") / "trace.parquet"
    sensor_trace(path, 1200, 20.0, seed=3, fire_probability=0.02)
    df = spark_sql.read.parquet(str(path))
    every = sensor_transforms(model_size=256)
    queries = {q: t for q, t in every.items() if q in PER_SENSOR}
    compiled = compile_transforms(df, queries, {q: SENSOR_QUERY_CLASSES[q] for q in queries}, SENSOR_CLASSES, "native")
    assert all(r is None for r in shard_report(compiled, "sensor_id").values())
    zones = {"zones": lambda d: d.select("sensor_id", F.regexp_extract("location", r"(\d+)$", 1).alias("zone"))}
    whole = compile_transforms(df, {**every, **zones})
    assert shard_report(whole, "sensor_id")["zone_stats"] is not None  # grouped by location
    with pytest.raises(NotShardable, match=r"queries \['zones'\] have parts Spark evaluates"):
        ShardWork(whole, RunConfig(checkpoint="/unused"), 2)
    return pq.read_table(path), compiled, {name: t(df).toArrow() for name, t in queries.items()}


@pytest.mark.parametrize("strategy", ["fifo", "chain", "cqc", "adaptive"])
def test_shards_give_sparks_rows_and_the_driver_lanes(vessels, sensors, strategy):
    table, df, queries, compiled, spark_rows = vessels
    sharded = _serve_in_shards(compiled, table, "mmsi", strategy)
    driver = sparkqos.run(df, queries, strategy=strategy)
    for name in queries:
        assert_same_rows(sharded[name], spark_rows[name], f"{name} sharded under {strategy}", rel=1e-12)
        assert_same_rows(sharded[name], driver[name], f"{name} sharded vs driver lane under {strategy}", rel=1e-12)
    readings, compiled, spark_rows = sensors
    sharded = _serve_in_shards(compiled, readings, "sensor_id", strategy)
    for name, want in spark_rows.items():
        assert_same_rows(sharded[name], want, f"{name} sharded under {strategy}", rel=1e-12)


def test_a_shard_behind_its_input_serves_longer_so_the_floor_stays_a_fifth_of_its_time():
    """A shard whose last serve ended ``w`` seconds before this micro-batch (the floor: Spark's
    work between the two) serves for up to four times that, at most four budgets, when it has
    that much queued; with nothing left it stops at once; a shard that waited little serves its
    budget."""
    from sparkqos.compile.builder import QuerySet
    from sparkqos.executor.expressions import col

    qs = QuerySet()
    _ = qs.stream("s", {"k": pa.int64()}).synthetic(1.0, cost_s=2e-4).where(col("k") >= 0).sink("all")
    work = ShardWork(qs.build(), RunConfig(checkpoint="/unused", strategy="fifo", budget_s=0.05), 1)
    rows = pa.table({"k": list(range(5_000))})  # 1 s of work
    first = work.step(0, None, [rows], now=1_000.0)
    assert first.metrics["budgetS"] == 0.05 and first.backlog
    ended = json_state(first.state)["served_until"]
    waited = work.step(0, first.state, [], now=ended + 0.04)  # a 40 ms floor: four times it, 160 ms
    assert waited.metrics["budgetS"] == pytest.approx(0.16) and waited.backlog
    assert waited.metrics["busyS"] > 0.1
    ended = json_state(waited.state)["served_until"]
    behind = work.step(0, waited.state, [], now=ended + 5.0)  # a long floor: four budgets at most
    assert behind.metrics["budgetS"] == pytest.approx(0.2)
    short = work.step(0, behind.state, [], now=json_state(behind.state)["served_until"] + 0.001)
    assert short.metrics["budgetS"] == 0.05
    rest = short
    for _ in range(60):  # about 0.6 s of work left, served 0.2 s at a time
        rest = work.step(0, rest.state, [], now=json_state(rest.state)["served_until"] + 5.0)
        if not rest.backlog:
            break
    assert not rest.backlog and rest.metrics["busyS"] < 0.2  # drained: it stopped before its budget


def json_state(blob: bytes) -> dict:
    from sparkqos.runtime.checkpoint import read_checkpoint_bytes

    return read_checkpoint_bytes(blob).state


def test_adaptive_scores_of_the_shards_fold_with_unscored_candidates():
    """``adaptive`` reports None for a candidate it has not scored yet (it scores one only once it
    ran); the trigger's record folds the shards' scores candidate by candidate over those that
    scored it, and a candidate no shard scored stays None (a mean over None failed every trigger)."""
    shards = [{"fifo": 0.4, "chain": None, "pc": None}, {"fifo": 0.6, "chain": 0.3, "pc": None}, {}]
    assert mean_scores(shards) == {"fifo": pytest.approx(0.5), "chain": 0.3, "pc": None}
    assert mean_scores([]) == {}


def test_a_job_run_sharded_names_the_query_the_lane_refuses(spark, tmp_path, capsys):
    """``--set job.shards=2`` switches a job to the sharded lane; a query it cannot run there (the
    sensor job's zone_stats, whose windows are kept per location, not per sensor) is a
    configuration error naming the query and how to leave it out, before any data moves."""
    from jobs import sensor_monitor

    argv = ["--set", "job.shards=2", "--output", str(tmp_path / "out"), "--duration", "1", "--quiet"]
    assert sensor_monitor.main(argv) == 2
    err = capsys.readouterr().err
    assert "job.shards > 0 runs the sharded lane" in err and "query 'zone_stats'" in err and "queries.run" in err, err


def _trace(tmp_path: Path) -> Path:
    path = tmp_path / "vessels.parquet"
    pq.write_table(handmade(), path)
    return path


def serve_to_end(handle, rows: int, timeout_s: float = 180.0, progress=None) -> list[dict]:
    """Run ``handle`` until its triggers took ``rows`` input rows and left nothing queued; stop it.
    ``progress()`` gives the records to count (default: this handle's; after a restart, the
    metrics table's, which hold the batches earlier processes ran too)."""
    query = handle.start()
    ends = time.monotonic() + timeout_s
    try:
        while time.monotonic() < ends:
            if query.exception() is not None:
                raise query.exception()
            recent = list(handle.recentProgress) if progress is None else progress()
            if sum(p["numInputRows"] for p in recent) >= rows and recent[-1]["queuedRows"] == 0:
                return recent
            time.sleep(0.2)
        raise AssertionError(f"the sharded stream did not take {rows} rows within {timeout_s:g} s")
    finally:
        handle.stop()


def test_the_sharded_stream_gives_sparks_rows(spark_sql, tmp_path):
    path = _trace(tmp_path)
    queries = vessel_queries(spark_sql)
    classes = {q: VESSEL_QUERY_CLASSES[q] for q in queries}
    sink = MemorySink()
    seen = []
    handle = sparkqos.stream(
        replay(spark_sql, path, seconds_per_trigger=600),
        queries,
        classes=classes,
        priorities=VESSEL_PRIORITIES,
        shards=2,
        shard_by="mmsi",
        strategy="cqc",
        trigger_s=0.25,
        checkpoint=tmp_path / "ckpt",
        output=tmp_path / "out",
        sink=sink,
        on_progress=seen.append,
    )
    serve_to_end(handle, handmade().num_rows)
    last = handle.finish()
    static = spark_sql.read.parquet(str(path))
    for name, transform in queries.items():
        assert_same_rows(sink.table(name), transform(static).toArrow(), f"{name} sharded", rel=1e-12)
    # the progress folds every shard's work: rows in, rows out per query, one record per trigger
    records = handle.recentProgress
    assert sum(p["numInputRows"] for p in records) == handmade().num_rows
    assert sum(p["numOutputRows"] for p in records) == sum(sink.table(q).num_rows for q in queries)
    assert {p["strategy"] for p in records} == {"cqc"} and seen[-1] is last is records[-1]
    # class H's rows (geofence) and C's left as parts while the shards served the lower classes
    assert sum(p["earlyRows"] for p in records) > 0
    assert {s["shard"] for p in records for s in p["shards"]} == {0, 1}
    stored = sparkqos.spark.runner.read_progress(tmp_path / "out", "sparkqos")
    assert [p["batchId"] for p in stored] == [p["batchId"] for p in records]
    with pytest.raises(RunnerError, match="drained by finish"):
        handle.start()


def test_finish_refuses_a_batch_of_new_rows_spark_did_not_commit(spark_sql, tmp_path):
    """A query stopped inside batch N of new rows (in Spark's offset log with offsets beyond N-1's,
    not in its commit log) has rows in no committed state: draining then would lose them, so
    finish() says to start the stream again (Spark replays N) instead."""
    handle = sparkqos.stream(
        replay(spark_sql, _trace(tmp_path)),
        vessel_queries(spark_sql),
        classes={q: VESSEL_QUERY_CLASSES[q] for q in PER_VESSEL},
        priorities=VESSEL_PRIORITIES,
        shards=2,
        shard_by="mmsi",
        trigger_s=0.25,
        checkpoint=tmp_path / "ckpt",
        sink=MemorySink(),
    )
    spark_log = tmp_path / "ckpt" / "spark"
    (spark_log / "offsets").mkdir(parents=True)
    (spark_log / "offsets" / "0").write_text('v1\n{}\n{"t_us": 10}\n')
    with pytest.raises(RunnerError, match="batch 0 took new input but Spark did not commit it"):
        handle.finish()
    (spark_log / "commits").mkdir()
    (spark_log / "commits" / "0").write_text("v1\n{}\n")
    (spark_log / "offsets" / "1").write_text('v1\n{}\n{"t_us": 20}\n')
    with pytest.raises(RunnerError, match="batch 1 took new input"):
        handle.finish()


def test_early_parts_are_kept_only_when_they_are_the_results_early_rows():
    """The driver's inbox writes a shard's early rows as parts of the open micro-batch, and only
    those of its token; the parts stand for the batch when every shard's parts come from the
    attempt whose result Spark kept, not when two attempts of a shard sent or one never did."""
    from sparkqos.executor.expressions import ARRIVAL
    from sparkqos.spark.shard_early import EarlyInbox, send_early

    sink = MemorySink()
    inbox = EarlyInbox(sink, "127.0.0.1")
    rows = pa.table({"v": [1.0, 2.0], ARRIVAL: [10.0, 11.0]})
    try:
        token = inbox.open(7)
        assert send_early(inbox.address, "not-the-token", 0, 1, {"geofence": rows})
        assert send_early(inbox.address, token, 0, 41, {"geofence": rows})
        deadline = time.monotonic() + 10
        while not sink.queries() and time.monotonic() < deadline:
            time.sleep(0.01)
        early = inbox.close()
        assert sink.batches("geofence")[7].column_names == ["v"] and sink.table("geofence").num_rows == 2
        assert early.parts.rows == {"geofence": 2} and early.kept({0: 41})
        assert not early.kept({0: 42}) and not early.kept({0: 41, 1: 43})
        token = inbox.open(8)
        for attempt in (50, 51):  # a task retried after its part was written
            assert send_early(inbox.address, token, 1, attempt, {"geofence": rows})
        while sink.table("geofence").num_rows < 6 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not inbox.close().kept({1: 51})
        assert not send_early(("127.0.0.1", 1), token, 1, 52, {"geofence": rows})  # nobody listens: only late
    finally:
        inbox.shutdown()


def _dedup(df):
    return df.dropDuplicates(["k", "s"])


@pytest.fixture(scope="module")
def keyed_files(tmp_path_factory):
    """tests/test_aggregates.py's trace (four keys, one of them null, windows and sessions that
    close on the way) as 6 Parquet files of 8 rows, read one per micro-batch."""
    from tests.test_aggregates import trace

    path = tmp_path_factory.mktemp("keyed") / "trace"
    path.mkdir()
    table = trace()
    for b, start in enumerate(range(0, table.num_rows, 8)):
        pq.write_table(table.slice(start, 8), path / f"part-{b:03d}.parquet")
        os.utime(path / f"part-{b:03d}.parquet", (1_700_000_000 + b, 1_700_000_000 + b))  # oldest first
    return path


@pytest.mark.slow  # two available-now streams end to end (sharded, then the driver lane) over a drain-forcing budget
def test_available_now_sharded_ends_drained_with_the_driver_lanes_rows(spark_sql, keyed_files, tmp_path):
    """``Trigger(availableNow=True)`` on the sharded lane: with a budget so small that the shards
    keep rows queued after each input batch, the query goes on in micro-batches without input
    (the drain ticks) and ends by itself once the input is read and no shard has rows queued;
    after ``finish()`` the running aggregates, windows, sessions and dedup equal the driver
    lane's available-now run of the same stream, and Spark's batch result."""
    from tests.test_aggregates import SET_COLUMNS, assert_same_aggregates, running, sessions, trace, windowed
    from tests.test_transforms_native import last_per_key

    schema = spark_sql.read.parquet(str(keyed_files)).schema

    def files():
        return spark_sql.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(keyed_files))

    queries = {"running": running, "windowed": windowed, "sessions": sessions, "dedup": _dedup}
    sink = MemorySink()
    handle = sparkqos.stream(
        files(),
        queries,
        shards=2,
        shard_by="k",
        strategy="chain",
        budget_s=1e-3,
        trigger=Trigger(availableNow=True),
        checkpoint=tmp_path / "sharded",
        sink=sink,
    )
    assert handle.start().awaitTermination(240), "the available-now sharded query did not end"
    records = handle.recentProgress
    assert sum(p["numInputRows"] for p in records) == trace().num_rows
    assert records[-1]["queuedRows"] == 0, records[-1]
    drains = [p for p in records if p["numInputRows"] == 0]
    assert drains and all(p["shards"] for p in drains), "no micro-batch drained a backlog without input"
    handle.finish()
    driver = stream_to_end(files(), queries, tmp_path / "driver", timeout_s=240, strategy="chain")
    static = spark_sql.createDataFrame(trace()).coalesce(1)
    for name, transform in queries.items():
        want = transform(static).toArrow()
        got, lane = (t.table(name).select(want.schema.names).cast(want.schema) for t in (sink, driver))
        if name == "running":  # update mode: a changelog, whose last row per key is the table
            got, lane = last_per_key(got, ["k"]), last_per_key(lane, ["k"])
        sets = SET_COLUMNS if name != "dedup" else ()
        assert_same_aggregates(got, lane, f"{name}: sharded vs the driver lane", sets)
        assert_same_aggregates(got, want, f"{name}: sharded vs Spark", sets)


@pytest.mark.slow  # a sharded stream served to its end, then watched idle for 10 s
def test_an_idle_sharded_stream_runs_no_micro_batch(spark_sql, tmp_path):
    """Once the input is taken and the shards drained, a sharded stream on a processing-time
    trigger runs no micro-batch (and Spark commits no state) through 10 s without input; before
    that, a shard left with rows queued by a small budget drains in micro-batches without input."""
    queries = vessel_queries(spark_sql)
    handle = sparkqos.stream(
        replay(spark_sql, _trace(tmp_path), seconds_per_trigger=600),
        queries,
        classes={q: VESSEL_QUERY_CLASSES[q] for q in queries},
        priorities=VESSEL_PRIORITIES,
        shards=2,
        shard_by="mmsi",
        strategy="fifo",
        budget_s=1e-3,
        trigger_s=0.25,
        checkpoint=tmp_path / "ckpt",
        sink=MemorySink(),
    )
    query = handle.start()
    try:
        ends = time.monotonic() + 180
        while time.monotonic() < ends:
            recent = handle.recentProgress
            if sum(p["numInputRows"] for p in recent) >= handmade().num_rows and recent[-1]["queuedRows"] == 0:
                break
            assert query.exception() is None, query.exception()
            time.sleep(0.2)
        else:
            raise AssertionError("the sharded stream did not take its input and drain within 180 s")
        assert any(p["numInputRows"] == 0 and p["shards"] for p in recent), "no micro-batch drained a backlog without input"
        spark_log = tmp_path / "ckpt" / "spark"

        def ran() -> tuple:  # foreachBatch calls, Spark's batch commits, its state store's versions
            commits, deltas = spark_log.glob("commits/[0-9]*"), spark_log.glob("state/**/*.delta")
            return len(handle.recentProgress), sorted(commits), sorted(deltas)

        last = recent[-1]["batchId"]
        while not (spark_log / "commits" / str(last)).exists():  # Spark logs it done after foreachBatch
            time.sleep(0.05)
        done = ran()
        time.sleep(10)
        assert query.exception() is None, query.exception()
        assert ran() == done
    finally:
        handle.stop()


CLUSTER_TESTS = pytest.mark.skipif(
    os.environ.get("SPARKQOS_CLUSTER_TESTS") != "1",
    reason="starts JVMs of its own (minutes on 2 loaded cores): SPARKQOS_CLUSTER_TESTS=1",
)


@CLUSTER_TESTS
def test_on_two_executor_jvms_a_killed_shard_worker_loses_and_duplicates_nothing(tmp_path):
    """local-cluster[2,1,1024]: two executor JVMs; the shards' Python workers run in both. The
    worker serving a shard is SIGKILLed in its second micro-batch; Spark retries the task from
    the state before it, and the rows after draining are Spark's, each once."""
    summary = run_connect_job("sharded_cluster_job.py", str(tmp_path), cwd=ROOT, timeout=600)
    assert summary["executor_pids"] >= 2, summary
    assert summary["killed"], summary
    assert summary["mismatches"] == [], summary


@CLUSTER_TESTS
def test_a_driver_killed_between_state_commit_and_sink_write_or_after_it_loses_and_duplicates_nothing(tmp_path):
    """The driver SIGKILLed after Spark committed the shards' state of batch 2 but before its
    outputs were written (``after_run:2``), then after the sink write of batch 4 but before Spark
    marked it done (``after_sink:4``); each restart replays the batch from the state before it and
    the sink replaces its files. After draining, every query's rows are Spark's, each once."""
    job = [sys.executable, str(ROOT / "tests" / "sharded_cluster_job.py"), str(tmp_path), "driver"]
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    for fault in ("after_run:2", "after_sink:4"):
        done = subprocess.run([*job, fault], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == -signal.SIGKILL, (fault, done.returncode, done.stderr[-3000:])
        assert f"SIGKILL at {fault.split(':')[0]} of batch {fault.split(':')[1]}" in done.stderr
    summary = run_connect_job("sharded_cluster_job.py", str(tmp_path), "driver", "-", cwd=ROOT, timeout=600)
    assert summary["mismatches"] == [], summary
