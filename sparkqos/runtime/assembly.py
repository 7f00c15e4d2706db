"""What a trigger loop is built of, from a query set and a :class:`~sparkqos.runtime.config.RunConfig`.

:func:`assemble` checks what depends on the plan (which stream the DataFrame feeds, its event-time
column) and builds the collaborators of :class:`~sparkqos.runtime.trigger.TriggerLoop`: the
strategy sized to the trigger, the executor with its options, the ingest of the stream (row
checks, arrival times), the checkpoint store, the output and dead-letter sinks and the progress
reporter (:class:`Parts`). The class levels a
continuous trigger serves first come from :func:`priority_levels`.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from sparkqos.compile.builder import QuerySet
from sparkqos.errors import RunnerError, not_one_of
from sparkqos.executor.loop import Executor, RunReport
from sparkqos.executor.options import ExecutorOptions
from sparkqos.executor.plan import CompiledPlan
from sparkqos.executor.runcost import OVERHEAD_SHARE
from sparkqos.io.deadletter import DeadLetterSink, RowChecks
from sparkqos.io.sinks import Sink
from sparkqos.runtime.checkpoint import CheckpointStore
from sparkqos.runtime.config import RunConfig
from sparkqos.runtime.ingest import Ingest
from sparkqos.runtime.progress import ProgressReporter
from sparkqos.schedulers.base import ClusterScheduler, Scheduler

__all__ = [
    "DEFAULT_ARRIVAL_COLUMN",
    "Parts",
    "assemble",
    "classes_by_priority",
    "executor_options",
    "priority_levels",
    "serve_by_class",
    "serve_trigger",
    "stream_of",
    "top_class",
    "usable_cores",
]

#: Arrival column looked for when none is named.
DEFAULT_ARRIVAL_COLUMN = "ts"


@dataclass
class Parts:
    """The collaborators of one trigger loop (see :func:`assemble`)."""

    compiled: CompiledPlan
    scheduler: Scheduler
    executor: Executor
    ingest: Ingest
    store: CheckpointStore
    sink: Sink
    dead_letter: DeadLetterSink | None
    progress: ProgressReporter


def assemble(queries: QuerySet | CompiledPlan, config: RunConfig) -> Parts:
    """The parts of a trigger loop serving ``queries`` as ``config`` says; raises
    :class:`~sparkqos.errors.RunnerError` naming what does not fit the plan."""
    compiled = queries.build() if isinstance(queries, QuerySet) else queries
    if not isinstance(compiled, CompiledPlan):
        expected = "a QuerySet or a CompiledPlan"
        got = type(queries).__name__
        raise RunnerError(f"queries must be {expected}, got {got}", parameter="queries", value=queries, expected=expected)
    stream, arrival_col = stream_of(compiled, config)
    scheduler = config.make_scheduler(compiled.plan)
    outputs, recovery = config.outputs, config.recovery
    options = executor_options(config, scheduler)
    if options.spill_dir is None:  # beside the checkpoint: its segments link spilled files (same file system)
        options = dataclasses.replace(options, spill_dir=str(recovery.checkpoint / "sparkqos" / "spill"))
    executor = Executor(compiled.fresh(), scheduler, clock=time.time, options=options)
    dead_letter = outputs.make_dead_letter(recovery.fsync)
    checks = config.input.checks if config.input.checks is not None else RowChecks()
    return Parts(
        compiled=compiled,
        scheduler=scheduler,
        executor=executor,
        ingest=Ingest(executor, compiled, stream, arrival_col, checks, keep_dead=dead_letter is not None),
        store=CheckpointStore(recovery.checkpoint / "sparkqos", keep=recovery.keep_checkpoints, fsync=recovery.fsync),
        sink=outputs.make_sink(recovery.fsync),
        dead_letter=dead_letter,
        progress=ProgressReporter(config.name, compiled.plan, outputs.output, config.on_progress),
    )


def stream_of(compiled: CompiledPlan, config: RunConfig) -> tuple[str, str | None]:
    """The stream the run's DataFrame feeds (``config.input.stream``, or the plan's only one) and
    its arrival column (``config.input.arrival_col``, else ``ts`` when the stream has it, else None)."""
    # the streams the DataFrame feeds (the others are fed by parts of queries Spark evaluates)
    streams = [s for s in compiled.sources if s not in compiled.spark_parts]
    stream = config.input.stream
    if stream is None:
        if len(streams) != 1:
            raise not_one_of(
                RunnerError,
                f"the query set reads streams {streams}: say which one this DataFrame feeds (stream=...)",
                "stream",
                None,
                streams,
            )
        stream = streams[0]
    elif stream not in compiled.sources:
        raise not_one_of(
            RunnerError, f"stream {stream!r} is not read by the query set; it reads {streams}", "stream", stream, streams
        )
    schema = compiled.sources[stream]
    arrival_col = config.input.arrival_col
    if arrival_col is None and DEFAULT_ARRIVAL_COLUMN in schema.names:
        arrival_col = DEFAULT_ARRIVAL_COLUMN
    elif arrival_col is not None and arrival_col not in schema.names:
        raise not_one_of(
            RunnerError,
            f"arrival_col {arrival_col!r} is not a column of stream {stream!r} ({schema.names})",
            "arrival_col",
            arrival_col,
            schema.names,
        )
    return stream, arrival_col


def executor_options(config: RunConfig, scheduler: Scheduler) -> ExecutorOptions:
    """The Executor's options: ``config.executor``, spilling beyond ``config.intake``'s memory limit
    unless the executor's own is given, with one cluster thread per core this process may run on
    (:func:`usable_cores`) for a strategy that serves clusters (COS §4.2) unless
    ``cluster_threads`` is given — pyarrow's and numpy's kernels release the GIL, so clusters
    really run side by side. A row-wise operator's run may be cut into slices on one thread per
    usable core unless ``threads`` is given; an operator calling a UDF is cut only when each UDF
    it calls is declared :func:`~sparkqos.executor.threadsafe.thread_safe` (code written for
    Spark's separate Python workers need not allow two calls at once). No operator run is sized
    below what makes its fixed cost at most 5 % of it unless ``overhead_share`` is given
    (:mod:`sparkqos.executor.runcost`)."""
    options = config.executor
    if options.memory_limit_bytes is None and config.intake.memory_limit_bytes is not None:
        options = dataclasses.replace(options, memory_limit_bytes=config.intake.memory_limit_bytes)  # spill, never OOM
    cores = usable_cores()  # taskset -c 0 leaves one: two cluster threads on one core only take turns
    if options.cluster_threads is None:
        threads = cores if isinstance(scheduler, ClusterScheduler) and cores > 1 else 0
        options = dataclasses.replace(options, cluster_threads=threads)
    if options.threads is None:
        options = dataclasses.replace(options, threads=cores)
    if options.overhead_share is None:
        options = dataclasses.replace(options, overhead_share=OVERHEAD_SHARE)
    return options


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity: ``taskset -c 0`` gives one), where the
    system says; else the machine's. Slices on one core would only take turns."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not every system has affinities
        return os.cpu_count() or 1


def top_class(compiled: CompiledPlan) -> str | None:
    """The class of the plan's queries with the highest priority, when one stands above the others
    (None with a single class, or a tie at the top: then no class goes first)."""
    plan = compiled.plan
    used = {q.klass for q in plan.queries.values()}
    ranked = sorted(((plan.classes[k], k) for k in used), reverse=True)
    if len(ranked) < 2 or ranked[0][0] == ranked[1][0]:
        return None
    return ranked[0][1]


def classes_by_priority(compiled: CompiledPlan) -> list[tuple[str, ...]]:
    """The plan's query classes from the highest priority down, classes of equal priority
    together; empty when there is nothing to put first (a single class, or all equal)."""
    plan = compiled.plan
    used = {q.klass for q in plan.queries.values()}
    levels: dict[float, list[str]] = {}
    for k in used:
        levels.setdefault(plan.classes[k], []).append(k)
    if len(levels) < 2:
        return []
    return [tuple(sorted(levels[p])) for p in sorted(levels, reverse=True)]


def priority_levels(compiled: CompiledPlan) -> list[tuple[str, ...]]:
    """The operators of each priority level's queries, highest level first (what a continuous
    trigger serves at once, level by level); empty when no class stands above another."""
    queries = compiled.plan.queries.values()
    return [tuple(op for q in queries if q.klass in level for op in q.operators) for level in classes_by_priority(compiled)]


def serve_by_class(
    executor: Executor,
    levels: list[tuple[str, ...]],
    budget_s: float,
    after_top: Callable[[], None] | None = None,
    after_level: Callable[[], None] | None = None,
) -> RunReport:
    """Serve what is queued class by class from the highest priority level (``levels``:
    :func:`priority_levels`) for up to ``budget_s`` in all: the top level always gets its round
    (:meth:`Executor.serve` makes progress on every call), a lower one only while time is left;
    ``after_top`` is called once the top level's round is done (a trigger writes its rows there),
    ``after_level`` once each further level above the lowest has had its round (a trigger writes
    that level's rows there, before the lower levels are served).
    Without levels the strategy in force serves for ``budget_s``, and ``after_top`` follows."""
    total = RunReport()
    if not levels:  # one round, the strategy's
        total = executor.run(budget_s) if budget_s > 0 else total
        if after_top is not None:
            after_top()
        return total
    for i, operators in enumerate(levels):
        left = budget_s - total.seconds  # on the executor's clock
        if budget_s <= 0 or (i > 0 and left <= 0):
            break
        total.add(executor.serve(operators, max(left, 0.0)))
        if i == 0 and after_top is not None:
            after_top()
        elif 0 < i < len(levels) - 1 and after_level is not None:
            after_level()
    return total


def serve_trigger(
    executor: Executor,
    levels: list[tuple[str, ...]],
    top_s: float,
    budget_s: float,
    after_top: Callable[[], None] | None = None,
    after_level: Callable[[], None] | None = None,
) -> RunReport:
    """What a trigger serves, written once for every caller (the trigger loop, with or without the
    continuous worker, and a shard of the sharded lane): the top classes first, class by class,
    for up to ``top_s`` (:func:`serve_by_class`; ``after_top`` once the top class's round is
    done, ``after_level`` after each further round above the lowest level), so what they have
    queued leaves with this trigger; then the strategy for what is left of ``budget_s``."""
    report = serve_by_class(executor, levels, min(top_s, budget_s), after_top, after_level)
    left = budget_s - report.seconds
    if left > 0:
        report.add(executor.run(left))
    return report
