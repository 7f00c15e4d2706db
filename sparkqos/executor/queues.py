"""Input queues of the executor: FIFO deques of Arrow record batches (thesis §3.2.3).

Every row carries its arrival time in seconds (column ``__arrival``) and a per-stream sequence
number (``__seq``) added by :func:`stamp` when a batch enters the plan. A queue knows its size in
rows and bytes and its oldest arrival, and serves a quota of N rows by slicing the batch at its
head (zero-copy). :func:`workload` is the thesis's rule for how many rows one run takes (fig 4.1).

>>> import pyarrow as pa
>>> q = BatchQueue(stamp(pa.record_batch({"v": [1]}), 0.0, 0).schema)
>>> q.push(stamp(pa.record_batch({"v": [1, 2, 3]}), 5.0, 0))
>>> q.push(stamp(pa.record_batch({"v": [4, 5]}), 6.0, 3))
>>> q.rows, q.oldest
(5, 5.0)
>>> [b.num_rows for b in q.take(4)], q.rows, q.oldest
([3, 1], 1, 6.0)
>>> workload(100, 0.3, 50), workload(1000, 0.3, 50)
(100, 300)

Spilling (overload): :meth:`BatchQueue.spill_tail` writes the newest in-memory batches
to Arrow IPC files and keeps a placeholder in their place; a spilled batch is read back when it
reaches the head of the queue, so rows leave in the order they came.

>>> import tempfile
>>> q = BatchQueue(stamp(pa.record_batch({"v": [1]}), 0.0, 0).schema)
>>> for i in range(4):
...     q.push(stamp(pa.record_batch({"v": [i, i]}), float(i), 2 * i))
>>> freed = q.spill_tail(tempfile.mkdtemp(), need=1)   # the newest batch goes to disk
>>> q.spilled_batches, q.spilled_bytes == freed > 0, q.rows
(1, True, 8)
>>> freed = q.spill_tail(tempfile.mkdtemp(), need=10**9)   # all but the head
>>> q.spilled_batches
3
>>> [b.column("v").to_pylist() for b in q.take(8)], q.spilled_bytes
([[0, 0], [1, 1], [2, 2], [3, 3]], 0)
"""

from __future__ import annotations

import io
import itertools
import math
import os
from collections import deque
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkqos.executor.expressions import ARRIVAL, SEQ

#: Fig 4.1 defaults: a run takes RATIO of the queued rows when that is more than THRESHOLD rows.
RATIO = 0.3
THRESHOLD = 50


def workload(queued: int, ratio: float = RATIO, threshold: int = THRESHOLD) -> int:
    """Rows one run dequeues out of ``queued`` (thesis fig 4.1): A = N·RATIO if A > THRESHOLD,
    else all N."""
    a = int(math.ceil(queued * ratio))
    return a if a > threshold else queued


def stamp(batch: pa.RecordBatch, arrival: float | np.ndarray, first_seq: int) -> pa.RecordBatch:
    """``batch`` with the executor's columns appended: arrival time (one for the batch, or one
    per row) and sequence numbers ``first_seq, first_seq + 1, …``."""
    n = batch.num_rows
    arrivals = np.full(n, arrival, dtype=np.float64) if np.ndim(arrival) == 0 else np.asarray(arrival, dtype=np.float64)
    arrays = list(batch.columns) + [
        pa.array(arrivals),
        pa.array(np.arange(first_seq, first_seq + n, dtype=np.int64)),
    ]
    names = list(batch.schema.names) + [ARRIVAL, SEQ]
    return pa.RecordBatch.from_arrays(arrays, names=names)


def with_internal(schema: pa.Schema) -> pa.Schema:
    """``schema`` plus the executor's columns."""
    return schema.append(pa.field(ARRIVAL, pa.float64())).append(pa.field(SEQ, pa.int64()))


def merge(batches: list[pa.RecordBatch], schema: pa.Schema | None = None) -> pa.RecordBatch:
    """One batch holding the rows of ``batches`` in order."""
    if len(batches) == 1:
        return batches[0]
    if not batches:
        return pa.RecordBatch.from_pylist([], schema=schema)
    return pa.concat_batches(batches)


def _arrivals(batch: pa.RecordBatch) -> np.ndarray:
    return batch.column(ARRIVAL).to_numpy(zero_copy_only=False)


_spill_names = itertools.count()


