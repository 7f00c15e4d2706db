"""The foreachBatch runner end to end on a finite replay input.

* Scheduling never changes the answer: the outputs equal Spark's own engine running the same
  logical queries on the same rows (chispa), under a small budget that leaves backlog across
  triggers.
* Exactly-once: a run that crashes (after our checkpoint, and between the sink write and the
  checkpoint) and restarts from its checkpoint ends with the same outputs as an uninterrupted one.
"""

from __future__ import annotations

import re
import threading
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from chispa import assert_df_equality

from sparkqos import sources
from sparkqos.compile import QuerySet
from sparkqos.executor.expressions import avg, col, count, max_
from sparkqos.io.sinks import ParquetSink, read_parquet_sink
from sparkqos.runtime.config import Trigger
from sparkqos.spark.runner import QosStream, RunnerError, stream
from sparkqos.spark.translate import plan_to_spark, stamped_inputs

SENSOR_PLAN_SCHEMA = {
    "sensor_id": pa.int32(),
    "location": pa.string(),
    "temperature": pa.float64(),
    "humidity": pa.float64(),
    "ts": pa.float64(),
}


def sensor_queries() -> QuerySet:
    qs = QuerySet(classes={"H": 6, "C": 3, "N": 1})
    s = qs.stream("sensors", SENSOR_PLAN_SCHEMA)
    s.where(col("temperature") > 60).select("sensor_id", "temperature", "ts").sink("fire", klass="H")
    s.where((col("humidity") < 20) & (col("temperature") > 30)).select("sensor_id", "humidity").sink("anomaly", klass="C")
    s.window_agg("location", [count(), avg("temperature"), max_("humidity")], time_col="ts", size=5).sink("stats", klass="N")
    return qs


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    n = 1500
    rng = np.random.default_rng(7)
    ts = 1_700_000_000_000_000 + np.sort(rng.integers(0, 20_000_000, n))
    table = pa.table(
        {
            "sensor_id": pa.array(rng.integers(0, 16, n), pa.int32()),
            "location": pa.array([f"z{i % 4}" for i in range(n)]),
            "temperature": pa.array(np.round(rng.normal(40, 15, n) * 2) / 2),
            "humidity": pa.array(np.round(rng.uniform(10, 90, n) * 2) / 2),
            "ts": pa.array(ts.astype("int64"), pa.timestamp("us", tz="UTC")),
        }
    )
    path = tmp_path_factory.mktemp("trace") / "sensors.parquet"
    pq.write_table(table, path)
    return path, table


@pytest.fixture(scope="module")
def replay_df(spark, trace):
    sources.register(spark)

    def make():
        return (
            spark.readStream.format("sparkqos.replay")
            .option("path", str(trace[0]))
            .option("speed", "max")
            .option("maxSecondsPerTrigger", "4")
            .load()
        )

    return make


def run_to_end(handle: QosStream) -> QosStream:
    handle.start().awaitTermination()
    handle.finish()
    return handle


def expected_outputs(spark, trace_table: pa.Table) -> dict:
    compiled = sensor_queries().build()
    batch = trace_table.set_column(4, "ts", pa.array(trace_table.column("ts").cast(pa.int64()).to_numpy() / 1e6))
    inputs = stamped_inputs(spark, [(0.0, "sensors", batch.combine_chunks().to_batches()[0])], compiled.sources)
    return {q: plan_to_spark(compiled, q, inputs) for q in compiled.roots}


@pytest.fixture(scope="module")
def chain_run(replay_df, tmp_path_factory):
    out = tmp_path_factory.mktemp("chain")
    return run_to_end(chain_stream(replay_df, out))


def chain_stream(replay_df, out, **options) -> QosStream:
    """The sensor queries under chain on the replay, available-now, with a budget small enough to
    leave backlog across triggers; checkpoint and outputs under ``out``."""
    return stream(
        replay_df(),
        sensor_queries(),
        strategy="chain",
        trigger=Trigger(availableNow=True),
        budget_s=0.001,
        whole_batches=False,
        checkpoint=out / "ckpt",
        output=out,
        **options,
    )


def assert_same_sink(spark, got_dir, want_dir) -> None:
    """The two ParquetSink folders hold the same queries with the same rows (any order)."""
    got, want = read_parquet_sink(got_dir), read_parquet_sink(want_dir)
    assert set(got) == set(want)
    for query in want:
        assert_df_equality(
            spark.createDataFrame(got[query]), spark.createDataFrame(want[query]), ignore_row_order=True, ignore_nullable=True
        )


