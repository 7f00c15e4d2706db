"""The trigger loop on Arrow tables alone (no SparkSession), and the runner's option checks.

* Two triggers write their outputs and one checkpoint each; a replayed batch id is skipped.
* A fresh loop restored from the checkpoint continues exactly where the first stopped, also
  after a crash between the sink write and the checkpoint (the injected fault raises here
  instead of SIGKILLing the test process).
* Bad rows go to dead letters; a bad ``fault`` string or bad option fails naming the key.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from sparkqos.errors import RunnerError, UnknownStrategy
from sparkqos.io.deadletter import RowChecks, read_dead_letters
from sparkqos.io.sinks import read_parquet_sink
from sparkqos.runtime.config import RunConfig, Trigger, parse_faults
from sparkqos.runtime.trigger import TriggerLoop
from sparkqos.schedulers import Fifo
from sparkqos.testing import sensor_table
from sparkqos.workloads.sensors import sensor_queries

T0 = 1_700_000_000.0


BATCHES = [sensor_table(150, b, start=T0 + 4 * b) for b in range(5)]


def make_loop(root: Path, **kw) -> TriggerLoop:
    kw.setdefault("strategy", "chain")
    kw.setdefault("continuous", False)  # one trigger serves everything it ingested (tests/test_continuous.py: the worker)
    config = RunConfig(checkpoint=root / "ckpt", output=root / "out", budget_s=30.0, **kw)
    return TriggerLoop(sensor_queries(work_us=0.0, window_s=5.0), config)


def rows(tables: dict[str, pa.Table]) -> dict[str, Counter]:
    """Each query's output as a multiset of rows (order is the strategy's business)."""
    return {q: Counter(tuple(r.values()) for r in t.to_pylist()) for q, t in tables.items()}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict[str, Counter]:
    root = tmp_path_factory.mktemp("uninterrupted")
    loop = make_loop(root)
    for b, t in enumerate(BATCHES):
        loop.process(t, b)
    loop.finish()
    return rows(read_parquet_sink(root / "out" / "outputs"))


def test_two_triggers_write_outputs_checkpoints_and_progress(tmp_path):
    loop = make_loop(tmp_path)
    assert loop.restore() == -1
    progress = [loop.process(BATCHES[b], b) for b in range(2)]
    assert [p["batchId"] for p in progress] == [0, 1] and loop.last_batch == 1
    assert loop.store.batches() == [0, 1]
    assert [p["numInputRows"] for p in progress] == [150, 150]
    sink = read_parquet_sink(tmp_path / "out" / "outputs")
    assert sink["archive"].num_rows == 300  # the archive keeps every row, so nothing was lost
    assert sum(p["numOutputRows"] for p in progress) == sum(t.num_rows for t in sink.values())
    last = loop.progress.last
    assert last is progress[-1] and last["strategy"] == "chain"
    assert {q["query"] for q in last["queries"]} == set(loop.compiled.roots)
    for key in (
        "queuedRows",
        "queuedBytes",
        "delayMsMean",
        "delayMsP50",
        "delayMsP99",
        "delayMsMax",
        "inputRowsPerSecond",
        "processedRowsPerSecond",
        "scores",
        "timestamp",
        "id",
    ):
        assert key in last
    assert last["durationMs"]["triggerExecution"] >= 0


def rows_by_query(sink: dict[str, pa.Table]) -> dict[str, Counter]:
    """Each query's rows as a multiset (a window's mean to 12 digits: it may differ in its last
    bits with how its rows were split into runs)."""

    def key(row: dict) -> tuple:
        return tuple(float(f"{v:.12g}") if isinstance(v, float) else v for v in row.values())

    return {q: Counter(key(r) for r in t.to_pylist()) for q, t in sink.items()}


def test_cos_serves_its_clusters_from_a_thread_per_core_with_the_same_rows(tmp_path, monkeypatch):
    """With cos the executor serves clusters from a thread pool (one thread per core
    unless executor_args says otherwise); the rows are those of a serial strategy."""
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    for name, strategy in (("cos", "cos"), ("chain", "chain")):
        loop = make_loop(tmp_path / name, strategy=strategy, class_shares=False)
        for b in range(3):
            loop.process(BATCHES[b], b)
        loop.finish()
    assert make_loop(tmp_path / "x", strategy="cos", class_shares=False).executor.cluster_threads == 2
    one = make_loop(tmp_path / "y", strategy="cos", class_shares=False, executor_args={"cluster_threads": 0})
    assert one.executor.cluster_threads == 0
    assert make_loop(tmp_path / "z", strategy="chain").executor.cluster_threads == 0
    got, want = (rows_by_query(read_parquet_sink(tmp_path / n / "out" / "outputs")) for n in ("cos", "chain"))
    assert got == want and got["archive"]


def test_progress_read_back_from_the_metrics_table_equals_the_live_records(tmp_path):
    """How a Spark Connect client follows a run whose triggers execute in the server's Python
    worker: the records rebuilt from the metrics table are the ones reported live, bad rows and
    adaptive scores included."""
    import json
    import math

    from sparkqos.runtime.progress import read_progress

    assert read_progress(tmp_path / "out", "sparkqos") == []  # before the first trigger
    loop = make_loop(tmp_path, strategy="adaptive", checks=RowChecks(ranges={"humidity": (0, 100)}))
    bad = BATCHES[1].set_column(3, "humidity", pa.array([500.0] * 3 + BATCHES[1].column(3).to_pylist()[3:]))
    live = [loop.process(t, b) for b, t in enumerate([BATCHES[0], bad, BATCHES[2]])]
    read = read_progress(tmp_path / "out", "sparkqos")

    def same(x):  # NaN == NaN; the same JSON with NaN spelled the same way
        return json.loads(json.dumps(x, sort_keys=True), parse_constant=lambda c: "nan")

    assert [r["batchId"] for r in read] == [0, 1, 2]
    assert read[1]["deadLetteredRows"] == 3 and read[1]["processedRows"] == 147
    assert same(read) == same(live)
    assert all(not math.isnan(r["executorBusyS"]) for r in read)
    assert read_progress(tmp_path / "out", "another-run") == []


def test_a_replayed_batch_is_skipped(tmp_path):
    loop = make_loop(tmp_path)
    loop.process(BATCHES[0], 0)
    before = read_parquet_sink(tmp_path / "out" / "outputs")
    assert loop.process(BATCHES[0], 0) is None
    assert loop.process(BATCHES[1], 0) is None  # whatever Spark hands again under that id
    assert loop.last_batch == 0 and loop.store.batches() == [0] and len(loop.progress.recent) == 1
    assert rows(read_parquet_sink(tmp_path / "out" / "outputs")) == rows(before)


def test_a_fresh_loop_restored_from_the_checkpoint_continues_exactly(tmp_path, uninterrupted):
    first = make_loop(tmp_path)
    for b in range(2):
        first.process(BATCHES[b], b)
    second = make_loop(tmp_path)
    assert second.restore() == 1
    assert second.process(BATCHES[1], 1) is None  # Spark replays the batch it had not committed
    for b in range(2, len(BATCHES)):
        second.process(BATCHES[b], b)
    second.finish()
    assert rows(read_parquet_sink(tmp_path / "out" / "outputs")) == uninterrupted


class Crash(RuntimeError):
    pass


def test_fault_given_as_option_fires_at_its_point_and_the_restart_is_exactly_once(tmp_path, monkeypatch, uninterrupted):
    """``fault=after_sink:2``: batch 2's outputs reach the sink but not our checkpoint; the
    restarted loop runs batch 2 again, the sink replaces it, and the end result is unchanged."""
    fired = []

    def crash(self, point, batch_id):
        fired.append((point, batch_id))
        raise Crash(f"{point} of batch {batch_id}")

    monkeypatch.setattr(TriggerLoop, "_kill", crash)  # a SIGKILL would end the test run
    first = make_loop(tmp_path, fault="after_sink:2")
    assert first.config.faults == {"after_sink": {2}}
    for b in range(2):
        first.process(BATCHES[b], b)
    with pytest.raises(Crash, match="after_sink of batch 2"):
        first.process(BATCHES[2], 2)
    assert fired == [("after_sink", 2)] and first.store.batches() == [0, 1]
    second = make_loop(tmp_path)
    assert second.restore() == 1
    for b in range(2, len(BATCHES)):
        second.process(BATCHES[b], b)
    second.finish()
    assert rows(read_parquet_sink(tmp_path / "out" / "outputs")) == uninterrupted


@pytest.mark.parametrize("fsync", [False, True])
def test_fsync_is_what_the_recovery_says_for_checkpoints_segments_sink_and_dead_letters(tmp_path, monkeypatch, fsync):
    """Off by default (every file still renamed into place); on, each of the run's files is fsynced."""
    import os

    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd) or real(fd))
    loop = make_loop(tmp_path, **({"fsync": True} if fsync else {}))
    assert loop.store.fsync is loop.sink.fsync is loop.dead_letter.fsync is fsync
    loop.process(BATCHES[0], 0)
    loop.process(BATCHES[1], 1)
    assert bool(synced) is fsync
    assert sorted(p.name for p in (tmp_path / "ckpt" / "sparkqos").glob("*.ckpt"))  # written either way


