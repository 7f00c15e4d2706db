"""Checkpoint store: atomic saves, keep-last-N, torn and corrupt files raise CheckpointCorrupt."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest

from sparkqos.errors import CheckpointCorrupt, CheckpointError
from sparkqos.runtime.checkpoint import CheckpointStore


def queues(b: int) -> dict[str, pa.Table]:
    ts = pa.array([1_700_000_000_000_000 + i for i in range(b + 2)], pa.timestamp("us", tz="UTC"))
    return {
        "fire": pa.table({"sensor_id": list(range(b + 2)), "temperature": [20.5 + i for i in range(b + 2)], "ts": ts}),
        "stats": pa.table({"location": ["a", None, "c"][: 1 + b % 3]}),
        "empty": pa.table({"x": pa.array([], pa.int64())}),
    }


def state(b: int) -> dict:
    return {"strategy": "chain", "scores": {"chain": 0.5 + b / 100, "pc": 0.25}, "rr_cursor": b, "history": [1.5, None]}


def test_round_trip_keeps_tables_schemas_and_state(tmp_path):
    store = CheckpointStore(tmp_path)
    store.save(7, queues(7), state(7))
    ck = store.load_latest()
    assert ck.batch_id == 7
    assert ck.state == state(7)
    assert set(ck.queues) == {"fire", "stats", "empty"}
    for name, table in queues(7).items():
        assert ck.queues[name].equals(table), name
        assert ck.queues[name].schema == table.schema


def test_empty_store_returns_none_and_missing_batch_is_named(tmp_path):
    store = CheckpointStore(tmp_path / "nested" / "dir")
    assert store.load_latest() is None
    assert store.batches() == []
    with pytest.raises(CheckpointError, match="no checkpoint for batch 3"):
        store.load(3)


def test_keeps_only_the_last_n(tmp_path):
    store = CheckpointStore(tmp_path, keep=3)
    for b in range(10):
        store.save(b, queues(b), state(b))
    assert store.batches() == [7, 8, 9]
    assert sorted(os.listdir(tmp_path)) == [f"{b:020d}.ckpt" for b in (7, 8, 9)]
    assert store.load_latest().state == state(9)
    assert store.load_latest(before=9).batch_id == 8
    assert store.load_latest(before=7) is None


def test_replayed_batch_overwrites_its_checkpoint(tmp_path):
    store = CheckpointStore(tmp_path)
    store.save(4, queues(4), state(4))
    store.save(4, queues(1), {"strategy": "pc"})
    assert store.batches() == [4]
    ck = store.load(4)
    assert ck.state == {"strategy": "pc"}
    assert ck.queues["fire"].num_rows == 3


def test_batch_ids_order_numerically_past_nine(tmp_path):
    store = CheckpointStore(tmp_path, keep=2)
    for b in (9, 10, 100):
        store.save(b, {}, {"b": b})
    assert store.batches() == [10, 100]
    assert store.load_latest().state == {"b": 100}


@pytest.mark.parametrize("cut", [0, 5, 40, -1, -20, -45])
def test_truncated_file_raises_checkpoint_corrupt(tmp_path, cut):
    store = CheckpointStore(tmp_path)
    path = store.save(3, queues(3), state(3))
    data = path.read_bytes()
    path.write_bytes(data[:cut] if cut >= 0 else data[:cut])
    with pytest.raises(CheckpointCorrupt, match=str(path.name)):
        store.load_latest()


def test_flipped_byte_in_a_queue_fails_its_checksum(tmp_path):
    store = CheckpointStore(tmp_path)
    path = store.save(3, queues(3), state(3))
    data = bytearray(path.read_bytes())
    data[200] ^= 0xFF  # inside the first Arrow section (state JSON is shorter than 200 bytes)
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointCorrupt, match="checksum mismatch in section 'fire'"):
        store.load(3)


def test_edited_manifest_fails_the_manifest_checksum(tmp_path):
    store = CheckpointStore(tmp_path)
    path = store.save(3, queues(3), state(3))
    data = path.read_bytes()
    path.write_bytes(data.replace(b'"batch_id": 3', b'"batch_id": 4'))
    with pytest.raises(CheckpointCorrupt, match="manifest checksum mismatch"):
        store.load(3)


def test_file_renamed_to_another_batch_is_detected(tmp_path):
    store = CheckpointStore(tmp_path)
    path = store.save(3, {}, {})
    os.replace(path, tmp_path / f"{5:020d}.ckpt")
    with pytest.raises(CheckpointCorrupt, match="manifest says batch 3, file name says 5"):
        store.load_latest()


def test_corrupt_latest_is_not_skipped_silently(tmp_path):
    store = CheckpointStore(tmp_path)
    store.save(1, queues(1), state(1))
    path = store.save(2, queues(2), state(2))
    path.write_bytes(b"")
    with pytest.raises(CheckpointCorrupt):
        store.load_latest()
    assert store.load(1).state == state(1)  # an older one can still be chosen explicitly


def test_failed_save_leaves_previous_checkpoint_and_no_temp_file(tmp_path):
    store = CheckpointStore(tmp_path)
    store.save(1, queues(1), state(1))

    class Boom:
        schema = None

    with pytest.raises(CheckpointError, match="queue 'bad' must be a pyarrow.Table, got Boom"):
        store.save(2, {"bad": Boom()}, {})
    with pytest.raises(CheckpointError, match="not JSON-serialisable"):
        store.save(2, {}, {"when": object()})
    assert os.listdir(tmp_path) == [f"{1:020d}.ckpt"]
    assert store.load_latest().batch_id == 1


def test_stale_temp_files_from_a_crash_are_removed_on_open(tmp_path):
    (tmp_path / ".00000000000000000002.abc.tmp").write_bytes(b"half a checkpoint")
    store = CheckpointStore(tmp_path)
    assert store.batches() == []
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("bad", [-1, 1.5, "3", True, None])
def test_bad_batch_id_is_named(tmp_path, bad):
    store = CheckpointStore(tmp_path)
    with pytest.raises(CheckpointError, match=f"batch_id must be an integer >= 0, got {bad!r}"):
        store.save(bad, {}, {})


@pytest.mark.parametrize("keep", [0, -2, 2.0, True])
def test_bad_keep_is_named(tmp_path, keep):
    with pytest.raises(CheckpointError, match="keep must be an integer >= 1"):
        CheckpointStore(tmp_path, keep=keep)


def test_state_is_plain_json_in_the_file(tmp_path):
    """The state section is readable JSON (useful when debugging a stuck job)."""
    store = CheckpointStore(tmp_path)
    path = store.save(0, {}, {"strategy": "threshold", "mode": "memory-saving"})
    data = path.read_bytes()
    start = len(b"SQCKPT01")
    assert json.loads(data[start : data.index(b"}", start) + 1]) == {"mode": "memory-saving", "strategy": "threshold"}
