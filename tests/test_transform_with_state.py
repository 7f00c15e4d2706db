"""Users' own stateful processors: ``groupBy(keys).transformWithStateInPandas(...)`` as a native operator.

* Streamed through ``sparkqos.stream`` (a file stream, one file per micro-batch, available-now,
  then ``finish()``), its rows equal Spark's own streaming run of the same PySpark code: a
  processor with a value and a list state without time (append), and one with a value state, a
  map state and event-time timers that close a key's session once the watermark passes it
  (update), whose late rows are dropped as Spark drops them.
* A crash after a batch's sink write and a restart from the checkpoint give the same rows, each once.
* Processing-time timers fire at the first trigger whose clock is at or past them, on the operator
  and through a stream (Spark's own run of them depends on its wall clock).
* What sparkqos does not run is refused before data moves, naming it.
"""

from __future__ import annotations

import os

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql.streaming import StatefulProcessor

import sparkqos
from sparkqos.compile.shardable import check_shardable
from sparkqos.errors import NotShardable, UdfError, UnsupportedTransform
from sparkqos.executor.operators import TransformWithState
from sparkqos.executor.operators.stateful_processor import StateVariable
from sparkqos.executor.queues import stamp, with_internal
from sparkqos.io.sinks import MemorySink
from sparkqos.spark.transforms import compile_transforms
from tests.conftest import spark_streams, stream_through_a_crash
from tests.test_pandas_state import file_stream, trace
from tests.test_transforms_stateful import assert_same

pytestmark = pytest.mark.spark

GAP_MS = 3_000
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


class RunningCount(StatefulProcessor):
    """Per key: its rows so far (a value state) and the values of ``i`` it saw (a list state)."""

    def init(self, handle):
        self.n = handle.getValueState("n", "n long")
        self.seen = handle.getListState("seen", "i integer, d double")

    def handleInputRows(self, key, rows, timerValues):  # noqa: N802,N803 - PySpark's names
        n = self.n.get()[0] if self.n.exists() else 0
        for frame in rows:
            n += len(frame)
            self.seen.appendList([(None if pd.isna(i) else int(i), d) for i, d in zip(frame["i"], frame["d"], strict=True)])
        self.n.update((n,))
        seen = list(self.seen.get())
        total = sum(i for i, _ in seen if i is not None)
        yield pd.DataFrame(
            {"k": [key[0]], "n": [n], "listed": [len(seen)], "total": [total], "time": [timerValues.getCurrentWatermarkInMs()]}
        )

    def close(self):
        pass