def assert_same_as_spark(spark, outputs: dict, expected: dict) -> None:
    for query, df in expected.items():
        assert outputs[query].num_rows > 0, f"{query} produced nothing; the trace is too small"
        assert_df_equality(spark.createDataFrame(outputs[query]), df, ignore_row_order=True, ignore_nullable=True)


def test_outputs_equal_sparks_engine(spark, trace, chain_run):
    assert chain_run.last_batch >= 4  # several triggers, a backlog carried between them
    assert any(p["queuedRows"] > 0 for p in chain_run.recentProgress[:-1])
    assert_same_as_spark(spark, read_parquet_sink(chain_run.output / "outputs"), expected_outputs(spark, trace[1]))


def test_adaptive_outputs_equal_sparks_engine(spark, trace, replay_df, tmp_path):
    handle = run_to_end(
        stream(
            replay_df(),
            sensor_queries(),
            strategy="adaptive",
            trigger=Trigger(availableNow=True),
            budget_s=0.001,
            whole_batches=False,
            checkpoint=tmp_path / "ckpt",
            output=tmp_path,
            strategy_params={"candidates": ["fifo", "chain", "cqc"], "period": 0.01},
        )
    )
    assert_same_as_spark(spark, read_parquet_sink(tmp_path / "outputs"), expected_outputs(spark, trace[1]))
    # the continuous worker may not have picked yet at the first trigger: then no strategy is in force, "-"
    names = {p["strategy"] for p in handle.recentProgress}
    assert names <= {"fifo", "chain", "cqc", "-"} and names & {"fifo", "chain", "cqc"}


def test_progress_and_metrics(chain_run):
    from sparkqos.report import metrics

    last = chain_run.lastProgress
    assert last["batchId"] == chain_run.last_batch and last["strategy"] == "chain"
    assert {q["query"] for q in last["queries"]} == {"fire", "anomaly", "stats"}
    table = metrics.read(chain_run.output).to_pandas()
    plan_rows = table[table["query"] == "*"]
    assert list(plan_rows["batchId"]) == list(range(chain_run.last_batch + 1))
    assert plan_rows["rowsIn"].sum() == 1500
    per_query = table[table["query"] != "*"].groupby("query")["rowsOut"].sum()
    sink = read_parquet_sink(chain_run.output / "outputs")
    assert {q: int(v) for q, v in per_query.items()} == {q: t.num_rows for q, t in sink.items()}


class Crash(RuntimeError):
    pass


class CrashingSink(ParquetSink):
    """Writes batch ``at`` and then dies, before the runner checkpoints it (with ``once``, only the
    first time: a sink that was briefly down)."""

    def __init__(self, path, at: int, once: bool = False):
        super().__init__(path)
        self.at = at
        self.once = once
        self.crashed = False

    def write(self, batch_id, outputs):
        super().write(batch_id, outputs)
        if batch_id == self.at and not (self.once and self.crashed):
            self.crashed = True
            raise Crash(f"killed after writing batch {batch_id}")


def test_restarting_the_same_handle_after_a_failed_trigger_is_exactly_once(spark, replay_df, chain_run, tmp_path):
    """A trigger fails after it ingested and served its rows (the sink is down): the query stops
    with the error and this handle's loop is ahead of its checkpoint. start() on the same handle
    then restores the checkpoint into a fresh loop, Spark replays the batch into it, and the
    outputs equal the uninterrupted run's: the batch's rows were not taken twice."""
    handle = chain_stream(replay_df, tmp_path, sink=CrashingSink(tmp_path / "outputs", at=1, once=True))
    with pytest.raises(Exception, match="killed after writing batch 1"):
        handle.start().awaitTermination()
    failed_loop = handle.loop
    assert failed_loop.failed
    with pytest.raises(RunnerError, match="an earlier trigger of this loop failed"):
        failed_loop.process(pa.table({}), 1)
    with pytest.raises(RunnerError, match="the last trigger failed"):
        handle.finish()  # the failed batch is in neither the checkpoint nor the sink yet
    run_to_end(handle)
    assert handle.loop is not failed_loop and not handle.loop.failed
    assert_same_sink(spark, tmp_path / "outputs", chain_run.output / "outputs")


