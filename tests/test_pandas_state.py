"""Users' own stateful functions: ``groupBy(keys).applyInPandasWithState(...)`` as a native operator.

* Streamed through ``sparkqos.stream`` (a file stream, one file per micro-batch, available-now,
  then ``finish()``), its rows equal Spark's own streaming run of the same PySpark code: an
  event-time timeout in update mode (sessions closed by the watermark, timestamps in and out), and
  a running count in append mode without timeout.
* A crash after a batch's sink write and a restart from the checkpoint give the same rows, each once.
* A processing-time timeout fires at the first trigger whose clock is past it, on the operator
  (Spark's own run of one depends on its wall clock).
* What sparkqos does not run is refused before data moves, naming it.
"""

from __future__ import annotations

import datetime as dt
import decimal
import os

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql.streaming.state import GroupStateTimeout

import sparkqos
from sparkqos import schedulers
from sparkqos.compile.shardable import check_shardable
from sparkqos.errors import NotShardable, UdfError, UnsupportedTransform
from sparkqos.executor import Executor
from sparkqos.executor.operators import PandasWithState
from sparkqos.executor.operators.base import ipc_to_table
from sparkqos.executor.operators.group_state import state_type_supported
from sparkqos.executor.queues import stamp, with_internal
from sparkqos.io.sinks import MemorySink
from sparkqos.spark.transforms import compile_transforms
from tests.conftest import spark_streams, stream_through_a_crash
from tests.test_transforms_stateful import BASE_US, assert_same

pytestmark = pytest.mark.spark

GAP_MS = 3_000