class Sessions(StatefulProcessor):
    """Per key, while its session is open: its rows and newest event time (a value state) and its
    rows per sign of ``i`` (a map state). Each micro-batch of its rows sets an event-time timer
    ``GAP_MS`` after its newest row; a timer the watermark passes reports the session, and the
    last one pending closes it (forgets its state)."""

    def init(self, handle):
        self.handle = handle
        self.session = handle.getValueState("session", "n long, last timestamp")
        self.signs = handle.getMapState("signs", "sign string", "n long")

    def handleInputRows(self, key, rows, timerValues):  # noqa: N802,N803 - PySpark's names
        n, last = self.session.get() if self.session.exists() else (0, None)
        for frame in rows:
            n += len(frame)
            top = frame["ts"].max()
            last = top if last is None else max(last, top)
            for i in frame["i"]:
                sign = ("null",) if pd.isna(i) else ("neg",) if i < 0 else ("pos",)
                held = self.signs.getValue(sign) if self.signs.containsKey(sign) else (0,)
                self.signs.updateValue(sign, (held[0] + 1,))
        self.session.update((n, last))
        self.handle.registerTimer(int(pd.Timestamp(last).value // 1_000_000) + GAP_MS)
        yield self._row(key, "open", n, timerValues)

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):  # noqa: N802,N803 - PySpark's names
        expiry = expiredTimerInfo.getExpiryTimeInMs()
        n, _ = self.session.get()
        later = [t for t in self.handle.listTimers() if t != expiry]  # Spark lists the firing timer too
        yield self._row(key, "tick" if later else "closed", n, timerValues, expiry)
        if not later:
            self.session.clear()
            self.signs.clear()

    def _row(self, key, status, n, values, expiry=None):
        signs = ",".join(f"{s[0]}={v[0]}" for s, v in sorted(self.signs.iterator()))
        return pd.DataFrame(
            {
                "k": [key[0]],
                "status": [status],
                "n": [n],
                "signs": [signs],
                "watermark": [values.getCurrentWatermarkInMs()],
                "expiry": [expiry],
            }
        )

    def close(self):
        pass


def counts(df):
    return df.groupBy("k").transformWithStateInPandas(
        RunningCount(), "k string, n long, listed long, total long, time long", "append", "None"
    )


def sessions(df):
    return (
        df.withWatermark("ts", "2 seconds")
        .groupBy("k")
        .transformWithStateInPandas(
            Sessions(), "k string, status string, n long, signs string, watermark long, expiry long", "update", "EventTime"
        )
    )


QUERIES = {"counts": counts, "sessions": sessions}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """test_pandas_state's trace in five files of 16 rows, one per micro-batch, in the trace's
    order (so the rows behind the others arrive after them)."""
    folder = tmp_path_factory.mktemp("transform_with_state") / "input"
    folder.mkdir()
    table, step = trace(), 16
    for f in range(table.num_rows // step):
        path = folder / f"part-{f:05d}.parquet"
        pq.write_table(table.slice(f * step, step), path)
        os.utime(path, (1_700_000_000 + f, 1_700_000_000 + f))
    return folder


@pytest.fixture(scope="module")
def rocksdb(spark_sql):
    """Spark runs transformWithStateInPandas on its RocksDB state store only."""
    key = "spark.sql.streaming.stateStore.providerClass"
    before = spark_sql.conf.get(key)
    spark_sql.conf.set(key, ROCKSDB)
    yield spark_sql
    spark_sql.conf.set(key, before)


@pytest.fixture(scope="module")
def sparks_run(rocksdb, folder, tmp_path_factory):
    modes = {"sessions": "update"}
    # Spark's processors run slowly on a busy machine (a Python worker and a state server per task)
    checkpoint = tmp_path_factory.mktemp("spark")
    return spark_streams(QUERIES, lambda: file_stream(rocksdb, folder), checkpoint, timeout_s=900, output_modes=modes)


def _check(got: pa.Table, want: pa.Table, name: str) -> None:
    assert want.num_rows > 0, name
    assert_same(got.select(want.column_names).cast(want.schema), want, name)


def test_streamed_processors_equal_sparks_streaming_run(spark_sql, folder, sparks_run, tmp_path):
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
    late = handle.loop.executor.compiled.operators["sessions/1:processor"].late_rows
    handle.finish()
    for name in QUERIES:
        _check(sink.table(name), sparks_run[name].rows, name)
    got = sink.table("sessions")
    fired = got.filter(pa.compute.not_equal(got.column("status"), "open"))
    assert fired.num_rows > 0 and late > 0  # event-time timers fired; rows behind the watermark were dropped


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


def test_the_plan_runs_it_natively(spark, folder):
    compiled = compile_transforms(file_stream(spark, folder), QUERIES)
    op = compiled.operators["sessions/1:processor"]
    assert isinstance(op, TransformWithState)
    assert (op.keys, op.time_mode, op.time_col, op.delay_us) == (["k"], "EventTime", "ts", 2_000_000)
    assert {(v.name, v.kind) for v in op.variables.values()} == {("session", "value"), ("signs", "map")}
    assert op.variables["signs"].key_type == pa.struct([("sign", pa.string())])
    text = sparkqos.explain(file_stream(spark, folder), QUERIES)
    assert "native  sessions/1:processor" in text and "transformWithStateInPandas" in text


class Quiet(StatefulProcessor):
    """Counts a key's rows since its last close; a processing-time timer a millisecond after its
    rows closes it (reports the count and forgets it)."""

    def init(self, handle):
        self.handle = handle
        self.n = handle.getValueState("n", "n long")

    def handleInputRows(self, key, rows, timerValues):  # noqa: N802,N803 - PySpark's names
        n = (self.n.get() or (0,))[0] + sum(len(f) for f in rows)
        self.n.update((n,))
        for t in list(self.handle.listTimers()):
            self.handle.deleteTimer(t)
        self.handle.registerTimer(timerValues.getCurrentProcessingTimeInMs() + 1)
        yield pd.DataFrame({"k": [key[0]], "n": [n], "closed": [False]})

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):  # noqa: N802,N803 - PySpark's names
        n = self.n.get()[0]
        self.n.clear()
        yield pd.DataFrame({"k": [key[0]], "n": [n], "closed": [True]})

    def close(self):
        pass


def test_processing_time_timers_through_a_stream_close_every_key_once_per_run_of_rows(spark_sql, folder, tmp_path):
    """Each key's timer fires a millisecond after the trigger of its last rows: at a later
    trigger, or at ``finish()``; its count then is every row since the last close (Spark's own run
    depends on its wall clock, so the rows are checked against the input)."""

    def quiet(d):
        return d.groupBy("k").transformWithStateInPandas(Quiet(), "k string, n long, closed boolean", "update", "ProcessingTime")

    sink = MemorySink()
    handle = sparkqos.stream(
        file_stream(spark_sql, folder),
        {"quiet": quiet},
        trigger=sparkqos.Trigger(availableNow=True),
        checkpoint=tmp_path / "ckpt",
        sink=sink,
        strategy="fifo",
    )
    assert handle.start().awaitTermination(180)
    handle.finish()
    rows = sink.table("quiet").to_pylist()
    keys = set(trace().column("k").to_pylist())
    closed = [r for r in rows if r["closed"]]
    assert {r["k"] for r in closed} == keys  # every key's timer fired; none stays open
    for k in keys:
        mine = [r for r in rows if r["k"] == k]
        assert mine[-1]["closed"] and all(a["n"] <= b["n"] or a["closed"] for a, b in zip(mine, mine[1:], strict=False))
    assert sum(r["n"] for r in closed) == trace().num_rows


# -- the operator alone ------------------------------------------------------------------------------
class Closing:
    """Counts a key's rows; a processing-time timer a second after its last rows closes it."""

    def init(self, handle):
        self.handle = handle
        self.n = handle.getValueState("n", "n long")

    def handleInputRows(self, key, rows, timerValues):  # noqa: N802,N803
        n = (self.n.get() or (0,))[0] + sum(len(f) for f in rows)
        self.n.update((n,))
        for t in list(self.handle.listTimers()):
            self.handle.deleteTimer(t)
        self.handle.registerTimer(timerValues.getCurrentProcessingTimeInMs() + 1_000)
        yield pd.DataFrame({"k": [key[0]], "n": [n]})

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):  # noqa: N802,N803
        self.n.clear()
        yield pd.DataFrame({"k": [key[0]], "n": [-1]})

    def close(self):
        pass


