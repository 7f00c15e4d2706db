"""Sinks for the outputs of a trigger: one call per trigger for all queries, idempotent per batch.

docs/ARCHITECTURE.md ("One trigger on Spark") measured a Spark write at ~0.44 s fixed cost, so the default sink
writes Parquet straight with pyarrow — ``out/query=NAME/batch=ID.parquet`` via a temporary file and
an atomic rename — and a replayed batch id rewrites the same files instead of adding rows. The
layout is Hive-partitioned, so ``spark.read.parquet(out)`` sees a ``query`` column too.

Every sink has ``write(batch_id, outputs)`` with ``outputs`` a mapping from query name to a
``pyarrow.Table``. A sink that can also take a batch in parts (a :class:`PartedSink`) has
``write_part(batch_id, outputs, first)``: the continuous worker writes the rows of every class
above the lowest as soon as it has them, as parts of the batch the next trigger commits (``RunConfig.early_write_s``);
that trigger then calls ``write(batch_id, outputs, keep_parts=True)``, which keeps the parts of
this attempt and replaces anything else of that batch id. A part with ``first`` set, and a
``write`` without ``keep_parts``, first removes every file an earlier attempt left for the batch.

* ``ParquetSink(path)`` — the default; ``read_parquet_sink(path)`` loads it back. Parts of a
  batch are ``batch=ID-P.parquet`` (P = 1, 2, ... per query), read before ``batch=ID.parquet``.
* ``MemorySink()`` — Arrow tables kept per query for notebooks; ``to_spark`` makes a temp view.

Sinks that write through Spark (``DataFrameSink``) are in :mod:`sparkqos.spark.sinks`.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.parquet as pq

from sparkqos.atomic import fsync_dir, write_atomic
from sparkqos.errors import SinkError, check_number

__all__ = [
    "Sink",
    "PartedSink",
    "ParquetSink",
    "MemorySink",
    "read_parquet_sink",
]

_QUERY_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")
_BATCH_FILE = re.compile(r"^batch=(\d+)(?:-(\d+))?\.parquet$")
#: A compacted file: batches A to B of one query in one file (ParquetSink.checkpointed).
_COMPACT_FILE = re.compile(r"^batches=(\d+)-(\d+)\.parquet$")
#: Key of a compacted file's metadata listing its batches and their row counts, in order.
_BATCHES_KEY = b"sparkqos.batches"
#: Sort key of the trigger's own file of a batch: after that batch's parts.
_LAST = 1 << 62


def check_outputs(outputs: Any) -> dict[str, pa.Table]:
    """Validate ``{query name: table}``; RecordBatches are accepted and turned into tables."""
    if not isinstance(outputs, Mapping):
        raise SinkError(f"outputs must be a mapping of query name to pyarrow.Table, got {type(outputs).__name__}")
    checked = {}
    for name, table in outputs.items():
        if not isinstance(name, str) or not _QUERY_NAME.match(name):
            raise SinkError(f"query name {name!r} cannot name a sink partition; use letters, digits, '_', '.', '-'")
        if isinstance(table, pa.RecordBatch):
            table = pa.Table.from_batches([table])
        if not isinstance(table, pa.Table):
            raise SinkError(f"output of query {name!r} must be a pyarrow.Table, got {type(table).__name__}")
        checked[name] = table
    return checked


class Sink:
    """Base class: ``write(batch_id, outputs)`` stores one trigger's outputs of every query, whole.

    A sink that also takes a batch in parts is a :class:`PartedSink`."""

    #: Whether the continuous worker may write parts of a batch through :meth:`write_part`.
    supports_parts: ClassVar[bool] = False

    def write(self, batch_id: int, outputs: Mapping[str, pa.Table]) -> None:
        raise NotImplementedError

    def write_part(self, batch_id: int, outputs: Mapping[str, pa.Table], first: bool) -> None:
        raise SinkError(f"{type(self).__name__} takes whole batches only (supports_parts is False)")

    def checkpointed(self, batch_id: int) -> None:
        """Batch ``batch_id`` and every one before it are final (checkpointed: never replayed);
        a sink may reorganise what it holds of them. Nothing by default."""

    def flush(self) -> None:
        """Wait for what the sink does in the background on final batches, and raise what it
        raised. Nothing by default."""


class PartedSink(Sink):
    """A sink that also takes a batch in parts (see the module docstring): ``write_part`` adds a
    part, and ``write(batch_id, outputs, keep_parts=True)`` commits the rest of the batch keeping
    this attempt's parts.

    A subclass that overrides ``write`` and not ``write_part`` takes whole batches only, so that
    its override sees every row (say ``supports_parts = True`` in it to take parts anyway)."""

    supports_parts: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "write" in cls.__dict__ and "write_part" not in cls.__dict__ and "supports_parts" not in cls.__dict__:
            cls.supports_parts = False

    def write(self, batch_id: int, outputs: Mapping[str, pa.Table], keep_parts: bool = False) -> None:
        raise NotImplementedError

    def write_part(self, batch_id: int, outputs: Mapping[str, pa.Table], first: bool) -> None:
        raise NotImplementedError


class ParquetSink(PartedSink):
    """Parquet files ``path/query=NAME/batch=ID.parquet`` written with pyarrow, no Spark job.

    Writing batch ``b`` replaces every ``batch=b`` file: queries present in ``outputs`` get their
    file rewritten, queries absent lose a ``batch=b`` file left by an earlier attempt, so the sink
    holds exactly the last attempt of each batch. Empty outputs write no file. Parts
    (``write_part``) are ``batch=b-P.parquet``, numbered 1, 2, ... per query within one attempt;
    ``write(b, ..., keep_parts=True)`` keeps the parts this sink object wrote for ``b`` since the
    last ``first`` part and removes any other.

    >>> import tempfile, pyarrow as pa
    >>> sink = ParquetSink(tempfile.mkdtemp())
    >>> sink.write(0, {"fire": pa.table({"t": [71.5]}), "stats": pa.table({"n": [3]})})
    >>> sink.write(1, {"fire": pa.table({"t": [80.0, 90.0]})})
    >>> sink.write(1, {"fire": pa.table({"t": [80.0, 90.0]})})   # replayed after a crash
    >>> {q: t.num_rows for q, t in sorted(sink.read().items())}
    {'fire': 3, 'stats': 1}

    Compaction (``compact_every``, default 64; None: never): once that many batches are final
    (:meth:`checkpointed`), each query's files of those batches become one
    ``batches=A-B.parquet`` (rows in batch order, the batches and their row counts in the file's
    metadata, so :func:`read_parquet_sink` still gives each row's batch), written atomically before
    the small files are removed; a reader ignores small files a compacted file covers (a crash
    between the two steps), and the next compaction removes them. Final batches are never replayed,
    so a replay never touches a compacted file. With ``background`` (the default) a compaction runs
    on a thread of its own at a lower scheduling priority, so the trigger that makes batches final
    does not wait for it (on one core, 64 batches of the main job took the trigger about a second);
    one compaction of a folder runs at a time (across sink objects of this process), each taking
    its range from the files on disk, and a failure is raised by the sink's next call.
    :meth:`flush` (and :meth:`read`) wait for the one in flight.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        compression: str = "zstd",
        fsync: bool = True,
        compact_every: int | None = 64,
        background: bool = True,
    ):
        check_number("compact_every", compact_every, low=1, integer=True, none_ok=True, error=SinkError)
        self.path = Path(path)
        self.compression = compression
        self.fsync = fsync
        self.compact_every = compact_every
        self.background = background
        self._compacted_through: int | None = None  # newest batch in a compacted file (None: not read yet)
        self.path.mkdir(parents=True, exist_ok=True)
        #: batch id → query → parts written in this attempt (write_part)
        self._parts: dict[int, dict[str, int]] = {}
        self._compactor: threading.Thread | None = None
        self._compact_error: BaseException | None = None

    def __getstate__(self) -> dict:  # a copy (Spark Connect's worker) starts with no attempt open
        return {**self.__dict__, "_parts": {}, "_compactor": None, "_compact_error": None}

    def __repr__(self) -> str:
        return f"ParquetSink({str(self.path)!r}, compression={self.compression!r}, fsync={self.fsync})"

    def write(self, batch_id: int, outputs: Mapping[str, pa.Table], keep_parts: bool = False) -> None:
        batch_id = check_number("batch_id", batch_id, low=0, integer=True, error=SinkError)
        outputs = check_outputs(outputs)
        kept = self._parts.pop(batch_id, {}) if keep_parts else {}
        self._parts.pop(batch_id, None)
        written = self._write_files(f"batch={batch_id}.parquet", outputs)
        self._remove_stale(batch_id, written, kept)

    def write_part(self, batch_id: int, outputs: Mapping[str, pa.Table], first: bool) -> None:
        """Add a part to batch ``batch_id`` (``first``: the first of this attempt, which removes
        every file an earlier attempt left for that batch)."""
        batch_id = check_number("batch_id", batch_id, low=0, integer=True, error=SinkError)
        outputs = check_outputs(outputs)
        if first or batch_id not in self._parts:
            self._remove_stale(batch_id, set(), {})
            self._parts[batch_id] = {}
        counts = self._parts[batch_id]
        for query, table in outputs.items():
            if table.num_rows == 0:
                continue
            counts[query] = counts.get(query, 0) + 1
            folder = self._write_files(f"batch={batch_id}-{counts[query]}.parquet", {query: table})
            if self.fsync:
                for f in folder:
                    fsync_dir(f)

    def _write_files(self, name: str, outputs: Mapping[str, pa.Table]) -> set[Path]:
        """Write each non-empty table to ``query=NAME/name`` (atomic rename); the folders written."""
        written = set()
        for query, table in outputs.items():
            if table.num_rows == 0:
                continue
            folder = self.path / f"query={query}"
            folder.mkdir(exist_ok=True)
            write_atomic(
                folder / name,
                lambda f, table=table: pq.write_table(table, f, compression=self.compression),
                fsync=self.fsync,
                sync_dir=False,
            )
            written.add(folder)
        return written

    def _remove_stale(self, batch_id: int, written: set[Path], kept: Mapping[str, int]) -> None:
        """Remove what an earlier attempt left of batch ``batch_id``: the trigger's file in every
        folder not in ``written``, and every part above ``kept[query]`` (0 when absent)."""
        changed = set(written)
        for folder in self.path.glob("query=*"):
            stale = folder / f"batch={batch_id}.parquet"
            if folder not in written and stale.exists():
                stale.unlink()
                changed.add(folder)
            if self._drop_parts(folder, batch_id, after=kept.get(folder.name.split("=", 1)[1], 0)):
                changed.add(folder)
        if self.fsync:
            for folder in changed:
                fsync_dir(folder)

    @staticmethod
    def _drop_parts(folder: Path, batch_id: int, after: int) -> bool:
        """Remove the parts of ``batch_id`` in ``folder`` numbered above ``after`` (an attempt
        numbers them 1, 2, ... without gaps, so the first missing number ends the search)."""
        dropped = False
        part = after + 1
        while True:
            f = folder / f"batch={batch_id}-{part}.parquet"
            if not f.exists():
                return dropped
            f.unlink()
            dropped = True
            part += 1

    def read(self, with_batch_id: bool = False) -> dict[str, pa.Table]:
        self.flush()
        return read_parquet_sink(self.path, with_batch_id=with_batch_id)

    def checkpointed(self, batch_id: int) -> None:
        """Compact every query's files of final batches once ``compact_every`` of them wait (class docstring)."""
        if self.compact_every is None:
            return
        if self._compactor is not None:
            if self._compactor.is_alive():
                return  # the next call after it takes the batches that became final meanwhile
            self.flush()
        if self._compacted_through is None:
            self._compacted_through = self._compacted_on_disk()
        if batch_id - self._compacted_through < self.compact_every:
            return
        if not self.background:
            self._compact_through(batch_id)
            return
        self._compactor = threading.Thread(
            target=self._compact_in_background, args=(batch_id,), name=f"sparkqos-compact-{self.path.name}", daemon=True
        )
        self._compactor.start()

    def flush(self) -> None:
        """Wait for a compaction in flight; raise what it raised (a :class:`SinkError`)."""
        compactor, self._compactor = self._compactor, None
        if compactor is not None:
            compactor.join()
        error, self._compact_error = self._compact_error, None
        if error is not None:
            raise SinkError(f"compacting {self.path}: {type(error).__name__}: {error}") from error

    def _compacted_on_disk(self) -> int:
        """The newest batch in a compacted file of this sink (-1: none)."""
        ends = [int(m.group(2)) for f in self.path.glob("query=*/batches=*") if (m := _COMPACT_FILE.match(f.name))]
        return max(ends, default=-1)

    def _compact_in_background(self, last: int) -> None:
        if hasattr(os, "setpriority"):  # this thread only (Linux: a thread's id is a process id here)
            try:
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), min(19, os.getpriority(os.PRIO_PROCESS, 0) + 10))
            except OSError:
                pass
        try:
            self._compact_through(last)
        except BaseException as exc:  # noqa: BLE001 - raised by the sink's next call (flush)
            self._compact_error = exc

    def _compact_through(self, last: int) -> None:
        """Compact batches after the newest compacted one (read from disk, under the folder's lock)
        through ``last``."""
        with _folder_lock(self.path):
            first = self._compacted_on_disk() + 1
            if first <= last:
                for folder in self.path.glob("query=*"):
                    self._compact(folder, first, last)
            self._compacted_through = max(last, first - 1)

    def _compact(self, folder: Path, first: int, last: int) -> None:
        files, _ = _batch_files(folder)
        todo = [(b, f) for b, _, f in files if first <= b <= last]
        if todo:
            tables = [pq.read_table(f) for _, f in todo]
            counts: dict[int, int] = {}
            for (b, _), t in zip(todo, tables, strict=True):
                counts[b] = counts.get(b, 0) + t.num_rows
            merged = pa.concat_tables(tables, promote_options="default")
            meta = {**(merged.schema.metadata or {}), _BATCHES_KEY: json.dumps(sorted(counts.items())).encode()}
            merged = merged.replace_schema_metadata(meta)
            write_atomic(
                folder / f"batches={first}-{last}.parquet",
                lambda f: pq.write_table(merged, f, compression=self.compression),
                fsync=self.fsync,
                sync_dir=False,
            )
        # the files just merged, and any a crash left after an earlier compaction
        small = [folder / e for e in os.listdir(folder) if (m := _BATCH_FILE.match(e)) and int(m.group(1)) <= last]
        for f in small:
            f.unlink()
        if self.fsync and small:
            fsync_dir(folder)


