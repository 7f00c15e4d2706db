"""The executor: runs a compiled plan's operators on Arrow batches under any strategy.

Thesis §3.2.4 (execution engine) and §3.2.5/§3.3 (statistics gatherer); workload per run from
fig 4.1. The loop asks the strategy for a unit, runs it, updates the statistics and repeats until
the time budget is spent or nothing can run. :class:`ExecutorState` is the strategies' read-only
view (the :class:`~sparkqos.schedulers.base.SchedulerState` contract) over the real queues.

:class:`Executor` is the front every runner uses; the work is done in three rooms, split by the
question each answers: :mod:`~sparkqos.executor.dataflow` (where rows go: input, delivery,
results), :mod:`~sparkqos.executor.dispatch` (what runs next and for how long: the strategy's
picks, run sizes, budgets, bookkeeping, cluster threads) and :mod:`~sparkqos.executor.snapshot`
(what a checkpoint holds and how it comes back).

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

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import pyarrow as pa

from sparkqos.errors import ArgumentError, ExecutorOptionError
from sparkqos.executor import snapshot
from sparkqos.executor.dataflow import EMIT, Dataflow
from sparkqos.executor.dispatch import Dispatcher
from sparkqos.executor.operators import PhysicalOperator
from sparkqos.executor.options import ExecutorOptions
from sparkqos.executor.plan import CompiledPlan
from sparkqos.executor.report import RunReport
from sparkqos.executor.state import ExecutorState
from sparkqos.schedulers.base import ClusterScheduler, Scheduler

__all__ = ["EMIT", "Executor", "RunReport", "replay"]


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
        self.state = ExecutorState(
            compiled, clock, options.w, options.tolerance, options.memory_limit_bytes, options.spill_dir, options.shed
        )
        self.cluster_threads = cluster_threads
        self.dataflow = Dataflow(compiled, self.state, clock)
        self.dispatcher = Dispatcher(self.dataflow, self.state, scheduler, clock, options, cluster_threads)
        self._ops: dict[str, PhysicalOperator] = compiled.operators

    # The options the dispatcher runs under (read-only: set them through ``options``).
    ratio = property(lambda self: self.dispatcher.ratio)
    threshold = property(lambda self: self.dispatcher.threshold)
    whole_batches = property(lambda self: self.dispatcher.whole_batches)
    stats_period = property(lambda self: self.dispatcher.stats_period)
    starvation_limit = property(lambda self: self.dispatcher.starvation_limit)

    @property
    def starved_picks(self) -> int:
        """Picks of a unit with no work (a strategy that offers those starves the loop)."""
        return self.dispatcher.starved_picks

    @property
    def stolen_units(self) -> int:
        """Units a cluster thread took from another thread's clusters (``cluster_threads``)."""
        return self.dispatcher.stolen_units

    # -- input and the loop ----------------------------------------------------------------------------
    def ingest(self, stream: str, batch: pa.RecordBatch | pa.Table, arrival: float | np.ndarray | None = None) -> int:
        """Queue ``batch`` for every operator reading ``stream`` (each query its own copy),
        stamped with ``arrival``: one time for the batch (default: now) or an array with one per
        row (e.g. the source's event timestamps). A batch whose schema does not match, or
        arrivals that are not finite numbers, raise and change nothing."""
        return self.dataflow.ingest(stream, batch, arrival)

    def next_seq(self, stream: str) -> int:
        """The sequence number the next row of ``stream`` gets (rows so far)."""
        return self.dataflow.seq[stream]

    def run(self, budget_s: float | None = None, max_units: int | None = None, stop: threading.Event | None = None) -> RunReport:
        """Serve units the strategy picks until ``budget_s`` seconds pass, ``max_units`` units ran,
        ``stop`` is set (checked between units, never during one: another thread pauses the run
        this way at a safe point), or nothing can run. With a budget, no operator run is sized
        beyond what its measured cost fits in the time left (the workload threshold aside), so
        one run cannot overrun the budget by much."""
        return self.dispatcher.run(budget_s, max_units, stop)

    def serve(self, operators: Iterable[str], budget_s: float | None = None) -> RunReport:
        """Serve ``operators`` directly, without asking the strategy: round after round, each
        runnable one (upstream first) runs on everything queued for it, until none of them can run,
        a round makes no progress or ``budget_s`` passes (runs are capped to the time left, as in
        :meth:`run`, but the first round always runs, so every call makes progress). A class
        priority honoured above every strategy is served this way (the continuous trigger loop
        serves its top class at once). Strategies see the queues change through their event log,
        as after their own picks."""
        return self.dispatcher.serve(operators, budget_s)

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
        for name in self.dataflow.bottom_up(self.plan.names):
            if self.dataflow.flush(name):
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
        return self.dataflow.end_trigger(self.dispatcher.serve)

    def close(self) -> None:
        """Stop the cluster threads and remove spilled files."""
        self.dispatcher.close()
        self.state.close()

    # -- results --------------------------------------------------------------------------------------
    def result(self, query: str, internal: bool = False) -> pa.Table:
        """Everything ``query`` delivered so far (with ``__arrival``/``__seq``/``__emit`` when
        ``internal``)."""
        return self.dataflow.result(query, internal)

    def take_outputs(self, queries: Iterable[str] | None = None) -> dict[str, pa.Table]:
        """What every query (or each of ``queries``) delivered since the last call (with
        ``__arrival``/``__seq``/``__emit``), and forget it: a streaming runner hands each trigger's
        outputs to its sink this way."""
        return self.dataflow.take_outputs(queries)

    def delays(self, query: str) -> pa.Array:
        """Per-row delay (emit − arrival) of ``query``'s outputs."""
        return self.dataflow.delays(query)

    # -- checkpoints -----------------------------------------------------------------------------------
    def queue_tables(self) -> dict[str, pa.Table]:
        """Leftover rows of every non-empty input queue, keyed ``"operator#port"`` (with the
        executor's internal columns), for a checkpoint that stores Arrow tables."""
        return snapshot.queue_tables(self.state)

    def load_queue_tables(self, tables: dict[str, pa.Table]) -> None:
        """Queue again what :meth:`queue_tables` returned (into a fresh executor of the same plan)."""
        snapshot.load_queue_tables(self.state, tables)

    def to_state(self, queues: bool = True) -> dict[str, Any]:
        """Leftover queues (unless ``queues=False``: see :meth:`queue_tables`) and operator state
        (Arrow IPC bytes), sequence numbers, statistics and the strategy's own state, for a
        checkpoint."""
        return snapshot.to_state(self.dataflow, self.state, self.scheduler, queues)

    def load_state(self, data: dict[str, Any]) -> None:
        """Restore :meth:`to_state` into a fresh executor of the same plan."""
        snapshot.load_state(self.dataflow, self.state, self.scheduler, data)


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
