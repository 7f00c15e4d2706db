"""Aggregation without a time window, trigger by trigger: what each trigger writes is what Spark's
update output mode writes for that micro-batch — every key the micro-batch changed, once, with its
aggregates at the trigger's end — however often a strategy runs the aggregate in one trigger.

The oracle is Spark's own streaming run of the same transforms in update mode over the same
micro-batches (one Parquet file each, read one file per trigger); those batches are fed to
sparkqos's Spark-free trigger loop under every registered strategy, with fig 4.1's workload rule exact and a
threshold of one row, so the aggregate runs several times per trigger; one run goes through
``sparkqos.stream`` end to end. Then the continuous worker, with early writes of the top class,
serving every row between triggers, and a crash between a trigger's sink write and its checkpoint.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sparkqos.executor.expressions import SEQ
from sparkqos.executor.operators import KeyedAggregate, WindowAgg
from sparkqos.executor.options import ExecutorOptions
from sparkqos.executor.queues import stamp, with_internal
from sparkqos.io.deadletter import RowChecks
from sparkqos.io.sinks import MemorySink
from sparkqos.runtime.config import RunConfig, Trigger
from sparkqos.runtime.shard import ShardWork
from sparkqos.runtime.trigger import TriggerLoop
from sparkqos.spark.transforms import compile_transforms
from sparkqos.testing import assert_same_rows
from tests.conftest import strategies, stream_to_end
from tests.test_transforms_native import last_per_key, overall, running, table_of

#: A running aggregate per key with a filter and a projection above it, and a global one; each is a
#: streaming query of its own in Spark's run (what makes the oracle cost).
QUERIES = {"running": running, "overall": overall}
CLASSES = {"raw": "H", "running": "H", "overall": "N"}
PRIORITIES = {"H": 10.0, "N": 1.0}
#: fig 4.1's rule exactly (no whole batches), at least one row a run: 2 or 3 of a batch's 8 rows
MANY_RUNS = ExecutorOptions(whole_batches=False, threshold=1, budget_s=60.0, overhead_share=0)  # fig 4.1 exactly: no floor


def raw(df):
    """A stateless query of the top class: what the worker writes early."""
    return df.select("k", "i")


@pytest.fixture(scope="module")
def oracle(spark_sql, tmp_path_factory):
    """A stream of micro-batches (one Parquet file each, read by Spark's file source one file per
    trigger), its batches as Arrow tables, and what Spark's update mode wrote in each, per query."""
    tmp = tmp_path_factory.mktemp("update_mode")
    data = [
        (["a", "b", None, ""][n % 4], n - 10, [2.675, math.nan, None, -0.5][n % 3], ["a,b", "", None][n % 3]) for n in range(24)
    ]
    table = table_of(data)
    folder = tmp / "trace"
    folder.mkdir()
    inputs = {}
    for b, start in enumerate(range(0, table.num_rows, 8)):
        inputs[b] = table.slice(start, 8)
        path = folder / f"part-{b:03d}.parquet"
        pq.write_table(inputs[b], path)
        os.utime(path, (1_700_000_000 + b, 1_700_000_000 + b))  # the file source takes files oldest first
    schema = spark_sql.read.parquet(str(folder)).schema

    def stream():
        return spark_sql.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(folder))

    return stream, inputs, spark_update_batches(QUERIES, stream, tmp / "spark")


def spark_update_batches(transforms, stream, checkpoint: Path, timeout_s: float = 120.0) -> dict[str, dict[int, pa.Table]]:
    """Spark's own streaming run of each transform in update mode, side by side: the rows each
    micro-batch wrote, by batch id."""
    got: dict[str, dict[int, pa.Table]] = {name: {} for name in transforms}
    queries = [
        transform(stream())
        .writeStream.outputMode("update")
        .foreachBatch(lambda batch_df, batch_id, rows=got[name]: rows.__setitem__(batch_id, batch_df.toArrow()))
        .trigger(availableNow=True)
        .option("checkpointLocation", str(checkpoint / name))
        .start()
        for name, transform in transforms.items()
    ]
    ends = time.monotonic() + timeout_s
    for query in queries:
        assert query.awaitTermination(max(ends - time.monotonic(), 0.001)), "Spark's update-mode run did not end"
    return got


