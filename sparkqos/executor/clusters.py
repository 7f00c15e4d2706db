"""COS on threads (COS §4.2): each cluster of a :class:`~sparkqos.schedulers.base.ClusterScheduler`
served by its own thread of the executor.

With ``ExecutorOptions.cluster_threads`` > 0 the executor runs each cluster in its own thread (at
most that many threads; with more clusters, thread i serves clusters i, i + threads, …, in their
Chain order). A thread whose clusters have nothing runnable takes the next unit of another
thread's cluster rather than wait (counted in ``stolen_units``): COS's clusters are rarely equal
in work, and a thread that only waited for its own would idle while the other's clusters hold the
backlog. An operator never runs in two threads at once (a running operator is not runnable), so
stealing changes only which thread runs a unit, not the order within its cluster.

Locking: a thread picks a unit under the executor's lock, runs the operator holding only that
operator's lock (so a queue is never read and written at once: producers push into it, and
strategies scan it, under the same lock) and books the run under the executor's lock again. Lock
order is always executor lock then operator lock, and an operator's lock is never held while
waiting for the executor's. pyarrow's and numpy's kernels release the GIL, so clusters really
run side by side.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, Protocol

from sparkqos.errors import SchedulerError
from sparkqos.executor.report import RunReport
from sparkqos.executor.state import ExecutorState
from sparkqos.model.state import Unit
from sparkqos.schedulers.base import ClusterScheduler

__all__ = ["AGAIN", "ClusterThreads", "Crew", "Pick", "Turns"]

#: What a pick returns when it found no work yet: the run loop takes another turn.
AGAIN = object()

#: A way to pick: the next unit, None to stop, or :data:`AGAIN`.
Pick = Callable[[], "Unit | object | None"]


class Turns(Protocol):
    """What the cluster threads run: a dispatcher
    (:class:`~sparkqos.executor.dispatch.Dispatcher`) whose run loop each thread enters."""

    scheduler: Any
    state: ExecutorState
    starvation_limit: int

    def turns(self, budget: Any, pick: Pick, crew: Crew | None = None) -> None:
        """Take turns within ``budget`` (its ``report`` is the run's) until the loop stops."""


class Crew:
    """What the cluster threads of one run share; read and written under the executor's lock
    (``cond``)."""

    __slots__ = ("cond", "report", "busy", "stop", "stuck")

    def __init__(self, cond: threading.Condition, report: RunReport):
        self.cond = cond
        self.report = report
        self.busy = 0  # threads running a unit
        self.stop = False
        self.stuck = 0  # turns in a row with work queued and no cluster offering it

    def halt(self, idle: bool = False) -> None:
        """Stop every thread (the caller holds the lock)."""
        self.stop = True
        self.report.idle = self.report.idle or idle
        self.cond.notify_all()

    def done(self) -> None:
        """A thread finished its unit: the others may find work now."""
        with self.cond:
            self.busy -= 1
            self.cond.notify_all()


class ClusterThreads:
    """The cluster threads of one executor: ``threads`` at most, sharing the executor's ``lock``."""

    def __init__(self, threads: int, lock: threading.RLock):
        self.threads = threads
        self.lock = lock
        self._pool: ThreadPoolExecutor | None = None
        #: Units a thread took from another thread's clusters.
        self.stolen_units = 0

    def run(self, dispatcher: Turns, budget: Any) -> None:
        """One run of ``dispatcher`` within ``budget``: each thread takes its turns
        (:meth:`~sparkqos.executor.dispatch.Dispatcher.turns`) with its own way to pick, until the
        loop stops them all; the first error of a thread is raised here once every thread ended."""
        scheduler: ClusterScheduler = dispatcher.scheduler  # type: ignore[assignment]
        state, report = dispatcher.state, budget.report
        with self.lock:
            scheduler.pick_cluster(0, state)  # attaches: the clusters exist from here on
            n = max(1, min(len(scheduler.clusters), self.threads))
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="sparkqos-cluster")
        crew = Crew(threading.Condition(self.lock), report)
        picks = _ClusterPicks(scheduler, state, crew, n, dispatcher.starvation_limit * n, self)
        errors: list[BaseException] = []

        def thread(i: int) -> None:
            cpu0 = time.thread_time()
            try:
                dispatcher.turns(budget, partial(picks.pick, i), crew)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller below
                with crew.cond:
                    errors.append(exc)
                    crew.halt()
            finally:
                with crew.cond:
                    report.cpu_s += time.thread_time() - cpu0

        for f in [self._pool.submit(thread, i) for i in range(n)]:
            f.result()
        if errors:
            raise errors[0]

    def close(self) -> None:
        """Stop the threads."""
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None


class _ClusterPicks:
    """How the ``n`` threads of one run pick, each from its own clusters first (under the lock)."""

    def __init__(
        self, scheduler: ClusterScheduler, state: ExecutorState, crew: Crew, n: int, stuck_limit: int, owner: ClusterThreads
    ):
        self.scheduler, self.state, self.crew, self.n = scheduler, state, crew, n
        self.stuck_limit = stuck_limit
        self.owner = owner
        self.cursor = [0] * n  # each thread's round-robin position among its own clusters
        self.stolen = [0] * n  # ... and among the other threads' clusters

    def _first(self, i: int, clusters: list[int], cursors: list[int], runnable_only: bool) -> Unit | None:
        """The first unit of ``clusters`` (round robin from thread i's cursor; with
        ``runnable_only``, the first whose head can run), moving the cursor past it."""
        for step in range(len(clusters)):
            unit = self.scheduler.pick_cluster(clusters[(cursors[i] + step) % len(clusters)], self.state)
            if unit is not None and (not runnable_only or self.state.runnable(unit.head)):
                cursors[i] = (cursors[i] + step + 1) % len(clusters)
                return unit
        return None

    def pick(self, i: int) -> Unit | object | None:
        """Thread i's next unit: of its clusters i, i + n, ... (their number changes when the
        statistics move and COS re-clusters), round-robin among them; else the next runnable unit
        of another thread's clusters; else wait a little for another cluster's run to feed one."""
        sched, state, crew = self.scheduler, self.state, self.crew
        sched.pick_cluster(0, state)  # follows the statistics first if they moved
        count = len(sched.clusters)
        unit = self._first(i, list(range(i, count, self.n)), self.cursor, False)
        if unit is None or not state.runnable(unit.head):
            other = self._first(i, [k for k in range(count) if k % self.n != i], self.stolen, True)
            if other is not None:
                self.owner.stolen_units += 1
                unit = other
        if unit is not None and state.runnable(unit.head):
            crew.busy += 1
            crew.stuck = 0
            return unit
        if crew.busy == 0:
            if not state.any_runnable:
                crew.halt(idle=True)
                return None
            crew.stuck += 1
            if crew.stuck > self.stuck_limit:
                raise SchedulerError(f"{sched!r}: {state.runnable_operators()} can run but no cluster offers them")
        crew.cond.wait(0.01)  # another cluster's run may feed this one
        return AGAIN
