"""The trigger loop: one micro-batch (an Arrow table) in, the strategy's share of work, outputs and a checkpoint out.

Each trigger (docs/ARCHITECTURE.md, "One trigger on Spark"):

1. each row's arrival is the source's event timestamp column when there is one (``ts`` by
   default), else the trigger's start;
2. the rows are queued at the leaves of every query that reads the stream (each query its copy);
3. the executor serves units the strategy picks for the trigger's budget (default: the trigger
   interval); what is left stays queued — that backlog is what the strategies manage;
4. the trigger's outputs of all queries go to the sink in one call, idempotent per batch id;
5. leftover queues, operator state and strategy/controller state are checkpointed atomically
   before :meth:`TriggerLoop.process` returns, then the progress record is reported.

Exactly-once: a batch replayed after a crash either was checkpointed by us (it is skipped: its
outputs are in the sink, its effect in our state) or was not (the checkpoint of the batch before
it is restored and it runs again; the sink replaces whatever an earlier attempt wrote).
Bad input never stops the loop: rows that do not fit the stream's schema or break its ``checks``
(:class:`~sparkqos.runtime.deadletter.RowChecks`) go to the dead-letter table with their reason, in
the same trigger, replaced like outputs on replay; the progress counts them (``numInputRows`` =
``processedRows`` + ``deadLetteredRows``).

Continuous mode (``RunConfig(continuous=True)``, issue 13): the executor serves the queues on a
worker thread between triggers too (:class:`~sparkqos.runtime.continuous.ContinuousWorker`), so the
trigger's cadence no longer decides delay. A trigger then pauses the worker between two units,
ingests, serves what is queued right away for up to ``top_class_s`` — class by class from the
top priority down when class shares are on and the plan has several priority levels (bypassing
the strategy: class priority is honoured whatever the strategy, and what a higher class has
queued is written by this trigger first), else with the strategy in force (its first picks are
written by this trigger, not one trigger later) — writes everything produced since
the last trigger as this batch's outputs, checkpoints, and resumes the worker. The trigger takes
what it commits while the worker is paused — the outputs, the queues (immutable Arrow tables), the
state as JSON bytes, the queue sizes for its progress record — and hands the executor back
before it writes them (sink, then checkpoint, both before ``foreachBatch`` returns), so the
worker serves while the files are written. The checkpoint is exactly the state after the outputs
the sink holds for that batch; work the worker did after that snapshot is simply done again
after a crash (its outputs were never written, or only as early parts the replay replaces).
:meth:`TriggerLoop.close` stops the worker.

Early writes (``RunConfig.early_write_s``): the one exception to "only a trigger writes". After a
slice, the worker writes what the top class's queries produced as a *part* of the batch the next
trigger will commit (``Sink.write_part``), so a class-H row waits for the sink's file write, not
for the next trigger. That trigger keeps those parts and writes the rest of the batch; a crash
before it commits leaves parts that no checkpoint covers, and the replayed batch replaces them
(its first write, part or whole, removes every file of that batch id), as it replaces the files of
a batch whose trigger crashed after its sink write. The sink's final content is the same: each
batch exactly its last attempt.

This module does not import pyspark: :class:`~sparkqos.spark.runner.QosStream` feeds it
``batch_df.toArrow()``, tests and tools feed it Arrow tables directly.
"""

from __future__ import annotations

import base64
import dataclasses
import math
import os
import signal
import sys
import time
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkqos.compile.builder import QuerySet
from sparkqos.errors import RunnerError, SchemaMismatch
from sparkqos.executor.expressions import ARRIVAL, INTERNAL
from sparkqos.executor.loop import EMIT, Executor, RunReport
from sparkqos.executor.options import ExecutorOptions
from sparkqos.executor.plan import CompiledPlan
from sparkqos.runtime.checkpoint import CheckpointStore
from sparkqos.runtime.config import RunConfig
from sparkqos.runtime.continuous import ContinuousWorker
from sparkqos.runtime.deadletter import DeadLetterSink, RowChecks
from sparkqos.runtime.intake import BacklogTracker, catch_up_line, warn_backlog
from sparkqos.runtime.progress import ProgressReporter, strategy_in_force
from sparkqos.schedulers.base import ClusterScheduler, Scheduler

