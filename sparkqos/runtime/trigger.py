"""The trigger loop: one micro-batch (an Arrow table) in, the strategy's share of work, outputs and a checkpoint out.

Each trigger (docs/ARCHITECTURE.md, "One trigger on Spark"):

1. each row's arrival is the source's event timestamp column when there is one (``ts`` by
   default), else the trigger's start, and the rows are queued at the leaves of every query that
   reads the stream, each query its copy (:mod:`sparkqos.runtime.ingest`);
2. the executor serves units the strategy picks for the trigger's budget (default: the trigger
   interval; in continuous mode see below); what is left stays queued — that backlog is what
   the strategies manage; then what is due at the trigger's end comes out
   (:meth:`~sparkqos.executor.loop.Executor.end_trigger`: an update-mode aggregate's keys changed
   since the last trigger, once each, through the operators above it);
3. the trigger's outputs of all queries go to the sink in one call, idempotent per batch id;
4. leftover queues, operator state and strategy/controller state are checkpointed atomically
   before :meth:`TriggerLoop.process` returns, then the progress record is reported.

Exactly-once: a batch replayed after a crash either was checkpointed by us (it is skipped: its
outputs are in the sink, its effect in our state) or was not (the checkpoint of the batch before
it is restored and it runs again; the sink replaces whatever an earlier attempt wrote).
Bad input never stops the loop: rows that do not fit the stream's schema or break its ``checks``
(:class:`~sparkqos.io.deadletter.RowChecks`) go to the dead-letter table with their reason, in
the same trigger, replaced like outputs on replay; the progress counts them (``numInputRows`` =
``processedRows`` + ``deadLetteredRows``).

Continuous mode (``RunConfig(continuous=...)``, on by default): the executor serves the queues on a
worker thread between triggers too (:class:`~sparkqos.runtime.continuous.ContinuousWorker`), so the
trigger's cadence does not decide delay. A trigger then pauses the worker between two units,
ingests, serves what is queued right away for up to ``top_class_s`` — class by class from the
top priority down when class shares are on and the plan has several priority levels (bypassing
the strategy: class priority is honoured whatever the strategy, and what a higher class has
queued is written by this trigger first), else with the strategy in force (its first picks are
written by this trigger, not one trigger later) — writes everything produced since
the last trigger as this batch's outputs, checkpoints, and resumes the worker. The trigger takes
what it commits while the worker is paused (:class:`Commit`: the outputs, the queues as immutable
Arrow tables, the state as JSON bytes, the queue sizes for its progress record) and hands the
executor back before it writes them (sink, then checkpoint, both before ``foreachBatch``
returns), so the worker serves while the files are written. The checkpoint is exactly the state
after the outputs the sink holds for that batch; work the worker did after that snapshot is
simply done again after a crash (its outputs were never written, or only as early parts the
replay replaces: :mod:`sparkqos.runtime.early`). :meth:`TriggerLoop.close` stops the worker.

What the loop is built of comes from :func:`~sparkqos.runtime.assembly.assemble`.

This module does not import pyspark: :class:`~sparkqos.spark.runner.QosStream` feeds it
``batch_df.toArrow()``, tests and tools feed it Arrow tables directly.
"""

from __future__ import annotations

import math
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from sparkqos.compile.builder import QuerySet
from sparkqos.errors import RunnerError
from sparkqos.executor.loop import RunReport
from sparkqos.executor.plan import CompiledPlan
from sparkqos.runtime.assembly import DEFAULT_ARRIVAL_COLUMN, assemble, priority_levels, serve_trigger, top_class
from sparkqos.runtime.checkpoint import decode_state, encode_state
from sparkqos.runtime.commit import Commit, CommitWriter
from sparkqos.runtime.config import RunConfig
from sparkqos.runtime.continuous import ContinuousWorker
from sparkqos.runtime.decompose import IngestLog, micro_batch_start
from sparkqos.runtime.early import EarlyWriter, above_the_lowest
from sparkqos.runtime.ingest import epoch_seconds
from sparkqos.runtime.intake import BEHIND, Admission, BacklogTracker, behind_cause, catch_up_line
from sparkqos.runtime.lifecycle import Life, Lifecycle
from sparkqos.runtime.service import Service

