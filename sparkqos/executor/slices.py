"""A row-wise operator's run on several cores: :class:`SlicePool`.

The executor serves one unit at a time, and the operators that cost most per row are row-wise (a
pandas UDF scoring readings with numpy, a JSON encoding, an expression over strings): an
operator whose output for a batch is the concatenation of its outputs for that batch's slices
(:attr:`~sparkqos.executor.operators.base.PhysicalOperator.row_wise`). With
``ExecutorOptions.threads`` > 1 such a run, when its rows at the operator's measured cost per row
take at least :data:`MIN_SLICED_S`, is cut into that many slices (of :data:`MIN_SLICE_ROWS` rows at
least), evaluated at once — the
slices but the first on the pool's threads, the first on the thread that runs the unit — and the
outputs joined in slice order. The run stays one run: the same rows taken off the queue, one
output, booked once in the statistics, so the strategy's picks, the order of every output and
what a checkpoint holds are those of one thread. pyarrow's and numpy's kernels release the GIL,
so the slices really run side by side; pure-Python work (a row-at-a-time UDF) does not gain.

A UDF's function would so be called from two threads at once, as Spark calls it from two Python
workers at once but here sharing the function's closure: an operator calling a UDF is cut only
when each UDF it calls was declared :func:`~sparkqos.executor.threadsafe.thread_safe`
(``Dispatcher.sliceable``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa

__all__ = ["MIN_SLICED_S", "MIN_SLICE_ROWS", "SlicePool"]

#: Fewest rows per slice: below that a thread's hand-over costs more than the slice's work.
MIN_SLICE_ROWS = 2048
#: Least time a run is expected to take (its rows times the operator's measured cost per row)
#: for the executor to cut it into slices: waking a thread and waiting for it costs up to milliseconds
#: on a busy machine, more than a cheap filter's run gains.
MIN_SLICED_S = 0.02

Process = Callable[[pa.RecordBatch], "pa.RecordBatch | None"]


class SlicePool:
    """``threads`` threads for one run (the caller's and ``threads - 1`` of the pool's), started
    on first use. ``cpu_s`` adds up the CPU seconds the pool's threads spent on slices (the
    caller's own are in its ``time.thread_time``)."""

    def __init__(self, threads: int, min_slice_rows: int = MIN_SLICE_ROWS):
        self.threads = threads
        self.min_slice_rows = min_slice_rows
        self.cpu_s = 0.0
        self._cpu_lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    def slices(self, rows: int) -> int:
        """How many slices a run of ``rows`` rows is cut into."""
        return max(1, min(self.threads, rows // self.min_slice_rows))

    def map(self, process: Process, batch: pa.RecordBatch) -> pa.RecordBatch | None:
        """``process(batch)``, computed slice by slice at once and joined in order (the first
        error of any slice is raised once every slice has ended)."""
        k = self.slices(batch.num_rows)
        if k == 1:
            return process(batch)
        with self._cpu_lock:  # COS's cluster threads may cut runs at once
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self.threads - 1, thread_name_prefix="sparkqos-slice")
        step = -(-batch.num_rows // k)
        futures = [self._pool.submit(self._timed, process, batch.slice(i * step, step)) for i in range(1, k)]
        outputs: list[pa.RecordBatch | None] = []
        error: BaseException | None = None
        try:
            outputs.append(process(batch.slice(0, step)))
        except BaseException as exc:  # noqa: BLE001 - raised below, once the other slices ended
            error = exc
        for f in futures:
            try:
                outputs.append(f.result())
            except BaseException as exc:  # noqa: BLE001
                error = error or exc
        if error is not None:
            raise error
        kept = [b for b in outputs if b is not None and b.num_rows]
        if not kept:
            return outputs[0]
        return kept[0] if len(kept) == 1 else pa.concat_batches(kept)

    def _timed(self, process: Process, batch: pa.RecordBatch) -> pa.RecordBatch | None:
        cpu0 = time.thread_time()
        try:
            return process(batch)
        finally:
            spent = time.thread_time() - cpu0
            with self._cpu_lock:
                self.cpu_s += spent

    def close(self) -> None:
        """Stop the pool's threads (a later run starts them again)."""
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
