"""Checkpoint store for leftover queues and scheduler/controller state (docs/ARCHITECTURE.md, "One trigger on Spark").

One file per micro-batch, written to a temporary name (fsynced with ``fsync=True``) and renamed
into place, so a reader sees either the whole checkpoint or the previous one; a torn or damaged file raises
``CheckpointCorrupt`` instead of silently restoring empty queues.

File layout (``<batch id, 20 digits>.ckpt``)::

    b"SQCKPT01"                          magic
    section 0, section 1, ...            state as JSON, then one Arrow IPC stream per queue
    manifest                             JSON: batch id, and per section name/kind/offset/length/sha256
    u64 manifest length, 32-byte sha256 of the manifest, b"SQCKEND1"

The manifest sits at the end (like Parquet's footer) so sections stream straight to disk; a
truncated file loses the end marker and is detected before anything is parsed.

This module does not import pyspark: the store is plain files plus pyarrow, usable from tests
and tools without a JVM.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from sparkqos.atomic import write_atomic
from sparkqos.errors import CheckpointCorrupt, CheckpointError, check_number
from sparkqos.runtime.segments import SegmentStore, Snapshot

__all__ = ["Checkpoint", "CheckpointStore", "checkpoint_bytes", "decode_state", "encode_state", "read_checkpoint_bytes"]

MAGIC = b"SQCKPT01"
END = b"SQCKEND1"
_FOOTER = struct.Struct("<Q32s8s")  # manifest length, manifest sha256, end marker
FORMAT_VERSION = 1
_NAME = re.compile(r"^(\d{20})\.ckpt$")


def encode_state(obj: Any) -> Any:
    """JSON-able copy of executor state: bytes become ``{"b64": ...}``.

    >>> encode_state({"q": b"\\x00\\x01", "n": [1, b"a"]})
    {'q': {'b64': 'AAE='}, 'n': [1, {'b64': 'YQ=='}]}
    >>> decode_state(encode_state({"q": b"\\x00\\x01"}))
    {'q': b'\\x00\\x01'}
    """
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return {"b64": base64.b64encode(bytes(obj)).decode("ascii")}
    if isinstance(obj, dict):
        return {k: encode_state(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [encode_state(v) for v in obj]
    return obj


def decode_state(obj: Any) -> Any:
    """The executor state :func:`encode_state` encoded."""
    if isinstance(obj, dict):
        if set(obj) == {"b64"}:
            return base64.b64decode(obj["b64"])
        return {k: decode_state(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [decode_state(v) for v in obj]
    return obj


@dataclass
class Checkpoint:
    """What one save stored: the batch id, the leftover queues by name, the JSON state."""

    batch_id: int
    queues: dict[str, pa.Table] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)


class CheckpointStore:
    """Atomic, checksummed checkpoints under ``path``, keeping the newest ``keep`` of them.

    >>> import tempfile, pyarrow as pa
    >>> store = CheckpointStore(tempfile.mkdtemp(), keep=2)
    >>> for b in range(3):
    ...     _ = store.save(b, {"select": pa.table({"x": [b, b + 1]})}, {"strategy": "chain", "batch": b})
    >>> store.batches()
    [1, 2]
    >>> ck = store.load_latest()
    >>> ck.batch_id, ck.queues["select"]["x"].to_pylist(), ck.state["strategy"]
    (2, [2, 3], 'chain')
    >>> store.load_latest(before=2).batch_id
    1
    """

    def __init__(self, path: str | os.PathLike, keep: int = 3, fsync: bool = True):
        check_number("keep", keep, low=1, integer=True, error=CheckpointError)
        self.path = Path(path)
        self.keep = keep
        self.fsync = fsync
        self.path.mkdir(parents=True, exist_ok=True)
        #: Queued batches written once (:mod:`sparkqos.runtime.segments`): a :meth:`save` given a
        #: :class:`~sparkqos.runtime.segments.Snapshot` refers to them instead of copying them.
        self.segments = SegmentStore(self.path / "segments", fsync=fsync)
        self._files: dict[int, set[str]] = {}  # batch id -> segment files its checkpoint refers to
        # temp files left by a save that crashed before its rename (one writer per store: the driver)
        for stale in self.path.glob(".*.tmp"):
            try:
                stale.unlink()
            except FileNotFoundError:
                pass

    def __repr__(self) -> str:
        return f"CheckpointStore({str(self.path)!r}, keep={self.keep}, fsync={self.fsync})"

    # -- writing --------------------------------------------------------------------------------

    @staticmethod
    def state_bytes(batch_id: int, state: Mapping[str, Any]) -> bytes:
        """``state`` as the checkpoint stores it (JSON): taken while the executor is still, it can
        be written after the executor went on (:meth:`save` takes these bytes as ``state``)."""
        if not isinstance(state, Mapping):
            raise CheckpointError(f"state must be a mapping, got {type(state).__name__}")
        try:
            return json.dumps(dict(state), sort_keys=True).encode()
        except (TypeError, ValueError) as exc:
            raise CheckpointError(f"state of batch {batch_id} is not JSON-serialisable: {exc}") from None

    def save(self, batch_id: int, queues: Mapping[str, pa.Table] | Snapshot, state: Mapping[str, Any] | bytes) -> Path:
        """Write the checkpoint of ``batch_id`` atomically (replacing one of the same id), prune
        old ones. ``state`` is a JSON-serialisable mapping, or :meth:`state_bytes` of one.
        ``queues`` are tables stored in the checkpoint file, or a
        :class:`~sparkqos.runtime.segments.Snapshot` of :attr:`segments` whose layout ``state``
        holds under ``"segments"``: its new files are made durable first, and the segments no
        kept checkpoint refers to any more are deleted after."""
        batch_id = check_number("batch_id", batch_id, low=0, integer=True, error=CheckpointError)
        if isinstance(queues, Snapshot):
            self.segments.write(queues)
            self._files[batch_id] = queues.files
            queues = {}
        if not isinstance(queues, Mapping):
            raise CheckpointError(f"queues must be a mapping of name to pyarrow.Table, got {type(queues).__name__}")
        for name, table in queues.items():
            if not isinstance(name, str) or not name:
                raise CheckpointError(f"queue names must be non-empty strings, got {name!r}")
            if not isinstance(table, (pa.Table, pa.RecordBatch)):
                raise CheckpointError(f"queue {name!r} must be a pyarrow.Table, got {type(table).__name__}")
        state_bytes = state if isinstance(state, bytes) else self.state_bytes(batch_id, state)

        final = self.path / f"{batch_id:020d}.ckpt"
        write_atomic(final, lambda f: _write_checkpoint(f, batch_id, queues, state_bytes), fsync=self.fsync)
        self._prune()
        return final

    def _prune(self) -> None:
        for batch_id in self.batches()[: -self.keep]:
            self._files.pop(batch_id, None)
            try:
                (self.path / f"{batch_id:020d}.ckpt").unlink()
            except FileNotFoundError:  # another process pruned it first
                pass
        referenced: set[str] = set()
        for batch_id in self.batches():
            if batch_id not in self._files:  # written by an earlier process: read its layout
                try:
                    self._files[batch_id] = _layout_files(self._decode(batch_id))
                except CheckpointError:
                    return  # a damaged checkpoint is the reader's to report: delete nothing
            referenced |= self._files[batch_id]
        self.segments.collect(referenced)

    # -- reading --------------------------------------------------------------------------------

    def batches(self) -> list[int]:
        """Batch ids of the stored checkpoints, oldest first."""
        ids = []
        for entry in os.listdir(self.path):
            m = _NAME.match(entry)
            if m:
                ids.append(int(m.group(1)))
        return sorted(ids)

    def load(self, batch_id: int) -> Checkpoint:
        """The checkpoint of ``batch_id``; ``CheckpointError`` if there is none, ``CheckpointCorrupt`` if damaged."""
        ckpt = self._decode(batch_id)
        layout = ckpt.state.get("segments")
        if layout:
            ckpt.queues.update(self.segments.load(layout, where=str(self.path / f"{ckpt.batch_id:020d}.ckpt")))
        return ckpt

    def _decode(self, batch_id: int) -> Checkpoint:
        batch_id = check_number("batch_id", batch_id, low=0, integer=True, error=CheckpointError)
        file = self.path / f"{batch_id:020d}.ckpt"
        try:
            data = file.read_bytes()
        except FileNotFoundError:
            raise CheckpointError(
                f"no checkpoint for batch {batch_id} in {self.path}; stored batches: {self.batches()}"
            ) from None
        return _decode(data, file, batch_id)

    def load_latest(self, before: int | None = None) -> Checkpoint | None:
        """The newest checkpoint (with batch id < ``before`` if given), or None if there is none.

        A damaged newest checkpoint raises ``CheckpointCorrupt``: falling back silently would
        drop or duplicate tuples. Pick an older one explicitly with ``load(batch_id)`` if wanted.
        """
        ids = self.batches()
        if before is not None:
            before = check_number("before", before, low=0, integer=True, error=CheckpointError)
            ids = [b for b in ids if b < before]
        return self.load(ids[-1]) if ids else None


def _layout_files(ckpt: Checkpoint) -> set[str]:
    return {ref[0] for refs in (ckpt.state.get("segments") or {}).values() for ref in refs}


def checkpoint_bytes(
    batch_id: int, queues: Mapping[str, pa.Table], state: Mapping[str, Any] | bytes, compression: str | None = None
) -> bytes:
    """One checkpoint as bytes, in the file layout above: what a sharded executor keeps in
    Spark's state store (one blob per shard per micro-batch). :func:`read_checkpoint_bytes` reads it.
    ``compression`` (``"zstd"``, ``"lz4"``): the queues' Arrow IPC streams carry compressed
    buffers, which Arrow's reader decompresses by itself, so reading needs no option.

    >>> import pyarrow as pa
    >>> blob = checkpoint_bytes(4, {"q#0": pa.table({"x": [1, 2]})}, {"step": 4}, compression="zstd")
    >>> ck = read_checkpoint_bytes(blob)
    >>> ck.batch_id, ck.queues["q#0"]["x"].to_pylist(), ck.state
    (4, [1, 2], {'step': 4})
    """
    state_bytes = state if isinstance(state, bytes) else CheckpointStore.state_bytes(batch_id, state)
    out = io.BytesIO()
    _write_checkpoint(out, batch_id, queues, state_bytes, compression)
    return out.getvalue()


def read_checkpoint_bytes(data: bytes, where: str = "state blob") -> Checkpoint:
    """The checkpoint :func:`checkpoint_bytes` wrote; ``CheckpointCorrupt`` (naming ``where``) when damaged."""
    if len(data) < len(MAGIC) + _FOOTER.size:
        raise CheckpointCorrupt(f"checkpoint {where} is corrupt: {len(data)} bytes")
    length, _, _ = _FOOTER.unpack_from(data, len(data) - _FOOTER.size)
    start = len(data) - _FOOTER.size - length
    try:
        batch_id = json.loads(data[start : start + length])["batch_id"]
    except (ValueError, KeyError, TypeError):
        batch_id = None
    return _decode(data, where, batch_id)


def _write_checkpoint(
    f, batch_id: int, queues: Mapping[str, pa.Table], state_bytes: bytes, compression: str | None = None
) -> None:
    f.write(MAGIC)
    sections = [_write_section(f, "state", "json", state_bytes)]
    for name, table in queues.items():
        sections.append(_write_section(f, name, "arrow", _ipc_bytes(table, compression)))
    manifest = json.dumps({"format": FORMAT_VERSION, "batch_id": batch_id, "sections": sections}, sort_keys=True).encode()
    f.write(manifest)
    f.write(_FOOTER.pack(len(manifest), hashlib.sha256(manifest).digest(), END))


def _ipc_bytes(table: pa.Table | pa.RecordBatch, compression: str | None = None) -> pa.Buffer:
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression=compression)
    with pa.ipc.new_stream(sink, table.schema, options=options) as writer:
        writer.write(table)
    return sink.getvalue()


def _write_section(f, name: str, kind: str, data) -> dict[str, Any]:
    offset = f.tell()
    f.write(data)
    return {
        "name": name,
        "kind": kind,
        "offset": offset,
        "length": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }


def _decode(data: bytes, file: Path | str, batch_id: int | None) -> Checkpoint:
    def corrupt(why: str) -> CheckpointCorrupt:
        return CheckpointCorrupt(f"checkpoint {file} is corrupt: {why}")

    if len(data) < len(MAGIC) + _FOOTER.size or not data.startswith(MAGIC):
        raise corrupt(f"missing header magic (file is {len(data)} bytes)")
    length, digest, end = _FOOTER.unpack_from(data, len(data) - _FOOTER.size)
    if end != END:
        raise corrupt("missing end marker (truncated or torn write)")
    start = len(data) - _FOOTER.size - length
    if start < len(MAGIC):
        raise corrupt(f"manifest length {length} exceeds the file")
    raw = data[start : start + length]
    if hashlib.sha256(raw).digest() != digest:
        raise corrupt("manifest checksum mismatch")
    manifest = json.loads(raw)
    if manifest.get("format") != FORMAT_VERSION:
        raise corrupt(f"unknown format version {manifest.get('format')!r}, expected {FORMAT_VERSION}")
    if manifest.get("batch_id") != batch_id:
        raise corrupt(f"manifest says batch {manifest.get('batch_id')!r}, file name says {batch_id}")
    view = memoryview(data)
    queues: dict[str, pa.Table] = {}
    state: dict[str, Any] | None = None
    for sec in manifest["sections"]:
        lo, hi = sec["offset"], sec["offset"] + sec["length"]
        if lo < len(MAGIC) or hi > start:
            raise corrupt(f"section {sec['name']!r} spans bytes {lo}..{hi}, outside the data area")
        chunk = view[lo:hi]
        if hashlib.sha256(chunk).hexdigest() != sec["sha256"]:
            raise corrupt(f"checksum mismatch in section {sec['name']!r}")
        if sec["kind"] == "json":
            state = json.loads(bytes(chunk))
        elif sec["kind"] == "arrow":
            queues[sec["name"]] = pa.ipc.open_stream(pa.py_buffer(chunk)).read_all()
        else:
            raise corrupt(f"unknown section kind {sec['kind']!r}")
    if state is None:
        raise corrupt("no state section")
    return Checkpoint(batch_id, queues, state)
