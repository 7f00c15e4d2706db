"""sparkqos under Spark Connect, where Databricks shared and serverless notebooks run PySpark.

foreachBatch's function is pickled to the server's Python worker there, so it must carry
configuration only (sparkqos/spark/batch.py). The Connect run happens in a process of its own
(tests/connect_job.py, run by the ``connect_jobs`` fixture in the ``remote("local[2]")`` session
of tests/connect_jobs.py), and must deliver exactly the rows the classic run of the same queries
delivers — after being stopped mid-stream and restarted from its checkpoint, so nothing is lost
or duplicated across the restart either.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import sparkqos
from sparkqos import sources
from sparkqos.io.deadletter import read_dead_letters
from sparkqos.io.sinks import read_parquet_sink
from sparkqos.spark.batch import BatchFunction
from sparkqos.workloads.sensors import sensor_queries

QUERIES = ("fire", "anomaly", "zone_stats", "archive")


@pytest.fixture(scope="module")
def trace(connect_trace) -> Path:
    """The trace both runs read: the Connect jobs' (tests/conftest.py)."""
    return connect_trace


def outputs(folder: Path) -> dict[str, pa.Table]:
    tables = read_parquet_sink(folder)
    return {q: tables[q] for q in QUERIES}


def sorted_rows(table: pa.Table) -> pa.Table:
    return table.sort_by([(name, "ascending") for name in table.column_names])


def assert_same_rows(got: pa.Table, want: pa.Table, query: str) -> None:
    """Equal as multisets of rows; window means may differ in the last bits (partial sums are
    combined in another order when the triggers cut the stream elsewhere)."""
    assert got.num_rows == want.num_rows, (query, got.num_rows, want.num_rows)
    assert sorted(got.column_names) == sorted(want.column_names), query
    got, want = sorted_rows(got.select(want.column_names)), sorted_rows(want)
    for name in want.column_names:
        a, b = got.column(name), want.column(name)
        if pa.types.is_floating(b.type):
            assert np.allclose(a.to_numpy(), b.to_numpy(), rtol=1e-12, atol=0, equal_nan=True), (query, name)
        else:
            assert pc.all(pc.equal(a, b)).as_py() in (True, None), (query, name)


@pytest.fixture(scope="module")
def classic(spark, trace, tmp_path_factory) -> dict[str, pa.Table]:
    sources.register(spark)
    out = tmp_path_factory.mktemp("classic")
    df = (
        spark.readStream.format("sparkqos.replay")
        .option("path", str(trace))
        .option("speed", "max")
        .option("maxSecondsPerTrigger", "4")
        .load()
    )
    handle = sparkqos.stream(
        df,
        sensor_queries(work_us=0),
        strategy="chain",
        trigger=sparkqos.Trigger(availableNow=True),
        checkpoint=out / "ckpt",
        output=out,
    )
    handle.start().awaitTermination()
    handle.finish()
    return {**outputs(out / "outputs"), "deadletter": read_dead_letters(out / "deadletter")}


def dead_letters(table: pa.Table) -> list[tuple[str, str, str]]:
    """What was rejected and why, whatever batch it came in."""
    return sorted(zip(table.column("reason").to_pylist(), table.column("column").to_pylist(), table.column("record").to_pylist()))


def test_the_batch_function_pickles_to_configuration_only(spark, trace, tmp_path):
    """What Connect sends to the server: no session, DataFrame, lock or executor; client-side
    callbacks stay behind; the copy builds its own loop."""
    from pyspark import cloudpickle

    sources.register(spark)
    df = spark.readStream.format("sparkqos.replay").option("path", str(trace)).load()
    handle = sparkqos.stream(df, sensor_queries(), checkpoint=tmp_path, on_progress=lambda p: None)
    fn = BatchFunction(handle.loop.compiled, handle.config, handle.loop)
    copy = cloudpickle.loads(cloudpickle.dumps(fn))
    assert copy._loop is None and copy.config.on_progress is None
    assert copy.config.storage.checkpoint == handle.config.storage.checkpoint and copy.loop is not handle.loop
    assert fn.loop is handle.loop  # classic: the driver feeds the handle's own loop


@pytest.mark.slow  # a Spark Connect server and its job in a process of their own
def test_connect_run_stopped_and_restarted_gives_the_classic_rows(connect_jobs, classic):
    out, summary = connect_jobs["restart"]
    # Stopped mid-stream: part of the trace was archived, and the restarted run had batches of
    # its own before finish() (which, on the client, drains from the server's newest checkpoint).
    assert 0 < summary["archived_at_stop"] < classic["archive"].num_rows, summary
    assert summary["stopped_at_batch"] >= 1 and summary["last_batch"] > summary["stopped_at_batch"] + 1, summary
    assert summary["config_error"] == "trigger_s", summary
    assert summary["seen"] == list(range(summary["stopped_at_batch"] + 1)), summary  # progress without shared memory
    got = outputs(out / "output" / "outputs")
    for query in QUERIES:
        assert classic[query].num_rows > 0, query
        assert_same_rows(got[query], classic[query], query)
    # Bad input under Connect as in classic: the same rows dead-lettered with the same reasons.
    rejected = dead_letters(read_dead_letters(out / "output" / "deadletter"))
    assert len(rejected) == 25 and all("temperature" in (reason + column) for reason, column, _ in rejected), rejected[:3]
    assert rejected == dead_letters(classic["deadletter"])