def _operator(processor, variables, output, time_mode="None", **options):
    op = TransformWithState(["k"], ["k"], processor, variables, output, time_mode, **options)
    op.bind("q/processor", [with_internal(pa.schema([("k", pa.string())]))])
    return op


N_LONG = pa.struct([("n", pa.int64())])
K_N = pa.schema([("k", pa.string()), ("n", pa.int64())])


def test_a_processing_time_timer_fires_at_the_first_trigger_at_or_past_it():
    now = [100.0]
    op = _operator(Closing, [StateVariable("n", "value", N_LONG)], K_N, "ProcessingTime", clock=lambda: now[0])

    def trigger(keys, at):
        now[0] = at
        if keys:
            op.process(stamp(pa.record_batch({"k": pa.array(keys, pa.string())}), at, 0))
        return sorted((r["k"], r["n"]) for b in op.end_trigger() for r in b.to_pylist())

    assert trigger(["a", "b"], 100.0) == [("a", 1), ("b", 1)]
    assert trigger(["a"], 100.5) == [("a", 2)]  # a's timer moves to 101.5 s; b's stays at 101 s
    assert trigger([], 100.9) == []
    assert trigger([], 101.0) == [("b", -1)]
    state = op.to_state()
    again = op.copy()
    again.bind("q/processor", op.input_schemas)
    again.from_state(state)
    op = again
    assert trigger([], 101.6) == [("a", -1)] and op.state_rows() == 0


class Kinds:
    """Every call of every state kind, its results in the output."""

    def init(self, handle):
        self.v = handle.getValueState("v", "x double, t timestamp")
        self.l = handle.getListState("l", "s string")
        self.m = handle.getMapState("m", "u long", "b boolean")

    def handleInputRows(self, key, rows, timerValues):  # noqa: N802,N803
        n = sum(len(f) for f in rows)
        before = (self.v.exists(), self.v.get(), self.l.exists(), list(self.l.get()), self.m.exists(), sorted(self.m.iterator()))
        self.v.update((float(n), pd.Timestamp("2024-01-01 10:00:00") + pd.Timedelta(seconds=n)))
        self.l.appendValue((f"x{n}",))
        self.l.appendList([("y",), ("z",)])
        if n > 1:
            self.l.put([("only",)])
        self.m.updateValue((n,), (True,))
        self.m.updateValue((n + 1,), (False,))
        self.m.removeKey((n + 1,))
        try:
            self.l.put([])
        except ValueError as e:  # Spark's state store refuses an empty list
            assert "EMPTY_LIST_VALUE" in str(e)
        else:
            raise AssertionError("put([]) was taken")
        after = (
            self.m.containsKey((n,)),
            self.m.getValue((n,)),
            self.m.getValue((99,)),
            sorted(self.m.keys()),
            list(self.m.values()),
        )
        yield pd.DataFrame({"k": [key[0]], "got": [repr((before, after))]})

    def close(self):
        pass