#: One lock per sink folder of this process: compactions of a folder never overlap.
_FOLDER_LOCKS: dict[Path, threading.Lock] = {}
_FOLDER_LOCKS_LOCK = threading.Lock()


def _folder_lock(path: Path) -> threading.Lock:
    with _FOLDER_LOCKS_LOCK:
        return _FOLDER_LOCKS.setdefault(path.resolve(), threading.Lock())


def _batch_files(folder: Path) -> tuple[list[tuple[int, int, Path]], list[tuple[int, int, Path]]]:
    """A query folder's small files ``(batch, part, path)`` not covered by a compacted file (parts
    1, 2, ... before the trigger's own file) and its compacted files ``(first, last, path)``."""
    small, compacted = [], []
    for entry in os.listdir(folder):
        if m := _BATCH_FILE.match(entry):
            small.append((int(m.group(1)), _LAST if m.group(2) is None else int(m.group(2)), folder / entry))
        elif m := _COMPACT_FILE.match(entry):
            compacted.append((int(m.group(1)), int(m.group(2)), folder / entry))
    covered = max((b for _, b, _ in compacted), default=-1)
    return sorted(f for f in small if f[0] > covered), sorted(compacted)


def read_parquet_sink(path: str | os.PathLike, with_batch_id: bool = False) -> dict[str, pa.Table]:
    """Load a ``ParquetSink`` directory: ``{query: rows in batch order}``.

    Each batch lives in one file, or in its parts then that file (read in that order), all of
    one attempt, so there is nothing to deduplicate; final batches may be merged into compacted
    files (``batches=A-B.parquet``, read first), and small files they cover are ignored.
    ``with_batch_id`` adds an int64 ``batch_id`` column. Hidden temp files of an interrupted write are ignored.
    """
    root = Path(path)
    if not root.is_dir():
        raise SinkError(f"sink directory {str(root)!r} does not exist")
    result = {}
    for folder in sorted(root.glob("query=*")):
        small, compacted = _batch_files(folder)
        tables = []
        for _, _, file in compacted:
            table = pq.read_table(file)
            if with_batch_id:
                counts = json.loads(table.schema.metadata[_BATCHES_KEY])
                ids = [b for b, n in counts for _ in range(n)]
                table = table.append_column("batch_id", pa.array(ids, pa.int64()))
            tables.append(
                table.replace_schema_metadata({k: v for k, v in (table.schema.metadata or {}).items() if k != _BATCHES_KEY})
            )
        for batch_id, _, file in small:
            table = pq.read_table(file)
            if with_batch_id:
                table = table.append_column("batch_id", pa.array([batch_id] * table.num_rows, pa.int64()))
            tables.append(table)
        if tables:
            result[folder.name.split("=", 1)[1]] = pa.concat_tables(tables, promote_options="default")
    return result