def test_restart_from_checkpoint_is_exactly_once(spark, replay_df, chain_run, tmp_path):
    """Crash between the sink write and the checkpoint of batch 1, then right after the
    checkpoint of batch 3 (before Spark commits it); restart each time from the same
    checkpoints. The final outputs equal the uninterrupted run's: nothing lost, nothing twice."""
    first = chain_stream(replay_df, tmp_path, sink=CrashingSink(tmp_path / "outputs", at=1))
    with pytest.raises(Exception, match="killed after writing batch 1"):
        first.start().awaitTermination()

    def die_after_checkpoint(progress):
        if progress["batchId"] == 3:
            raise Crash("killed after checkpointing batch 3")

    second = chain_stream(replay_df, tmp_path, on_progress=die_after_checkpoint)
    assert second.restore() == 0  # batch 1 never reached our checkpoint
    with pytest.raises(Exception, match="killed after checkpointing batch 3"):
        second.start().awaitTermination()

    third = chain_stream(replay_df, tmp_path)
    assert third.restore() == 3
    run_to_end(third)
    assert_same_sink(spark, tmp_path / "outputs", chain_run.output / "outputs")


def test_bad_configuration_fails_at_construction(spark, replay_df, tmp_path):
    with pytest.raises(RunnerError, match="needs a streaming DataFrame"):
        stream(spark.range(3), sensor_queries(), checkpoint=tmp_path)
    with pytest.raises(RunnerError, match="trigger_s must be"):
        stream(replay_df(), sensor_queries(), checkpoint=tmp_path, trigger_s=-1)
    with pytest.raises(RunnerError, match="stream 'packets' is not read"):
        stream(replay_df(), sensor_queries(), checkpoint=tmp_path, stream="packets")
    with pytest.raises(RunnerError, match="qos applies to the 'adaptive' strategy"):
        stream(replay_df(), sensor_queries(), checkpoint=tmp_path, strategy="chain", qos="low_latency")
    from sparkqos.errors import UnknownStrategy

    with pytest.raises(UnknownStrategy, match="unknown strategy 'chian'"):
        stream(replay_df(), sensor_queries(), checkpoint=tmp_path, strategy="chian")


def test_listener_sees_sparkqos_metrics(spark, replay_df, tmp_path):
    import time

    from sparkqos.spark.listener import QosProgressListener

    seen = []
    handle = stream(
        replay_df(),
        sensor_queries(),
        strategy="fifo",
        trigger=Trigger(availableNow=True),
        checkpoint=tmp_path / "ckpt",
        output=tmp_path,
        name="listened",
    )
    listener = QosProgressListener(handle, lambda sp, qp: seen.append((sp.batchId, qp)))
    spark.streams.addListener(listener)
    try:
        handle.start().awaitTermination()
        deadline = time.time() + 10  # listener events arrive asynchronously
        while len(seen) <= handle.last_batch and time.time() < deadline:
            time.sleep(0.1)
    finally:
        spark.streams.removeListener(listener)
        handle.stop()  # the continuous worker outlives an available-now query until stopped
    assert [b for b, _ in seen] == list(range(handle.last_batch + 1))
    assert all(qp is not None and qp["strategy"] == "fifo" and qp["batchId"] == b for b, qp in seen)


def test_time_parameters_are_sized_to_the_trigger(replay_df, tmp_path):
    """On Spark a time unit is a second of executor time: left unset, CQC's round k becomes the
    trigger's budget and every quantum a tenth of it (also for adaptive's candidates); what the
    user sets is kept."""
    h = stream(replay_df(), sensor_queries(), strategy="cqc", trigger_s=1.0, budget_s=0.4, checkpoint=tmp_path / "a")
    assert h.scheduler.k == pytest.approx(0.4) and h.scheduler.quantum == pytest.approx(0.04)
    h = stream(
        replay_df(), sensor_queries(), strategy="cqc", strategy_params={"k": 2.0}, trigger_s=1.0, checkpoint=tmp_path / "b"
    )
    assert h.scheduler.k == 2.0 and h.scheduler.quantum == pytest.approx(0.1)
    h = stream(replay_df(), sensor_queries(), strategy="pc", trigger_s=0.5, checkpoint=tmp_path / "c")
    assert h.scheduler.quantum == pytest.approx(0.05)
    h = stream(
        replay_df(),
        sensor_queries(),
        strategy="adaptive",
        trigger_s=0.5,
        checkpoint=tmp_path / "d",
        strategy_params={"candidates": ["fifo", "pc", "cqc"], "member_params": {"cqc": {"k": 3.0}}},
    )
    members = h.scheduler._members
    assert members["cqc"].k == 3.0 and members["cqc"].quantum == pytest.approx(0.05)
    assert members["pc"].quantum == pytest.approx(0.05)


