"""Sinks: one write per trigger for all queries, idempotent per (batch id, query)."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sparkqos.errors import SinkError
from sparkqos.io.sinks import MemorySink, ParquetSink, read_parquet_sink, union_outputs
from sparkqos.spark.sinks import DataFrameSink, partitioned_writer

TS = pa.timestamp("us", tz="UTC")


def outputs(b: int) -> dict[str, pa.Table]:
    """A trigger's outputs: a fire query with alerts, a stats query with aggregates."""
    return {
        "fire": pa.table(
            {"sensor_id": [b, b + 1], "temperature": [70.0 + b, 80.0 + b], "ts": pa.array([b * 1_000_000, b * 1_000_000 + 5], TS)}
        ),
        "stats": pa.table({"location": ["zone-0"], "n": pa.array([10 * b], pa.int64())}),
    }


def files(root) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)


def test_parquet_layout_and_round_trip(tmp_path):
    sink = ParquetSink(tmp_path)
    for b in range(3):
        sink.write(b, outputs(b))
    assert files(tmp_path) == [f"query={q}/batch={b}.parquet" for q in ("fire", "stats") for b in range(3)]
    back = read_parquet_sink(tmp_path)
    assert back["fire"].equals(pa.concat_tables([outputs(b)["fire"] for b in range(3)]))
    assert back["stats"].column("n").to_pylist() == [0, 10, 20]
    with_ids = read_parquet_sink(tmp_path, with_batch_id=True)
    assert with_ids["fire"].column("batch_id").to_pylist() == [0, 0, 1, 1, 2, 2]


def test_replayed_batch_overwrites_instead_of_duplicating(tmp_path):
    sink = ParquetSink(tmp_path)
    sink.write(0, outputs(0))
    sink.write(1, outputs(1))
    before = read_parquet_sink(tmp_path)
    for _ in range(3):  # the driver crashed after writing batch 1, Spark re-runs it
        sink.write(1, outputs(1))
    after = read_parquet_sink(tmp_path)
    assert {q: t.num_rows for q, t in after.items()} == {"fire": 4, "stats": 2}
    assert all(after[q].equals(before[q]) for q in before)


def test_replay_with_different_outputs_leaves_only_the_last_attempt(tmp_path):
    """With a time budget a replay may finish less work: the first attempt's rows of that batch must
    go, including a query that produced nothing the second time."""
    sink = ParquetSink(tmp_path)
    sink.write(5, outputs(5))
    sink.write(5, {"fire": outputs(5)["fire"].slice(0, 1), "stats": outputs(5)["stats"].slice(0, 0)})
    assert files(tmp_path) == ["query=fire/batch=5.parquet"]
    assert read_parquet_sink(tmp_path)["fire"].num_rows == 1
    sink.write(5, {})
    assert files(tmp_path) == []


def test_spark_reads_the_sink_as_a_partitioned_table(spark, tmp_path):
    sink = ParquetSink(tmp_path)
    for b in range(2):
        sink.write(b, outputs(b))
    df = spark.read.parquet(str(tmp_path / "query=fire"))
    assert sorted(r.sensor_id for r in df.collect()) == [0, 1, 1, 2]
    assert spark.read.parquet(str(tmp_path)).select("query").distinct().count() == 2


def test_interrupted_write_leaves_no_visible_file(tmp_path, monkeypatch):
    sink = ParquetSink(tmp_path)
    sink.write(0, outputs(0))

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(pq, "write_table", crash)
    with pytest.raises(OSError, match="disk full"):
        sink.write(1, outputs(1))
    assert files(tmp_path) == ["query=fire/batch=0.parquet", "query=stats/batch=0.parquet"]
    assert read_parquet_sink(tmp_path)["fire"].num_rows == 2


