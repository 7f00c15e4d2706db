"""One shard of the sharded lane, without Spark: restore from a state blob, serve, snapshot.

The sharded lane (:mod:`sparkqos.spark.sharded`) runs one sparkqos executor per shard inside a
Spark task; between micro-batches its queues, operator state and strategy/controller state live
in Spark's state store as one blob (:func:`~sparkqos.runtime.checkpoint.checkpoint_bytes`: the
JSON state and one Arrow IPC stream per non-empty queue), so Spark's checkpoint, not ours, makes
the lane exactly-once. What runs inside the task is here, testable on Arrow tables alone:

>>> import pyarrow as pa
>>> from sparkqos.compile.builder import QuerySet
>>> from sparkqos.executor.expressions import col
>>> from sparkqos.runtime.config import RunConfig
>>> qs = QuerySet()
>>> _ = qs.stream("s", {"k": pa.int64(), "v": pa.float64()}).where(col("v") > 1.0).sink("big")
>>> work = ShardWork(qs.build(), RunConfig(checkpoint="/tmp/unused", strategy="fifo"), shards=2)
>>> step = work.step(0, None, [pa.table({"k": [1, 2], "v": [0.5, 3.0]})], now=100.0)
>>> step.outputs["big"].column("v").to_pylist(), step.metrics["step"], step.backlog
([3.0], 0, False)
>>> work.step(0, step.state, [], now=101.0).metrics["step"]
1
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from sparkqos.compile.shardable import refuse_spark_parts
from sparkqos.errors import RunnerError, check_number
from sparkqos.executor.loop import Executor, RunReport
from sparkqos.executor.plan import CompiledPlan
from sparkqos.io.deadletter import RowChecks
from sparkqos.runtime.assembly import priority_levels, serve_trigger, stream_of
from sparkqos.runtime.checkpoint import checkpoint_bytes, decode_state, encode_state, read_checkpoint_bytes
from sparkqos.runtime.config import RunConfig
from sparkqos.runtime.early import above_the_lowest
from sparkqos.runtime.ingest import ingest
from sparkqos.runtime.progress import strategy_in_force

__all__ = ["BEHIND_BUDGETS", "FLOOR_SHARE", "STATE_COMPRESSION", "ShardStep", "ShardWork", "serve_budget_s", "shard_seed"]

#: The codec of the queues' Arrow streams in a shard's state blob. The blob crosses the state
#: store's path whole at every micro-batch: JVM to the shard's Python worker (pickled as a latin-1
#: string), back (unpickled into the store), into the store's delta file. Zstandard shrinks the
#: queues of a sensor backlog about fourfold (5.9 MB to 1.5 MB) for about 20 ms more CPU to encode
#: and decode, where the smaller blob spends about 100 ms less of the task's JVM and Python CPU.
STATE_COMPRESSION = "zstd"

#: The share of a backlogged shard's time its micro-batch's fixed floor may take
#: (:func:`serve_budget_s`): planning, the logs, the pack stage and shuffle, the state's way in
#: and out, the commit and the collect, which every micro-batch pays whatever its work.
FLOOR_SHARE = 0.2
#: A shard serves at most this many budgets in one micro-batch, so a backlog never holds the next
#: micro-batch's input (and its class H rows) for more than a few triggers.
BEHIND_BUDGETS = 4.0


def serve_budget_s(budget_s: float, waited_s: float | None) -> float:
    """How long a shard serves in a micro-batch: its budget, or — when it waited ``waited_s``
    seconds between the end of its last serve and the start of this one (the micro-batch's floor)
    — long enough that the floor is at most :data:`FLOOR_SHARE` of its time, up to
    :data:`BEHIND_BUDGETS` budgets. The serve ends as soon as nothing can run, so only a shard
    with more queued than a budget serves longer: a shard behind its input then turns more of
    each micro-batch into work, as the driver lane's continuous worker serves between triggers.

    >>> serve_budget_s(1.0, None), serve_budget_s(1.0, 0.1), serve_budget_s(1.0, 0.5), serve_budget_s(1.0, 3.0)
    (1.0, 1.0, 2.0, 4.0)
    """
    if waited_s is None or waited_s <= 0:
        return budget_s
    return min(max(budget_s, waited_s * (1 - FLOOR_SHARE) / FLOOR_SHARE), BEHIND_BUDGETS * budget_s)


def shard_seed(seed: int | None, shard: int, step: int) -> int:
    """The seed of ``shard``'s random draws in its micro-batch ``step``: a hash of all three, so
    shards draw independently and a replayed micro-batch (restored from the same state, same
    step) draws the same.

    >>> shard_seed(0, 1, 5) == shard_seed(0, 1, 5), shard_seed(0, 1, 5) == shard_seed(0, 2, 5)
    (True, False)
    """
    digest = hashlib.blake2b(f"{seed}/{shard}/{step}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


@dataclass
class ShardStep:
    """What one micro-batch of a shard gives back: the new state blob, the outputs of every
    query (with the executor's ``__arrival`` column, from which the driver takes delays), the
    rows its checks rejected, the shard's metrics (JSON-able), whether work is left, and the
    outputs it handed to ``early`` (:meth:`ShardWork.step`; not in ``outputs``)."""

    state: bytes
    outputs: dict[str, pa.Table]
    dead: pa.Table | None
    metrics: dict[str, Any] = field(default_factory=dict)
    backlog: bool = False
    early: dict[str, pa.Table] = field(default_factory=dict)


class ShardWork:
    """The work of every shard: the compiled plan and the run's options, pickled to Spark's
    executors once when the stream starts. :meth:`step` serves one shard's micro-batch,
    :meth:`finish` drains a shard at the end of a finite input."""

    def __init__(self, compiled: CompiledPlan, config: RunConfig, shards: int):
        check_number("shards", shards, low=1, integer=True, error=RunnerError)
        if config.shed:
            raise RunnerError(
                "shed= runs on the driver lane only: a shard has no dead-letter table of its own to write shed rows to",
                parameter="shed",
                value=dict(config.shed),
                expected="no shed= with shards=",
            )
        refuse_spark_parts(compiled)
        stream, arrival_col = stream_of(compiled, config)
        self.compiled = compiled
        self.config = config
        self.shards = int(shards)
        self.stream = stream
        self.arrival_col = arrival_col
        self.checks = config.input.checks if config.input.checks is not None else RowChecks()
        self.seed = config.strategy.params.get("seed", 0)
        self.levels = priority_levels(compiled) if config.strategy.class_shares else []
        #: the queries whose rows a step hands to ``early`` once the top class is served
        self.early_queries = above_the_lowest(compiled.plan) if len(self.levels) > 1 else ()
        # a shard is one Spark task on one core: no cluster threads, one thread per run, unless asked for
        options = config.executor
        if options.cluster_threads is None:
            options = dataclasses.replace(options, cluster_threads=0)
        self.options = options if options.threads is not None else dataclasses.replace(options, threads=1)

    def _executor(self, shard: int, blob: bytes | None) -> tuple[Executor, int, int, float | None]:
        """A fresh executor of the plan with the run's strategy, restored from ``blob``; with the
        shard's step count, the rows its checks rejected so far and when its last serve ended
        (None: the shard's first micro-batch)."""
        scheduler = self.config.make_scheduler(self.compiled.plan)
        executor = Executor(self.compiled.fresh(), scheduler, clock=time.time, options=self.options)
        step, dead_total, served_until = 0, 0, None
        if blob is not None:
            ckpt = read_checkpoint_bytes(blob, where=f"of shard {shard}")
            executor.load_state(decode_state(ckpt.state["executor"]))
            executor.load_queue_tables(ckpt.queues)
            step, dead_total = ckpt.state["step"] + 1, ckpt.state["dead_lettered_total"]
            served_until = ckpt.state.get("served_until")
        scheduler.reseed(shard_seed(self.seed, shard, step))
        return executor, step, dead_total, served_until

    def step(
        self,
        shard: int,
        blob: bytes | None,
        inputs: Sequence[pa.Table],
        now: float | None = None,
        early: Callable[[dict[str, pa.Table]], None] | None = None,
    ) -> ShardStep:
        """One micro-batch of ``shard``: restore its executor from ``blob`` (None: the shard's
        first), queue ``inputs`` (its rows of this micro-batch, in order), serve for the run's
        budget with its strategy (longer when the shard is behind: :func:`serve_budget_s`), and
        snapshot. With ``early``, once the top class is served
        (class shares on, several priority levels), the outputs so far of every class above the
        lowest go to ``early`` before the lower classes are served (and into the step's
        ``early``, not its ``outputs``)."""
        started = time.time() if now is None else now
        t0 = time.perf_counter()
        executor, step, dead_total, served_until = self._executor(shard, blob)
        rows_in, dead_parts = 0, []
        for table in inputs:
            rows_in += table.num_rows
            if table.num_rows:
                dead, _ = ingest(executor, self.compiled, self.stream, self.checks, table, step, self.arrival_col, started)
                dead_parts.append(dead)
        sent: dict[str, pa.Table] = {}

        def after_top() -> None:  # update-mode aggregates' rows are due at end_trigger, not here
            sent.update((q, t) for q, t in executor.take_outputs(self.early_queries).items() if t.num_rows)
            if sent:
                early(sent)

        # the top classes first (class shares on, several levels), so their rows are out in this
        # micro-batch; then the strategy for what is left of the budget
        budget_s = serve_budget_s(self.config.effective_budget_s, None if served_until is None else started - served_until)
        top_s = self.config.effective_top_class_s
        report = serve_trigger(executor, self.levels, top_s, budget_s, after_top if early and self.early_queries else None)
        report.add(executor.end_trigger())  # update-mode aggregates: each key changed in this micro-batch, once
        dead = pa.concat_tables(dead_parts) if dead_parts else None
        dead_rows = 0 if dead is None else dead.num_rows
        served_until = started + (time.perf_counter() - t0)  # on the clock of ``started``
        done = self._snapshot(executor, shard, step, dead_total + dead_rows, report, rows_in, dead, served_until)
        done.metrics["budgetS"] = budget_s
        done.early = sent
        return done

    def finish(self, shard: int, blob: bytes) -> ShardStep:
        """End of a finite input for ``shard``: drain every queue and flush windows and joins."""
        executor, step, dead_total, _ = self._executor(shard, blob)
        report = executor.finish()  # no budget: the answer on the finite input needs every row served
        done = self._snapshot(executor, shard, step, dead_total, report, 0, None, None)
        done.metrics["budgetS"] = None
        return done

    def _snapshot(
        self,
        executor: Executor,
        shard: int,
        step: int,
        dead_total: int,
        report: RunReport,
        rows_in: int,
        dead: pa.Table | None,
        served_until: float | None,
    ) -> ShardStep:
        outputs = executor.take_outputs()
        plan = self.compiled.plan
        state = executor.state
        queued_rows = {op: float(state.queued(op)) for op in plan.names}
        queued_bytes = {op: float(state.queued_bytes(op)) for op in plan.names}
        strategy, scores = strategy_in_force(executor.scheduler)
        blob = checkpoint_bytes(
            step,
            executor.queue_tables(),
            {
                "executor": encode_state(executor.to_state(queues=False)),
                "step": step,
                "dead_lettered_total": dead_total,
                "served_until": served_until,
            },
            compression=STATE_COMPRESSION,
        )
        executor.close()
        metrics = {
            "shard": shard,
            "step": step,
            "rowsIn": rows_in,
            "deadRows": 0 if dead is None else dead.num_rows,
            "consumed": int(report.rows_consumed),
            "busyS": float(report.seconds),
            "cpuS": float(report.cpu_s),
            "queuedRows": queued_rows,
            "queuedBytes": queued_bytes,
            "strategy": strategy,
            "scores": scores,
            "stateBytes": len(blob),
            # the Python worker that served, and its parent (the daemon of its executor JVM)
            "pid": os.getpid(),
            "ppid": os.getppid(),
        }
        backlog = sum(queued_rows.values()) > 0
        return ShardStep(blob, outputs, dead, json.loads(json.dumps(metrics, default=float)), backlog)