def test_bad_rows_go_to_dead_letters(tmp_path):
    loop = make_loop(tmp_path, checks=RowChecks(required=("sensor_id",), ranges={"humidity": (0, 100)}))
    table = BATCHES[0]
    sid = table.column("sensor_id").to_pylist()
    hum = table.column("humidity").to_pylist()
    sid[3] = None
    hum[7] = 140.0
    table = table.set_column(0, "sensor_id", pa.array(sid, pa.int32())).set_column(3, "humidity", pa.array(hum))
    p = loop.process(table, 0)
    assert (p["numInputRows"], p["processedRows"], p["deadLetteredRows"]) == (150, 148, 2)
    dead = read_dead_letters(tmp_path / "out" / "deadletter")
    assert sorted(dead.column("row").to_pylist()) == [3, 7] and set(dead.column("batch_id").to_pylist()) == {0}
    assert loop.dead_lettered_total == 2
    again = make_loop(tmp_path)
    assert again.restore() == 0 and again.dead_lettered_total == 2  # carried in the checkpoint


def test_bad_fault_string_raises_naming_it(tmp_path):
    assert parse_faults("after_sink:3,before_ingest:0") == {"after_sink": {3}, "before_ingest": {0}}
    with pytest.raises(RunnerError, match="fault 'mid_air:2' must be POINT:BATCH_ID with POINT one of before_ingest") as exc:
        RunConfig(checkpoint=tmp_path, fault="after_sink:1,mid_air:2")
    assert exc.value.parameter == "fault" and exc.value.value == "mid_air:2"
    with pytest.raises(RunnerError, match="fault 'after_sink:x' must be"):
        RunConfig(checkpoint=tmp_path, fault="after_sink:x")
    assert RunConfig(checkpoint=tmp_path).faults == {} and RunConfig(checkpoint=tmp_path, fault="").faults == {}


