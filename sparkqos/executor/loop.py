"""The executor: runs a compiled plan's operators on Arrow batches under any strategy.

Thesis §3.2.4 (execution engine) and §3.2.5/§3.3 (statistics gatherer); workload per run from
fig 4.1. The loop asks the strategy for a unit, runs it, updates the statistics and repeats until
the time budget is spent or nothing can run. :class:`ExecutorState` is the strategies' read-only
view (the :class:`~sparkqos.schedulers.base.SchedulerState` contract) over the real queues.

>>> import pyarrow as pa
>>> from sparkqos.executor.expressions import col
>>> from sparkqos.compile import QuerySet
>>> from sparkqos.schedulers import get
>>> qs = QuerySet()
>>> s = qs.stream("s", {"v": pa.int64()})
>>> s.where(col("v") > 1).select((col("v") * 10).alias("w")).sink("q")
>>> ticks = iter(range(1_000_000))
>>> ex = Executor(qs.build(), get("chain"), clock=lambda: float(next(ticks)))
>>> ex.ingest("s", pa.record_batch({"v": [1, 2, 3]}))
3
>>> _ = ex.run()
>>> ex.result("q").column("w").to_pylist()
[20, 30]
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkqos.errors import ArgumentError, ExecutorOptionError, SchedulerError, SchemaMismatch, check_number
from sparkqos.executor.clusters import AGAIN, ClusterThreads, Crew, Pick
from sparkqos.executor.expressions import ARRIVAL, INTERNAL
from sparkqos.executor.operators import PhysicalOperator
from sparkqos.executor.operators.base import TriggerEndOperator
from sparkqos.executor.options import ExecutorOptions
from sparkqos.executor.plan import CompiledPlan
from sparkqos.executor.queues import BatchQueue, stamp, workload
from sparkqos.executor.report import RunReport
from sparkqos.executor.state import ExecutorState
from sparkqos.model.state import Unit
from sparkqos.model.stats import StatisticsGatherer
from sparkqos.schedulers.base import ClusterScheduler, Scheduler

EMIT = "__emit"


class Executor:
    """Runs ``compiled`` under ``scheduler`` (any registered strategy, unchanged).

    ``clock`` gives the time in seconds (``time.monotonic``; inject a fake clock for
    deterministic tests): arrival stamps, emit times, operator costs and budgets use it.
    ``options`` (or its fields as keywords) are the
    :class:`~sparkqos.executor.options.ExecutorOptions`: fig 4.1's workload rule, whole
    batches, statistics, starvation, overload and cluster threads.

    Unit kinds: ``operator`` runs one operator for its quota; ``path`` / ``segment`` run each
    operator once bottom-up, or with ``carry`` feed each operator exactly what the one below
    produced. ``cluster`` units run like a path, one operator after the other in this thread.

    ``cluster_threads`` > 0 (a :class:`~sparkqos.schedulers.base.ClusterScheduler`, i.e. COS
    §4.2) runs each cluster in its own thread instead (:mod:`sparkqos.executor.clusters`).

    Overload: with ``memory_limit_bytes`` the bytes queued in memory stay under the
    limit — the newest batches of the fullest queues spill to Arrow IPC files in ``spill_dir``
    (default: a temporary folder) and are read back in order when they reach the head of their
    queue; with ``shed=True`` they are dropped instead and counted per query in
    ``state.shed_rows``. Nothing is dropped unless ``shed`` is set.
    """

    def __init__(
        self,
        compiled: CompiledPlan,
        scheduler: Scheduler | str,
        clock: Callable[[], float] = time.monotonic,
        options: ExecutorOptions | None = None,
        **option_values: Any,
    ):
        if isinstance(scheduler, str):
            from sparkqos import schedulers  # a registry name: its default parameters

            scheduler = schedulers.get(scheduler)
        if not isinstance(scheduler, Scheduler):
            expected = "a Scheduler or a registered strategy name"
            raise ArgumentError(
                f"scheduler must be {expected}, got {scheduler!r}", parameter="scheduler", value=scheduler, expected=expected
            )
        options = ExecutorOptions.of(options, **option_values) if option_values or options is None else options
        cluster_threads = options.cluster_threads or 0
        if cluster_threads and not isinstance(scheduler, ClusterScheduler):
            expected = "a strategy with clusters (cos)"
            raise ExecutorOptionError(
                f"cluster_threads needs {expected}, got {scheduler!r}", parameter="scheduler", value=scheduler, expected=expected
            )
        self.options = options
        self.compiled = compiled
        self.plan = compiled.plan
        self.scheduler = scheduler
        self.clock = clock
        self.ratio, self.threshold = options.ratio, options.threshold
        self.whole_batches = options.whole_batches
        self.stats_period = options.stats_period
        self.starvation_limit = options.starvation_limit
        self.state = ExecutorState(
            compiled, clock, options.w, options.tolerance, options.memory_limit_bytes, options.spill_dir, options.shed
        )
        self.cluster_threads = cluster_threads
        self._deadline: float | None = None  # end of the current run's budget (see _time_cap)
        self._lock = threading.RLock()
        self._threads: ClusterThreads | None = None
        if cluster_threads:
            self._threads = ClusterThreads(cluster_threads, self._lock)
            self.state.locks = {name: threading.RLock() for name in self.plan.names}
        self._ops: dict[str, PhysicalOperator] = compiled.operators
        self._targets: dict[str, list[tuple[str, int]]] = {s: [] for s in self.plan.streams}
        self._next: dict[str, tuple[str, int] | None] = {}
        for op in self.plan:
            for port, src in enumerate(op.inputs):
                if src in self._targets:
                    self._targets[src].append((op.name, port))
            consumer = self.plan.consumer(op.name)
            self._next[op.name] = None if consumer is None else (consumer, self.plan[consumer].inputs.index(op.name))
        self._query = {op.name: self.plan.query_of(op.name) for op in self.plan}
        #: Operators whose output is due at each trigger's end, bottom-up (see end_trigger).
        self._trigger_end = [n for n in self._bottom_up(self.plan.names) if isinstance(self._ops[n], TriggerEndOperator)]
        # Streams arrive in order; order-preserving operators over ordered inputs stay ordered.
        self._ordered: dict[str, bool] = {}
        for name in self.plan.names:
            self._ordered_output(name)
        self._seq = {s: 0 for s in self.plan.streams}
        self._outputs: dict[str, list[tuple[pa.RecordBatch, float]]] = {q: [] for q in compiled.roots}
        self._next_window: float | None = None
        self.starved_picks = 0

    @property
    def stolen_units(self) -> int:
        """Units a cluster thread took from another thread's clusters (``cluster_threads``)."""
        return 0 if self._threads is None else self._threads.stolen_units

    def _ordered_output(self, name: str) -> bool:
        if name not in self._ordered:
            op = self._ops[name]
            self._ordered[name] = op.preserves_order and all(
                i in self._targets or self._ordered_output(i) for i in self.plan[name].inputs
            )
        return self._ordered[name]

    # -- input -------------------------------------------------------------------------------------
    def _check_schema(self, stream: str, batch: pa.RecordBatch) -> pa.RecordBatch:
        expected = self.compiled.sources[stream]
        if isinstance(batch, pa.Table):
            batch = (
                batch.combine_chunks().to_batches()[0] if batch.num_rows else pa.RecordBatch.from_pylist([], schema=batch.schema)
            )
        if not isinstance(batch, pa.RecordBatch):
            raise SchemaMismatch(f"stream {stream!r} takes pyarrow RecordBatches, got {type(batch).__name__}")
        for field in expected:
            idx = batch.schema.get_field_index(field.name)
            if idx < 0:
                raise SchemaMismatch(
                    f"stream {stream!r}: the batch has no column {field.name!r} ({field.type}); it has {batch.schema.names}"
                )
            got = batch.schema.field(idx).type
            if got != field.type:
                raise SchemaMismatch(f"stream {stream!r}: column {field.name!r} is {got}, expected {field.type}")
        extra = [n for n in batch.schema.names if expected.get_field_index(n) < 0]
        if extra:
            raise SchemaMismatch(f"stream {stream!r}: unexpected column(s) {extra}; the stream has {expected.names}")
        if batch.schema.names != expected.names:
            batch = batch.select(expected.names)
        return batch

    def ingest(self, stream: str, batch: pa.RecordBatch | pa.Table, arrival: float | np.ndarray | None = None) -> int:
        """Queue ``batch`` for every operator reading ``stream`` (each query its own copy),
        stamped with ``arrival``: one time for the batch (default: now) or an array with one per
        row (e.g. the source's event timestamps). A batch whose schema does not match, or
        arrivals that are not finite numbers, raise and change nothing."""
        if stream not in self._targets:
            raise SchemaMismatch(f"unknown stream {stream!r}; the plan reads {list(self.plan.streams)}")
        if self.state.finished:
            raise SchedulerError(f"stream {stream!r}: input arrived after finish()")
        batch = self._check_schema(stream, batch)
        n = batch.num_rows
        if n == 0:
            return 0
        if arrival is not None and np.ndim(arrival) == 1:
            t = np.asarray(arrival, dtype=np.float64)
            if t.shape != (n,) or not np.all(np.isfinite(t)):
                raise SchemaMismatch(
                    f"stream {stream!r}: need {n} finite arrival times, got "
                    f"{t.shape[0]} with {int(np.sum(~np.isfinite(t)))} not finite"
                )
            oldest, ordered = float(t.min()), bool(np.all(t[1:] >= t[:-1]))
        else:
            t = self.clock() if arrival is None else float(arrival)
            if not math.isfinite(t):
                raise SchemaMismatch(f"stream {stream!r}: arrival time must be finite, got {t!r}")
            oldest, ordered = t, True
        stamped = stamp(batch, t, self._seq[stream])
        self._seq[stream] += n
        for op, port in self._targets[stream]:
            self.state.enqueue(op, port, stamped, oldest, ordered)
            self.state.record_input(n)
        return n

    def next_seq(self, stream: str) -> int:
        """The sequence number the next row of ``stream`` gets (rows so far)."""
        return self._seq[stream]

    # -- the loop ------------------------------------------------------------------------------------
    def run(self, budget_s: float | None = None, max_units: int | None = None, stop: threading.Event | None = None) -> RunReport:
        """Serve units the strategy picks until ``budget_s`` seconds pass, ``max_units`` units ran,
        ``stop`` is set (checked between units, never during one: another thread pauses the run
        this way at a safe point), or nothing can run. With a budget, no operator run is sized
        beyond what its measured cost fits in the time left (the workload threshold aside), so
        one run cannot overrun the budget by much."""
        clock = self.clock
        start = clock()
        self._deadline = None if budget_s is None else start + budget_s
        self._open_window(start)
        report = RunReport()
        try:
            if self._threads is not None:
                self._threads.run(
                    self.scheduler,
                    self.state,
                    report,
                    self.starvation_limit,
                    lambda pick, crew: self._turns(start, budget_s, max_units, report, pick, crew, stop),
                )
            else:
                cpu0 = time.thread_time()
                try:
                    self._turns(start, budget_s, max_units, report, self._serial_pick(report), stop=stop)
                finally:
                    report.cpu_s += time.thread_time() - cpu0
        finally:
            self._deadline = None
        report.seconds = clock() - start
        return report

    def _open_window(self, now: float) -> None:
        """Open the first statistics window at the first run."""
        if self._next_window is None:
            self._next_window = now + self.stats_period
            self.state.stats.close_window(now, self.state.total_queued)

    def serve(self, operators: Iterable[str], budget_s: float | None = None) -> RunReport:
        """Serve ``operators`` directly, without asking the strategy: round after round, each
        runnable one (upstream first) runs on everything queued for it, until none of them can run,
        a round makes no progress or ``budget_s`` passes (runs are capped to the time left, as in
        :meth:`run`, but the first round always runs, so every call makes progress). A class
        priority honoured above every strategy is served this way (the continuous trigger loop
        serves its top class at once). Strategies see the queues change through their event log,
        as after their own picks."""
        names = list(dict.fromkeys(operators))
        unknown = [n for n in names if n not in self._ops]
        if unknown:
            expected = f"operators of the plan ({', '.join(self.plan.names)})"
            raise ArgumentError(f"serve: unknown operator(s) {unknown}", parameter="operators", value=unknown, expected=expected)
        check_number("budget_s", budget_s, low=0, none_ok=True, where="serve: ")
        names = self._bottom_up(names)
        state, clock = self.state, self.clock
        start = clock()
        self._open_window(start)
        self._deadline = None if budget_s is None else start + budget_s
        report = RunReport()
        first = True  # the first round runs whatever the budget: every call makes progress
        cpu0 = time.thread_time()
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
            report.cpu_s = time.thread_time() - cpu0
        report.idle = not any(state.runnable(n) for n in names)
        report.seconds = clock() - start
        return report

    def _turns(
        self,
        start: float,
        budget_s: float | None,
        max_units: int | None,
        report: RunReport,
        pick: Pick,
        crew: Crew | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        """The run loop, in this thread or in each cluster thread (``crew``: what those share).

        Each turn stops once ``max_units`` units ran or ``budget_s`` passed since ``start``,
        closes the statistics window when due, then ``pick()`` gives the unit to run, None to
        stop, or :data:`~sparkqos.executor.clusters.AGAIN` to take another turn. In cluster threads the turn holds the
        executor's lock, which is released while the unit runs."""
        clock, state = self.clock, self.state
        lock = None if crew is None else crew.cond  # no null context when serial: this runs once per pick
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

    def close(self) -> None:
        """Stop the cluster threads and remove spilled files."""
        if self._threads is not None:
            self._threads.close()
        self.state.close()

    def _limit(self, op: str, quota_tuples: float | None, time_left: float | None = None) -> int:
        ports = self.state.ports[op]
        n = ports[0].rows if len(ports) == 1 else int(self.state.queued(op))
        if quota_tuples is not None:
            a = max(1, min(n, int(math.ceil(quota_tuples))))
        else:
            a = workload(n, self.ratio, self.threshold)
            if self.whole_batches and a < n and len(ports) == 1:
                a = ports[0].rows_through(a)
        return self._time_cap(op, a, time_left)

    def _time_cap(self, op: str, rows: int, time_left: float | None) -> int:
        """At most the rows the operator's measured cost lets finish in what is left of the
        trigger's budget (and of the unit's time quota): one run cannot be interrupted, and a
        whole queued batch of a costly operator could otherwise overrun the budget many times
        over (a burst batch of 4,000 rows at 150 µs a row is 0.6 s). Never below the workload
        threshold, so every pick still makes progress."""
        if self._deadline is not None:
            left = self._deadline - self.clock()
            time_left = left if time_left is None else min(time_left, left)
        if time_left is None or rows <= self.threshold:
            return rows
        c = self.state.cost(op)
        if not c > 0:
            return rows
        return max(self.threshold, min(rows, int(max(time_left, 0.0) / c)))

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
                # What the one below produced, within the budget (the rest waits in op's queue).
                produced = self._run_op(op, self._time_cap(op, produced, None), report)
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
        t0 = self.clock()
        consumed, out = self._ops[name].run(ports, limit, final)
        t1 = self.clock()
        return (consumed, out, t0, t1, rows_before - sum(q.rows for q in ports), bytes_before - sum(q.nbytes for q in ports))

    def _book(self, name: str, consumed: int, out: list[pa.RecordBatch], t0: float, t1: float, report: RunReport) -> int:
        """Record one finished run of ``name`` and pass its output on; returns the rows produced."""
        produced = sum(b.num_rows for b in out)
        self.state.record_run(name, consumed, produced, t1 - t0)
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

    def _deliver(self, name: str, batches: Iterable[pa.RecordBatch], now: float) -> None:
        target = self._next[name]
        state = self.state
        if target is None:
            sink = self._outputs[self._query[name]]
            for b in batches:
                n = b.num_rows
                if not n:
                    continue
                arrivals = pc.sum(b.column(ARRIVAL)).as_py()
                state.record_output(n, n * now - arrivals)
                sink.append((b, now))  # the emit column is built when results are read
        else:
            ordered = self._ordered[name]
            for b in batches:
                if b.num_rows:
                    state.enqueue(target[0], target[1], b, None, ordered)

    def finish(self, budget_s: float | None = None) -> RunReport:
        """End of input: drain every queue, let blocking joins finish their inputs and flush
        window aggregates (bottom-up), so the outputs are the answer on the finite input. The
        report adds up the drains' (``seconds``: the time they ran)."""
        state = self.state
        state.finished = True
        for name in self.plan.names:
            if state.refresh(name):
                state.notify(name)
        total = self.run(budget_s)
        for name in self._bottom_up(self.plan.names):
            out = self._ops[name].flush()
            if out:
                self._deliver(name, out, self.clock())
                total.add(self.run(budget_s))
        total.idle = state.total_queued == 0
        return total

    def end_trigger(self) -> RunReport:
        """The end of a trigger: each operator whose output is due now
        (:class:`~sparkqos.executor.operators.base.TriggerEndOperator`: an update-mode aggregate)
        gives it, bottom-up, and the operators above it run on it up to its query's root
        (:meth:`serve`, no budget: one row per changed key through stateless steps), so the
        outputs a runner takes next hold it. A streaming runner calls this once per trigger, after
        serving and before :meth:`take_outputs`; :meth:`finish` gives the same through
        ``flush``. Returns what the operators above did."""
        report = RunReport()
        for name in self._trigger_end:
            out = self._ops[name].end_trigger()
            if not out:
                continue
            self._deliver(name, out, self.clock())
            above = self.plan.upstream_path(name)[1:]
            if above:
                report.add(self.serve(above))
        return report

    def _bottom_up(self, names: Iterable[str]) -> list[str]:
        """``names`` ordered so that an operator comes before every operator above it."""
        depth = {n: len(self.plan.upstream_path(n)) for n in names}  # operators up to the root
        return sorted(depth, key=lambda n: (-depth[n], self.plan.index[n]))

    # -- results --------------------------------------------------------------------------------------
    def result(self, query: str, internal: bool = False) -> pa.Table:
        """Everything ``query`` delivered so far (with ``__arrival``/``__seq``/``__emit`` when
        ``internal``)."""
        root = self.compiled.root(query)
        schema = self._ops[root].schema.append(pa.field(EMIT, pa.float64()))
        batches = [b.append_column(EMIT, pa.array(np.full(b.num_rows, t))) for b, t in self._outputs[query]]
        table = pa.Table.from_batches(batches, schema=schema)
        if internal:
            return table
        return table.select([n for n in table.column_names if n not in INTERNAL and n != EMIT])

    def take_outputs(self, queries: Iterable[str] | None = None) -> dict[str, pa.Table]:
        """What every query (or each of ``queries``) delivered since the last call (with
        ``__arrival``/``__seq``/``__emit``), and forget it: a streaming runner hands each trigger's
        outputs to its sink this way."""
        out = {}
        for query in self._outputs if queries is None else queries:
            out[query] = self.result(query, internal=True)
            self._outputs[query] = []
        return out

    def delays(self, query: str) -> pa.Array:
        """Per-row delay (emit − arrival) of ``query``'s outputs."""
        t = self.result(query, internal=True)
        return pc.subtract(t.column(EMIT), t.column(ARRIVAL)).combine_chunks()

    # -- checkpoints -----------------------------------------------------------------------------------
    def queue_tables(self) -> dict[str, pa.Table]:
        """Leftover rows of every non-empty input queue, keyed ``"operator#port"`` (with the
        executor's internal columns), for a checkpoint that stores Arrow tables."""
        out = {}
        for name, ports in self.state.ports.items():
            for port, q in enumerate(ports):
                batches = list(q.batches())
                if batches:
                    out[f"{name}#{port}"] = pa.Table.from_batches(batches)
        return out

    def load_queue_tables(self, tables: dict[str, pa.Table]) -> None:
        """Queue again what :meth:`queue_tables` returned (into a fresh executor of the same plan)."""
        for key, table in tables.items():
            name, _, port = key.rpartition("#")
            if name not in self.state.ports or not port.isdigit() or int(port) >= len(self.state.ports[name]):
                raise SchemaMismatch(f"checkpointed queue {key!r} does not belong to this plan")
            for batch in table.to_batches():
                if batch.num_rows:
                    self.state.enqueue(name, int(port), batch)

    def to_state(self, queues: bool = True) -> dict[str, Any]:
        """Leftover queues (unless ``queues=False``: see :meth:`queue_tables`) and operator state
        (Arrow IPC bytes), sequence numbers, statistics and the strategy's own state, for a
        checkpoint."""
        out = {
            "operators": {n: op.to_state() for n, op in self._ops.items()},
            "seq": dict(self._seq),
            "stats": self.state.stats.to_dict(),
            "scheduler": self.scheduler.state_dict(),
            "totals": self.state.totals(),
        }
        if queues:
            out["queues"] = {n: [q.to_ipc() for q in ports] for n, ports in self.state.ports.items()}
        return out

    def load_state(self, data: dict[str, Any]) -> None:
        """Restore :meth:`to_state` into a fresh executor of the same plan."""
        state = self.state
        for name, blobs in data.get("queues", {}).items():
            for port, blob in enumerate(blobs):
                for batch in BatchQueue.from_ipc(blob).batches():
                    state.enqueue(name, port, batch)
        for name, s in data["operators"].items():
            self._ops[name].from_state(s)
        self._seq.update(data["seq"])
        state.stats = StatisticsGatherer.from_dict(data["stats"])
        if "totals" in data:  # checkpoints written before the totals were kept start them at 0
            state.load_totals(data["totals"])
        self.scheduler.load_state_dict(data["scheduler"])
        # A restored strategy state that does not fit this plan (CQC's classes...) must fail here,
        # where a job catches restore errors, not at the first pick. The strategy itself attaches at
        # its first pick, once the queues are back (a round-robin ring keeps its place only then),
        # so a throwaway copy attaches now.
        probe = self.scheduler.clone()
        probe.load_state_dict(data["scheduler"])
        probe.attach(state)
        probe.detach()


def replay(
    compiled: CompiledPlan,
    scheduler: Scheduler,
    feeds: Iterable[tuple[float, str, pa.RecordBatch]],
    units_between: Iterable[int] | None = None,
    clock: Callable[[], float] | None = None,
    options: ExecutorOptions | None = None,
    **option_values: Any,
) -> Executor:
    """Run a finite input through a fresh copy of ``compiled`` and finish it.

    ``feeds`` is ``[(arrival, stream, batch), ...]`` in arrival order; after each feed the
    executor serves the next count of ``units_between`` units (None: none), so a backlog builds
    up the way the strategy lets it. The default clock ticks 1 ms per reading, which makes the
    whole run (statistics, priorities, picks) deterministic. ``options`` (or its fields as
    keywords) are the executor's.
    """
    if clock is None:
        ticks = iter(range(1, 1 << 62))
        clock = lambda: next(ticks) * 1e-3  # noqa: E731
    ex = Executor(compiled.fresh(), scheduler, clock, options, **option_values)
    steps = iter(units_between) if units_between is not None else None
    for arrival, stream, batch in feeds:
        ex.ingest(stream, batch, arrival=arrival)
        k = next(steps, 0) if steps is not None else 0
        if k:
            ex.run(max_units=k)
    ex.finish()
    return ex