def assert_per_trigger(sink: MemorySink, want: dict[str, dict[int, pa.Table]], what: str, shift: int = 0) -> None:
    """Each batch ``b + shift`` of ``sink`` holds exactly Spark's rows of micro-batch ``b`` for every
    query (and nothing else: no batch without a counterpart)."""
    for name, spark_batches in want.items():
        ours = sink.batches(name)
        expected = {b + shift: t for b, t in spark_batches.items() if t.num_rows}
        assert sorted(ours) == sorted(expected), f"{name} {what}: batches with rows {sorted(ours)}, Spark's {sorted(expected)}"
        for b, table in expected.items():
            got = ours[b].select(table.schema.names).cast(table.schema)
            assert_same_rows(got, table, f"{name} {what}, batch {b}", rel=1e-12)


def loop_of(compiled, checkpoint: Path, sink: MemorySink, strategy: str, **options) -> TriggerLoop:
    config = RunConfig(
        checkpoint=str(checkpoint),
        sink=sink,
        strategy=strategy,
        trigger=Trigger(availableNow=True),
        checks=RowChecks(finite=False),  # NaN and ±inf are values in a PySpark transform
        **{"continuous": False, "executor": MANY_RUNS, **options},
    )
    return TriggerLoop(compiled.fresh(), config)


def test_each_trigger_writes_sparks_update_mode_rows_under_every_strategy(spark_sql, oracle, tmp_path):
    stream, inputs, want = oracle
    compiled = compile_transforms(stream(), QUERIES, placement="native")
    aggregates = [n for n, op in compiled.operators.items() if type(op).__name__ == "KeyedAggregate"]
    assert len(aggregates) == len(QUERIES)
    for strategy in strategies():
        sink = MemorySink()
        loop = loop_of(compiled, tmp_path / strategy, sink, strategy)
        for batch_id, table in inputs.items():
            assert loop.process(table, batch_id) is not None
            assert loop.executor.state.total_queued == 0, f"{strategy}: batch {batch_id} served within its trigger"
        runs = max(loop.executor.state.stats.operator(op).runs for op in aggregates)
        loop.finish()
        if strategy in ("rr", "chain", "greedy", "mtiq"):  # operator units under fig 4.1's rule
            assert runs > 2 * len(inputs), f"{strategy}: the aggregates ran {runs} times in {len(inputs)} triggers"
        assert_per_trigger(sink, want, f"under {strategy}")


@pytest.mark.parametrize("strategy", ["chain", "rr"])
def test_with_a_backlog_each_trigger_writes_a_key_once_and_the_changelog_ends_as_sparks(spark_sql, oracle, tmp_path, strategy):
    """A budget far below the micro-batch's work: rows stay queued from trigger to trigger, so a
    trigger writes the keys changed by the rows it served — still each at most once — and the
    changelog's last row per key is the table Spark's changelog leaves."""
    stream, inputs, want = oracle
    compiled = compile_transforms(stream(), QUERIES, placement="native")
    sink = MemorySink()
    tight = dataclasses.replace(MANY_RUNS, budget_s=1e-4)
    loop = loop_of(compiled, tmp_path / "ckpt", sink, strategy, executor=tight)
    behind = 0
    for batch_id, table in inputs.items():
        loop.process(table, batch_id)
        behind += loop.executor.state.total_queued > 0
    loop.finish()
    assert behind == len(inputs), "every trigger left rows queued"
    for name, keys in (("running", ["k"]), ("overall", [])):
        for b, table in sink.batches(name).items():
            written = [tuple(r[k] for k in keys) for r in table.to_pylist()]
            assert len(written) == len(set(written)), f"{name} under {strategy}: batch {b} wrote a key twice: {written}"
        spark_rows = pa.concat_tables(want[name][b] for b in sorted(want[name]))
        ours = sink.table(name).select(spark_rows.schema.names).cast(spark_rows.schema)
        final = last_per_key(spark_rows, keys)
        assert_same_rows(last_per_key(ours, keys), final, f"{name} under {strategy}", rel=1e-12)


def test_a_shards_micro_batches_write_sparks_update_mode_rows(spark_sql, oracle):
    """The sharded lane's step (one shard here), restored from its state blob every micro-batch."""
    stream, inputs, want = oracle
    compiled = compile_transforms(stream(), QUERIES, placement="native")
    config = RunConfig(checkpoint="/tmp/unused", strategy="rr", executor=MANY_RUNS, checks=RowChecks(finite=False))
    work, blob = ShardWork(compiled, config, shards=1), None
    for batch_id, table in inputs.items():
        step = work.step(0, blob, [table], now=float(batch_id))
        blob = step.state
        for name, spark_batches in want.items():
            expected = spark_batches[batch_id]
            got = step.outputs[name].select(expected.schema.names).cast(expected.schema)
            assert_same_rows(got, expected, f"{name}, shard step {batch_id}", rel=1e-12)


