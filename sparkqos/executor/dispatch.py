"""What runs next, for how long: the executor's dispatch room.

:class:`Dispatcher` asks the strategy for units (or serves named operators directly), sizes each
operator run to fig 4.1's workload rule, to what is left of the time budget and, with
``overhead_share``, to at least the rows that make a run worth its fixed cost
(:mod:`sparkqos.executor.runcost`), runs it and books it in the statistics. It never routes a row
itself: every run's output goes to :meth:`~sparkqos.executor.dataflow.Dataflow.deliver`. With
cluster threads (:mod:`sparkqos.executor.clusters`) each thread runs this dispatcher's
:meth:`~Dispatcher.turns`.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterable

import pyarrow as pa

from sparkqos.errors import ArgumentError, SchedulerError, check_number
from sparkqos.executor.clusters import AGAIN, ClusterThreads, Crew, Pick
from sparkqos.executor.dataflow import Dataflow
from sparkqos.executor.operators import PhysicalOperator
from sparkqos.executor.options import ExecutorOptions
from sparkqos.executor.queues import workload
from sparkqos.executor.report import RunReport
from sparkqos.executor.runcost import RunCost
from sparkqos.executor.slices import MIN_SLICED_S, SlicePool
from sparkqos.executor.state import ExecutorState
from sparkqos.executor.threadsafe import unsafe_udfs
from sparkqos.model.state import Unit
from sparkqos.schedulers.base import Scheduler

__all__ = ["Budget", "Dispatcher"]


class Budget:
    """The limits of one :meth:`Dispatcher.run`: it started at ``start`` and stops after
    ``budget_s`` seconds, ``max_units`` units or once ``stop`` is set (None: no such limit)."""

    __slots__ = ("start", "budget_s", "max_units", "stop", "report")

    def __init__(
        self,
        start: float,
        budget_s: float | None,
        max_units: int | None,
        stop: threading.Event | None,
        report: RunReport,
    ):
        self.start, self.budget_s, self.max_units, self.stop, self.report = start, budget_s, max_units, stop, report


class Dispatcher:
    """Runs ``scheduler``'s units over ``state``, delivering through ``dataflow``, under
    ``options`` (the workload rule, whole batches, statistics window, starvation limit, cluster
    threads)."""

    def __init__(
        self,
        dataflow: Dataflow,
        state: ExecutorState,
        scheduler: Scheduler,
        clock,
        options: ExecutorOptions,
        cluster_threads: int,
    ):
        self.dataflow = dataflow
        self.plan = dataflow.plan
        self.state = state
        self.scheduler = scheduler
        self.clock = clock
        self.ratio, self.threshold = options.ratio, options.threshold
        self.whole_batches = options.whole_batches
        self.stats_period = options.stats_period
        self.starvation_limit = options.starvation_limit
        self.cluster_threads = cluster_threads
        self.ops: dict[str, PhysicalOperator] = dataflow.ops
        self._deliver = dataflow.deliver
        self._deadline: float | None = None  # end of the current run's budget (see _time_cap)
        self._lock = threading.RLock()
        self._threads: ClusterThreads | None = None
        if cluster_threads:
            self._threads = ClusterThreads(cluster_threads, self._lock)
            state.locks = {name: threading.RLock() for name in self.plan.names}
        self._next_window: float | None = None
        self.starved_picks = 0
        #: Where a row-wise operator's run is computed slice by slice (``options.threads`` > 1).
        self.slices = SlicePool(options.threads) if (options.threads or 1) > 1 else None
        #: The operators whose runs may be cut into slices: row-wise, and every UDF they call
        #: declared thread-safe (:func:`~sparkqos.executor.threadsafe.thread_safe`).
        self.sliceable = (
            frozenset(n for n, op in self.ops.items() if op.row_wise and not unsafe_udfs(op)) if self.slices else frozenset()
        )
        #: The fixed cost of a run and the floor of a run's size it gives (``options.overhead_share``).
        self.run_cost = RunCost(options.overhead_share) if options.overhead_share else None
        self._kernel_s = 0.0  # time inside operator runs since the current unit's pick
        self._unit_runs = 0  # operator runs since the current unit's pick

    @property
    def stolen_units(self) -> int:
        """Units a cluster thread took from another thread's clusters (``cluster_threads``)."""
        return 0 if self._threads is None else self._threads.stolen_units

    def close(self) -> None:
        """Stop the cluster threads and the slices' threads."""
        if self._threads is not None:
            self._threads.close()
        if self.slices is not None:
            self.slices.close()

    # -- the loop ------------------------------------------------------------------------------------
    def run(self, budget_s: float | None = None, max_units: int | None = None, stop: threading.Event | None = None) -> RunReport:
        """See :meth:`sparkqos.executor.loop.Executor.run`."""
        start = self.clock()
        self._deadline = None if budget_s is None else start + budget_s
        self._open_window(start)
        report = RunReport()
        budget = Budget(start, budget_s, max_units, stop, report)
        helpers0 = self._helper_cpu()
        try:
            if self._threads is not None:
                self._threads.run(self, budget)
            else:
                cpu0 = time.thread_time()
                try:
                    self.turns(budget, self._serial_pick(report))
                finally:
                    report.cpu_s += time.thread_time() - cpu0
        finally:
            self._deadline = None
            report.cpu_s += self._helper_cpu() - helpers0
        report.seconds = self.clock() - start
        return report

    def _helper_cpu(self) -> float:
        """CPU seconds the slices' threads spent so far."""
        return 0.0 if self.slices is None else self.slices.cpu_s

    def _open_window(self, now: float) -> None:
        """Open the first statistics window at the first run."""
        if self._next_window is None:
            self._next_window = now + self.stats_period
            self.state.stats.close_window(now, self.state.total_queued)

    def serve(self, operators: Iterable[str], budget_s: float | None = None) -> RunReport:
        """See :meth:`sparkqos.executor.loop.Executor.serve`."""
        names = list(dict.fromkeys(operators))
        unknown = [n for n in names if n not in self.ops]
        if unknown:
            expected = f"operators of the plan ({', '.join(self.plan.names)})"
            raise ArgumentError(f"serve: unknown operator(s) {unknown}", parameter="operators", value=unknown, expected=expected)
        check_number("budget_s", budget_s, low=0, none_ok=True, where="serve: ")
        names = self.dataflow.bottom_up(names)
        state, clock = self.state, self.clock
        start = clock()
        self._open_window(start)
        self._deadline = None if budget_s is None else start + budget_s
        report = RunReport()
        first = True  # the first round runs whatever the budget: every call makes progress
        cpu0, helpers0 = time.thread_time(), self._helper_cpu()
        try:
            while True:
                before = report.rows_consumed
                for name in names:
                    if not first and self._deadline is not None and clock() >= self._deadline:
                        break
                    if state.runnable(name):
                        report.units += 1
                        self._run_op(name, self._limit(name, max(1.0, state.queued(name))), report)
                else:
                    first = False
                    if report.rows_consumed > before:
                        continue  # a full round that moved rows: the next one may move more
                break
        finally:
            self._deadline = None
            report.cpu_s = time.thread_time() - cpu0 + self._helper_cpu() - helpers0
        report.idle = not any(state.runnable(n) for n in names)
        report.seconds = clock() - start
        return report

    def turns(self, budget: Budget, pick: Pick, crew: Crew | None = None) -> None:
        """The run loop, in this thread or in each cluster thread (``crew``: what those share).

        Each turn stops once ``budget`` is spent, closes the statistics window when due, then
        ``pick()`` gives the unit to run, None to stop, or
        :data:`~sparkqos.executor.clusters.AGAIN` to take another turn. In cluster threads the
        turn holds the executor's lock, which is released while the unit runs. Serving in this
        thread, each turn hands the previous unit's time outside its operator runs to
        :attr:`run_cost` (in cluster threads a unit's time includes waiting for the lock, so they
        size runs by the estimate as it stands)."""
        clock, state = self.clock, self.state
        start, budget_s, max_units, stop, report = budget.start, budget.budget_s, budget.max_units, budget.stop, budget.report
        lock = None if crew is None else crew.cond  # no null context when serial: this runs once per pick
        run_cost = self.run_cost if crew is None else None
        began = None  # when the unit before this turn was picked (run_cost)
        while True:
            if lock is not None:
                lock.acquire()
            try:
                if crew is not None and crew.stop:
                    return
                if (max_units is not None and report.units >= max_units) or (stop is not None and stop.is_set()):
                    spent = True
                else:
                    now = clock()
                    spent = budget_s is not None and now - start >= budget_s
                    if run_cost is not None:
                        if began is not None:
                            run_cost.observe(now - began, self._kernel_s, self._unit_runs)
                        began, self._kernel_s, self._unit_runs = now, 0.0, 0
                if spent:
                    if crew is not None:
                        crew.halt()
                    return
                if now >= self._next_window:
                    state.stats.close_window(now, state.total_queued)
                    self._next_window = now + self.stats_period
                unit = pick()
                if unit is None:
                    return
                if unit is AGAIN:
                    continue
                report.units += 1
            finally:
                if lock is not None:
                    lock.release()
            if crew is None:
                self._dispatch(unit, report)
            else:
                try:
                    self._dispatch(unit, report)
                finally:
                    crew.done()

    def _serial_pick(self, report: RunReport) -> Pick:
        """The serial way to pick: the strategy's next unit; None (and ``report.idle``) when
        nothing can run; :data:`AGAIN` after a unit with no work (``starvation_limit`` of those
        in a row raise)."""
        state, sched = self.state, self.scheduler
        starved = 0

        def pick() -> Unit | object | None:
            nonlocal starved
            unit = sched.pick(state)
            if unit is None:
                if state.any_runnable:
                    raise SchedulerError(f"{sched!r} returned no unit while {state.runnable_operators()} can run")
                report.idle = True
                return None
            if not state.runnable(unit.head):
                starved += 1
                self.starved_picks += 1
                if starved >= self.starvation_limit:
                    raise SchedulerError(f"{sched!r} picked units with no work {starved} times in a row")
                return AGAIN
            starved = 0
            return unit

        return pick

    # -- sizing a run ---------------------------------------------------------------------------------
    def _floor(self, op: str) -> int:
        """The fewest rows a run of ``op`` should take for its work to outweigh the fixed cost of a
        run (:attr:`run_cost`; 0 without it)."""
        return 0 if self.run_cost is None else self.run_cost.min_rows(self.state.cost(op))

    def _limit(self, op: str, quota_tuples: float | None, time_left: float | None = None) -> int:
        ports = self.state.ports[op]
        n = ports[0].rows if len(ports) == 1 else int(self.state.queued(op))
        if quota_tuples is not None:
            a = max(1, min(n, int(math.ceil(quota_tuples))))
        else:
            a = workload(n, self.ratio, self.threshold)
            if self.whole_batches and a < n and len(ports) == 1:
                a = ports[0].rows_through(a)
        if self.run_cost is not None:
            a = max(a, min(n, self._floor(op)))
        return self._time_cap(op, a, time_left)

    def _time_cap(self, op: str, rows: int, time_left: float | None) -> int:
        """At most the rows the operator's measured cost lets finish in what is left of the
        trigger's budget (and of the unit's time quota): one run cannot be interrupted, and a
        whole queued batch of a costly operator could otherwise overrun the budget many times
        over (a burst batch of 4,000 rows at 150 µs a row is 0.6 s). Never below the workload
        threshold, so every pick still makes progress, nor below the run's floor
        (:meth:`_floor`), so a run cut short by the budget still outweighs its fixed cost."""
        if self._deadline is not None:
            left = self._deadline - self.clock()
            time_left = left if time_left is None else min(time_left, left)
        least = self.threshold if self.run_cost is None else max(self.threshold, self._floor(op))
        if time_left is None or rows <= least:
            return rows
        c = self.state.cost(op)
        if not c > 0:
            return rows
        return max(least, min(rows, int(max(time_left, 0.0) / c)))

    # -- running a unit ------------------------------------------------------------------------------
    def _dispatch(self, unit: Unit, report: RunReport) -> None:
        state = self.state
        ops = unit.operators
        if unit.kind == "operator" or len(ops) == 1:
            self._share(ops[0], unit.quota_tuples, unit.quota_time, report)
        elif unit.carry:
            produced = self._share(ops[0], unit.quota_tuples, unit.quota_time, report)
            for op in ops[1:]:
                if produced <= 0 or not state.runnable(op):
                    break
                # What the one below produced, within the budget (the rest waits in op's queue);
                # at least the run's floor of what op holds, older rows first.
                limit = produced if self.run_cost is None else max(produced, self._floor(op))
                produced = self._run_op(op, self._time_cap(op, limit, None), report)
        else:
            for op in ops:
                if state.runnable(op):
                    self._share(op, unit.quota_tuples, unit.quota_time, report)

    def _share(self, op: str, quota_tuples: float | None, quota_time: float | None, report: RunReport) -> int:
        """One operator's share of a unit: one run under the workload rule, or runs until
        ``quota_time`` is used up. Returns the rows produced."""
        if quota_time is None:
            return self._run_op(op, self._limit(op, quota_tuples), report)
        produced = 0
        start = self.clock()
        left = None if quota_tuples is None else int(math.ceil(quota_tuples))
        while self.state.runnable(op) and (left is None or left > 0):
            limit = self._limit(op, left, quota_time - (self.clock() - start))
            before = report.rows_consumed
            produced += self._run_op(op, limit, report)
            if left is not None:
                left -= report.rows_consumed - before
            if self.clock() - start >= quota_time:
                break
        return produced

    def _run_op(self, name: str, limit: int, report: RunReport) -> int:
        """Run operator ``name`` once on up to ``limit`` rows and book it; returns the rows produced."""
        if self.cluster_threads:
            return self._run_op_locked(name, limit, report)
        state = self.state
        final = state.final(name)
        consumed, out, t0, t1, rows_gone, bytes_gone = self._execute(name, limit, final)
        state.after_run(name, rows_gone, bytes_gone, delta=True)
        return self._book(name, consumed, out, t0, t1, report)

    def _execute(self, name: str, limit: int, final: bool) -> tuple[int, list[pa.RecordBatch], float, float, int, int]:
        """The run itself: (rows consumed, output, start and end time, rows and bytes it took
        off its queues)."""
        ports = self.state.ports[name]
        rows_before = sum(q.rows for q in ports)
        bytes_before = sum(q.nbytes for q in ports)
        op = self.ops[name]
        t0 = self.clock()
        if name in self.sliceable and self.state.cost(name) * min(limit, rows_before) >= MIN_SLICED_S:
            consumed, out = op.run(ports, limit, final, pool=self.slices)
        else:
            consumed, out = op.run(ports, limit, final)
        t1 = self.clock()
        return (consumed, out, t0, t1, rows_before - sum(q.rows for q in ports), bytes_before - sum(q.nbytes for q in ports))

    def _book(self, name: str, consumed: int, out: list[pa.RecordBatch], t0: float, t1: float, report: RunReport) -> int:
        """Record one finished run of ``name`` and pass its output on; returns the rows produced."""
        produced = sum(b.num_rows for b in out)
        self.state.record_run(name, consumed, produced, t1 - t0)
        self._kernel_s += t1 - t0
        self._unit_runs += 1
        report.operator_runs += 1
        report.rows_consumed += consumed
        self._deliver(name, out, t1)
        return produced

    def _run_op_locked(self, name: str, limit: int, report: RunReport) -> int:
        """:meth:`_run_op` for cluster threads (the locking: :mod:`sparkqos.executor.clusters`)."""
        state = self.state
        with self._lock:
            final = state.final(name)
            # While it runs its queues change outside the executor's lock: strategies must not
            # offer (or rank) it meanwhile; after_run makes it runnable again if it still is.
            state.mark_running(name)
        with state.locks[name]:
            consumed, out, t0, t1, rows_gone, bytes_gone = self._execute(name, limit, final)
        with self._lock:
            # Deliveries into this operator's queues may have come in since: book only what it took.
            state.after_run(name, rows_gone, bytes_gone, delta=True)
            if state.runnable(name):
                state.notify(name)  # back into its cluster's heap
            return self._book(name, consumed, out, t0, t1, report)
