"""The Delta Lake sink (sparkqos.io.delta, delta-rs): one table per query, each batch one
commit with the transaction identifier (app id, batch id), a replayed batch replacing what an
earlier attempt committed — through every crash point of a trigger, 0 rows lost, 0 duplicated."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pytest

deltalake = pytest.importorskip("deltalake")

from sparkqos.io.delta import DeltaSink, read_delta_sink  # noqa: E402
from sparkqos.runtime.config import FAULT_POINTS, RunConfig  # noqa: E402
from sparkqos.runtime.trigger import TriggerLoop  # noqa: E402
from sparkqos.testing import sensor_table  # noqa: E402
from sparkqos.workloads.sensors import sensor_queries  # noqa: E402

T0 = 1_700_000_000.0
BATCHES = [sensor_table(150, b, start=T0 + 4 * b) for b in range(5)]
#: A trigger's own crash points (the continuous worker's are crash_restart's business, the
#: sharded lane's its own tests').
TRIGGER_FAULTS = ["before_ingest", "after_ingest", "after_run", "after_sink", "after_checkpoint", "after_progress"]
assert set(TRIGGER_FAULTS) <= set(FAULT_POINTS)


class Crash(RuntimeError):
    pass


def make_loop(root, **kw) -> TriggerLoop:
    config = RunConfig(
        checkpoint=root / "ckpt", sink=DeltaSink(root / "delta"), strategy="chain", continuous=False, budget_s=30.0, **kw
    )
    return TriggerLoop(sensor_queries(work_us=0.0, window_s=5.0), config)


def rows(tables: dict[str, pa.Table]) -> dict[str, Counter]:
    return {q: Counter(tuple(r.values()) for r in t.to_pylist()) for q, t in tables.items() if t.num_rows}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict[str, Counter]:
    root = tmp_path_factory.mktemp("delta_uninterrupted")
    loop = make_loop(root)
    for b, t in enumerate(BATCHES):
        loop.process(t, b)
    loop.finish()
    return rows(read_delta_sink(root / "delta"))


def test_each_batch_is_one_commit_with_its_transaction_id(tmp_path):
    sink = DeltaSink(tmp_path, app_id="job-1")
    sink.write(0, {"a": pa.table({"x": [1, 2]}), "b": pa.table({"y": ["u"]})})
    sink.write(1, {"a": pa.table({"x": [3]}), "b": pa.table({"y": pa.array([], pa.string())})})
    sink.write(1, {"a": pa.table({"x": [4, 5]}), "b": pa.table({"y": ["v"]})})  # batch 1 replayed, other rows
    sink.write(2, {"a": pa.table({"x": pa.array([], pa.int64())}), "b": pa.table({"y": ["w"]})})
    got = read_delta_sink(tmp_path, with_batch_id=True)
    assert got["a"].to_pydict() == {"x": [1, 2, 4, 5], "batch_id": [0, 0, 1, 1]}
    assert got["b"].to_pydict() == {"y": ["u", "v", "w"], "batch_id": [0, 1, 2]}
    assert (sink.committed("a"), sink.committed("b")) == (1, 2)
    table = deltalake.DeltaTable(str(tmp_path / "a"))
    assert table.transaction_version("job-1") == 1 and table.version() == 2  # batches 0, 1, 1 again
    assert DeltaSink(tmp_path, app_id="other").committed("a") == -1


@pytest.mark.parametrize("point", TRIGGER_FAULTS)
def test_a_crash_at_any_point_of_a_trigger_loses_and_duplicates_nothing(tmp_path, monkeypatch, uninterrupted, point):
    def crash(self, where, batch_id):
        raise Crash(f"{where} of batch {batch_id}")

    monkeypatch.setattr(TriggerLoop, "_kill", crash)  # a SIGKILL would end the test run
    first = make_loop(tmp_path, fault=f"{point}:2")
    for b in range(2):
        first.process(BATCHES[b], b)
    with pytest.raises(Crash, match=f"{point} of batch 2"):
        first.process(BATCHES[2], 2)
    second = make_loop(tmp_path)
    restored = second.restore()
    for b in range(restored + 1, len(BATCHES)):
        second.process(BATCHES[b], b)
    second.finish()
    assert rows(read_delta_sink(tmp_path / "delta")) == uninterrupted
    sink = DeltaSink(tmp_path / "delta")
    for query, table in read_delta_sink(tmp_path / "delta", with_batch_id=True).items():
        assert sink.committed(query) == max(table.column("batch_id").to_pylist())  # the last batch it holds


def test_without_deltalake_the_job_says_so_before_spark_starts(monkeypatch, capsys):
    """jobs/sensor_monitor.py with job.sink=delta and no deltalake: a configuration error naming
    the package and the extra, printed before the job starts Spark (spark-submit.sh installs the
    extra when it sees job.sink=delta; a plain ``python`` run does not)."""
    import importlib.util

    from jobs import sensor_monitor

    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "deltalake" else found(name, *a))
    assert sensor_monitor.main(["--set", "job.sink=delta", "--quiet"]) == 2
    out, err = capsys.readouterr()
    assert "starting Spark" not in out
    assert "job.sink = 'delta' needs the deltalake package" in err and "pip install 'sparkqos[delta]'" in err


def test_without_deltalake_the_sink_fails_when_made(tmp_path, monkeypatch):
    """A library user's DeltaSink(...) without deltalake: a SinkError naming the extra, when the
    sink is made — before sparkqos.stream, not at the first batch."""
    import builtins

    from sparkqos.errors import SinkError

    real_import = builtins.__import__

    def no_deltalake(name, *args, **kwargs):
        if name == "deltalake":
            raise ImportError("No module named 'deltalake'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_deltalake)
    with pytest.raises(SinkError, match=r"pip install 'sparkqos\[delta\]'"):
        DeltaSink(tmp_path / "delta")