def test_stop_ends_a_running_query_without_error(replay_df, tmp_path):
    """QosStream.stop() on a handle never started does nothing; on a running query it stops it
    with no exception (it waits for the running trigger first; that wait is not observed here)."""
    h = stream(replay_df(), sensor_queries(), strategy="fifo", trigger_s=0.5, checkpoint=tmp_path / "ckpt", output=tmp_path)
    h.stop()  # not started: nothing to stop
    query = h.start()
    deadline = time.time() + 60
    while not h.recentProgress and time.time() < deadline:
        time.sleep(0.1)
    h.stop()
    assert not query.isActive and query.exception() is None
    assert h.recentProgress


class _JavaException:
    """What py4j hands Python for a Java exception: ``toString()`` and ``getCause()``."""

    def __init__(self, text: str, cause=None):
        self.text, self.cause = text, cause

    def toString(self) -> str:  # noqa: N802 - Java's name
        return self.text + "\n\tat org.apache.spark.SparkThreadUtils.awaitResult(SparkThreadUtils.scala:70)" * 150

    def getCause(self):  # noqa: N802 - Java's name
        return self.cause


class _Py4JJavaError(Exception):
    def __init__(self, java):
        super().__init__("An error occurred while calling o354.getResult.\n" + java.toString())
        self.java_exception = java


#: Spark's StreamExecution.PROXY_ERROR: how its stream thread tells a stop in a Python foreachBatch
_PROXY_ERROR = re.compile(
    r"py4j.protocol.Py4JJavaError: An error occurred while calling((.|\r\n|\r|\n)*)"
    r"(java.lang.InterruptedException|java.io.InterruptedIOException|java.nio.channels.ClosedByInterruptException)"
)


def test_a_stop_inside_a_trigger_reaches_spark_as_one_short_line():
    """What foreachBatch raises when stop() cancels its Spark job or interrupts its JVM call: a
    StoppedInTrigger whose traceback is short (Spark matches a backtracking regular expression
    over it, which overflows the stream thread's stack on a Java stack trace) and still says what
    Spark looks for to end the query as stopped; any other error passes unchanged."""
    import traceback

    from sparkqos.errors import StoppedInTrigger
    from sparkqos.spark.batch import stop_as_spark_reads_it

    run_id = "13361381-6954-49e0-8eb5-98f805288064"
    cancelled = _JavaException(
        "org.apache.spark.SparkException: Exception thrown in awaitResult: ",
        _JavaException(
            f"org.apache.spark.SparkException: [SPARK_JOB_CANCELLED] Job 5 cancelled Query q [runId = {run_id}] was stopped"
        ),
    )
    interrupted = _JavaException("org.apache.spark.SparkException: Job aborted", _JavaException("java.lang.InterruptedException"))

    def raised(error: Exception) -> tuple[BaseException, str]:
        try:
            with stop_as_spark_reads_it(7):
                raise error
        except BaseException as exc:  # noqa: BLE001 - what leaves the function
            return exc, traceback.format_exc()

    exc, text = raised(_Py4JJavaError(cancelled))
    assert isinstance(exc, StoppedInTrigger) and exc.batch_id == 7 and len(text) < 2000
    assert "org.apache.spark.SparkException" in text and "cancelled" in text and run_id in text
    assert "Py4JJavaError: An error occurred" not in text  # nothing for the expression to run over
    exc, text = raised(_wrapped(_Py4JJavaError(interrupted)))
    assert isinstance(exc, StoppedInTrigger) and len(text) < 2000
    match = _PROXY_ERROR.search(text)
    assert match is not None and len(text) - match.start() < 200
    other = ValueError("a bug")
    assert raised(other)[0] is other
    failed = _Py4JJavaError(_JavaException("org.apache.spark.SparkException: Task failed"))
    assert raised(failed)[0] is failed