def test_stream_writes_sparks_update_mode_rows_per_trigger(spark_sql, oracle, tmp_path):
    """End to end through sparkqos.stream + finish(): the same rows, trigger by trigger."""
    stream, _, want = oracle
    sink = stream_to_end(
        stream(),
        QUERIES,
        tmp_path / "ckpt",
        timeout_s=120,
        strategy="rr",
        continuous=False,
        executor=MANY_RUNS,
        placement="native",
    )
    assert_per_trigger(sink, want, "through sparkqos.stream")


def test_the_worker_serves_between_triggers_and_early_writes_hold_no_aggregate_rows(spark_sql, oracle, tmp_path):
    """Continuous mode, the trigger serving nothing itself (``top_class_s=0``): the worker serves
    each micro-batch after its trigger, early-writing the top class's stateless query, and the
    next trigger writes the keys that micro-batch changed, once each; ``finish()`` the last."""
    stream, inputs, want = oracle
    queries = {"raw": raw, **QUERIES}
    compiled = compile_transforms(stream(), queries, CLASSES, PRIORITIES, placement="native")
    sink = MemorySink()
    loop = loop_of(compiled, tmp_path / "ckpt", sink, "chain", continuous=True, top_class_s=0.0, early_write_s=0.0001)
    try:
        for batch_id, table in inputs.items():
            loop.process(table, batch_id)
            assert not loop.worker.wait_while(lambda: loop.executor.state.total_queued > 0, 30.0), "the worker drained"
        loop.finish()
    finally:
        loop.close()
    assert loop.phase_s["earlyWrite"] > 0, "the worker wrote the top class early"
    assert_per_trigger(sink, want, "served between triggers", shift=1)
    raw_rows = sum(t.num_rows for t in sink.batches("raw").values())
    assert raw_rows == sum(t.num_rows for t in inputs.values())


def test_a_crash_between_sink_and_checkpoint_replays_the_trigger_exactly_once(spark_sql, oracle, tmp_path):
    """The trigger of batch 1 writes its sink and dies before its checkpoint; a fresh loop restores
    batch 0's checkpoint, Spark replays batch 1, and the sink ends holding each trigger's rows once."""
    stream, inputs, want = oracle
    compiled = compile_transforms(stream(), QUERIES, placement="native")
    sink = MemorySink()
    loop = loop_of(compiled, tmp_path / "ckpt", sink, "rr")
    ids = list(inputs)
    loop.process(inputs[ids[0]], ids[0])

    def crash(batch_id, *args):
        raise OSError(f"disk gone while checkpointing batch {batch_id}")

    loop.store.save = crash
    with pytest.raises(OSError, match="disk gone"):
        loop.process(inputs[ids[1]], ids[1])
    assert ids[1] in sink.batches("running"), "the failed trigger had written its rows"
    again = loop_of(compiled, tmp_path / "ckpt", sink, "rr")
    assert again.restore() == ids[0]
    for batch_id in ids[1:]:
        again.process(inputs[batch_id], batch_id)
    again.finish()
    assert_per_trigger(sink, want, "after a crash")


def test_keys_pending_at_a_checkpoint_come_out_after_the_restore():
    """Keys changed since the last trigger's end are operator state: a checkpoint taken between
    two runs (the executor's own to_state) keeps them, and the restored operator emits them."""
    op = KeyedAggregate(["k"], [WindowAgg("count_all", None, "n")], update=True)
    schema = with_internal(pa.schema([("k", pa.string())]))
    op.bind("q/agg", [schema])
    assert op.process(stamp(pa.record_batch({"k": ["a", "b", "a"]}), 0.0, 0)) is None
    assert [r["n"] for r in op.end_trigger()[0].to_pylist()] == [2, 1]
    assert op.process(stamp(pa.record_batch({"k": ["b", None]}), 1.0, 3)) is None
    restored = KeyedAggregate(["k"], [WindowAgg("count_all", None, "n")], update=True)
    restored.bind("q/agg", [schema])
    restored.from_state(op.to_state())
    assert restored.state_rows() == 3 + 2  # three keys, two of them pending
    rows = restored.end_trigger()[0].to_pylist()
    assert sorted((r["k"] or "", r["n"], r[SEQ]) for r in rows) == [("", 1, 4), ("b", 2, 3)]
    assert restored.end_trigger() == [] and restored.flush() == []
