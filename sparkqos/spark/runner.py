"""The foreachBatch runner: a streaming DataFrame + a query set + a strategy → a StreamingQuery.

Three parts, each testable alone:

* :class:`~sparkqos.runtime.config.RunConfig` — every option, validated when it is made;
* :class:`~sparkqos.runtime.trigger.TriggerLoop` — what one trigger does on an Arrow table (ingest,
  the strategy's share of work, sink, dead letters, checkpoint, progress), exactly-once across
  restarts, and no Spark;
* :class:`QosStream` (here) — the Spark adapter: ``foreachBatch`` hands each micro-batch to the
  loop as ``batch_df.toArrow()``, with Spark's checkpoint next to ours.

Fault injection for crash tests is an option like any other (``fault="after_sink:3"``, see
:mod:`sparkqos.runtime.config`); the job passes it in.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa

from sparkqos.compile.builder import QuerySet
from sparkqos.compile.explain import explain_compiled
from sparkqos.compile.spark_part import check_placement
from sparkqos.errors import RunnerError
from sparkqos.executor.options import ExecutorOptions
from sparkqos.executor.plan import CompiledPlan
from sparkqos.io.deadletter import DeadLetterSink, RowChecks
from sparkqos.io.sinks import Sink
from sparkqos.runtime.config import (
    FAULT_POINTS,
    NOT_FOR_STREAM,
    SHARDED_TRIGGER_S,
    UNSET,
    Continuous,
    Input,
    Outputs,
    Recovery,
    RunConfig,
    Storage,
    StrategyConfig,
    Trigger,
    parse_faults,
    refuse,
)
from sparkqos.runtime.intake import Intake
from sparkqos.runtime.progress import read_progress, strategy_in_force
from sparkqos.runtime.trigger import TriggerLoop
from sparkqos.schedulers.base import Scheduler
from sparkqos.sources.pyenv import check_python_workers
from sparkqos.spark.batch import BatchFunction, StopGate, stop_between_triggers
from sparkqos.spark.sharded import ShardedStream
from sparkqos.spark.transforms import Transform, compile_transforms, is_transforms
from sparkqos.spark.warmup import warm_up

__all__ = ["FAULT_POINTS", "QosStream", "RunConfig", "RunnerError", "ShardedStream", "parse_faults", "stream"]


class QosStream:
    """A continuous query set served by a sparkqos strategy inside Spark's micro-batches.

    Build it with :func:`sparkqos.stream` (options: :class:`~sparkqos.runtime.config.RunConfig`);
    ``start()`` returns the real ``StreamingQuery``. ``lastProgress`` / ``recentProgress`` give the
    metrics of the last triggers in Spark's style (plus ``queuedRows``, ``delayMsP99``,
    ``strategy``…, see :mod:`sparkqos.runtime.progress`); ``on_progress`` is called with each, and
    ``on_delays(batch_id, {query: seconds})`` with every output row's delay. ``process`` /
    ``finish`` / ``restore`` are the :class:`~sparkqos.runtime.trigger.TriggerLoop`'s.
    """

    def __init__(self, df, queries: QuerySet | CompiledPlan, config: RunConfig | None = None, **options: Any):
        if not getattr(df, "isStreaming", False):
            raise RunnerError(
                "sparkqos.stream needs a streaming DataFrame (spark.readStream…); "
                "for a static DataFrame run the executor directly (sparkqos.executor.replay)"
            )
        if config is None:
            config = RunConfig(**options)
        elif options:
            raise RunnerError(f"give options in the RunConfig or as keywords, not both (got {sorted(options)})")
        self.df = df
        self.config = config
        self.loop = TriggerLoop(queries, config)
        self.query = None
        self._gate: StopGate | None = None
        #: Reads and seconds of the last start's warm-up (:mod:`sparkqos.spark.warmup`).
        self.warmed_up: tuple[int, float] = (0, 0.0)

    # -- what the loop holds, under the names jobs and listeners use -----------------------------
    @property
    def name(self) -> str:
        return self.config.name

    @property
    def output(self) -> Path | None:
        return self.config.outputs.output

    @property
    def compiled(self) -> CompiledPlan:
        return self.loop.compiled

    @property
    def scheduler(self) -> Scheduler:
        return self.loop.scheduler

    @property
    def last_batch(self) -> int:
        return self.loop.last_batch

    @property
    def recentProgress(self) -> list[dict[str, Any]]:
        """The newest progress records, oldest first. This handle's loop has them when the
        triggers run in this process; where they run elsewhere (Spark Connect: the server's
        Python worker) they are read back from the metrics table, which needs ``output``."""
        output = self.config.outputs.output
        if self.loop.progress.recent or output is None:
            return self.loop.progress.recent
        return read_progress(output, self.config.name)

    @property
    def lastProgress(self) -> dict[str, Any] | None:
        recent = self.recentProgress
        return recent[-1] if recent else None

    def strategy_in_force(self) -> tuple[str, dict[str, float]]:
        return strategy_in_force(self.loop.scheduler)

    def explain(self, print_: bool = True) -> str:
        """Each query's operators and where each runs (native, or Spark inside the micro-batch),
        as :func:`sparkqos.explain` prints them; printed unless ``print_`` is False, and returned."""
        text = explain_compiled(self.loop.compiled)
        if print_:
            print(text)
        return text

    # -- the trigger loop ------------------------------------------------------------------------
    def restore(self) -> int:
        """Load the newest checkpoint (if any); returns its batch id or -1. A torn or corrupt
        checkpoint raises CheckpointCorrupt instead of starting empty."""
        return self.loop.restore()

    def process(self, table: pa.Table, batch_id: int) -> dict[str, Any] | None:
        """One trigger on an Arrow table (what ``foreachBatch`` does after ``toArrow()``)."""
        return self.loop.process(table, batch_id)

    def finish(self, budget_s: float | None = None) -> dict[str, Any]:
        """End of a finite input: drain every queue, flush windows and joins, and write the last
        outputs as batch ``last + 1`` (stop the StreamingQuery first).

        Where the batches ran in another process (Spark Connect runs foreachBatch in the server's
        Python worker), this handle's loop never saw them: it is stale once the checkpoint holds a
        newer batch than it committed, and a fresh loop restored from that checkpoint drains.
        After a failed trigger it raises: draining without the failed batch would write the next
        batch id, and Spark's replay of the failed batch would then be skipped as committed."""
        if self.loop.failed:
            raise RunnerError(
                "finish(): the last trigger failed, so its batch is in neither the checkpoint nor the sink; "
                "start() the stream again (Spark replays that batch into a fresh loop), stop it, then finish()"
            )
        self._fresh_loop_if_stale()
        return self.loop.finish(budget_s)

    def _fresh_loop_if_stale(self) -> None:
        """Replace this handle's loop with a fresh one (restored from the checkpoint when used)
        when its memory no longer matches the checkpoint: a trigger of it failed after changing
        it (rows ingested, operators run), or another process committed newer batches. Reusing
        it would take a replayed batch's rows a second time, or miss what the other process
        did. The recent progress records are kept."""
        batches = self.loop.store.batches()
        if self.loop.failed or (self.loop.restored and batches and batches[-1] > self.loop.last_batch):
            old = self.loop
            old.close()
            self.loop = TriggerLoop(old.compiled, self.config)
            self.loop.progress.recent = list(old.progress.recent)

    # -- Spark -----------------------------------------------------------------------------------
    def start(self):
        """Restore from the checkpoint and start the streaming query; returns the StreamingQuery.
        After a failed trigger (the query stopped with its error) this starts from the last
        checkpoint in a fresh loop, and Spark replays the failed batch into it."""
        self._fresh_loop_if_stale()
        self.restore()
        self.loop.reopen()
        self._gate = StopGate()
        writer = (
            self.df.writeStream.foreachBatch(BatchFunction(self.loop.compiled, self.config, self.loop, self._gate))
            .option("checkpointLocation", str(self.config.recovery.checkpoint / "spark"))
            .queryName(self.config.name)
            .trigger(**self.config.trigger.spark_kwargs())
        )
        self.warmed_up = self._warm_up()
        self.query = writer.start()
        return self.query

    def _warm_up(self) -> tuple[int, float]:
        """Warm Spark's read path up on synthetic rows (:mod:`sparkqos.spark.warmup`) when the
        trigger is processing-time; the reads done and their seconds."""
        if self.config.interval_s is None:
            return 0, 0.0
        schema = self.loop.compiled.sources[self.loop.ingest.stream]
        return warm_up(self.df.sparkSession, schema, self.config.input.warm_up_s)

    def stop(self, wait_s: float = 60.0) -> None:
        """Stop the streaming query between triggers (:func:`~sparkqos.spark.batch.stop_between_triggers`),
        then the continuous worker, if any, and join it."""
        stop_between_triggers(self.query, wait_s, self._gate)
        self.loop.close()