def test_every_state_call_behaves_as_pysparks_and_survives_a_checkpoint():
    variables = [
        StateVariable("v", "value", pa.struct([("x", pa.float64()), ("t", pa.timestamp("us", tz="UTC"))])),
        StateVariable("l", "list", pa.struct([("s", pa.string())])),
        StateVariable("m", "map", pa.struct([("b", pa.bool_())]), pa.struct([("u", pa.int64())])),
    ]
    op = _operator(Kinds, variables, pa.schema([("k", pa.string()), ("got", pa.string())]), time_zone="Europe/Paris")
    op.process(stamp(pa.record_batch({"k": ["a"]}), 0.0, 0))
    first = op.end_trigger()[0].to_pylist()[0]["got"]
    assert first == repr(((False, None, False, [], False, []), (True, (True,), None, [(1,)], [(True,)])))
    again = op.copy()
    again.bind("q/processor", op.input_schemas)
    again.from_state(op.to_state())
    again.process(stamp(pa.record_batch({"k": ["a", "a"]}), 1.0, 1))
    got = again.end_trigger()[0].to_pylist()[0]["got"]
    import datetime as dt

    held = (1.0, dt.datetime(2024, 1, 1, 10, 0, 1))  # naive, in the session's time zone, as given
    want_before = (True, held, True, [("x1",), ("y",), ("z",)], True, [((1,), (True,))])
    assert got == repr((want_before, (True, (True,), None, [(1,), (2,)], [(True,), (True,)])))


def test_a_failing_processor_is_named_and_keeps_its_rows_and_state():
    class Broken(Closing):
        def handleInputRows(self, key, rows, timerValues):  # noqa: N802,N803
            self.n.update((7,))
            raise ZeroDivisionError("boom")

    op = _operator(Broken, [StateVariable("n", "value", N_LONG)], K_N, "ProcessingTime", query="q", udf="Broken")
    op.process(stamp(pa.record_batch({"k": ["a"]}), 0.0, 0))
    with pytest.raises(UdfError, match="query 'q': UDF 'Broken' handleInputRows raised ZeroDivisionError: boom"):
        op.end_trigger()
    assert op.state_rows() == 1  # the micro-batch's row waits for the next try; the update is undone
    assert op.to_state()["pending"] is not None and not op._store.values.get("n")


def test_timers_without_a_time_mode_and_values_of_another_type_fail_in_the_call():
    class Timer(Closing):
        pass

    op = _operator(Timer, [StateVariable("n", "value", N_LONG)], K_N)
    op.process(stamp(pa.record_batch({"k": ["a"]}), 0.0, 0))
    with pytest.raises(UdfError, match=r"Timers with TimeMode.None"):
        op.end_trigger()

    class Wrong(Closing):
        def handleInputRows(self, key, rows, timerValues):  # noqa: N802,N803
            self.n.update(("many",))
            yield from ()

    op = _operator(Wrong, [StateVariable("n", "value", N_LONG)], K_N)
    op.process(stamp(pa.record_batch({"k": ["a"]}), 0.0, 0))
    with pytest.raises(UdfError, match="does not fit its type"):
        op.end_trigger()


class Recent:
    """Value, list and map states with a TTL of a second: per key, its rows since the state
    expired, counted in each."""

    def init(self, handle):
        self.n = handle.getValueState("n", "n long", 1_000)
        self.seen = handle.getListState("seen", "s string", 1_000)
        self.signs = handle.getMapState("signs", "s string", "n long", 1_000)

    def handleInputRows(self, key, rows, timerValues):  # noqa: N802,N803
        before = (self.n.exists(), self.seen.exists(), self.signs.exists())
        for frame in rows:
            self.n.update(((self.n.get() or (0,))[0] + len(frame),))
            self.seen.appendList([(k,) for k in frame["k"]])
            self.signs.updateValue((key[0],), ((self.signs.getValue((key[0],)) or (0,))[0] + len(frame),))
        listed = len(list(self.seen.get()))
        yield pd.DataFrame({"k": [key[0]], "got": [repr((before, self.n.get()[0], listed, list(self.signs.values())))]})

    def close(self):
        pass