def test_reader_ignores_temp_files_and_orders_batches_numerically(tmp_path):
    sink = ParquetSink(tmp_path)
    for b in (10, 2, 1):
        sink.write(b, {"q": pa.table({"b": [b]})})
    (tmp_path / "query=q" / ".batch=11.parquet.x.tmp").write_bytes(b"half")
    assert read_parquet_sink(tmp_path)["q"].column("b").to_pylist() == [1, 2, 10]


def test_schema_changes_between_batches_are_promoted(tmp_path):
    sink = ParquetSink(tmp_path)
    sink.write(0, {"q": pa.table({"x": pa.array([1], pa.int32())})})
    sink.write(1, {"q": pa.table({"x": pa.array([None], pa.int32()), "y": ["a"]})})
    t = read_parquet_sink(tmp_path)["q"]
    assert t.column("x").to_pylist() == [1, None] and t.column("y").to_pylist() == [None, "a"]


@pytest.mark.parametrize("sink_factory", [lambda p: ParquetSink(p), lambda p: MemorySink()], ids=["parquet", "memory"])
def test_bad_input_is_named(tmp_path, sink_factory):
    sink = sink_factory(tmp_path)
    with pytest.raises(SinkError, match="batch_id must be an integer >= 0, got -1"):
        sink.write(-1, outputs(0))
    with pytest.raises(SinkError, match="batch_id must be an integer >= 0, got True"):
        sink.write(True, outputs(0))
    with pytest.raises(SinkError, match="query name '../etc' cannot name a sink partition"):
        sink.write(0, {"../etc": pa.table({"x": [1]})})
    with pytest.raises(SinkError, match="query name '' cannot"):
        sink.write(0, {"": pa.table({"x": [1]})})
    with pytest.raises(SinkError, match="output of query 'fire' must be a pyarrow.Table, got list"):
        sink.write(0, {"fire": [1, 2]})
    with pytest.raises(SinkError, match="outputs must be a mapping"):
        sink.write(0, [pa.table({"x": [1]})])


def test_missing_sink_directory_is_named(tmp_path):
    with pytest.raises(SinkError, match="does not exist"):
        read_parquet_sink(tmp_path / "nope")


def test_memory_sink_is_idempotent_and_accepts_record_batches():
    sink = MemorySink()
    sink.write(0, outputs(0))
    sink.write(1, {"fire": pa.record_batch({"sensor_id": [9], "temperature": [99.0], "ts": pa.array([1], TS)})})
    sink.write(1, {"fire": pa.record_batch({"sensor_id": [9], "temperature": [99.0], "ts": pa.array([1], TS)})})
    assert sink.table("fire").column("sensor_id").to_pylist() == [0, 1, 9]
    sink.write(0, {"fire": outputs(0)["fire"]})  # replay of 0 without stats output
    assert sink.queries() == ["fire"]
    with pytest.raises(SinkError, match="no rows for query 'stats'; queries with rows: \\['fire'\\]"):
        sink.table("stats")


def test_memory_sink_to_spark_view(spark):
    sink = MemorySink()
    sink.write(0, outputs(0))
    sink.write(1, outputs(1))
    df = sink.to_spark(spark, "fire", view="fire_alerts")
    assert df.count() == 4
    assert spark.sql("select max(temperature) as m from fire_alerts").collect()[0].m == 81.0


def test_union_outputs_tags_rows_and_unions_columns():
    t = union_outputs(3, outputs(3))
    assert t.column_names[:2] == ["batch_id", "query"]
    assert t.column("query").to_pylist() == ["fire", "fire", "stats"]
    assert t.column("batch_id").to_pylist() == [3, 3, 3]
    assert t.column("location").to_pylist() == [None, None, "zone-0"]
    assert union_outputs(3, {"fire": outputs(0)["fire"].slice(0, 0)}) is None
    with pytest.raises(SinkError, match="cannot share one DataFrame"):
        union_outputs(0, {"a": pa.table({"x": [1]}), "b": pa.table({"x": ["s"]})})