def test_a_stop_waits_for_the_next_trigger_at_the_start_of_foreachbatch():
    """With triggers back to back (Spark starts the next at once), stop_between_triggers holds the
    next foreachBatch call at its start, before any Spark job, and stops the query there: the
    held call fails with the stream thread's interruption, in the short form Spark takes as a
    stop. (Stand-ins for the query and the JVM; the stop itself runs in the Spark tests.)"""
    from sparkqos.errors import StoppedInTrigger
    from sparkqos.spark.batch import StopGate, stop_as_spark_reads_it, stop_between_triggers

    interrupted = threading.Event()

    class Thread:  # java.lang.Thread as the held call sees it: sleep raises once stop() interrupted
        @staticmethod
        def sleep(ms):
            if interrupted.is_set():
                raise _Py4JJavaError(_JavaException("java.lang.InterruptedException: sleep interrupted"))
            time.sleep(ms / 1000)

    class Jvm:
        class java:  # noqa: N801 - py4j's spelling of Java's packages
            class lang:  # noqa: N801
                pass

    Jvm.java.lang.Thread = Thread

    class BatchDf:
        class sparkSession:  # noqa: N801
            class sparkContext:  # noqa: N801
                _jvm = Jvm

    class Query:
        isActive = True
        status = {"isTriggerActive": True}  # triggers back to back: never seen between two

        def stop(self):
            Query.isActive = False
            interrupted.set()

    gate = StopGate(hold_s=30)
    gate.enter(BatchDf)  # not armed: a trigger goes on
    held: list[BaseException] = []

    def next_trigger():
        gate.armed.wait(10)
        try:
            with stop_as_spark_reads_it(8):
                gate.enter(BatchDf)
                held.append(AssertionError("the trigger ran past the gate"))
        except BaseException as exc:  # noqa: BLE001 - what Spark would receive
            held.append(exc)

    worker = threading.Thread(target=next_trigger)
    worker.start()
    started = time.monotonic()
    stop_between_triggers(Query(), wait_s=30, gate=gate)
    worker.join(10)
    assert time.monotonic() - started < 10 and gate.reached.is_set() and not Query.isActive
    (exc,) = held
    assert isinstance(exc, StoppedInTrigger) and exc.batch_id == 8 and _PROXY_ERROR.search(str(exc))


def _wrapped(error: Exception) -> Exception:
    """``error`` as the cause of another, as sparkqos's SparkPartError wraps Spark's errors."""
    try:
        raise error
    except Exception as exc:  # noqa: BLE001
        try:
            raise RuntimeError("the part Spark evaluates failed") from exc
        except RuntimeError as outer:
            return outer


def continuous_threads(name: str) -> list[threading.Thread]:
    """The worker threads of the stream called ``name`` (other tests' streams may still have one
    serving until its orphan timeout: a stream that ends by itself is not closed)."""
    return [t for t in threading.enumerate() if t.name == f"sparkqos-continuous-{name}"]


def test_continuous_outputs_equal_sparks_engine(spark, trace, replay_df, tmp_path):
    """With the continuous worker serving between triggers, the answer is unchanged;
    finish() leaves no worker thread behind."""
    handle = run_to_end(
        stream(
            replay_df(),
            sensor_queries(),
            strategy="chain",
            trigger=Trigger(availableNow=True),
            budget_s=0.001,
            continuous=True,
            checkpoint=tmp_path / "ckpt",
            output=tmp_path,
            name="continuous_equal",
        )
    )
    assert continuous_threads("continuous_equal") == []
    assert handle.last_batch >= 4 and all("executorBusyFraction" in p for p in handle.recentProgress)
    assert_same_as_spark(spark, read_parquet_sink(tmp_path / "outputs"), expected_outputs(spark, trace[1]))


def test_the_main_jobs_queries_give_the_same_rows_continuous_or_not(replay_df, tmp_path):
    from sparkqos.workloads.sensors import sensor_queries as main_job_queries

    def run(continuous: bool) -> dict:
        out = tmp_path / f"continuous-{continuous}"
        run_to_end(
            stream(
                replay_df(),
                main_job_queries(work_us=20.0, window_s=5.0),
                strategy="adaptive",
                trigger=Trigger(availableNow=True),
                budget_s=0.005,
                continuous=continuous,
                checkpoint=out / "ckpt",
                output=out,
            )
        )
        return {
            q: sorted(tuple(round(v, 9) if isinstance(v, float) else v for v in r.values()) for r in t.to_pylist())
            for q, t in read_parquet_sink(out / "outputs").items()
        }

    continuous = run(True)
    assert continuous == run(False)
    assert continuous["archive"] and continuous["fire"]


def test_stop_stops_the_continuous_worker(replay_df, tmp_path):
    h = stream(
        replay_df(),
        sensor_queries(),
        strategy="fifo",
        trigger_s=0.5,
        continuous=True,
        checkpoint=tmp_path / "ckpt",
        output=tmp_path,
        name="stop_stops",
    )
    query = h.start()
    deadline = time.time() + 60
    while not h.recentProgress and time.time() < deadline:
        time.sleep(0.1)
    assert len(continuous_threads("stop_stops")) == 1
    h.stop()
    assert not query.isActive and query.exception() is None
    assert continuous_threads("stop_stops") == []