def stream(
    df,
    queries: QuerySet | CompiledPlan | Mapping[str, Transform],
    strategy: StrategyConfig | str | Scheduler = "adaptive",
    *,
    # the queries (transforms given by name)
    classes: Mapping[str, str] | None = None,
    priorities: Mapping[str, float] | None = None,
    placement: str = "auto",
    # the strategy (StrategyConfig's fields)
    qos: Any = UNSET,
    class_shares: bool | None = UNSET,
    strategy_params: Mapping[str, Any] | None = UNSET,
    # the executor (ExecutorOptions, or its fields)
    executor: ExecutorOptions | None = None,
    budget_s: float | None = UNSET,
    whole_batches: bool = UNSET,
    cluster_threads: int | None = UNSET,
    threads: int | None = UNSET,
    overhead_share: float | None = UNSET,
    ratio: float = UNSET,
    threshold: int = UNSET,
    w: float = UNSET,
    tolerance: float = UNSET,
    stats_period: float = UNSET,
    starvation_limit: int = UNSET,
    memory_limit_bytes: int | None = UNSET,
    spill_dir: str | None = UNSET,
    executor_args: Mapping[str, Any] | None = UNSET,
    # sparkqos.run only: how the finite input arrives and is served
    batch_rows: int = 256,
    units_between: int = 3,
    # sparkqos.stream only: storage and recovery, trigger, worker, input, intake, reporting, lane
    storage: Storage | None = None,
    recovery: Recovery | None = None,
    outputs: Outputs | None = None,
    checkpoint: str | Path = UNSET,
    output: str | Path | None = UNSET,
    sink: Sink | None = UNSET,
    dead_letter: DeadLetterSink | str | Path | None = UNSET,
    keep_checkpoints: int = UNSET,
    fsync: bool = UNSET,
    trigger: Trigger | None = None,
    trigger_s: float | str = UNSET,
    continuous: Continuous | bool | None = True,
    slice_s: float | None = UNSET,
    top_class_s: float | None = UNSET,
    early_write_s: float | None = UNSET,
    worker_nice: int = UNSET,
    input: Input | None = None,  # noqa: A002 - the part's name
    stream: str | None = UNSET,
    arrival_col: str | None = UNSET,
    checks: RowChecks | None = UNSET,
    warm_up_s: float = UNSET,
    intake: Intake | None = None,
    name: str = "sparkqos",
    on_progress: Callable[[dict[str, Any]], None] | None = None,
    on_delays: Callable[[int, dict[str, Any]], None] | None = None,
    fault: str | None = None,
    slo: Mapping[str, str | float] | None = None,
    shed: Mapping[str, str | float] | None = None,
    shards: int | None = None,
    shard_by: str | None = None,
) -> QosStream | ShardedStream:
    """Serve ``queries`` (a :class:`QuerySet`, its build, or query name → PySpark transform)
    over the streaming DataFrame ``df`` with a sparkqos strategy; ``.start()`` gives the
    StreamingQuery. The keywords, shared with :func:`sparkqos.run`, are the transforms' ``classes``
    (query → class), ``priorities`` (class → priority) and ``placement`` (``"auto"``,
    ``"native"``, ``"spark"``: :mod:`sparkqos.compile.spark_part`), then
    :class:`~sparkqos.runtime.config.RunConfig`'s parts and their shorthands (each one field of a
    part, :data:`~sparkqos.runtime.config.SHORTHANDS`; ``UNSET``: not given). ``batch_rows`` and
    ``units_between`` are run's, refused here. The strategy is sized to ``budget_s``, else the
    trigger's interval (0.1 s by default; 0.25 s on the sharded lane). ``shards=K, shard_by="column"`` runs the sharded lane
    (:class:`~sparkqos.spark.sharded.ShardedStream`)."""
    return _stream(df, queries, {k: v for k, v in locals().items() if k not in ("df", "queries")})