def test_dataframe_sink_one_job_per_trigger_and_idempotent_partitioned_writer(spark, tmp_path):
    calls = []
    target = tmp_path / "table"
    write = partitioned_writer(target)

    def counting(df, batch_id):
        calls.append(batch_id)
        write(df, batch_id)

    sink = DataFrameSink(spark, counting)
    sink.write(0, outputs(0))
    sink.write(1, outputs(1))
    sink.write(1, outputs(1))  # replay
    sink.write(2, {"fire": outputs(2)["fire"].slice(0, 0)})  # nothing to write: no Spark job
    assert calls == [0, 1, 1]
    df = spark.read.parquet(str(target))
    assert df.count() == 6  # 2 batches x (2 fire + 1 stats)
    assert sorted(
        (r.batch_id, r.query, r.c) for r in df.groupBy("batch_id", "query").count().withColumnRenamed("count", "c").collect()
    ) == [(0, "fire", 2), (0, "stats", 1), (1, "fire", 2), (1, "stats", 1)]
    with pytest.raises(SinkError, match="fn must be callable"):
        DataFrameSink(spark, "parquet")


def _fire(*ids: int) -> dict[str, pa.Table]:
    return {"fire": pa.table({"sensor_id": list(ids)})}


@pytest.mark.parametrize("make", [ParquetSink, lambda path: MemorySink()], ids=["parquet", "memory"])
def test_parts_of_a_batch_are_kept_by_its_commit_and_replaced_by_a_replay(tmp_path, make):
    """The continuous worker's early writes (RunConfig.early_write_s): parts of a batch, then the
    trigger's own write keeping them; a replay (a new attempt: ``first`` part, or a whole write)
    leaves exactly its own rows, whatever an earlier attempt had written."""
    sink = make(tmp_path)
    assert sink.supports_parts

    def ids() -> list[int]:
        table = sink.read()["fire"] if isinstance(sink, ParquetSink) else sink.table("fire")
        return table.column("sensor_id").to_pylist()

    sink.write(0, _fire(0))
    sink.write_part(1, _fire(1), first=True)
    sink.write_part(1, _fire(2), first=False)
    sink.write(1, _fire(3), keep_parts=True)
    assert ids() == [0, 1, 2, 3]  # batch order, a batch's parts before its trigger's own rows
    sink.write_part(1, _fire(4), first=True)  # batch 1 again (after a crash): a new attempt
    assert ids() == [0, 4]
    sink.write(1, _fire(5))  # a replay that wrote no part of its own drops the earlier parts
    assert ids() == [0, 5]
    sink.write_part(2, _fire(6), first=True)
    sink.write_part(2, {"other": pa.table({"x": [1]})}, first=False)
    sink.write(2, {}, keep_parts=True)  # nothing left for the trigger itself: the parts stay
    assert ids() == [0, 5, 6]
    if isinstance(sink, ParquetSink):
        assert files(tmp_path) == [
            "query=fire/batch=0.parquet",
            "query=fire/batch=1.parquet",
            "query=fire/batch=2-1.parquet",
            "query=other/batch=2-1.parquet",
        ]
        fresh = ParquetSink(tmp_path)  # a restarted process replays batch 2 without parts
        fresh.write(2, _fire(7))
        assert read_parquet_sink(tmp_path)["fire"].column("sensor_id").to_pylist() == [0, 5, 7]
        assert "other" not in read_parquet_sink(tmp_path)


def test_a_sink_without_parts_says_so(spark):
    sink = DataFrameSink(spark, lambda df, batch_id: None)
    assert not sink.supports_parts
    with pytest.raises(SinkError, match="whole batches only"):
        sink.write_part(0, _fire(1), first=True)


def test_a_subclass_overriding_write_alone_takes_whole_batches(tmp_path):
    """Its override must see every row, so the worker writes nothing early through it."""

    class Audited(ParquetSink):
        def write(self, batch_id, outputs):
            super().write(batch_id, outputs)

    assert ParquetSink(tmp_path / "a").supports_parts and MemorySink().supports_parts
    assert not Audited(tmp_path / "b").supports_parts
