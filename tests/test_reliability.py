"""Reliability, the fast part: bad input goes to dead letters and the counts add up; bad
configuration fails at start naming the key; a torn checkpoint is refused; overload spills in order
(or sheds only when asked, counted per query); COS clusters in threads give fifo's outputs with no
queue read and written at once. The SIGKILL crash/restart runs of the real job are in
benchmarks/crash_restart.py (they start a JVM per run, too slow for this module).

These tests drive the runner's ``process`` with Arrow tables (what foreachBatch hands it after
``toArrow()``), so no SparkSession is needed.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkqos import schedulers
from sparkqos.compile import QuerySet
from sparkqos.config import ConfigError
from sparkqos.errors import CheckpointCorrupt, SchemaMismatch
from sparkqos.executor.expressions import INTERNAL, SEQ, col
from sparkqos.executor.loop import EMIT, Executor
from sparkqos.executor.queues import BatchQueue
from sparkqos.io.deadletter import DeadLetterSink, RowChecks, _json_value, json_records, read_dead_letters
from sparkqos.io.sinks import read_parquet_sink
from sparkqos.spark.runner import QosStream, RunnerError, parse_faults
from sparkqos.testing import sensor_table
from sparkqos.workloads.sensors import SENSOR_SCHEMA, sensor_queries

T0 = 1_700_000_000.0
SENSOR_CHECKS = RowChecks(required=("sensor_id", "location"), ranges={"temperature": (-60, 150), "humidity": (0, 100)})


class FakeStream:
    """Stands in for a streaming DataFrame: the runner only checks ``isStreaming`` before start()."""

    isStreaming = True


def make_stream(tmp_path: Path, **kw) -> QosStream:
    kw.setdefault("strategy", "chain")
    return QosStream(
        FakeStream(),
        sensor_queries(work_us=0.0, window_s=5.0),
        checkpoint=tmp_path / "ckpt",
        output=tmp_path / "out",
        budget_s=30.0,
        fault="",
        **kw,
    )


# -- bad input ------------------------------------------------------------------------------------


def test_bad_rows_go_to_dead_letters_and_counts_add_up(tmp_path):
    """Nulls in key columns, NaN, out-of-range values, wrong types (strings in a number column, as
    a CSV replay gives them) and a schema change mid-stream (a column renamed): each bad row is
    dead-lettered with its reason and batch id; every other row is processed."""
    handle = make_stream(tmp_path, checks=SENSOR_CHECKS)
    good0 = sensor_table(200, 1)
    bad = sensor_table(100, 2, start=T0 + 4)
    temp = bad.column("temperature").to_pylist()
    sid = bad.column("sensor_id").to_pylist()
    hum = bad.column("humidity").to_pylist()
    for i in range(0, 10):
        sid[i] = None  # null key
    for i in range(10, 15):
        temp[i] = float("nan")  # NaN
    for i in range(15, 20):
        hum[i] = 140.0  # out of range
    bad = bad.set_column(0, "sensor_id", pa.array(sid, pa.int32()))
    bad = bad.set_column(2, "temperature", pa.array(temp)).set_column(3, "humidity", pa.array(hum))
    # wrong types: the temperature column arrives as text, three values are not numbers
    text = [("n/a" if i in (20, 21, 22) else str(v)) for i, v in enumerate(bad.column("temperature").to_pylist())]
    typed = bad.set_column(2, "temperature", pa.array(text, pa.string()))
    # schema change mid-stream: humidity renamed
    renamed = sensor_table(50, 3, start=T0 + 8).rename_columns(["sensor_id", "location", "temperature", "hum", "ts"])
    good3 = sensor_table(150, 4, start=T0 + 12)

    progress = [handle.process(t, b) for b, t in enumerate([good0, typed, renamed, good3])]
    dead = read_dead_letters(tmp_path / "out" / "deadletter")
    reasons = Counter(
        (r["batch_id"], r["reason"].split(" ")[0] if r["reason"].startswith(("null", "NaN", "missing")) else r["column"])
        for r in dead.to_pylist()
    )
    assert reasons[(1, "null")] == 10 and reasons[(1, "NaN")] == 5 and reasons[(1, "humidity")] == 5
    assert reasons[(1, "temperature")] == 3  # 'n/a' is not double
    assert reasons[(2, "missing")] == 50  # every row of the renamed batch
    assert "column 'temperature': 'n/a' is not double" in set(dead.column("reason").to_pylist())
    assert json.loads(dead.filter(pa.compute.equal(dead.column("batch_id"), 2)).column("record")[0].as_py())["hum"] is not None
    # rows in = processed + dead-lettered, per batch and in total
    for p in progress:
        assert p["numInputRows"] == p["processedRows"] + p["deadLetteredRows"]
    assert [p["deadLetteredRows"] for p in progress] == [0, 23, 50, 0]
    processed = sum(p["processedRows"] for p in progress)
    assert processed == 200 + 77 + 0 + 150
    handle.finish()
    archive = read_parquet_sink(tmp_path / "out" / "outputs")["archive"]
    assert archive.num_rows == processed  # archive keeps every processed row: nothing else was lost
    # the processed rows of the typed batch kept their numbers
    assert set(archive.column("temperature").to_pylist()) >= {float(v) for i, v in enumerate(text) if i >= 23}


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_dead_letter_records_are_the_rows_json_text(data):
    """A dead letter's record, built a column at a time, is exactly ``json.dumps`` of the row's
    dict with sorted keys: integers, booleans, floats (NaN and infinities as strings), strings
    with quotes, control and non-ASCII characters, UTC and zone-less timestamps, bytes, lists and
    nulls in each."""
    n = data.draw(st.integers(0, 12))
    kinds = {
        "i": (st.integers(-(2**63), 2**63 - 1), pa.int64()),
        "s": (st.text(max_size=6), pa.string()),
        "f": (st.floats(allow_nan=True, allow_infinity=True), pa.float64()),
        "g": (st.floats(width=32, allow_nan=True, allow_infinity=True), pa.float32()),
        "b": (st.booleans(), pa.bool_()),
        "t": (st.integers(-(10**16), 2 * 10**14), pa.timestamp("us", tz="UTC")),
        "n": (st.integers(-(10**11), 10**11), pa.timestamp("ms")),
        "x": (st.binary(max_size=4), pa.binary()),
        "l": (st.lists(st.integers(0, 9), max_size=2), pa.list_(pa.int64())),
    }
    names = data.draw(st.lists(st.sampled_from(sorted(kinds)), unique=True, max_size=len(kinds)))
    table = pa.table(
        {k: pa.array(data.draw(st.lists(st.none() | kinds[k][0], min_size=n, max_size=n)), kinds[k][1]) for k in names}
        or {"i": pa.array([None] * n, pa.int64())}
    )
    expected = [json.dumps({k: _json_value(v) for k, v in r.items()}, sort_keys=True) for r in table.to_pylist()]
    assert json_records(table).to_pylist() == expected


def test_dead_letters_are_replaced_on_replay(tmp_path):
    sink = DeadLetterSink(tmp_path)
    _, dead = RowChecks(required=("id",)).split(pa.table({"id": [None, None, 1]}), pa.schema([("id", pa.int64())]), 4)
    sink.write(4, dead)
    sink.write(4, dead)
    assert read_dead_letters(tmp_path).num_rows == 2
    sink.write(4, None)  # the replayed batch had no bad rows this time
    assert read_dead_letters(tmp_path).num_rows == 0


def test_without_a_dead_letter_place_bad_rows_raise(tmp_path):
    handle = QosStream(FakeStream(), sensor_queries(work_us=0.0), checkpoint=tmp_path, strategy="fifo", fault="")
    with pytest.raises(SchemaMismatch, match="batch 0 of stream 'sensors': 5 bad row.*missing column 'humidity'"):
        handle.process(sensor_table(5, 1).drop_columns(["humidity"]), 0)


def test_row_checks_reject_bad_rules():
    with pytest.raises(ValueError, match=r"ranges\['t'\]: low 5 is above high 1"):
        RowChecks(ranges={"t": (5, 1)})
    with pytest.raises(ValueError, match="required column 'nope' is not in the stream's schema"):
        RowChecks(required=("nope",)).split(pa.table({"a": [1]}), pa.schema([("a", pa.int64())]))


# -- bad configuration (through the main job's loader) ---------------------------------------------


def job_config(tmp_path: Path, toml: str | None = None, overrides: tuple[str, ...] = ()):
    from jobs.sensor_monitor import parse_args

    argv = []
    if toml is not None:
        path = tmp_path / "job.toml"
        path.write_text(toml)
        argv += ["--config", str(path)]
    for o in overrides:
        argv += ["--set", o]
    return parse_args(argv)


@pytest.mark.parametrize(
    "toml, overrides, message",
    [
        (
            None,
            ("scheduler.strategy=chian",),
            r"scheduler.strategy = 'chian' is not allowed \(did you mean 'chain'\?\); allowed values are: .*fifo",
        ),
        (None, ("job.budget_s=-1",), r"job.budget_s must be a finite number >= 0, got -1"),
        (
            "[scheduler]\nstratgy = 'chain'\n",
            (),
            r"unknown key 'scheduler.stratgy' \(did you mean 'strategy'\?\); allowed keys in \[scheduler\] are: strategy",
        ),
        ("[job]\nduration_s = = 3\n", (), r"not valid TOML"),
        (None, ("scheduler.candidates=fifo,nope",), r"scheduler.candidates = 'nope' is not allowed.*allowed values are: "),
    ],
)
def test_bad_job_configuration_fails_at_start_naming_the_key(tmp_path, toml, overrides, message):
    with pytest.raises(ConfigError, match=message):
        job_config(tmp_path, toml, overrides)


def test_qos_weights_not_summing_to_one_fail_at_start(tmp_path):
    spec = tmp_path / "qos.toml"
    spec.write_text(
        'name = "lopsided"\n[[goal]]\nstatistic = "delay"\ndirection = "minimize"\nweight = 0.5\n'
        '[[goal]]\nstatistic = "queued"\ndirection = "minimize"\nweight = 0.2\n'
    )
    with pytest.raises(ConfigError, match=r"scheduler.qos: .*weights must sum to 1, got 0.7"):
        job_config(tmp_path, overrides=(f"scheduler.qos={spec}",))


def test_fault_spec_is_checked():
    assert parse_faults("after_sink:3,before_ingest:0") == {"after_sink": {3}, "before_ingest": {0}}
    with pytest.raises(RunnerError, match="fault 'mid_air:2' must be POINT:BATCH_ID with POINT one of before_ingest"):
        parse_faults("mid_air:2")


# -- torn checkpoint --------------------------------------------------------------------------------


def test_torn_checkpoint_is_refused_by_the_runner(tmp_path):
    handle = make_stream(tmp_path)
    for b in range(3):
        handle.process(sensor_table(100, b, start=T0 + 4 * b), b)
    newest = sorted((tmp_path / "ckpt" / "sparkqos").glob("*.ckpt"))[-1]
    data = newest.read_bytes()
    newest.write_bytes(data[: len(data) - 100])
    with pytest.raises(CheckpointCorrupt, match=rf"checkpoint .*{newest.name} is corrupt: missing end marker"):
        make_stream(tmp_path).restore()
    flipped = bytearray(data)
    flipped[len(b"SQCKPT01") + 10] ^= 0xFF  # a byte inside the state section
    newest.write_bytes(bytes(flipped))
    with pytest.raises(CheckpointCorrupt, match="checksum mismatch"):
        make_stream(tmp_path).restore()


def test_restart_with_an_idle_adaptive_candidate_restores(tmp_path):
    """A checkpoint taken before one adaptive candidate (cqc) ever ran restores (found by the
    crash runs: cqc refused its own never-attached state)."""
    kw = dict(strategy="adaptive", strategy_params={"candidates": ["fifo", "cqc"], "period": 1e9})
    first = make_stream(tmp_path, **kw)
    first.process(sensor_table(100, 1), 0)
    second = make_stream(tmp_path, **kw)
    assert second.restore() == 0
    assert second.process(sensor_table(100, 2, start=T0 + 4), 1)["processedRows"] == 100


# -- overload: spill and shed ------------------------------------------------------------------------


def pass_through() -> QuerySet:
    qs = QuerySet(classes={"H": 2, "N": 1})
    s = qs.stream("s", {"k": pa.int64(), "v": pa.float64()})
    s.where(col("v") >= 0).sink("keep", klass="H")
    s.synthetic(selectivity=1.0, cost_s=0.0, seed=3).select("k", "v").sink("copy", klass="N")
    return qs


def overload_run(**kw) -> tuple[Executor, int]:
    ticks = iter(range(1, 1 << 40))
    ex = Executor(pass_through().build().fresh(), schedulers.get("chain"), clock=lambda: next(ticks) * 1e-3, **kw)
    rng = np.random.default_rng(5)
    rows = 0
    for i in range(120):
        n = int(rng.integers(50, 150))
        ex.ingest("s", pa.record_batch({"k": np.arange(rows, rows + n), "v": rng.uniform(0, 1, n)}), arrival=float(i))
        rows += n
        ex.run(max_units=1 if i < 80 else 6)  # a burst the executor cannot keep up with, then catch-up
    ex.finish()
    return ex, rows


def test_overload_spills_beyond_the_limit_and_loses_nothing_in_order(tmp_path):
    free, rows = overload_run()
    limit = 64_000
    ex, _ = overload_run(memory_limit_bytes=limit, spill_dir=str(tmp_path))
    assert ex.state.spilled_bytes_total > limit
    assert free.state.peak_memory_bytes == 0 and ex.state.peak_memory_bytes > limit  # peak before relief
    # after every enqueue the memory is back under the limit, except each queue's head batch
    assert ex.state.memory_bytes <= limit
    for q in ("keep", "copy"):
        got, want = ex.result(q, internal=True), free.result(q, internal=True)
        assert got.num_rows == want.num_rows == rows
        assert got.column(SEQ).to_pylist() == want.column(SEQ).to_pylist() == list(range(rows))  # order kept
    assert ex.state.shed_rows == {} and ex.state.spilled_bytes == 0
    assert not list(Path(ex.state._spill_dir).iterdir())  # every spill file was read back and removed
    ex.close()


def test_spilled_bytes_are_every_queues_also_after_a_restore(tmp_path):
    """ExecutorState.spilled_bytes sums the queues that spilled; a restored executor's queues spill
    again as they come back under its memory limit, and the figure follows them, also as runs
    read spilled batches back."""

    def on_disk(ex: Executor) -> int:
        return sum(q.spilled_bytes for ports in ex.state.ports.values() for q in ports)

    def executor(limit: int | None, where: str) -> Executor:
        ticks = iter(range(1, 1 << 40))
        return Executor(
            pass_through().build().fresh(),
            schedulers.get("chain"),
            clock=lambda: next(ticks) * 1e-3,
            memory_limit_bytes=limit,
            spill_dir=str(tmp_path / where),
        )

    first = executor(64_000, "first")
    rng = np.random.default_rng(7)
    for i in range(60):
        batch = pa.record_batch({"k": np.arange(100 * i, 100 * i + 100), "v": rng.uniform(0, 1, 100)})
        first.ingest("s", batch, arrival=float(i))
        first.run(max_units=1)
    assert first.state.spilled_bytes == on_disk(first) > 0
    saved = first.to_state()
    for limit in (64_000, 32_000, None):
        back = executor(limit, f"back-{limit}")
        back.load_state(saved)
        assert back.state.spilled_bytes == on_disk(back)
        assert (back.state.spilled_bytes > 0) == (limit is not None)
        while back.state.spilled_bytes:
            back.run(max_units=1)
            assert back.state.spilled_bytes == on_disk(back)
        back.close()
    first.close()


def test_load_shedding_only_when_asked_and_counted_per_query(tmp_path):
    with pytest.raises(ValueError, match="shed=True needs memory_limit_bytes"):
        Executor(pass_through().build().fresh(), schedulers.get("fifo"), shed=True)
    ex, rows = overload_run(memory_limit_bytes=64_000, shed=True)
    shed = ex.state.shed_rows
    assert shed and set(shed) <= {"keep", "copy"} and sum(shed.values()) > 0
    for q in ("keep", "copy"):
        assert ex.result(q).num_rows + shed.get(q, 0) == rows  # out + shed = in, per query


def test_spilled_queue_checkpoints_whole(tmp_path):
    from sparkqos.executor.queues import stamp, with_internal

    q = BatchQueue(with_internal(pa.schema([("v", pa.int64())])))
    for i in range(5):
        q.push(stamp(pa.record_batch({"v": [i] * 10}), float(i), 10 * i))
    q.spill_tail(tmp_path, need=10**9)
    back = BatchQueue.from_ipc(q.to_ipc())
    assert back.rows == 50 and [b.column("v")[0].as_py() for b in back.batches()] == [0, 1, 2, 3, 4]
    assert q.spilled_batches == 4  # checkpointing read the files without loading them back


# -- thread safety: COS clusters in threads --------------------------------------------------------


def cos_plan() -> QuerySet:
    """Operators of very different cost and selectivity, so COS forms several clusters."""
    qs = QuerySet(classes={"H": 3, "N": 1})
    s = qs.stream("s", {"k": pa.int64(), "v": pa.float64(), "g": pa.string()})
    s.where(col("v") > 0.2).synthetic(selectivity=0.9, cost_s=1e-6, seed=1).select("k", "v").sink("light", klass="H")
    s.synthetic(selectivity=0.3, cost_s=2e-5, seed=2).where(col("v") < 0.9).select("k", "g").sink("heavy", klass="N")
    s.synthetic(selectivity=1.0, cost_s=5e-6, seed=3).select("k", "v", "g").sink("copy", klass="N")
    return qs


class QueueWatch:
    """Records any moment two threads are inside the same queue at once."""

    def __init__(self, monkeypatch):
        self.inside: dict[int, int] = {}
        self.lock = threading.Lock()
        self.clashes = 0
        self.threads: set[str] = set()
        for name in ("push", "take", "take_before", "spill_tail", "drop_tail", "clear"):
            monkeypatch.setattr(BatchQueue, name, self.wrap(getattr(BatchQueue, name)))

    def wrap(self, fn):
        watch = self

        def guarded(q, *args, **kwargs):
            with watch.lock:
                if watch.inside.get(id(q), 0):
                    watch.clashes += 1
                watch.inside[id(q)] = watch.inside.get(id(q), 0) + 1
                watch.threads.add(threading.current_thread().name)
            try:
                return fn(q, *args, **kwargs)
            finally:
                with watch.lock:
                    watch.inside[id(q)] -= 1

        return guarded


def drive(ex: Executor, triggers: int, seed: int) -> int:
    rng = np.random.default_rng(seed)
    rows = 0
    for t in range(triggers):
        n = int(rng.integers(0, 12))
        if n:
            ex.ingest(
                "s",
                pa.record_batch(
                    {"k": np.arange(rows, rows + n), "v": rng.uniform(0, 1, n), "g": [f"g{i % 3}" for i in range(n)]}
                ),
                arrival=float(t),
            )
            rows += n
        ex.run(max_units=int(rng.integers(1, 5)))
    ex.finish()
    return rows


def test_cos_cluster_threads_equal_fifo_over_1000_triggers(monkeypatch):
    """COS §4.2 (clusters in threads): 1,000 triggers of small batches; the outputs equal fifo's
    row for row (as sets keyed by sequence number: none lost, none twice) and no queue was ever
    entered by two threads at once."""
    compiled = cos_plan().build()
    watch = QueueWatch(monkeypatch)
    cos = schedulers.get("cos", T=0.1)
    threaded = Executor(compiled.fresh(), cos, clock=__import__("time").monotonic, cluster_threads=8)
    rows = drive(threaded, 1000, seed=9)
    threaded.close()
    assert len(cos.clusters) >= 2
    serial = Executor(compiled.fresh(), schedulers.get("fifo"))
    assert drive(serial, 1000, seed=9) == rows
    assert watch.clashes == 0
    assert sum(1 for name in watch.threads if name.startswith("sparkqos-cluster")) >= 2
    for q in compiled.roots:
        got, want = threaded.result(q, internal=True), serial.result(q, internal=True)
        seq = got.column(SEQ).to_pylist()
        assert len(seq) == len(set(seq)), f"{q}: duplicated rows"
        assert sorted(seq) == want.column(SEQ).to_pylist(), f"{q}: rows lost or invented"
        cols = [c for c in want.column_names if c not in INTERNAL and c != EMIT]
        assert got.sort_by(SEQ).select(cols).equals(want.select(cols))
    assert threaded.state.total_queued == 0 and threaded.state.total_queued_bytes == 0


def test_cluster_threads_need_a_clustering_strategy():
    with pytest.raises(ValueError, match="cluster_threads needs a strategy with clusters"):
        Executor(cos_plan().build().fresh(), schedulers.get("chain"), cluster_threads=2)


def test_spill_schema_matches_sensor_schema():
    # the dead-letter checks run against the plan's schema the job uses
    good, dead = SENSOR_CHECKS.split(sensor_table(10, 1), SENSOR_SCHEMA)
    assert good.num_rows == 10 and dead.num_rows == 0 and good.schema == SENSOR_SCHEMA