def test_state_with_a_ttl_is_gone_from_the_first_micro_batch_whose_processing_time_reaches_its_expiry():
    """Spark's TTL: a value written in a micro-batch expires at that micro-batch's processing time
    plus the TTL; from a micro-batch whose processing time is at or past it, it is gone (and the
    checkpoint holds each value's expiry)."""
    now = [100.0]
    variables = [
        StateVariable("n", "value", N_LONG, ttl_ms=1_000),
        StateVariable("seen", "list", pa.struct([("s", pa.string())]), ttl_ms=1_000),
        StateVariable("signs", "map", N_LONG, pa.struct([("s", pa.string())]), ttl_ms=1_000),
    ]
    op = _operator(
        Recent, variables, pa.schema([("k", pa.string()), ("got", pa.string())]), "ProcessingTime", clock=lambda: now[0]
    )

    def trigger(at):
        nonlocal op
        now[0] = at
        op.process(stamp(pa.record_batch({"k": ["a"]}), at, 0))
        got = op.end_trigger()[0].to_pylist()[0]["got"]
        again = op.copy()
        again.bind("q/processor", op.input_schemas)
        again.from_state(op.to_state())
        op = again
        return got

    assert trigger(100.0) == repr(((False, False, False), 1, 1, [(1,)]))
    assert trigger(100.999) == repr(((True, True, True), 2, 2, [(2,)]))  # written at 100 s: alive until 101 s
    assert trigger(101.5) == repr(((True, True, True), 3, 2, [(3,)]))  # rewritten at 100.999 s; the list's first item is gone
    assert trigger(103.0) == repr(((False, False, False), 1, 1, [(1,)]))
    now[0] = 104.5
    op.process(stamp(pa.record_batch({"k": ["b"]}), 104.5, 1))
    assert [r["k"] for r in op.end_trigger()[0].to_pylist()] == ["b"]
    assert set(op._store.values["n"]) == {("b",)}  # a's expired values went at the end of that micro-batch


# -- refusals ------------------------------------------------------------------------------------------
class Nothing(StatefulProcessor):
    def init(self, handle):
        pass

    def handleInputRows(self, key, rows, timerValues):  # noqa: N802,N803
        yield from ()

    def close(self):
        pass


class WithTtl(Nothing):
    def init(self, handle):
        handle.getValueState("n", "n long", 60_000)


class WithArrays(Nothing):
    def init(self, handle):
        handle.getListState("xs", "xs array<long>")


REFUSED = {
    "timeMode EventTime on a stream without withWatermark": lambda d: d.groupBy("k").transformWithStateInPandas(
        Nothing(), "k string", "append", "EventTime"
    ),
    "a TTL on state 'n' in timeMode None": lambda d: d.groupBy("k").transformWithStateInPandas(
        WithTtl(), "k string", "append", "None"
    ),
    "state 'xs' field 'xs' of type": lambda d: d.groupBy("k").transformWithStateInPandas(
        WithArrays(), "k string", "append", "None"
    ),
    "output field 'm' of type": lambda d: d.groupBy("k").transformWithStateInPandas(
        Nothing(), "k string, m map<string, long>", "append", "None"
    ),
    "transformWithStateInPandas with initialState": lambda d: d.groupBy("k").transformWithStateInPandas(
        Nothing(), "k string", "append", "None", initialState=d.groupBy("k")
    ),
    "transformWithStateInPandas with eventTimeColumnName": lambda d: (
        d.withWatermark("ts", "2 seconds")
        .groupBy("k")
        .transformWithStateInPandas(Nothing(), d.schema, "append", "EventTime", eventTimeColumnName="ts")
    ),
    "output mode Complete": lambda d: d.groupBy("k").transformWithStateInPandas(Nothing(), "k string", "complete", "None"),
    "transformWithState \\(PySpark's Row API\\)": lambda d: d.groupBy("k").transformWithState(
        Nothing(), "k string", "append", "None"
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


def test_a_finite_dataframe_is_refused(spark):
    df = spark.createDataFrame([("a", 1)], "k string, v long")
    with pytest.raises(UnsupportedTransform, match="on a finite DataFrame"):
        sparkqos.run(df, {"q": lambda d: d.groupBy("k").transformWithStateInPandas(Nothing(), "k string", "append", "None")})