__all__ = ["DEFAULT_ARRIVAL_COLUMN", "PHASES", "Commit", "TriggerLoop", "decode_state", "encode_state", "epoch_seconds"]

#: The parts of a trigger timed in :attr:`TriggerLoop.phase_s`.
PHASES = ("toArrow", "spark", "ingest", "executor", "sink", "checkpoint", "progress", "earlyWrite")


#: What :meth:`TriggerLoop.process` may be given instead of a table: a function reading the
#: micro-batch, giving its table, its Spark-evaluated parts and the reader of the later parts.
Read = Callable[
    [], tuple[pa.Table, "dict[str, tuple[pa.Table, float]] | None", "Callable[[], dict[str, tuple[pa.Table, float]]] | None"]
]


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
        parts = assemble(queries, config)
        self.config = config
        self.compiled = parts.compiled
        self.scheduler = parts.scheduler
        self.executor = parts.executor
        self.ingest = parts.ingest
        self.store = parts.store
        self.sink = parts.sink
        self.dead_letter = parts.dead_letter
        self.progress = parts.progress
        self.budget_s = config.effective_budget_s
        self.backlog = BacklogTracker(config.intake.catch_up_lag_s)
        #: What the run promises per query: latency targets, shedding (:mod:`sparkqos.runtime.service`).
        self.service = Service(self.compiled, config, keeps_dead=self.dead_letter is not None)
        #: When each trigger queued which rows (the delay's parts, :mod:`sparkqos.runtime.decompose`).
        self.ingest_log = IngestLog()
        #: The sink write of a commit, its delays and their parts, and the progress columns per query.
        self.writer = CommitWriter(self.compiled, self.sink, self.executor, self.ingest_log, self.service, config.on_delays)
        self._returned: float | None = None  # time.time() when the last trigger returned
        self._started: float | None = None  # time.time() when the last trigger started
        #: Seconds from one trigger's start to the next, smoothed (None before the second trigger):
        #: the default ``top_class_s`` follows it where triggers come further apart than the
        #: interval (:meth:`RunConfig.top_class_s_for`).
        self.period_s: float | None = None
        self.dead_lettered_total = 0
        self.last_batch = -1
        #: Seconds spent so far in each part of the triggers (benchmarks/throughput.py): ``toArrow``
        #: (added by the foreachBatch function: Spark reads the source and converts), ``spark``
        #: (the parts of queries Spark evaluates in the micro-batch, also added by it), ``ingest``
        #: (checks, dead letters, queueing), ``executor`` (operator work, in the trigger and on the
        #: continuous worker), ``sink``, ``checkpoint`` and ``progress`` (the metrics row); and
        #: ``earlyWrite``, the continuous worker's early writes of the classes above the lowest.
        self.phase_s: dict[str, float] = dict.fromkeys(PHASES, 0.0)
        #: Where the loop is in its life: restored, in a trigger, closed, failed (:mod:`~sparkqos.runtime.lifecycle`).
        self.life = Lifecycle()
        self.worker: ContinuousWorker | None = None
        self.early: EarlyWriter | None = None
        self.top_class: str | None = top_class(self.compiled)
        #: The operators a trigger serves at once, a tuple per priority level, highest first.
        self.levels: list[tuple[str, ...]] = priority_levels(self.compiled) if config.strategy.class_shares else []
        #: Shedding waits for the top level's round (and its early write) when no query of that
        #: level sheds: the round touches only the top level's queues, so the same rows are shed,
        #: and the top class's rows no longer wait for the dead letters of the rows others drop.
        self.shed_after_top = self._sheds_apart_from_top()
        #: Back-pressure before a batch is taken in, on the top class's queues (:class:`Admission`).
        self.admission = Admission(config, self.executor, self.compiled.plan, self.top_class)
        if config.continuous is not None:
            self._start_worker(config)

    def _sheds_apart_from_top(self) -> bool:
        shedder = self.service.shedder
        if shedder is None or not self.levels:
            return False
        top = set(self.levels[0])
        return not any(op in top for q in shedder.ages for op in self.compiled.plan.queries[q].operators)

    def _start_worker(self, config: RunConfig) -> None:
        """The continuous worker and its early writer (with a top class and a sink that takes
        parts): it writes the rows of every class above the lowest as they come, so a class's
        rows wait for the next trigger's commit only in the lowest class."""
        continuous = config.continuous
        if self.top_class is not None and continuous.early_write_s > 0 and self.sink.supports_parts:
            written = lambda batch_id: self._fault("after_early_write", batch_id)  # noqa: E731
            queries = above_the_lowest(self.compiled.plan)
            self.early = EarlyWriter(self.executor, self.sink, queries, continuous.early_write_s, self.phase_s, written)
        self.worker = ContinuousWorker(
            self.executor,
            continuous.slice_s,
            name=f"sparkqos-continuous-{config.name}",
            on_event=self._worker_event if {"between_triggers", "in_pause"} & set(config.faults) else None,
            # a worker not resumed by a trigger for this long ends by itself (Spark Connect: the stream was stopped)
            orphan_s=max(60.0, 20 * (config.interval_s or 0.0)),
            after_slice=self.early.after_slice if self.early is not None else None,
            nice=continuous.nice,
        )
        self._worker_batch = -1  # the batch the worker's events belong to (crash tests)

    # -- checkpoint ------------------------------------------------------------------------------
    @property
    def restored(self) -> bool:
        """:meth:`restore` has run: the executor holds the checkpoint's state (or started empty)."""
        return self.life.state not in (Life.NEW, Life.NEW_CLOSED)

    @property
    def closed(self) -> bool:
        """:meth:`close` was called (and no :meth:`reopen` since): no trigger restarts the worker."""
        return self.life.state in (Life.CLOSED, Life.NEW_CLOSED)

    @property
    def failed(self) -> bool:
        """A trigger (or finish) raised: the memory may be ahead of the checkpoint (rows ingested,
        operators run, state moved), so the loop refuses the replayed batch; :meth:`QosStream.start`
        builds a fresh loop from the checkpoint instead."""
        return self.life.state is Life.FAILED

    def restore(self) -> int:
        """Load the newest checkpoint (if any) into the executor; returns its batch id or -1.
        A torn or corrupt checkpoint raises CheckpointCorrupt instead of starting empty."""
        if self.restored:
            return self.last_batch
        ckpt = self.store.load_latest()
        if ckpt is not None:
            self.executor.load_state(decode_state(ckpt.state["executor"]))
            self.executor.load_queue_tables(ckpt.queues)
            self.last_batch = ckpt.batch_id
            if self.early is not None:
                self.early.parts_batch = ckpt.batch_id + 1
            self.dead_lettered_total = int(ckpt.state.get("dead_lettered_total", 0))
            self.service.stream_time = float(ckpt.state.get("stream_time", -math.inf))
        self.progress.baseline(self.executor.state)
        self.life.step("restore")
        return self.last_batch

    # -- the trigger -----------------------------------------------------------------------------
    @property
    def defers_lower_parts(self) -> bool:
        """A trigger writes the top class's outputs before the lower classes' Spark-evaluated
        parts are evaluated (``process(..., later=...)``): it has a top class and early writes."""
        return self.early is not None

    def process(
        self,
        table: pa.Table | Read,
        batch_id: int,
        parts: dict[str, tuple[pa.Table, float]] | None = None,
        later: Callable[[], dict[str, tuple[pa.Table, float]]] | None = None,
    ) -> dict[str, Any] | None:
        """One trigger on an Arrow table; its progress record, or None for a batch already
        checkpointed (replayed after a crash). ``parts``: for each stream fed by a part of a query
        Spark evaluated in this micro-batch, its rows and the seconds Spark took. ``later`` (with
        :attr:`defers_lower_parts`): evaluates the parts of the lower classes, called once the top
        class's rows of this batch are served and written, so they never wait for them.

        ``table`` may instead be a :data:`Read` giving the three (Spark's micro-batch, read by
        the foreachBatch function): it is called only for a batch not yet checkpointed, before
        the intake's back-pressure and the worker's pause."""
        started = time.time()
        if self._started is not None:
            gap = started - self._started
            self.period_s = gap if self.period_s is None else 0.8 * self.period_s + 0.2 * gap
        self._started = started
        try:
            return self._process(table, batch_id, parts, later, started)
        finally:
            self._returned = time.time()

    def _process(
        self,
        table: pa.Table,
        batch_id: int,
        parts: dict[str, tuple[pa.Table, float]] | None,
        later: Callable[[], dict[str, tuple[pa.Table, float]]] | None,
        started: float,
    ) -> dict[str, Any] | None:
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
            if callable(table):
                # the worker runs on while Spark hands the batch over: on a short machine the
                # executor needs that time (pausing it for the read starved the lower classes)
                table, parts, later = table()
            admitted = self.admission.admit(self.worker, self.budget_s)
            self.life.step("trigger")
            if worker is not None:
                self._worker_batch = batch_id  # its pause is batch_id's "in_pause"
                worker.pause()  # from here until resume() this thread alone touches the executor
            return self._trigger(table, batch_id, started, admitted, parts or {}, later)
        except BaseException:
            # This loop's memory is now ahead of its checkpoint: leave it stopped (a restart
            # restores the checkpoint into a fresh loop and replays the batch).
            self.life.step("fail")
            if worker is not None:
                worker.close()
            raise
        finally:
            self._release_worker()  # once per trigger, however it ended

    def _release_worker(self) -> None:
        """Hand the executor back to the continuous worker (once per trigger; not after close())."""
        self.life.step("hand back", then=self.worker.resume if self.worker is not None else None)

    def _trigger(
        self,
        table: pa.Table,
        batch_id: int,
        started: float,
        admitted: tuple[float, RunReport],
        parts: dict[str, tuple[pa.Table, float]],
        later: Callable[[], dict[str, tuple[pa.Table, float]]] | None = None,
    ) -> dict[str, Any]:
        self._fault("before_ingest", batch_id)
        t0 = time.perf_counter()
        batch_start = micro_batch_start(started, self._returned, self.config.interval_s)
        stream = self.ingest.stream
        first = self.executor.next_seq(stream)
        came = self.ingest(table, batch_id, started)
        self.ingest_log.add(stream, first, self.executor.next_seq(stream) - first, batch_start, started, time.time())
        spark_parts = self.ingest.spark_parts(parts, started, self.ingest_log, batch_start)
        self.service.observe(came.newest if math.isfinite(came.newest) else started)
        # The top class's round always runs when its budget is above 0 (serve_by_class), and
        # calls after_top then: only so may the shedding wait for it.
        top_s = self.config.top_class_s_for(self.period_s)
        budget = top_s if self.worker is not None else self.budget_s
        shed_later = self.shed_after_top and min(top_s, budget) > 0
        shed_dead, shed = (None, {}) if shed_later else self.service.shed(self.executor.state, batch_id)
        self.phase_s["ingest"] += time.perf_counter() - t0
        waited, admit_report = admitted
        # an available-now run reads what is there and ends: how far behind it is says nothing
        # (a backfill of old rows would read as years behind)
        timed = self.config.interval_s is not None
        behind = self.backlog.observe(started, came.rows_in, came.newest) if timed else dict.fromkeys(BEHIND, math.nan)
        backlog = {**behind, "intakeWaitS": waited}
        if math.isinf(backlog["catchUpEtaS"]):
            self.admission.warn(f"{catch_up_line(backlog)}: {behind_cause(waited)}")
        self._fault("after_ingest", batch_id)
        served = self.worker.take_counters() if self.worker is not None else RunReport()
        served.add(admit_report)
        # The top classes first, so what they have queued is written by this trigger; with the
        # continuous worker the rest is its, else the strategy serves the rest of the budget.
        # the top class's rows of this batch are written as soon as it is served: before the lower
        # classes are served or their Spark parts evaluated, and before the commit writes the rest;
        # so are each further class's above the lowest, once its round is done (class C's rows do
        # not wait for class N's round and the commit)
        write_top = self.early.write_now if self.early is not None else None
        shed_box: list[tuple[pa.Table | None, dict[str, int]]] = []

        def after_top() -> None:
            if write_top is not None:
                write_top()
            t1 = time.perf_counter()
            shed_box.append(self.service.shed(self.executor.state, batch_id))
            self.phase_s["ingest"] += time.perf_counter() - t1

        report = serve_trigger(
            self.executor,
            self.levels,
            top_s,
            budget,
            after_top if shed_later else write_top,
            after_level=write_top,
        )
        if shed_later:
            shed_dead, shed = shed_box[0]
        if later is not None:
            t1 = time.perf_counter()
            lower = later()
            self.phase_s["spark"] += time.perf_counter() - t1
            t1 = time.perf_counter()
            for query, done in self.ingest.spark_parts(lower, started, self.ingest_log, batch_start).items():
                rows, secs = spark_parts.get(query, (0, 0.0))
                spark_parts[query] = (rows + done[0], secs + done[1])
            self.phase_s["ingest"] += time.perf_counter() - t1
        # What is due at the trigger's end (update-mode aggregates: each key changed since the
        # last trigger, once) goes into this trigger's outputs.
        report.add(self.executor.end_trigger())
        self._fault("after_run", batch_id)
        served.add(report)
        dead = _concat_dead(came.dead, shed_dead)
        return self._commit(batch_id, started, came.rows_in, served, dead, backlog, spark_parts, shed)

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
            if self.worker is not None:  # and the commit below hands nothing back: no trigger took it
                self.worker.pause()
                self.worker.close()
                served = self.worker.take_counters()
            started = time.time()
            served.add(self.executor.finish(budget_s))
            progress = self._commit(self.last_batch + 1, started, 0, served, None)
            self.sink.flush()  # the outputs are whole on disk when finish returns
            return progress
        except BaseException:
            self.life.step("fail")
            raise

    def close(self) -> None:
        """Stop the continuous worker and join its thread (nothing to do otherwise). What it
        produced since the last trigger is not written: a restart redoes it from the checkpoint.
        A trigger still running when the stream is stopped ends without handing the executor
        back to the worker; :meth:`reopen` (a new start) allows it again. The sink's background
        work on final batches (a compaction) is waited for."""
        self.life.step("close")
        if self.worker is not None:
            self.worker.close()
        self.sink.flush()  # a compaction in flight ends before the stream is said stopped

    def reopen(self) -> None:
        """After :meth:`close`: triggers hand the executor to the worker again."""
        self.life.step("reopen")

    def _fault(self, point: str, batch_id: int) -> None:
        if batch_id in self.config.faults.get(point, ()):
            self._kill(point, batch_id)

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
        shed: dict[str, int] | None = None,
    ) -> dict[str, Any]:
        """Write what the executor produced since the last trigger (``served``: what it did
        meanwhile), checkpoint, and report batch ``batch_id``: the :class:`Commit` is taken while
        the executor is still, the executor handed back, then the dead letters (``dead``: the
        batch's bad rows and the rows ``shed`` counts), the sink and the checkpoint are written,
        in that order, before ``foreachBatch`` returns."""
        self.phase_s["executor"] += served.seconds
        shed = shed or {}
        # shed rows are dead letters of rows taken in earlier: not part of this batch's input
        dead_rows = (0 if dead is None else dead.num_rows) - sum(shed.values())
        t0 = time.perf_counter()
        state = {"dead_lettered_total": self.dead_lettered_total + dead_rows, "stream_time": self.service.stream_time}
        commit = Commit.take(batch_id, self.executor, self.store, self.early, self.scheduler, self.compiled.plan, state)
        t_snap = time.perf_counter()
        self._release_worker()
        if self.dead_letter is not None:
            self.dead_letter.write(batch_id, dead)
        rows_out, delays, parts = self.writer.write(batch_id, commit)
        t1 = time.perf_counter()
        self.phase_s["sink"] += t1 - t_snap
        self._fault("after_sink", batch_id)
        self.store.save(batch_id, commit.queues, commit.state)
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
            served=served,
            rows_out=rows_out,
            delays=delays,
            continuous=self.worker is not None,
            state=commit.queued,
            strategy=commit.strategy,
            backlog={**(backlog or {}), "queuedMemoryBytes": float(commit.spilled[0]), "spilledBytes": float(commit.spilled[1])},
            spark_parts=spark_parts,
            query_columns=self.writer.query_columns(commit, delays, parts, shed),
        )
        self.service.check_capacity(self.executor.state, progress)
        self.phase_s["progress"] += time.perf_counter() - t2
        self._fault("after_progress", batch_id)
        return progress


def _concat_dead(*tables: pa.Table | None) -> pa.Table | None:
    present = [t for t in tables if t is not None and t.num_rows]
    if not present:
        return next((t for t in tables if t is not None), None)
    return present[0] if len(present) == 1 else pa.concat_tables(present)