__all__ = [
    "DEFAULT_ARRIVAL_COLUMN",
    "PHASES",
    "QueuedSizes",
    "TriggerLoop",
    "arrivals",
    "conform",
    "decode_state",
    "encode_state",
    "epoch_seconds",
    "ingest",
    "stream_of",
    "top_class",
]

#: Arrival column looked for when none is named.
DEFAULT_ARRIVAL_COLUMN = "ts"
#: The parts of a trigger timed in :attr:`TriggerLoop.phase_s`.
PHASES = ("toArrow", "spark", "ingest", "executor", "sink", "checkpoint", "progress", "earlyWrite")


def encode_state(obj: Any) -> Any:
    """JSON-able copy of executor state: bytes become ``{"b64": ...}``.

    >>> encode_state({"q": b"\\x00\\x01", "n": [1, b"a"]})
    {'q': {'b64': 'AAE='}, 'n': [1, {'b64': 'YQ=='}]}
    >>> decode_state(encode_state({"q": b"\\x00\\x01"}))
    {'q': b'\\x00\\x01'}
    """
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return {"b64": base64.b64encode(bytes(obj)).decode("ascii")}
    if isinstance(obj, dict):
        return {k: encode_state(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [encode_state(v) for v in obj]
    return obj


def decode_state(obj: Any) -> Any:
    """The executor state :func:`encode_state` encoded."""
    if isinstance(obj, dict):
        if set(obj) == {"b64"}:
            return base64.b64decode(obj["b64"])
        return {k: decode_state(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [decode_state(v) for v in obj]
    return obj


def epoch_seconds(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A timestamp or numeric column as float seconds since the epoch (dividing as Spark's
    ``cast(ts as double)`` does, so both engines see the same numbers)."""
    if pa.types.is_timestamp(column.type):
        per_second = {"s": 1.0, "ms": 1e3, "us": 1e6, "ns": 1e9}[column.type.unit]
        return pc.cast(column, pa.int64()).to_numpy(zero_copy_only=False).astype(np.float64) / per_second
    return pc.cast(column, pa.float64()).to_numpy(zero_copy_only=False)


def arrivals(table: pa.Table, arrival_col: str | None, started: float) -> np.ndarray | float:
    """Each row's arrival: its event time in ``arrival_col`` (a missing one is stamped
    ``started``), or ``started`` for every row without an arrival column."""
    if arrival_col is None or table.num_rows == 0:
        return started
    t = epoch_seconds(table.column(arrival_col))
    bad = ~np.isfinite(t)
    if bad.any():
        t = t.copy()
        t[bad] = started  # a missing event time is stamped at ingestion
    return t


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Timestamps become float seconds where ``schema`` declares numbers (the executor's
    windows run on numeric seconds). Other columns stay as they came: the checks cast them,
    and a dead letter keeps the whole original row."""
    for field in schema:
        if field.name in table.column_names:
            i = table.column_names.index(field.name)
            col = table.column(i)
            if pa.types.is_timestamp(col.type) and pa.types.is_floating(field.type):
                table = table.set_column(i, field.name, pa.array(epoch_seconds(col), pa.float64()))
    return table


def ingest(
    executor: Executor,
    compiled: CompiledPlan,
    stream: str,
    checks: RowChecks,
    table: pa.Table,
    batch_id: int,
    arrival_col: str | None,
    started: float,
) -> tuple[pa.Table, float]:
    """Queue ``table``'s rows that pass ``checks`` at the leaves of every query reading ``stream``;
    returns the rejected rows as a dead-letter table (the caller decides where they go) and the
    newest arrival queued (NaN without an arrival column or rows)."""
    good, dead = checks.split(conform(table, compiled.sources[stream]), compiled.sources[stream], batch_id)
    newest = math.nan
    if good.num_rows:
        stamps = arrivals(good, arrival_col, started)
        executor.ingest(stream, good, arrival=stamps)
        if arrival_col is not None:
            newest = float(np.max(stamps))
    return dead, newest


class QueuedSizes:
    """What the progress record reads of the executor's queues: rows and bytes per operator,
    taken while the executor is still (the record is written after the worker went on), or
    summed over the shards of the sharded lane."""

    def __init__(self, rows: dict[str, float], nbytes: dict[str, float]):
        self._rows = rows
        self._bytes = nbytes
        self.total_queued = float(sum(rows.values()))
        self.total_queued_bytes = float(sum(nbytes.values()))

    @classmethod
    def of(cls, state: Any, plan: Any) -> QueuedSizes:
        """The sizes of ``state``'s queues now, for every operator of ``plan``."""
        sizes = cls({op: state.queued(op) for op in plan.names}, {op: state.queued_bytes(op) for op in plan.names})
        sizes.total_queued, sizes.total_queued_bytes = state.total_queued, state.total_queued_bytes
        return sizes

    def queued(self, op: str) -> float:
        return self._rows[op]

    def queued_bytes(self, op: str) -> float:
        return self._bytes[op]


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


def executor_options(config: RunConfig, scheduler: Scheduler) -> ExecutorOptions:
    """The Executor's options: ``config.executor``, spilling beyond ``config.intake``'s memory limit
    unless the executor's own is given, and with one cluster thread per core for a
    strategy that serves clusters (COS §4.2) unless ``cluster_threads`` is given — its operators'
    pyarrow and numpy kernels release the GIL, so clusters really run side by side."""
    options = config.executor
    if options.memory_limit_bytes is None and config.intake.memory_limit_bytes is not None:
        options = dataclasses.replace(options, memory_limit_bytes=config.intake.memory_limit_bytes)  # spill, never OOM
    cores = os.cpu_count() or 1
    if options.cluster_threads is None:
        threads = cores if isinstance(scheduler, ClusterScheduler) and cores > 1 else 0
        options = dataclasses.replace(options, cluster_threads=threads)
    return options


def stream_of(compiled: CompiledPlan, config: RunConfig) -> tuple[str, str | None]:
    """The stream the run's DataFrame feeds (``config.input.stream``, or the plan's only one) and
    its arrival column (``config.input.arrival_col``, else ``ts`` when the stream has it, else None)."""
    # the streams the DataFrame feeds (the others are fed by parts of queries Spark evaluates)
    streams = [s for s in compiled.sources if s not in compiled.spark_parts]
    stream = config.input.stream
    if stream is None:
        if len(streams) != 1:
            raise RunnerError(
                f"the query set reads streams {streams}: say which one this DataFrame feeds (stream=...)",
                parameter="stream",
                value=None,
                expected=f"one of {streams}",
            )
        stream = streams[0]
    elif stream not in compiled.sources:
        raise RunnerError(
            f"stream {stream!r} is not read by the query set; it reads {streams}",
            parameter="stream",
            value=stream,
            expected=f"one of {streams}",
        )
    schema = compiled.sources[stream]
    arrival_col = config.input.arrival_col
    if arrival_col is None and DEFAULT_ARRIVAL_COLUMN in schema.names:
        arrival_col = DEFAULT_ARRIVAL_COLUMN
    elif arrival_col is not None and arrival_col not in schema.names:
        raise RunnerError(
            f"arrival_col {arrival_col!r} is not a column of stream {stream!r} ({schema.names})",
            parameter="arrival_col",
            value=arrival_col,
            expected=f"one of {schema.names}",
        )
    return stream, arrival_col


class TriggerLoop:
    """The work of every trigger of one query set on one stream, on Arrow tables.

    Holds the compiled plan, the :class:`~sparkqos.executor.loop.Executor` (with the strategy the
    config names), the checkpoint store, the output sink, the dead-letter sink and row checks, and
    the :class:`~sparkqos.runtime.progress.ProgressReporter`. :meth:`process` runs one trigger,
    :meth:`finish` drains what is left at the end of a finite input, :meth:`restore` loads the
    newest checkpoint (both call it first). With ``continuous`` the loop also holds the
    :class:`~sparkqos.runtime.continuous.ContinuousWorker` (``worker``), started by the first
    trigger and stopped by :meth:`close` or :meth:`finish`.
    """

    def __init__(self, queries: QuerySet | CompiledPlan, config: RunConfig):
        compiled = queries.build() if isinstance(queries, QuerySet) else queries
        if not isinstance(compiled, CompiledPlan):
            raise RunnerError(
                f"queries must be a QuerySet or a CompiledPlan, got {type(queries).__name__}",
                parameter="queries",
                value=queries,
                expected="a QuerySet or a CompiledPlan",
            )
        stream, arrival_col = stream_of(compiled, config)
        self.config = config
        self.compiled = compiled
        self.stream = stream
        self.arrival_col = arrival_col
        self.budget_s = config.effective_budget_s
        self.scheduler: Scheduler = config.make_scheduler(compiled.plan)
        storage = config.storage
        self.store = CheckpointStore(storage.checkpoint / "sparkqos", keep=storage.keep_checkpoints)
        self.sink = storage.make_sink()
        self.checks = config.input.checks if config.input.checks is not None else RowChecks()
        self.dead_letter: DeadLetterSink | None = storage.make_dead_letter()
        self.dead_lettered_total = 0
        options = executor_options(config, self.scheduler)
        self.executor = Executor(compiled.fresh(), self.scheduler, clock=time.time, options=options)
        self.progress = ProgressReporter(config.name, compiled.plan, storage.output, config.on_progress)
        self.backlog = BacklogTracker(config.intake.catch_up_lag_s)
        self._warned_at = -math.inf  # time.monotonic() of the last BacklogWarning
        self.last_batch = -1
        #: Seconds spent so far in each part of the triggers (benchmarks/throughput.py): ``toArrow``
        #: (added by the foreachBatch function: Spark reads the source and converts), ``spark``
        #: (the parts of queries Spark evaluates in the micro-batch, also added by it), ``ingest``
        #: (checks, dead letters, queueing), ``executor`` (operator work, in the trigger and on the
        #: continuous worker), ``sink``, ``checkpoint`` and ``progress`` (the metrics row); and
        #: ``earlyWrite``, the continuous worker's early writes of the top class.
        self.phase_s: dict[str, float] = dict.fromkeys(PHASES, 0.0)
        self._restored = False
        self.worker: ContinuousWorker | None = None
        self.top_class: str | None = None
        #: The operators a trigger serves at once, a tuple per priority level, highest first.
        self._levels: list[tuple[str, ...]] = []
        self.closed = False  # close() was called: a trigger still in flight must not restart the worker
        #: A trigger (or finish) raised: this loop's memory may be ahead of its checkpoint (rows
        #: ingested, operators run, state moved), so it must not take the replayed batch again.
        #: :meth:`QosStream.start` builds a fresh loop from the checkpoint instead.
        self.failed = False
        #: The top class's queries the worker writes early (RunConfig.early_write_s); empty: none.
        self._early_queries: tuple[str, ...] = ()
        #: The batch the worker's early parts belong to (None: no part since the last commit),
        #: and what those parts held: rows and delays per query.
        self._early_batch: int | None = None
        self._early_rows: dict[str, int] = {}
        self._early_delays: dict[str, list[np.ndarray]] = {}
        self._early_at = 0.0  # time.monotonic() of the last early write
        self._parts_batch = 0  # the batch the worker's early parts go to: the one after the last commit
        self._paused = False  # a trigger holds the executor and has not handed it back yet
        continuous = config.continuous
        if continuous is not None:
            on_event = self._worker_event if {"between_triggers", "in_pause"} & set(config.faults) else None
            # a worker not resumed by a trigger for this long ends by itself (Spark Connect: the stream was stopped)
            orphan_s = max(60.0, 20 * (config.interval_s or 0.0))
            self.top_class = top_class(compiled)
            plan = compiled.plan
            if self.top_class is not None and continuous.early_write_s > 0 and self.sink.supports_parts:
                self._early_queries = tuple(q.name for q in plan.queries.values() if q.klass == self.top_class)
            self.worker = ContinuousWorker(
                self.executor,
                continuous.slice_s,
                name=f"sparkqos-continuous-{config.name}",
                on_event=on_event,
                orphan_s=orphan_s,
                after_slice=self._early_write if self._early_queries else None,
            )
            self._worker_batch = -1  # the batch the worker's events belong to (crash tests)
            if config.strategy.class_shares:  # class priority above the strategy: the trigger honours it too
                self._levels = [
                    tuple(op for q in plan.queries.values() if q.klass in level for op in q.operators)
                    for level in classes_by_priority(compiled)
                ]

    # -- checkpoint ------------------------------------------------------------------------------
    @property
    def restored(self) -> bool:
        """:meth:`restore` has run: the executor holds the checkpoint's state (or started empty)."""
        return self._restored

    def restore(self) -> int:
        """Load the newest checkpoint (if any) into the executor; returns its batch id or -1.
        A torn or corrupt checkpoint raises CheckpointCorrupt instead of starting empty."""
        if self._restored:
            return self.last_batch
        ckpt = self.store.load_latest()
        if ckpt is not None:
            self.executor.load_state(decode_state(ckpt.state["executor"]))
            self.executor.load_queue_tables(ckpt.queues)
            self.last_batch = ckpt.batch_id
            self._parts_batch = ckpt.batch_id + 1
            self.dead_lettered_total = int(ckpt.state.get("dead_lettered_total", 0))
        self._restored = True
        return self.last_batch

    # -- the trigger -----------------------------------------------------------------------------
    def process(
        self, table: pa.Table, batch_id: int, parts: dict[str, tuple[pa.Table, float]] | None = None
    ) -> dict[str, Any] | None:
        """One trigger on an Arrow table; its progress record, or None for a batch already
        checkpointed (replayed after a crash). ``parts``: for each stream fed by a part of a query
        Spark evaluated in this micro-batch, its rows and the seconds Spark took."""
        started = time.time()
        self.restore()
        if batch_id <= self.last_batch:
            return None  # replayed after a crash: checkpointed already, its outputs are in the sink
        if self.failed:
            raise RunnerError(
                f"batch {batch_id}: an earlier trigger of this loop failed, so its memory is ahead of its "
                "checkpoint; restart the stream (QosStream.start() restores the checkpoint into a fresh loop)"
            )
        worker = self.worker
        try:
            admitted = self._admit()
            if worker is None:
                return self._trigger(table, batch_id, started, admitted, parts or {})
            self._worker_batch = batch_id  # its pause is batch_id's "in_pause"
            self._paused = True
            worker.pause()  # from here until resume() this thread alone touches the executor
            progress = self._trigger(table, batch_id, started, admitted, parts or {})
        except BaseException:
            # This loop's memory is now ahead of its checkpoint: leave it stopped (a restart
            # restores the checkpoint into a fresh loop and replays the batch).
            self.failed = True
            if worker is not None:
                self._paused = False
                worker.close()
            raise
        self._release_worker()  # a trigger that committed nothing (replayed) still hands it back
        return progress

    def _release_worker(self) -> None:
        """Hand the executor back to the continuous worker (once per trigger; not after close())."""
        if self.worker is not None and self._paused and not self.closed:
            self._paused = False
            self.worker.resume()

    def _admit(self) -> tuple[float, RunReport]:
        """Back-pressure (:class:`~sparkqos.runtime.intake.Intake`): before a batch is taken in,
        wait while more than ``max_queued_rows`` rows are queued and the executor can serve them
        — for the continuous worker, or serving them here — for at most ``wait_s``. Returns the
        seconds waited and what was served here. Warns when the wait ran out."""
        intake = self.config.intake
        served = RunReport()
        state = self.executor.state
        if intake.max_queued_rows is None or state.total_queued <= intake.max_queued_rows:
            return 0.0, served
        t0 = time.monotonic()

        def over() -> bool:
            return state.total_queued > intake.max_queued_rows

        if self.worker is not None and self.worker.alive:
            still = self.worker.wait_while(over, intake.wait_s)
        else:
            still = over()
            while still and time.monotonic() - t0 < intake.wait_s:
                report = self.executor.run(self.budget_s)
                served.add(report)
                still = over()
                if report.idle:
                    break
        waited = time.monotonic() - t0
        if still and waited >= intake.wait_s:
            self._warn(
                f"{state.total_queued:.0f} rows still queued after waiting {waited:.0f} s for the executor "
                f"(Intake.max_queued_rows = {intake.max_queued_rows}); taking the next batch in anyway, bytes beyond "
                "Intake.memory_limit_bytes spill to disk. Lower the source's rate or its per-trigger limit "
                "(maxRowsPerTrigger), or give the executor more time."
            )
        return waited, served

    def _warn(self, message: str) -> None:
        """A :class:`~sparkqos.runtime.intake.BacklogWarning`, at most every ``Intake.warn_every_s``."""
        now = time.monotonic()
        if now - self._warned_at >= self.config.intake.warn_every_s:
            self._warned_at = now
            warn_backlog(f"sparkqos {self.config.name!r}: {message}")

    def _trigger(
        self,
        table: pa.Table,
        batch_id: int,
        started: float,
        admitted: tuple[float, RunReport],
        parts: dict[str, tuple[pa.Table, float]],
    ) -> dict[str, Any]:
        self._fault("before_ingest", batch_id)
        t0 = time.perf_counter()
        rows_in = table.num_rows
        dead = None
        newest = math.nan
        if rows_in:
            dead, newest = ingest(
                self.executor, self.compiled, self.stream, self.checks, table, batch_id, self.arrival_col, started
            )
            if dead.num_rows and self.dead_letter is None:
                raise SchemaMismatch(
                    f"batch {batch_id} of stream {self.stream!r}: {dead.num_rows} bad row(s), first: "
                    f"{dead.column('reason')[0].as_py()} (give dead_letter= or output= to keep them)"
                )
        spark_parts = self._ingest_parts(parts, started)
        self.phase_s["ingest"] += time.perf_counter() - t0
        waited, admit_report = admitted
        backlog = {**self.backlog.observe(started, rows_in, newest), "intakeWaitS": waited}
        if math.isinf(backlog["catchUpEtaS"]):
            self._warn(f"{catch_up_line(backlog)}: the executor does not keep up with the stream")
        self._fault("after_ingest", batch_id)
        served = self.worker.take_counters() if self.worker is not None else RunReport()
        served.add(admit_report)
        if self.worker is None:
            report = self.executor.run(self.budget_s)
        else:
            report = self._serve_by_class(self.config.effective_top_class_s)
        self._fault("after_run", batch_id)
        served.add(report)
        return self._commit(batch_id, started, rows_in, served, dead, backlog, spark_parts)

    def _ingest_parts(self, parts: dict[str, tuple[pa.Table, float]], started: float) -> dict[str, tuple[int, float]]:
        """Queue the rows of the parts Spark evaluated (higher classes first, as they came); each
        row's arrival is the input's event time where the part passes that column on. Returns
        query → (rows, seconds) for the progress record."""
        done: dict[str, tuple[int, float]] = {}
        for stream, (table, seconds) in parts.items():
            part = self.compiled.spark_parts[stream]
            if table.num_rows:
                carried = dict(part.carried).get(self.arrival_col) if self.arrival_col else None
                arrival = arrivals(table, carried, started) if carried else started
                self.executor.ingest(stream, table, arrival=arrival)
            rows, secs = done.get(part.query, (0, 0.0))
            done[part.query] = (rows + table.num_rows, secs + seconds)
        return done

    def _serve_by_class(self, budget_s: float) -> RunReport:
        """In a continuous trigger: serve what is queued, class by class from the highest
        priority, for up to ``budget_s`` in all, so that what is served now is written by this
        trigger; what is left is the worker's, and waits for the next trigger's write. The top
        class always gets its round (:meth:`Executor.serve` makes progress on every call); a
        lower class only while time is left. Without levels (class shares off: the strategy alone
        decides; or a single priority level) the strategy in force serves for ``budget_s``."""
        total = RunReport()
        if not self._levels:
            return self.executor.run(budget_s) if budget_s > 0 else total
        for i, operators in enumerate(self._levels):
            left = budget_s - total.seconds  # on the executor's clock
            if budget_s <= 0 or (i > 0 and left <= 0):
                break
            total.add(self.executor.serve(operators, max(left, 0.0)))
        return total

    def finish(self, budget_s: float | None = None) -> dict[str, Any]:
        """End of a finite input: stop the continuous worker, drain every queue, flush windows
        and joins, and write the last outputs (with what the worker produced since the last
        trigger) as batch ``last + 1``."""
        if self.failed:
            raise RunnerError(
                "finish(): an earlier trigger of this loop failed, so its memory is ahead of its checkpoint; "
                "restart the stream so that Spark replays the failed batch into a fresh loop, then finish that one"
            )
        self.restore()
        served = RunReport()
        try:
            if self.worker is not None:
                self.worker.pause()
                self.worker.close()
                self._paused = False  # the commit below must not hand the executor back
                served = self.worker.take_counters()
            started = time.time()
            served.add(self.executor.finish(budget_s))
            return self._commit(self.last_batch + 1, started, 0, served, None)
        except BaseException:
            self.failed = True
            raise

    def close(self) -> None:
        """Stop the continuous worker and join its thread (nothing to do otherwise). What it
        produced since the last trigger is not written: a restart redoes it from the checkpoint.
        A trigger still running when the stream is stopped ends without handing the executor
        back to the worker; :meth:`reopen` (a new start) allows it again."""
        self.closed = True
        if self.worker is not None:
            self.worker.close()

    def reopen(self) -> None:
        """After :meth:`close`: triggers hand the executor to the worker again."""
        self.closed = False

    def _fault(self, point: str, batch_id: int) -> None:
        if batch_id in self.config.faults.get(point, ()):
            self._kill(point, batch_id)

    def _early_write(self, report: RunReport) -> None:
        """On the worker's thread, after a slice: write what the top class's queries produced
        since the last write as a part of the next batch, once ``early_write_s`` has passed since
        the last early write, or at once when the slice found nothing more to run (the worker is
        about to wait for the next trigger). Their delays count from this write."""
        if not report.idle and time.monotonic() - self._early_at < self.config.continuous.early_write_s:
            return
        outputs = {q: t for q, t in self.executor.take_outputs(self._early_queries).items() if t.num_rows}
        if not outputs:
            return
        batch_id = self._parts_batch
        first = self._early_batch != batch_id
        t0 = time.perf_counter()
        self.sink.write_part(batch_id, self._sink_tables(outputs), first=first)
        written = time.time()
        self._early_at = time.monotonic()
        if first:
            self._early_batch, self._early_rows, self._early_delays = batch_id, {}, {}
        for q, t in outputs.items():
            self._early_rows[q] = self._early_rows.get(q, 0) + t.num_rows
            self._early_delays.setdefault(q, []).append(written - t.column(ARRIVAL).to_numpy(zero_copy_only=False))
        self.phase_s["earlyWrite"] += time.perf_counter() - t0
        self._fault("after_early_write", batch_id)

    @staticmethod
    def _sink_tables(outputs: dict[str, pa.Table]) -> dict[str, pa.Table]:
        """Outputs as the sink gets them: without the executor's internal columns."""
        return {q: t.drop_columns([c for c in t.column_names if c in INTERNAL or c == EMIT]) for q, t in outputs.items()}

    def _worker_event(self, event: str) -> None:
        """The continuous worker's crash points: ``in_pause:N`` while batch N's trigger pauses it;
        ``between_triggers:N`` after a slice served rows once batch N was committed."""
        if event == "pause":
            self._fault("in_pause", self._worker_batch)
        elif self.last_batch >= 0:
            self._fault("between_triggers", self.last_batch)

    def _kill(self, point: str, batch_id: int) -> None:
        """The injected crash: SIGKILL, so nothing after this point runs, not even ``finally``."""
        print(f"sparkqos: fault injection: SIGKILL at {point} of batch {batch_id}", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)

    def _commit(
        self,
        batch_id: int,
        started: float,
        rows_in: int,
        served: RunReport,
        dead: pa.Table | None = None,
        backlog: dict[str, float] | None = None,
        spark_parts: dict[str, tuple[int, float]] | None = None,
    ) -> dict[str, Any]:
        """Write what the executor produced since the last trigger (``served``: what it did
        meanwhile), checkpoint, and report batch ``batch_id``."""
        self.phase_s["executor"] += served.seconds
        t0 = time.perf_counter()
        # What this batch commits, taken while the executor is still: its outputs, the parts the
        # worker wrote of it, the queues (immutable Arrow), the state (as JSON bytes) and the
        # queue sizes for the progress record. The writes below need nothing live, so the worker
        # goes on meanwhile (continuous mode): writing the sink and the checkpoint no longer
        # idles the executor. They are done, in that order, before foreachBatch returns.
        outputs = self.executor.take_outputs()
        early = self._early_batch == batch_id  # the worker wrote parts of this batch: keep them
        early_rows, early_delays = (self._early_rows, self._early_delays) if early else ({}, {})
        self._early_batch, self._early_rows, self._early_delays = None, {}, {}
        dead_rows = 0 if dead is None else dead.num_rows
        queues = self.executor.queue_tables()
        state = self.store.state_bytes(
            batch_id,
            {
                "executor": encode_state(self.executor.to_state(queues=False)),
                "batch_id": batch_id,
                "dead_lettered_total": self.dead_lettered_total + dead_rows,
            },
        )
        queued = QueuedSizes.of(self.executor.state, self.compiled.plan)
        strategy = strategy_in_force(self.scheduler)
        t_snap = time.perf_counter()
        self._parts_batch = batch_id + 1  # the worker's early parts now belong to the next batch
        self._release_worker()
        if self.dead_letter is not None:
            self.dead_letter.write(batch_id, dead)
        if early:
            self.sink.write(batch_id, self._sink_tables(outputs), keep_parts=True)
        else:
            self.sink.write(batch_id, self._sink_tables(outputs))
        # Delay is end to end: the moment the row is in its sink minus its event time (for a
        # window, the newest row it covers), whenever the executor produced it; rows the worker
        # wrote early count from their own write.
        written = time.time()
        delays = {
            q: written - t.column(ARRIVAL).to_numpy(zero_copy_only=False) if t.num_rows else np.empty(0)
            for q, t in outputs.items()
        }
        rows_out = {q: t.num_rows for q, t in outputs.items()}
        for q, parts in early_delays.items():
            delays[q] = np.concatenate([*parts, delays.get(q, np.empty(0))])
            rows_out[q] = rows_out.get(q, 0) + early_rows[q]
        if self.config.on_delays is not None:
            self.config.on_delays(batch_id, delays)
        t1 = time.perf_counter()
        self.phase_s["sink"] += t1 - t_snap
        self._fault("after_sink", batch_id)
        self.store.save(batch_id, queues, state)
        self.sink.checkpointed(batch_id)  # final now: the sink may compact it
        t2 = time.perf_counter()
        self.phase_s["checkpoint"] += t2 - t1 + (t_snap - t0)
        self._fault("after_checkpoint", batch_id)
        self.last_batch = batch_id
        self.dead_lettered_total += dead_rows
        progress = self.progress.report(
            batch_id,
            started,
            rows_in=rows_in,
            dead_rows=dead_rows,
            consumed=served.rows_consumed,
            rows_out=rows_out,
            delays=delays,
            busy_s=served.seconds,
            cpu_s=served.cpu_s,
            continuous=self.worker is not None,
            state=queued,
            scheduler=self.scheduler,
            strategy=strategy,
            backlog=backlog,
            spark_parts=spark_parts,
        )
        self.phase_s["progress"] += time.perf_counter() - t2
        self._fault("after_progress", batch_id)
        return progress
