"""Queued rows written once: the checkpoint refers to them instead of copying them every trigger.

A queue is a FIFO of immutable Arrow batches; between two triggers most of it does not change —
new batches are appended, the head is served (dropped or sliced). Rewriting every queued row at
every trigger costs time in proportion to the backlog, which is exactly when time is short (after
downtime, 300 s of stream sit in the queues of the lower classes). So a checkpoint stores each
queued batch once, in a *segment* file under ``<checkpoint>/segments``, and refers to it by
(file, batch, row offset, rows) from then on: a served head is a smaller offset range of the same
segment, a new batch goes into the one new segment file of its trigger. A batch spilled to disk
already is an immutable file: it is hard-linked into the segments folder (copied across file
systems), not read back.

A batch is recognised across triggers by its buffers: slicing keeps them (pyarrow slices are
views), so the queue's key and the addresses of every column's buffers identify a batch, and its
offset says which rows of the segment are still queued. The store keeps a reference to each batch
it has written, so an address cannot be reused by another batch while it is known; batches no
queue holds any more are forgotten at the next snapshot.

Files are complete before the checkpoint that refers to them is written (and, with ``fsync``,
durable: fsynced with their folder), and a segment is deleted only once no kept checkpoint refers
to it. A missing or damaged segment raises :class:`~sparkqos.errors.CheckpointCorrupt` naming it.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from sparkqos.atomic import fsync_dir, write_atomic
from sparkqos.errors import CheckpointCorrupt

__all__ = ["SegmentStore", "Snapshot", "queue_parts"]

Part = pa.RecordBatch | Path


def queue_parts(state: Any) -> dict[str, list[Part]]:
    """Every non-empty input queue of an executor's state, keyed ``"operator#port"``, as its
    batches in order — in memory, or the path of a spilled one (not read back)."""
    out = {}
    for name, ports in state.ports.items():
        for port, q in enumerate(ports):
            parts = q.parts()
            if parts:
                out[f"{name}#{port}"] = parts
    return out


def _identity(batch: pa.RecordBatch) -> tuple[int, ...]:
    """The addresses of every buffer of ``batch``'s columns (shared by its slices)."""
    return tuple(b.address if b is not None else 0 for c in batch.columns for b in c.buffers())


def _offset(batch: pa.RecordBatch) -> int:
    return batch.column(0).offset if batch.num_columns else 0


@dataclass
class Snapshot:
    """What one checkpoint refers to: per queue, ``[file, batch index, row offset, rows]`` refs
    (``layout``), the batches to write into the trigger's new segment file and the linked files to
    make durable. Taken while the executor is still; written after it went on."""

    layout: dict[str, list[list[Any]]]
    new_file: str
    new_batches: list[pa.RecordBatch] = field(default_factory=list)
    linked: list[Path] = field(default_factory=list)

    @property
    def files(self) -> set[str]:
        return {ref[0] for refs in self.layout.values() for ref in refs}