def _stream(
    df, queries: QuerySet | CompiledPlan | Mapping[str, Transform], keywords: dict[str, Any]
) -> QosStream | ShardedStream:
    """:func:`stream` on its ``keywords``. Transforms see every row Spark would give them: unless
    ``checks`` says otherwise, NaN and ±inf are values, not dead letters. The sharded lane runs K
    executors inside Spark tasks, each serving the rows of its values of ``shard_by``, their state
    in Spark's state store; every query must keep its state per ``shard_by``
    (:mod:`sparkqos.compile.shardable`), else ``NotShardable``."""
    refuse("sparkqos.stream", keywords, _DEFAULTS, NOT_FOR_STREAM)
    own = ("classes", "priorities", "placement", "batch_rows", "units_between", "shards", "shard_by")
    options = {k: v for k, v in keywords.items() if k not in own and v is not UNSET}
    classes, priorities, placement = keywords["classes"], keywords["priorities"], keywords["placement"]
    shards, shard_by = keywords["shards"], keywords["shard_by"]
    if (shards is None) != (shard_by is None):
        missing = "shard_by" if shard_by is None else "shards"
        raise RunnerError(
            f"the sharded lane needs both shards= and shard_by=; {missing} is missing",
            parameter=missing,
            value=None,
            expected="shards=K with shard_by='column'",
        )
    check_python_workers(df.sparkSession)  # before anything reads: Spark's workers must run sparkqos
    check_placement(placement)
    if shards is not None and options.get("trigger") is None and "trigger_s" not in options:
        options["trigger_s"] = SHARDED_TRIGGER_S  # its micro-batches carry a floor of their own
    config = RunConfig(**options)
    if is_transforms(queries) and config.input.checks is None:
        config = config.replace(input=dataclasses.replace(config.input, checks=RowChecks(finite=False)))
    if is_transforms(queries):
        if not getattr(df, "isStreaming", False):
            raise RunnerError(
                "sparkqos.stream needs a streaming DataFrame (spark.readStream…); for a static DataFrame use sparkqos.run"
            )
        queries = compile_transforms(df, queries, classes, priorities, placement)
    elif classes is not None or priorities is not None:
        raise RunnerError(
            "classes= and priorities= go with queries given as PySpark transforms; a QuerySet declares its own",
            parameter="classes" if classes is not None else "priorities",
            value=classes if classes is not None else priorities,
            expected="None with a QuerySet",
        )
    if shards is not None:
        compiled = queries.build() if isinstance(queries, QuerySet) else queries
        return ShardedStream(df, compiled, config, shards, shard_by)
    return QosStream(df, queries, config)


#: :func:`stream`'s keywords and their defaults (what "not given" is for each).
_DEFAULTS = {n: p.default for n, p in inspect.signature(stream).parameters.items() if p.default is not p.empty}