class MemorySink(PartedSink):
    """Arrow tables per query kept in memory (notebooks, tests); a replayed batch replaces its rows.

    >>> import pyarrow as pa
    >>> sink = MemorySink()
    >>> sink.write(0, {"anomaly": pa.table({"s": [1, 2]})})
    >>> sink.write(0, {"anomaly": pa.table({"s": [1, 2]})})
    >>> sink.table("anomaly").num_rows, sink.queries()
    (2, ['anomaly'])
    """

    def __init__(self) -> None:
        #: query → batch id → the batch's tables (its parts, then the trigger's own)
        self._batches: dict[str, dict[int, list[pa.Table]]] = {}
        self._open: set[int] = set()  # batches with parts of the current attempt
        # the continuous worker writes parts of the next batch while a trigger writes its own
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return "MemorySink()"

    def write(self, batch_id: int, outputs: Mapping[str, pa.Table], keep_parts: bool = False) -> None:
        batch_id = check_number("batch_id", batch_id, low=0, integer=True, error=SinkError)
        outputs = check_outputs(outputs)
        with self._lock:
            if not (keep_parts and batch_id in self._open):
                self._drop(batch_id)
            self._open.discard(batch_id)
            self._add(batch_id, outputs)

    def write_part(self, batch_id: int, outputs: Mapping[str, pa.Table], first: bool) -> None:
        batch_id = check_number("batch_id", batch_id, low=0, integer=True, error=SinkError)
        outputs = check_outputs(outputs)
        with self._lock:
            if first or batch_id not in self._open:
                self._drop(batch_id)
                self._open.add(batch_id)
            self._add(batch_id, outputs)

    def _drop(self, batch_id: int) -> None:
        for per_query in self._batches.values():
            per_query.pop(batch_id, None)

    def _add(self, batch_id: int, outputs: Mapping[str, pa.Table]) -> None:
        for query, table in outputs.items():
            if table.num_rows:
                self._batches.setdefault(query, {}).setdefault(batch_id, []).append(table)

    def queries(self) -> list[str]:
        with self._lock:
            return sorted(q for q, b in self._batches.items() if b)

    def table(self, query: str) -> pa.Table:
        """All rows of ``query`` in batch order."""
        with self._lock:
            batches = dict(self._batches.get(query) or {})
            tables = [t for b in sorted(batches) for t in batches[b]]
        if not tables:
            raise SinkError(f"no rows for query {query!r}; queries with rows: {self.queries()}")
        return pa.concat_tables(tables, promote_options="default")

    def batches(self, query: str) -> dict[int, pa.Table]:
        """The rows of ``query`` by batch id, each batch's parts first (batches without rows left out)."""
        with self._lock:
            batches = dict(self._batches.get(query) or {})
        return {b: pa.concat_tables(batches[b], promote_options="default") for b in sorted(batches)}

    def to_spark(self, spark: Any, query: str, view: str | None = None) -> Any:
        """The rows of ``query`` as a DataFrame of the SparkSession ``spark``, also registered as temp view
        ``view`` (default: the query name)."""
        df = spark.createDataFrame(self.table(query))
        df.createOrReplaceTempView(view or query.replace(".", "_").replace("-", "_"))
        return df


def union_outputs(batch_id: int, outputs: Mapping[str, pa.Table]) -> pa.Table | None:
    """One table holding every query's rows: ``batch_id``, ``query``, then the union of columns.

    Columns a query lacks are null; a column with conflicting types across queries is an error.
    """
    tables = []
    for query, table in outputs.items():
        if table.num_rows == 0:
            continue
        n = table.num_rows
        tagged = pa.table(
            [pa.array([batch_id] * n, pa.int64()), pa.array([query] * n, pa.string()), *table.columns],
            names=["batch_id", "query", *table.column_names],
        )
        tables.append(tagged)
    if not tables:
        return None
    try:
        return pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise SinkError(f"outputs of batch {batch_id} cannot share one DataFrame: {exc}") from None