class SegmentStore:
    """Segment files under ``path`` (see the module)."""

    def __init__(self, path: str | os.PathLike, fsync: bool = True):
        self.path = Path(path)
        self.fsync = fsync  # the folder is made at the first write: a store of tables never has one
        # batches written: (queue, buffer addresses) -> (batch kept alive, file, index, first row offset)
        self._known: dict[tuple[str, tuple[int, ...]], tuple[pa.RecordBatch, str, int, int]] = {}
        self._linked: dict[str, str] = {}  # spilled file path -> segment file name
        self._names = (f"{uuid.uuid4().hex[:12]}-{i:06d}" for i in itertools.count())

    def snapshot(self, queues: Mapping[str, Sequence[Part]]) -> Snapshot:
        """Refer to every part of ``queues``: known batches by their segment, new ones into this
        snapshot's new segment file, spilled files linked in now (before the executor can remove
        them)."""
        snap = Snapshot({}, f"seg-{next(self._names)}.arrows")
        known: dict[tuple[str, tuple[int, ...]], tuple[pa.RecordBatch, str, int, int]] = {}
        linked: dict[str, str] = {}
        for key, parts in queues.items():
            refs = []
            for part in parts:
                if isinstance(part, Path):
                    name = self._linked.get(str(part)) or self._link(part, snap)
                    linked[str(part)] = name
                    refs.append([name, 0, 0, -1])
                    continue
                ident = (key, _identity(part))
                entry = self._known.get(ident) or known.get(ident)
                at, n = _offset(part), part.num_rows
                if entry is None or not (entry[3] <= at and at + n <= entry[3] + entry[0].num_rows):
                    entry = (part, snap.new_file, len(snap.new_batches), at)
                    snap.new_batches.append(part)
                known[ident] = entry
                refs.append([entry[1], entry[2], at - entry[3], n])
            snap.layout[key] = refs
        self._known, self._linked = known, linked
        return snap

    def _link(self, spilled: Path, snap: Snapshot) -> str:
        name = f"spill-{next(self._names)}.arrows"
        self.path.mkdir(parents=True, exist_ok=True)
        target = self.path / name
        try:
            os.link(spilled, target)
        except OSError:  # another file system, or no hard links: copy it once
            shutil.copyfile(spilled, target)
        snap.linked.append(target)
        return name

    def write(self, snap: Snapshot) -> None:
        """Make every file ``snap`` refers to durable: its new segment (one Arrow IPC stream of
        its new batches, each with its own schema) and the spilled files linked in."""
        if snap.new_batches:
            self.path.mkdir(parents=True, exist_ok=True)

            def write(f) -> None:
                for batch in snap.new_batches:
                    with pa.ipc.new_stream(f, batch.schema) as writer:
                        writer.write_batch(batch)

            write_atomic(self.path / snap.new_file, write, fsync=self.fsync, sync_dir=False)
        if self.fsync and (snap.new_batches or snap.linked):
            for path in snap.linked:
                with open(path, "rb") as f:
                    os.fsync(f.fileno())
            fsync_dir(self.path)

    def collect(self, referenced: Iterable[str]) -> None:
        """Delete the segment files nobody refers to: not ``referenced`` (by the checkpoints
        kept) and not known to the snapshot in progress."""
        if not self.path.is_dir():
            return
        keep = set(referenced) | {e[1] for e in self._known.values()} | set(self._linked.values())
        for entry in os.listdir(self.path):
            if entry.endswith(".arrows") and entry not in keep:
                with contextlib.suppress(FileNotFoundError):
                    (self.path / entry).unlink()

    def load(self, layout: Mapping[str, Sequence[Sequence[Any]]], where: str) -> dict[str, pa.Table]:
        """The queues a checkpoint's ``layout`` refers to, as tables (one chunk per ref)."""
        files: dict[str, list[pa.RecordBatch]] = {}
        out = {}
        for key, refs in layout.items():
            batches = []
            for name, index, offset, rows in refs:
                if name not in files:
                    files[name] = self._read(name, where)
                stored = files[name]
                if not 0 <= index < len(stored):
                    raise CheckpointCorrupt(f"checkpoint {where}: segment {name} has no batch {index}")
                batch = stored[index]
                part = batch if rows < 0 else batch.slice(offset, rows)
                # known from here on: a restored queue is not written again by the next snapshot
                self._known[(key, _identity(part))] = (batch, name, index, _offset(batch))
                batches.append(part)
            if batches:
                out[key] = pa.Table.from_batches(batches)
        return out

    def _read(self, name: str, where: str) -> list[pa.RecordBatch]:
        path = self.path / name
        try:
            source = pa.memory_map(str(path))
        except FileNotFoundError:
            raise CheckpointCorrupt(f"checkpoint {where} refers to segment {path}, which is missing") from None
        batches = []
        try:
            while source.tell() < source.size():
                batches.extend(pa.ipc.open_stream(source).read_all().to_batches())
        except pa.ArrowInvalid as exc:
            raise CheckpointCorrupt(f"checkpoint {where}: segment {path} is damaged: {exc}") from None
        return batches