def sessions_of(key, frames, state):
    """A session per key: rows and their sum while open; closed (and forgotten) once the watermark
    passes its last row plus the gap."""
    if state.hasTimedOut:
        n, total, last_ms = state.get
        state.remove()
        yield pd.DataFrame(
            {"k": [key[0]], "status": ["closed"], "n": [n], "total": [total], "last": [pd.Timestamp(last_ms, unit="ms")]}
        )
        return
    n, total, last_ms = state.get if state.exists else (0, 0.0, 0)
    for frame in frames:
        n += len(frame)
        total += float(frame["i"].sum())
        last_ms = max(last_ms, int(frame["ts"].max().value // 1_000_000))
    state.update((n, total, last_ms))
    state.setTimeoutTimestamp(last_ms + GAP_MS)
    yield pd.DataFrame(
        {"k": [key[0]], "status": ["open"], "n": [n], "total": [total], "last": [pd.Timestamp(last_ms, unit="ms")]}
    )


def sessions(df):
    return (
        df.withWatermark("ts", "2 seconds")
        .groupBy("k")
        .applyInPandasWithState(
            sessions_of,
            "k string, status string, n long, total double, last timestamp",
            "n long, total double, last_ms long",
            "update",
            GroupStateTimeout.EventTimeTimeout,
        )
    )


def counts_of(key, frames, state):
    n = state.get[0] if state.exists else 0
    for frame in frames:
        n += len(frame)
    state.update((n,))
    yield pd.DataFrame({"k": [key[0]], "n": [n], "watermark": [state.getCurrentWatermarkMs()]})


def counts(df):
    return (
        df.withWatermark("ts", "4 seconds")
        .groupBy("k")
        .applyInPandasWithState(counts_of, "k string, n long, watermark long", "n long", "append", GroupStateTimeout.NoTimeout)
    )


QUERIES = {"sessions": sessions, "counts": counts}


def trace(n: int = 80, seed: int = 7) -> pa.Table:
    """Rows at half seconds, bursts and pauses longer than the gap, nulls in keys and values, and
    every tenth row up to a minute behind the others (some late, some not)."""
    rng = np.random.default_rng(seed)
    names = ["u1", "u2", None, ""]
    t, data = 40, []
    for j in range(n):
        t += int(rng.choice([0, 1, 1, 2, 16]))
        behind = int(rng.integers(1, 121)) if j % 10 == 9 else 0
        i = None if rng.random() < 0.1 else int(rng.integers(-50, 50))
        data.append((names[int(rng.integers(4))], i, float(rng.normal()), BASE_US + (t - behind) * 500_000))
    k, i, d, ts = zip(*data, strict=True)
    return pa.table(
        {
            "k": pa.array(k, pa.string()),
            "i": pa.array(i, pa.int32()),
            "d": pa.array(d, pa.float64()),
            "ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
        }
    )


FILES = 10


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """The trace in files of 8 rows, one per micro-batch, in the trace's order (so the rows
    behind the others arrive after them)."""
    folder = tmp_path_factory.mktemp("pandas_state") / "input"
    folder.mkdir()
    table, step = trace(), 8
    for f in range(FILES):
        path = folder / f"part-{f:05d}.parquet"
        pq.write_table(table.slice(f * step, step), path)
        os.utime(path, (1_700_000_000 + f, 1_700_000_000 + f))
    return folder


def file_stream(spark, folder):
    return spark.readStream.schema(spark.read.parquet(str(folder)).schema).option("maxFilesPerTrigger", 1).parquet(str(folder))


@pytest.fixture(scope="module")
def sparks_run(spark_sql, folder, tmp_path_factory):
    modes = {"sessions": "update"}
    return spark_streams(QUERIES, lambda: file_stream(spark_sql, folder), tmp_path_factory.mktemp("spark"), output_modes=modes)


def _check(got: pa.Table, want: pa.Table, name: str) -> None:
    assert want.num_rows > 0, name
    assert_same(got.select(want.column_names).cast(want.schema), want, name)


def test_streamed_state_equals_sparks_streaming_run(spark_sql, folder, sparks_run, tmp_path):
    sink = MemorySink()
    handle = sparkqos.stream(
        file_stream(spark_sql, folder),
        QUERIES,
        trigger=sparkqos.Trigger(availableNow=True),
        checkpoint=tmp_path / "ckpt",
        sink=sink,
        strategy="chain",
    )
    assert handle.start().awaitTermination(180)
    late = handle.loop.executor.compiled.operators["sessions/1:state"].late_rows
    handle.finish()
    for name in QUERIES:
        _check(sink.table(name), sparks_run[name].rows, name)
    closed = sink.table("sessions").filter(pa.compute.equal(sink.table("sessions").column("status"), "closed"))
    assert closed.num_rows > 0 and late > 0  # event-time timeouts fired; rows behind the watermark were dropped


@pytest.mark.slow
def test_a_crash_and_restart_in_the_middle_gives_each_row_once(spark_sql, folder, sparks_run, tmp_path, monkeypatch):
    sink = MemorySink()

    def attempt(**fault):
        return sparkqos.stream(
            file_stream(spark_sql, folder),
            QUERIES,
            strategy="cqc",
            trigger=sparkqos.Trigger(availableNow=True),
            checkpoint=tmp_path / "ckpt",
            sink=sink,
            **fault,
        )

    _, restored = stream_through_a_crash(monkeypatch, attempt, "after_sink:2")
    assert restored == 1
    for name in QUERIES:
        _check(sink.table(name), sparks_run[name].rows, name)


def _closing(key, frames, state):
    if state.hasTimedOut:
        n = state.get[0]
        state.remove()
        yield pd.DataFrame({"k": [key[0]], "n": [n], "closed": [True]})
        return
    n = (state.get[0] if state.exists else 0) + sum(len(frame) for frame in frames)
    state.update((n,))
    state.setTimeoutDuration(1)
    yield pd.DataFrame({"k": [key[0]], "n": [n], "closed": [False]})


def test_a_processing_time_timeout_through_a_stream_closes_every_key_once(spark_sql, folder, tmp_path):
    """Each key times out a millisecond after its last rows: at a later trigger without rows for
    it, or at ``finish()``; its count then is every row it had, and it is closed once per run of
    rows (Spark's own run depends on its wall clock, so the rows are checked against the input)."""

    def closing(d):
        return d.groupBy("k").applyInPandasWithState(
            _closing, "k string, n long, closed boolean", "n long", "update", GroupStateTimeout.ProcessingTimeTimeout
        )

    sink = MemorySink()
    handle = sparkqos.stream(
        file_stream(spark_sql, folder),
        {"closing": closing},
        trigger=sparkqos.Trigger(availableNow=True),
        checkpoint=tmp_path / "ckpt",
        sink=sink,
        strategy="fifo",
    )
    assert handle.start().awaitTermination(180)
    handle.finish()
    rows = sink.table("closing").to_pylist()
    keys = set(trace().column("k").to_pylist())
    closed = [r for r in rows if r["closed"]]
    assert {r["k"] for r in closed} == keys  # every key timed out at least once, none stays open
    for k in keys:  # between two closes, the counts of a key's open rows run up to its closed count
        mine = [r for r in rows if r["k"] == k]
        assert mine[-1]["closed"] and all(a["n"] <= b["n"] or a["closed"] for a, b in zip(mine, mine[1:], strict=False))
    assert sum(r["n"] for r in closed) == trace().num_rows


def test_the_plan_runs_it_natively(spark, folder):
    compiled = compile_transforms(file_stream(spark, folder), QUERIES)
    op = compiled.operators["sessions/1:state"]
    assert isinstance(op, PandasWithState)
    assert (op.keys, op.timeout, op.time_col, op.delay_us) == (["k"], "EventTimeTimeout", "ts", 2_000_000)
    text = sparkqos.explain(file_stream(spark, folder), QUERIES)
    assert "native  sessions/1:state" in text and "applyInPandasWithState" in text


def test_a_triggers_end_serves_the_rows_still_below_the_function(spark, folder):
    """Spark calls the function once per key with the whole micro-batch: rows of the trigger
    still queued below it are served before the calls, whatever the strategy left."""
    compiled = compile_transforms(file_stream(spark, folder), {"counts": lambda d: counts(d.where(d.i.isNotNull()))})
    ex = Executor(compiled.fresh(), schedulers.get("fifo"))
    batch = trace().slice(0, 8).cast(compiled.sources["input"])
    ex.ingest("input", batch, arrival=0.0)
    assert ex.result("counts").num_rows == 0  # nothing ran yet
    ex.end_trigger()
    got = ex.result("counts")
    want = batch.filter(pa.compute.is_valid(batch.column("i"))).group_by("k").aggregate([("i", "count")])
    assert dict(zip(got.column("k").to_pylist(), got.column("n").to_pylist(), strict=True)) == dict(
        zip(want.column("k").to_pylist(), want.column("i_count").to_pylist(), strict=True)
    )
    assert got.num_rows == want.num_rows  # one call per key


# -- the operator alone ------------------------------------------------------------------------------
def _timing_out(key, frames, state):
    if state.hasTimedOut:
        state.remove()
        yield pd.DataFrame({"k": [key[0]], "n": [-1]})
        return
    n = sum(len(f) for f in frames) + (state.get[0] if state.exists else 0)
    state.update((n,))
    state.setTimeoutDuration(1_000)
    yield pd.DataFrame({"k": [key[0]], "n": [n]})


def test_a_processing_time_timeout_fires_at_the_first_trigger_past_it():
    now = [100.0]
    op = PandasWithState(
        ["k"], ["k"], _timing_out, pa.schema([("k", pa.string()), ("n", pa.int64())]),
        pa.struct([("n", pa.int64())]), "ProcessingTimeTimeout", clock=lambda: now[0],
    )  # fmt: skip
    op.bind("q/state", [with_internal(pa.schema([("k", pa.string())]))])

    def trigger(keys, at):
        now[0] = at
        if keys:
            op.process(stamp(pa.record_batch({"k": pa.array(keys, pa.string())}), at, 0))
        return sorted((r["k"], r["n"]) for b in op.end_trigger() for r in b.to_pylist())

    assert trigger(["a", "b"], 100.0) == [("a", 1), ("b", 1)]
    assert trigger(["a"], 100.5) == [("a", 2)]  # a's timeout moves to 101.5 s; b's stays at 101 s
    assert trigger([], 101.0) == []  # not past 101 s yet
    assert trigger([], 101.2) == [("b", -1)]
    state = op.to_state()
    again = op.copy()
    again.bind("q/state", op.input_schemas)
    again.from_state(state)
    op = again
    assert trigger([], 101.6) == [("a", -1)] and op.state_rows() == 0


def _echo(key, frames, state):
    for frame in frames:
        yield frame[["k", "v"]] if "v" in frame else frame


def _rows_of(key, frames, state):
    yield pd.DataFrame({"k": [key[0]], "n": [sum(len(frame) for frame in frames)]})


TS_UTC = pa.timestamp("us", tz="UTC")
#: Arrow types of the columns a function may read, with two values and a null each.
FRAME_TYPES = {
    pa.int8(): [1, -2],
    pa.int16(): [300, -2],
    pa.int32(): [70_000, -2],
    pa.int64(): [2**40, -2],
    pa.float32(): [1.5, float("nan")],
    pa.float64(): [1e300, -0.0],
    pa.string(): ["", "ü"],
    pa.bool_(): [True, False],
    TS_UTC: [BASE_US, BASE_US + 1],
    pa.decimal128(10, 2): [decimal.Decimal("1.25"), decimal.Decimal("-3.00")],
    pa.date32(): [dt.date(2024, 2, 29), dt.date(1970, 1, 1)],
    pa.binary(): [b"\x00\x01", b""],
    pa.list_(pa.string()): [["a", None], []],
    pa.struct([("a", pa.int32()), ("b", pa.string())]): [{"a": 1, "b": None}, {"a": None, "b": "x"}],
}


@pytest.mark.parametrize("t", list(FRAME_TYPES), ids=str)
def test_every_column_type_it_takes_reaches_the_function_and_back(t):
    """Integers, floats, strings, booleans and timestamps go through the function and back
    unchanged (nulls too); the other types it may read reach it."""
    values = [*FRAME_TYPES[t], None]
    schema = with_internal(pa.schema([("k", pa.string()), ("v", t)]))
    echo = state_type_supported(t)
    output = pa.schema([("k", pa.string()), ("v", t)] if echo else [("k", pa.string()), ("n", pa.int64())])
    op = PandasWithState(["k"], ["k", "v"], _echo if echo else _rows_of, output, pa.struct([("n", pa.int64())]), "NoTimeout")
    op.bind("q/state", [schema])
    op.process(stamp(pa.record_batch({"k": ["a", "a", "b"], "v": pa.array(values, t)}), 0.0, 0))
    got = pa.Table.from_batches(op.end_trigger())
    if echo:
        want = pa.array(values, t)
        if pa.types.is_floating(t):  # NaN is null, as Spark takes a pandas result
            want = pa.array([None if v is None or v != v else v for v in values], t)
        assert got.column("v").combine_chunks().equals(want)
    else:
        assert sorted(got.select(["k", "n"]).to_pylist(), key=str) == [{"k": "a", "n": 2}, {"k": "b", "n": 1}]


def test_a_timestamp_in_the_state_is_naive_in_the_session_time_zone_as_spark_gives_it():
    """The function sees the state's timestamps as its rows' (naive, in the session's time zone)
    and stores them the same way, so the two compare."""

    def newest(key, frames, state):
        seen = state.get[0] if state.exists else None
        for frame in frames:
            top = frame["ts"].max()
            seen = top if seen is None else max(seen, top)
        state.update((seen,))
        yield pd.DataFrame({"k": [key[0]], "newest": [seen]})

    schema = with_internal(pa.schema([("k", pa.string()), ("ts", TS_UTC)]))
    output = pa.schema([("k", pa.string()), ("newest", TS_UTC)])
    op = PandasWithState(["k"], ["k", "ts"], newest, output, pa.struct([("t", TS_UTC)]), "NoTimeout", time_zone="Europe/Paris")
    op.bind("q/state", [schema])
    for i, secs in enumerate(([5, 3], [1])):
        ts = pa.array([BASE_US + s * 1_000_000 for s in secs], TS_UTC)
        op.process(stamp(pa.record_batch({"k": ["a"] * len(secs), "ts": ts}), float(i), i))
        got = pa.Table.from_batches(op.end_trigger()).column("newest").to_pylist()
        assert got == [pa.scalar(BASE_US + 5_000_000, TS_UTC).as_py()]
    held = op.to_state()
    assert ipc_to_table(held["groups"]).column("__value").to_pylist() == [{"t": pa.scalar(BASE_US + 5_000_000, TS_UTC).as_py()}]


def test_a_failing_function_is_named_and_keeps_its_rows():
    def broken(key, frames, state):
        raise ZeroDivisionError("boom")

    op = PandasWithState(
        ["k"],
        ["k"],
        broken,
        pa.schema([("k", pa.string())]),
        pa.struct([("n", pa.int64())]),
        "NoTimeout",
        query="q",
        udf="broken",
    )
    op.bind("q/state", [with_internal(pa.schema([("k", pa.string())]))])
    op.process(stamp(pa.record_batch({"k": ["a"]}), 0.0, 0))
    with pytest.raises(UdfError, match="query 'q': UDF 'broken' raised ZeroDivisionError: boom"):
        op.end_trigger()
    assert op.state_rows() == 1  # the micro-batch's rows wait for the next try


def _bad_state(key, frames, state):
    state.update(("many",))
    yield pd.DataFrame({"k": [key[0]]})


def test_a_state_value_of_another_type_is_refused_in_the_call():
    op = PandasWithState(["k"], ["k"], _bad_state, pa.schema([("k", pa.string())]), pa.struct([("n", pa.int64())]), "NoTimeout")
    op.bind("q/state", [with_internal(pa.schema([("k", pa.string())]))])
    op.process(stamp(pa.record_batch({"k": ["a"]}), 0.0, 0))
    with pytest.raises(UdfError, match="does not fit the state type"):
        op.end_trigger()


# -- refusals ------------------------------------------------------------------------------------------
def _nothing(key, frames, state):
    yield from ()


REFUSED = {
    "EventTimeTimeout on a stream without withWatermark": lambda d: d.groupBy("k").applyInPandasWithState(
        _nothing, "k string", "n long", "update", GroupStateTimeout.EventTimeTimeout
    ),
    "state field 'xs' of type": lambda d: d.groupBy("k").applyInPandasWithState(
        _nothing, "k string", "xs array<long>", "update", GroupStateTimeout.NoTimeout
    ),
    "output field 'm' of type": lambda d: d.groupBy("k").applyInPandasWithState(
        _nothing, "k string, m map<string, long>", "n long", "update", GroupStateTimeout.NoTimeout
    ),
}


@pytest.mark.parametrize("named", REFUSED)
def test_what_sparkqos_does_not_run_is_refused_naming_it(spark, folder, named, tmp_path):
    with pytest.raises(UnsupportedTransform, match=named):
        sparkqos.stream(file_stream(spark, folder), {"q": REFUSED[named]}, checkpoint=tmp_path / "ckpt")


def test_the_sharded_lane_refuses_it(spark, folder):
    compiled = compile_transforms(file_stream(spark, folder), QUERIES)
    with pytest.raises(NotShardable, match=r"\['counts', 'sessions'\] call a user's stateful function"):
        check_shardable(compiled, "k")


def test_a_spark_connect_plan_is_refused_naming_it(spark):
    """Spark Connect's plan rewrite (sparkqos.spark.connect_plan) writes the node without the
    function: refused by name."""
    import json

    from sparkqos.compile.spark_plan import compile_plans

    table = trace(4)
    analyzed = spark.createDataFrame(table)._jdf.queryExecution().analyzed()
    source = json.loads(analyzed.toJSON())
    ids = [int(analyzed.output().apply(i).exprId().id()) for i in range(analyzed.output().size())]
    plan = [{"class": "FlatMapGroupsInPandasWithState", "num-children": 1}, *source]
    with pytest.raises(UnsupportedTransform, match="applyInPandasWithState under Spark Connect"):
        compile_plans({"q": plan}, source, ids, table.schema)


def test_a_finite_dataframe_is_refused_as_spark_refuses_it(spark):
    df = spark.createDataFrame([("a", 1)], "k string, v long")
    with pytest.raises(UnsupportedTransform, match="on a finite DataFrame"):
        sparkqos.run(
            df, {"q": lambda d: d.groupBy("k").applyInPandasWithState(_nothing, "k string", "n long", "update", "NoTimeout")}
        )
