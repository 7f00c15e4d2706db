"""What an operator run costs beyond its rows, and the smallest run worth making:
:class:`RunCost`, the executor's cost-aware quantum.

Every operator run pays a fixed cost whatever its size: the strategy's pick, the statistics and
the runnable set updated after it, the output pushed into the next queue (the dispatch and queue
bookkeeping, Python holding the GIL), and the queue's take and the Arrow slicing and concatenation
around the kernel. The papers' strategies take switching between operators to be free, and the
simulator models it so; here it is not. A strategy that serves many small runs (path capacity's
carry chains cut at a slice's end, round robin's short quanta, the workload rule's 50 rows of a
cheap operator) can spend a large share of the processor on it: about 0.3 ms a run on the 2-core
development VM, more on a slower or a busier one, against a few milliseconds of rows.

:class:`RunCost` measures that fixed cost and gives, per operator, the fewest rows whose work
makes it at most ``share`` of the run (work ≥ fixed cost / share). The dispatcher
(:mod:`sparkqos.executor.dispatch`) never sizes a run below that floor when the rows are queued:
not to a slice's or a budget's end, not to a strategy's quota in tuples, not to what the operator
below just produced. It only makes runs larger, so the order the strategy chose stays the same.

The estimate has two parts. The queue and Arrow part is measured once per process, at the first
executor that asks (:func:`queue_cost_s`: the take, the concatenation and a filter of a few
rows, which happen inside a run's timing). The dispatch part is measured on every unit the executor serves in its own
thread: the unit's wall time less the time inside the operators' runs, per run, smoothed with
eq 3.1's weight so it follows the machine as it gets busier or quieter. Before the first unit
the queue part alone stands for the whole.

>>> cost = RunCost(0.05, queue_s=1e-4)
>>> cost.overhead_s  # before any unit: the queue part alone
0.0001
>>> cost.observe(unit_s=0.0105, kernel_s=0.0100, runs=1)  # 0.5 ms around one run
>>> round(cost.overhead_s * 1e3, 3)
0.6
>>> cost.min_rows(cost_s=1e-5)  # 0.6 ms / 5 % = 12 ms of work at 10 µs a row
1200
"""

from __future__ import annotations

import functools
import math
import time

import pyarrow as pa

from sparkqos.executor.queues import BatchQueue, stamp, with_internal
from sparkqos.model.stats import DEFAULT_WEIGHT, smooth

__all__ = ["MAX_FLOOR_S", "OVERHEAD_SHARE", "RunCost", "queue_cost_s"]

#: The streaming runner's ``ExecutorOptions.overhead_share``: a run's fixed cost at most 5 % of it.
OVERHEAD_SHARE = 0.05

#: The most work the floor asks of one run, seconds: one run is never interrupted (a pause of the
#: continuous worker waits for it), so on a very slow machine the share gives way before that.
MAX_FLOOR_S = 0.02


@functools.cache
def queue_cost_s() -> float:
    """The queue and Arrow part of a run's fixed cost on this machine, seconds: the fastest of
    five rounds of 50 takes of two queued two-row batches, their concatenation and a filter
    (what every run does to its input whatever its size). Measured once per process."""
    schema = with_internal(pa.schema([("v", pa.int64())]))
    batch = stamp(pa.record_batch({"v": pa.array([1, 2], pa.int64())}), 0.0, 0)
    mask = pa.array([True, False, True, False])
    queue = BatchQueue(schema)
    best = math.inf
    for _ in range(5):
        began = time.perf_counter()
        for _ in range(50):
            queue.push(batch)
            queue.push(batch)
            pa.concat_batches(queue.take(4)).filter(mask)
        best = min(best, (time.perf_counter() - began) / 50)
    return best


class RunCost:
    """The fixed cost of one operator run (:attr:`overhead_s`) and the floor of a run's size it
    gives (:meth:`min_rows`): at least ``share`` (0 < share < 1) of a run's time goes to its
    rows unless the floor would pass :data:`MAX_FLOOR_S`. ``queue_s``: the queue and Arrow part
    (default: :func:`queue_cost_s`, measured on this machine); ``w``: the smoothing weight of
    the dispatch part (eq 3.1)."""

    __slots__ = ("share", "queue_s", "dispatch_s", "w")

    def __init__(self, share: float, queue_s: float | None = None, w: float = DEFAULT_WEIGHT):
        self.share = float(share)
        self.queue_s = queue_cost_s() if queue_s is None else float(queue_s)
        self.dispatch_s: float | None = None  # smoothed; None until the first unit
        self.w = w

    def __repr__(self) -> str:
        return f"RunCost(share={self.share:g}, overhead_s={self.overhead_s:.3g})"

    @property
    def overhead_s(self) -> float:
        """The fixed cost of one run now, seconds (the queue part plus the smoothed dispatch part)."""
        return self.queue_s + (self.dispatch_s or 0.0)

    @property
    def floor_s(self) -> float:
        """The least work one run should do, seconds: :attr:`overhead_s` / ``share``, at most
        :data:`MAX_FLOOR_S`."""
        return min(self.overhead_s / self.share, MAX_FLOOR_S)

    def observe(self, unit_s: float, kernel_s: float, runs: int) -> None:
        """One unit took ``unit_s`` seconds from its pick to its last run's booking, ``kernel_s``
        of them inside its ``runs`` operator runs: the rest, per run, is the dispatch part."""
        if runs > 0 and unit_s >= kernel_s:
            self.dispatch_s = smooth(self.dispatch_s, (unit_s - kernel_s) / runs, self.w)

    def min_rows(self, cost_s: float) -> int:
        """The fewest rows of an operator costing ``cost_s`` seconds a row whose run does
        :attr:`floor_s` of work (0 when the cost is not known)."""
        if not cost_s > 0:
            return 0
        return math.ceil(self.floor_s / cost_s - 1e-9)  # not one more row for a rounding error