class _Spilled:
    """Where a spilled batch lives on disk (an Arrow IPC stream file holding just that batch)."""

    __slots__ = ("path",)

    def __init__(self, path: Path):
        self.path = path

    def read(self) -> pa.RecordBatch:
        with pa.OSFile(str(self.path), "rb") as f:
            batch = pa.ipc.open_stream(f).read_next_batch()
        return batch

    def drop(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def _materialise(entry: list) -> pa.RecordBatch:
    item = entry[0]
    return item.read() if isinstance(item, _Spilled) else item


class BatchQueue:
    """One input port's FIFO of record batches (some of them possibly spilled to disk:
    ``nbytes`` counts every queued byte, ``spilled_bytes`` those on disk)."""

    __slots__ = ("schema", "_batches", "rows", "nbytes", "_oldest", "spilled_bytes", "spilled_batches")

    def __init__(self, schema: pa.Schema):
        self.schema = schema
        self._batches: deque[list] = deque()  # [batch or _Spilled, rows, nbytes, min arrival, ordered]
        self.rows = 0
        self.nbytes = 0
        self._oldest: float | None = None
        self.spilled_bytes = 0
        self.spilled_batches = 0

    @property
    def memory_bytes(self) -> int:
        """Bytes of the queued batches held in memory."""
        return self.nbytes - self.spilled_bytes

    def spill_tail(self, directory: str | os.PathLike, need: int) -> int:
        """Write in-memory batches to ``directory``, newest first (never the head, which is
        about to be served), until ``need`` bytes are freed; returns the bytes freed."""
        freed = 0
        for i in range(len(self._batches) - 1, 0, -1):
            if freed >= need:
                break
            entry = self._batches[i]
            if isinstance(entry[0], _Spilled):
                continue
            path = Path(directory) / f"{os.getpid()}-{next(_spill_names)}.arrows"
            with pa.OSFile(str(path), "wb") as f, pa.ipc.new_stream(f, entry[0].schema) as writer:
                writer.write_batch(entry[0])
            entry[0] = _Spilled(path)
            self.spilled_bytes += entry[2]
            self.spilled_batches += 1
            freed += entry[2]
        return freed

    def drop_tail(self, need: int) -> int:
        """Remove batches from the tail (newest first, never the head) until ``need`` bytes are
        gone — load shedding; returns the rows dropped."""
        dropped = freed = 0
        while freed < need and len(self._batches) > 1:
            item, n, size, low, _ = self._batches.pop()
            if isinstance(item, _Spilled):
                item.drop()
                self.spilled_bytes -= size
                self.spilled_batches -= 1
            else:
                freed += size
            self.rows -= n
            self.nbytes -= size
            dropped += n
            if self._oldest is not None and low <= self._oldest:
                self._oldest = None
        return dropped

    def _load_head(self) -> pa.RecordBatch:
        entry = self._batches[0]
        item = entry[0]
        if isinstance(item, _Spilled):
            entry[0] = item.read()
            item.drop()
            self.spilled_bytes -= entry[2]
            self.spilled_batches -= 1
        return entry[0]

    def __len__(self) -> int:
        return self.rows

    def __bool__(self) -> bool:
        return self.rows > 0

    def push(self, batch: pa.RecordBatch, oldest: float | None = None, ordered: bool = False) -> None:
        """Append ``batch``; ``ordered`` promises its arrival column does not decrease, so the
        first row is the oldest (saves a scan per batch and per split)."""
        n = batch.num_rows
        if n == 0:
            return
        if oldest is None:
            arrivals = batch.column(ARRIVAL)
            oldest = float(arrivals[0].as_py() if ordered else pc.min(arrivals).as_py())
        # Buffer sizes, not RecordBatch.nbytes: 40× cheaper, and a slice keeps its whole
        # buffers alive anyway. A split divides the size pro rata.
        size = batch.get_total_buffer_size()
        self._batches.append([batch, n, size, oldest, ordered])
        self.rows += n
        self.nbytes += size
        if self._oldest is None:
            # None means "not known" once a take() has removed the oldest row: only a queue that
            # was empty may take this batch's time without a scan (see ``oldest``).
            if len(self._batches) == 1:
                self._oldest = oldest
        elif oldest < self._oldest:
            self._oldest = oldest

    @property
    def oldest(self) -> float | None:
        """Arrival time of the oldest row waiting (rows need not be sorted)."""
        if self._oldest is None and self._batches:
            self._oldest = min(e[3] for e in self._batches)
        return self._oldest

    @property
    def head_arrival(self) -> float | None:
        """Arrival time of the row at the front of the queue."""
        if not self._batches:
            return None
        return float(self._load_head().column(ARRIVAL)[0].as_py())

    def rows_through(self, k: int) -> int:
        """Rows from the front up to the end of the batch holding row ``k`` (``k`` rounded up
        to whole batches)."""
        total = 0
        for e in self._batches:
            total += e[1]
            if total >= k:
                return total
        return total

    def _pop_entry(self) -> pa.RecordBatch:
        self._load_head()
        batch, n, size, low, _ = self._batches.popleft()
        self.rows -= n
        self.nbytes -= size
        if self._oldest is not None and low <= self._oldest:
            self._oldest = None  # recomputed on demand
        return batch

    def _split_head(self, k: int) -> pa.RecordBatch:
        self._load_head()
        entry = self._batches[0]
        batch, n, size = entry[0], entry[1], entry[2]
        front, rest = batch.slice(0, k), batch.slice(k)
        rest_size = size * (n - k) // n
        entry[0], entry[1], entry[2] = rest, n - k, rest_size
        arrivals = rest.column(ARRIVAL)
        entry[3] = float(arrivals[0].as_py() if entry[4] else pc.min(arrivals).as_py())
        self.rows -= k
        self.nbytes -= size - rest_size
        self._oldest = None
        return front

    def take(self, limit: int) -> list[pa.RecordBatch]:
        """Remove and return up to ``limit`` rows from the front (the head batch is sliced)."""
        out: list[pa.RecordBatch] = []
        left = limit
        while left > 0 and self._batches:
            n = self._batches[0][1]
            if n <= left:
                out.append(self._pop_entry())
                left -= n
            else:
                out.append(self._split_head(left))
                left = 0
        return out

    def put_back(self, batches: list[pa.RecordBatch], nbytes: int) -> None:
        """Return rows a :meth:`take` removed (``batches``, which accounted for ``nbytes``) to the
        front, in their order: a run that failed gives its input back, so nothing queued is lost."""
        batches = [b for b in batches if b.num_rows]
        total = sum(b.num_rows for b in batches)
        left = nbytes
        for i, b in enumerate(reversed(batches)):
            size = left if i == len(batches) - 1 else nbytes * b.num_rows // total
            left -= size
            self._batches.appendleft([b, b.num_rows, size, float(pc.min(b.column(ARRIVAL)).as_py()), False])
            self.rows += b.num_rows
            self.nbytes += size
        self._oldest = None

    def take_before(self, bound: float, inclusive: bool, limit: int) -> list[pa.RecordBatch]:
        """Remove up to ``limit`` rows from the front while their arrival is < ``bound`` (<= when
        ``inclusive``); the join's merge of its inputs in arrival order."""
        out: list[pa.RecordBatch] = []
        left = limit
        side = "right" if inclusive else "left"
        while left > 0 and self._batches:
            batch, n = self._load_head(), self._batches[0][1]
            k = int(np.searchsorted(_arrivals(batch), bound, side=side))
            k = min(k, left)
            if k == 0:
                break
            if k == n:
                out.append(self._pop_entry())
            else:
                out.append(self._split_head(k))
                break
            left -= k
        return out

    def clear(self) -> list[pa.RecordBatch]:
        out = [_materialise(e) for e in self._batches]
        for e in self._batches:
            if isinstance(e[0], _Spilled):
                e[0].drop()
        self.spilled_bytes = self.spilled_batches = 0
        self._batches.clear()
        self.rows = 0
        self.nbytes = 0
        self._oldest = None
        return out

    # -- checkpoints ---------------------------------------------------------------------------
    def to_ipc(self) -> bytes:
        """The queued rows as Arrow IPC stream bytes."""
        sink = io.BytesIO()
        with pa.ipc.new_stream(sink, self.schema) as writer:
            for e in self._batches:
                writer.write_batch(_materialise(e))
        return sink.getvalue()

    @classmethod
    def from_ipc(cls, data: bytes) -> BatchQueue:
        reader = pa.ipc.open_stream(data)
        q = cls(reader.schema)
        for batch in reader:
            q.push(batch)
        return q

    def parts(self) -> list[pa.RecordBatch | Path]:
        """The queued batches in order, a spilled one as the path of its file (not read back)."""
        return [e[0].path if isinstance(e[0], _Spilled) else e[0] for e in self._batches]

    def batches(self) -> Iterable[pa.RecordBatch]:
        """The queued batches in order (spilled ones are read from disk, and stay spilled)."""
        return (_materialise(e) for e in self._batches)