def test_the_environment_does_not_inject_faults(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARKQOS_FAULT", "before_ingest:0")
    assert make_loop(tmp_path).config.faults == {}


@pytest.mark.parametrize(
    "options, error, parameter, message",
    [
        ({"trigger_s": 0}, RunnerError, "trigger_s", r"trigger_s must be a finite number > 0 or 'available_now', got 0"),
        ({"trigger_s": "soon"}, RunnerError, "trigger_s", r"trigger_s must be .* or 'available_now', got 'soon'"),
        ({"trigger_s": True}, RunnerError, "trigger_s", r"trigger_s must be"),
        ({"budget_s": float("nan")}, RunnerError, "budget_s", r"budget_s must be a finite number > 0 or None, got nan"),
        ({"budget_s": -1}, RunnerError, "budget_s", r"budget_s must be"),
        ({"keep_checkpoints": 0}, RunnerError, "keep_checkpoints", r"keep_checkpoints must be an integer >= 1, got 0"),
        ({"fsync": "yes"}, RunnerError, "fsync", r"fsync must be true or false, got 'yes'"),
        ({"strategy": "chian"}, UnknownStrategy, "strategy", r"unknown strategy 'chian'; registered strategies are: .*chain"),
        (
            {"strategy": "chain", "qos": "low_latency"},
            RunnerError,
            "qos",
            r"qos applies to the 'adaptive' strategy, not to 'chain'",
        ),
        ({"strategy": Fifo(), "strategy_params": {"quantum": 1}}, RunnerError, "strategy", r"not with a Scheduler instance"),
    ],
)
def test_run_config_rejects_garbage_naming_the_key(tmp_path, options, error, parameter, message):
    with pytest.raises(error, match=message) as exc:
        RunConfig(checkpoint=tmp_path, **options)
    assert exc.value.parameter == parameter


def test_run_config_defaults_and_normalisation(tmp_path):
    cfg = RunConfig(checkpoint=str(tmp_path), output=str(tmp_path / "out"), trigger_s=2)
    assert (cfg.strategy.name, cfg.trigger.processingTime, cfg.interval_s) == ("adaptive", 2.0, 2.0)
    assert cfg.executor.budget_s is None and cfg.effective_budget_s == 2.0
    assert cfg.storage.checkpoint == tmp_path and cfg.storage.output == tmp_path / "out"
    assert (cfg.name, cfg.storage.keep_checkpoints, cfg.executor.whole_batches) == ("sparkqos", 3, True)
    now = RunConfig(checkpoint=tmp_path, trigger=Trigger(availableNow=True))
    assert now.interval_s is None and now.effective_budget_s == 1.0
    with pytest.warns(DeprecationWarning, match="availableNow"):
        assert RunConfig(checkpoint=tmp_path, trigger_s="available_now").trigger == now.trigger
    with pytest.raises(AttributeError):
        cfg.trigger = Trigger(processingTime=5.0)  # frozen
    with pytest.raises(AttributeError):
        cfg.trigger.processingTime = 5.0  # its parts too
    with pytest.raises(TypeError):
        cfg.strategy.params["x"] = 1  # read-only


def test_loop_checks_what_depends_on_the_plan(tmp_path):
    with pytest.raises(RunnerError, match="stream 'packets' is not read by the query set"):
        TriggerLoop(sensor_queries(), RunConfig(checkpoint=tmp_path, stream="packets"))
    with pytest.raises(RunnerError, match="arrival_col 'when' is not a column of stream 'sensors'"):
        TriggerLoop(sensor_queries(), RunConfig(checkpoint=tmp_path, arrival_col="when"))
    with pytest.raises(RunnerError, match="queries must be a QuerySet or a CompiledPlan"):
        TriggerLoop("fire", RunConfig(checkpoint=tmp_path))


def test_the_trigger_loop_does_not_import_pyspark():
    code = (
        "import sys, sparkqos.runtime.trigger, sparkqos.runtime.config, sparkqos.runtime.progress; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("point", ["after_sink", "after_checkpoint", "after_progress"])
def test_compacted_parquet_sink_through_a_crash_loses_and_duplicates_nothing(tmp_path, monkeypatch, uninterrupted, point):
    """ParquetSink(compact_every=2): final batches merge into one file per query and range; a
    crash around batch 3 and the restart leave exactly the uninterrupted rows, in fewer files
    (compacting on the trigger's thread, so the files are known exactly)."""
    from sparkqos.io.sinks import ParquetSink

    def crash(self, where, batch_id):
        raise Crash(f"{where} of batch {batch_id}")

    monkeypatch.setattr(TriggerLoop, "_kill", crash)
    sink = ParquetSink(tmp_path / "out" / "outputs", compact_every=2, background=False)
    first = make_loop(tmp_path, fault=f"{point}:3", sink=sink)
    for b in range(3):
        first.process(BATCHES[b], b)
    with pytest.raises(Crash):
        first.process(BATCHES[3], 3)
    second = make_loop(tmp_path, sink=ParquetSink(tmp_path / "out" / "outputs", compact_every=2, background=False))
    for b in range(second.restore() + 1, len(BATCHES)):
        second.process(BATCHES[b], b)
    second.finish()
    assert rows(read_parquet_sink(tmp_path / "out" / "outputs")) == uninterrupted
    archive = tmp_path / "out" / "outputs" / "query=archive"
    assert sorted(p.name for p in archive.iterdir()) == ["batches=0-1.parquet", "batches=2-3.parquet", "batches=4-5.parquet"]
    ids = read_parquet_sink(tmp_path / "out" / "outputs", with_batch_id=True)["archive"].column("batch_id").to_pylist()
    assert ids == sorted(ids) and set(ids) == {0, 1, 2, 3, 4}


def test_a_compaction_runs_beside_the_triggers_one_at_a_time_and_its_failure_is_raised(tmp_path, monkeypatch):
    """In the background (the default), checkpointed() returns while the compaction runs; a call
    meanwhile starts none; flush() waits for it; the next compaction takes every final batch since
    the last compacted one; a failure is raised by the sink's next call, naming the folder."""
    import threading

    from sparkqos.errors import SinkError
    from sparkqos.io.sinks import ParquetSink

    sink = ParquetSink(tmp_path, compact_every=2)
    go, compacting = threading.Event(), threading.Event()
    real = ParquetSink._compact

    def slow(self, folder, first, last):
        compacting.set()
        assert go.wait(10)
        real(self, folder, first, last)

    monkeypatch.setattr(ParquetSink, "_compact", slow)
    for b in range(4):
        sink.write(b, {"q": pa.table({"x": [b]})})
        sink.checkpointed(b)
    assert compacting.wait(10) and sorted(p.name for p in (tmp_path / "query=q").iterdir())[0] == "batch=0.parquet"
    go.set()
    sink.flush()
    files = sorted(p.name for p in (tmp_path / "query=q").iterdir())
    assert files == ["batch=2.parquet", "batch=3.parquet", "batches=0-1.parquet"]
    sink.write(4, {"q": pa.table({"x": [4]})})
    sink.checkpointed(4)
    assert sink.read()["q"].column("x").to_pylist() == [0, 1, 2, 3, 4]
    assert sorted(p.name for p in (tmp_path / "query=q").iterdir()) == ["batches=0-1.parquet", "batches=2-4.parquet"]

    def broken(self, folder, first, last):
        raise OSError("disk full")

    monkeypatch.setattr(ParquetSink, "_compact", broken)
    for b in range(5, 7):
        sink.write(b, {"q": pa.table({"x": [b]})})
        sink.checkpointed(b)
    with pytest.raises(SinkError, match=f"compacting {tmp_path}: OSError: disk full"):
        sink.flush()
    assert read_parquet_sink(tmp_path)["q"].column("x").to_pylist() == list(range(7))


def test_small_files_a_compacted_file_covers_are_ignored_then_removed(tmp_path):
    """A crash between writing a compacted file and removing the small ones it merged: readers
    ignore those small files, and the next compaction removes them."""
    from sparkqos.io.sinks import ParquetSink

    sink = ParquetSink(tmp_path, compact_every=2, background=False)
    for b in range(2):
        sink.write(b, {"q": pa.table({"x": [b, b]})})
    saved = {p.name: p.read_bytes() for p in (tmp_path / "query=q").iterdir()}
    sink.checkpointed(1)
    for name, data in saved.items():  # as if the removal had not happened
        (tmp_path / "query=q" / name).write_bytes(data)
    assert read_parquet_sink(tmp_path)["q"].column("x").to_pylist() == [0, 0, 1, 1]
    for b in range(2, 4):
        sink.write(b, {"q": pa.table({"x": [b]})})
    sink.checkpointed(3)
    assert sorted(p.name for p in (tmp_path / "query=q").iterdir()) == ["batches=0-1.parquet", "batches=2-3.parquet"]
    assert read_parquet_sink(tmp_path)["q"].column("x").to_pylist() == [0, 0, 1, 1, 2, 3]


def test_a_batch_reported_again_replaces_its_record(tmp_path):
    """A batch stopped after its report but before Spark committed it runs again under the same id
    (the sharded lane's finish() after a stop): its new record replaces the old one in
    ``recentProgress``, as its metrics file and outputs are replaced, so the live records and the
    ones read back from the metrics table stay one per batch."""
    import time

    import numpy as np

    from sparkqos.executor.report import RunReport
    from sparkqos.runtime.progress import QueuedSizes, read_progress

    loop = make_loop(tmp_path, strategy="fifo")
    first = [loop.process(BATCHES[b], b) for b in range(2)]
    names, queries = loop.progress.plan.names, loop.progress.plan.queries
    again = loop.progress.report(
        1,
        time.time(),
        rows_in=0,
        dead_rows=0,
        served=RunReport(),
        rows_out=dict.fromkeys(queries, 0),
        delays={q: np.empty(0) for q in queries},
        state=QueuedSizes(dict.fromkeys(names, 0.0), dict.fromkeys(names, 0.0)),
        strategy=("fifo", {}),
    )
    assert loop.progress.recent == [first[0], again] and loop.progress.last is again
    assert [p["batchId"] for p in read_progress(tmp_path / "out", "sparkqos")] == [0, 1]


def test_a_progress_record_has_sparks_keys_then_ours_and_the_metrics_rows_it_was_built_from(tmp_path, monkeypatch):
    """A record on fixed inputs and a fixed clock: Spark's progress keys and ours, in one order
    and with their types; each query's row exactly the metrics table's; the plan row of the table
    the numbers the top-level keys show; the record handed to ``on_progress`` the one returned
    and kept (the sharded lane adds its ``shards`` to it)."""
    import itertools
    import math
    from types import SimpleNamespace

    import numpy as np

    from sparkqos.executor.report import RunReport
    from sparkqos.report import metrics
    from sparkqos.runtime import progress as progress_module
    from sparkqos.runtime.progress import ProgressReporter, QueuedSizes

    t0 = 1_700_000_000.0
    clock = itertools.count(t0, 0.25)
    monkeypatch.setattr(progress_module, "time", SimpleNamespace(time=lambda: next(clock)))
    plan = sensor_queries(work_us=0.0, window_s=5.0).build().plan
    seen = []
    reporter = ProgressReporter("run1", plan, output=tmp_path, on_progress=seen.append)
    names = plan.names
    state = QueuedSizes({op: float(i) for i, op in enumerate(names)}, {op: 100.0 * i for i, op in enumerate(names)})
    rows_out = {"fire": 1, "anomaly": 2, "zone_stats": 0, "archive": 1}
    delays = {"fire": np.array([0.5]), "anomaly": np.array([0.25, 1.0]), "zone_stats": np.empty(0), "archive": np.array([2.0])}
    first = reporter.report(
        0, t0 - 1.0, rows_in=100, dead_rows=0, served=RunReport(rows_consumed=90, seconds=0.5, cpu_s=0.25),
        rows_out=rows_out, delays=delays, state=state, strategy=("chain", {}),
    )  # fmt: skip
    backlog = {
        "backlogS": 1.5,
        "backlogRows": 10.0,
        "catchUpEtaS": math.inf,
        "intakeWaitS": 0.0,
        "queuedMemoryBytes": 5.0,
        "spilledBytes": 0.0,
    }
    second = reporter.report(
        1, t0 - 0.5, rows_in=101, dead_rows=1, served=RunReport(rows_consumed=91, seconds=0.1, cpu_s=0.05),
        rows_out=rows_out, delays=delays, state=state, strategy=("adaptive", {"fifo": 0.25, "chain": 0.75}),
        continuous=True, backlog=backlog, spark_parts={"fire": (7, 0.5)},
        query_columns={"fire": {"shedRows": 0.0, "sloTargetS": 0.5, "sloViolations": 1.0, "sloMet": 0.0},
                       "archive": {"shedRows": 3.0, "behindS": 0.25}},
    )  # fmt: skip
    assert seen == [first, second] and seen[1] is second and reporter.recent == seen and reporter.last is second

    def plain(record):  # NaN compared as a string
        return {k: "nan" if isinstance(v, float) and math.isnan(v) else v for k, v in record.items() if k != "queries"}

    assert plain(first) == {
        "id": "run1", "batchId": 0, "timestamp": t0, "numInputRows": 100, "numOutputRows": 4, "processedRows": 100,
        "deadLetteredRows": 0, "inputRowsPerSecond": 100.0, "processedRowsPerSecond": 90.0,
        "durationMs": {"triggerExecution": 1000.0}, "queuedRows": 28.0, "queuedBytes": 2800.0,
        "delayMsMean": 937.5, "delayMsP50": 500.0, "delayMsP99": 2000.0, "delayMsMax": 2000.0,
        "strategy": "chain", "scores": {}, "executorRows": 90, "executorBusyS": 0.5, "executorBusyFraction": 0.5,
        "executorCpuS": 0.25, "executorCores": 0.25, "backlogS": "nan", "backlogRows": "nan", "catchUpEtaS": "nan",
        "intakeWaitS": "nan", "sparkRows": "nan", "sparkS": "nan", "shedRows": 0, "sloMet": "nan", "sloViolations": 0,
        "queuedMemoryBytes": "nan", "spilledBytes": "nan",
    }  # fmt: skip
    assert plain(second) == {
        **plain(first), "batchId": 1, "timestamp": t0 + 0.25, "numInputRows": 101, "processedRows": 100,
        "deadLetteredRows": 1, "inputRowsPerSecond": 80.8, "processedRowsPerSecond": 364.0,
        "durationMs": {"triggerExecution": 750.0}, "strategy": "adaptive", "scores": {"chain": 0.75, "fifo": 0.25},
        "executorRows": 91, "executorBusyS": 0.1, "executorBusyFraction": 0.4, "executorCpuS": 0.05, "executorCores": 0.2,
        "backlogS": 1.5, "backlogRows": 10.0, "catchUpEtaS": math.inf, "intakeWaitS": 0.0, "sparkRows": 7.0, "sparkS": 0.5,
        "shedRows": 3, "sloMet": 0.0, "sloViolations": 1, "queuedMemoryBytes": 5.0, "spilledBytes": 0.0,
    }  # fmt: skip
    assert list(second) == [*plain(second), "queries"]
    assert [type(v).__name__ for v in second.values()] == (
        "str int float int int int int float float dict float float float float float float str dict int "
        "float float float float float float float float float float int float int float float list"
    ).split()
    # each query's row: every metrics column, in the table's order, with the trigger's shared columns
    fire, anomaly, zone_stats, archive = second["queries"]
    assert all(list(q) == metrics.SCHEMA.names for q in second["queries"])
    shared = {"run": "run1", "batchId": 1, "time_s": t0 + 0.25, "strategy": "adaptive", "scores": '{"chain": 0.75, "fifo": 0.25}'}
    assert all({k: q[k] for k in shared} == shared for q in second["queries"])
    assert {k: fire[k] for k in ("query", "klass", "rowsIn", "rowsOut", "queuedRows", "queuedBytes", "durationMs")} == {
        "query": "fire", "klass": "H", "rowsIn": 101.0, "rowsOut": 1.0, "queuedRows": 1.0, "queuedBytes": 100.0,
        "durationMs": 750.0,
    }  # fmt: skip
    assert (fire["delayMean_s"], fire["sparkRows"], fire["sparkS"], fire["sloTargetS"], fire["sloMet"]) == (
        0.5,
        7.0,
        0.5,
        0.5,
        0.0,
    )
    assert (anomaly["delayMax_s"], anomaly["rowsOut"]) == (1.0, 2.0) and math.isnan(zone_stats["delayMean_s"])
    assert (archive["shedRows"], archive["behindS"]) == (3.0, 0.25) and math.isnan(anomaly["shedRows"])
    assert all(math.isnan(q[c]) for q in second["queries"] for c in ("deadLetteredRows", "executorRows", "backlogS"))
    # the metrics table holds the query rows and the plan row the top-level keys were read from
    table = [r for r in metrics.read(tmp_path, run="run1").to_pylist() if r["batchId"] == 1]
    plan_row = plain(next(r for r in table if r["query"] == metrics.PLAN_ROW))
    assert [plain(r) for r in table if r["query"] != metrics.PLAN_ROW] == [plain(q) for q in second["queries"]]
    assert {k: plan_row[k] for k in ("rowsIn", "rowsOut", "deadLetteredRows", "shedRows", "sloMet", "sloViolations")} == {
        "rowsIn": 101.0, "rowsOut": 4.0, "deadLetteredRows": 1.0, "shedRows": 3.0, "sloMet": 0.0, "sloViolations": 1.0,
    }  # fmt: skip
    assert (plan_row["klass"], plan_row["delayP99_s"], plan_row["executorCores"], plan_row["queuedMemoryBytes"]) == (
        "*",
        2.0,
        0.2,
        5.0,
    )


def test_the_typed_progress_row_is_the_metrics_tables_row():
    """:class:`ProgressRow` has a field per metrics column, in the table's order, with the defaults
    the table gives a column left out, and is frozen: a published record cannot change under its
    readers."""
    import dataclasses
    import json

    from sparkqos.report import metrics
    from sparkqos.runtime.progress import COLUMNS, Progress, ProgressRow

    assert list(COLUMNS) == metrics.SCHEMA.names
    assert json.dumps(ProgressRow().as_row()) == json.dumps(metrics.row())
    row = ProgressRow(run="r", batchId=3, query="q", rowsOut=2.0, scores='{"a": 1.0}')
    assert ProgressRow.of(row.as_row()) == row and ProgressRow.of({"run": "r", "scores": {"a": 1.0}}).scores == '{"a": 1.0}'
    with pytest.raises(dataclasses.FrozenInstanceError):
        row.rowsOut = 3.0
    progress = Progress(ProgressRow(query="*", rowsIn=5.0, deadLetteredRows=1.0), (row,))
    assert progress.rows() == [row.as_row(), progress.plan.as_row()]
    record = progress.to_json()
    assert (record["numInputRows"], record["processedRows"], record["queries"]) == (5, 4, [row.as_row()])


def test_each_querys_executor_seconds_stay_within_the_executors_even_after_a_restart(tmp_path):
    """A query's row holds the seconds the executor ran its operators since the last record:
    what each query costs. Their sum is within the executor's busy time (the plan's row: the runs
    and the picks between them), and the first record after a restart counts only that run's
    seconds, not those restored with the checkpoint's statistics."""
    first = make_loop(tmp_path)
    for b, t in enumerate(BATCHES[:2]):
        p = first.process(t, b)
        per_query = [q["executorBusyS"] for q in p["queries"]]
        assert all(s >= 0 for s in per_query) and sum(per_query) > 0
        assert sum(per_query) <= p["executorBusyS"]
    again = make_loop(tmp_path)
    p = again.process(BATCHES[2], 2)
    assert 0 < sum(q["executorBusyS"] for q in p["queries"]) <= p["executorBusyS"]
