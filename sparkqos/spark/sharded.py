"""The sharded lane: one sparkqos executor per shard, inside Spark tasks, state in Spark's state store.

``sparkqos.stream(df, queries, shards=K, shard_by="mmsi", ...)`` builds a :class:`ShardedStream`.
Each micro-batch:

1. every row gets its shard, ``pmod(hash(shard_by), K)`` (Spark's Murmur3, stable across runs);
   a ``mapInArrow`` over the input packs each input partition's rows of each shard into one
   Arrow IPC blob — rows cross the shuffle as a few blobs per shard, never one by one;
2. ``groupBy(shard).applyInPandasWithState`` runs one call per shard in a Spark task: it
   restores the shard's executor from its state (one blob: JSON state plus an Arrow IPC stream
   per queue, :func:`~sparkqos.runtime.checkpoint.checkpoint_bytes`), queues the new rows, serves
   them with the run's strategy for the budget (:class:`~sparkqos.runtime.shard.ShardWork`), and
   stores the new blob; it returns each query's outputs, the rejected rows and the shard's metrics
   as a few blob rows;
3. ``foreachBatch`` on the driver collects those rows (the job in which Spark commits the state)
   and writes every query's rows to the sink in one write, replacing that batch id whole, then
   folds the shards' metrics into one progress record and the metrics table. When shards end it
   with rows queued, it asks for a drain tick (:mod:`sparkqos.spark.ticks`): a second source,
   unioned with the packed input, whose offset moves only then, so Spark runs the next
   micro-batch for those shards without new input. With no input and no backlog Spark plans no
   micro-batch; under available-now the query ends once the input is read and the shards drained.

The classes above the lowest need not wait for step 3: a shard sends their rows to the driver as
soon as it has served its top class, and the driver writes them as a part of the micro-batch
while the shards go on (:mod:`sparkqos.spark.shard_early`, which says how that stays exactly-once).

Exactly-once is Spark's: a micro-batch the driver did not mark committed is replayed from the
state version before it, and the sink replaces whatever an earlier attempt wrote for it.

``applyInPandasWithState``, not ``transformWithStateInPandas``: its state travels inside the Arrow
stream with the rows (``transformWithStateInPandas`` makes a socket round trip per state call and
needs the RocksDB state store). It runs without a timeout: with a processing-time timeout Spark plans a
micro-batch at every trigger whether or not a key has timed out, and an available-now query
never ends; the drain ticks take its place.

The shards are Spark's state partitions: ``spark.sql.shuffle.partitions`` is set to ``K`` while
the query starts (Spark then keeps it in the checkpoint), and shard ``s`` is grouped under a key
that Spark's hash partitioning sends to partition ``s``, so K shards run as K parallel tasks.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupStateTimeout

from sparkqos.compile.shardable import check_shardable
from sparkqos.errors import RunnerError, check_number, not_one_of
from sparkqos.executor.expressions import ARRIVAL
from sparkqos.executor.operators.base import ipc_to_table, table_to_ipc
from sparkqos.executor.plan import CompiledPlan
from sparkqos.executor.report import RunReport
from sparkqos.io.sinks import Sink
from sparkqos.runtime.config import RunConfig
from sparkqos.runtime.early import sink_tables
from sparkqos.runtime.progress import ProgressReporter, QueuedSizes, strategy_in_force
from sparkqos.runtime.shard import ShardWork
from sparkqos.spark.batch import StopGate, stop_as_spark_reads_it, stop_between_triggers
from sparkqos.spark.shard_early import TOKEN_PROPERTY, EarlyBatch, EarlyInbox, send_early
from sparkqos.spark.ticks import TICK_PART, Ticks, TickSource, is_tick_offset

__all__ = ["ShardedStream", "mean_scores"]

#: The rows a shard hands back: ``kind`` is ``out`` (a query's rows), ``early`` (a query's rows
#: sent to the driver early, :mod:`sparkqos.spark.shard_early`), ``dead`` (rejected rows) or
#: ``metrics`` (JSON); ``blob`` is Arrow IPC, or the JSON text.
SHARD_ROWS = "kind string, query string, shard int, blob binary"
_PACKED = "key long, part int, seq long, blob binary"
_SHARD = "__shard"


def partition_keys(spark, shards: int) -> list[int]:
    """One grouping key per shard such that Spark's hash partitioning into ``shards`` partitions
    sends key ``i`` to partition ``i``: the shards then run as parallel tasks, none sharing one."""
    found: dict[int, int] = {}
    for row in spark.range(64 * shards).select("id", F.pmod(F.hash("id"), F.lit(shards)).alias("p")).collect():
        found.setdefault(row["p"], row["id"])
    return [found[i] for i in range(shards)]


def mean_scores(per_shard: list[dict[str, float | None]]) -> dict[str, float | None]:
    """The strategy scores of several shards folded into one record: each candidate's mean over
    the shards that scored it, None where none has (``adaptive`` scores a candidate only once it ran).

    >>> mean_scores([{"fifo": 0.25, "chain": None}, {"fifo": 0.75, "chain": None}, {}])
    {'fifo': 0.5, 'chain': None}
    """
    names = dict.fromkeys(k for scores in per_shard for k in scores)
    values = {k: [s[k] for s in per_shard if s.get(k) is not None] for k in names}
    return {k: float(np.mean(v)) if v else None for k, v in values.items()}


class _Pack:
    """``mapInArrow``: an input partition's rows → one IPC blob per shard, tagged with the
    partition and its position, so a shard queues its rows in the order the source gave them."""

    def __init__(self, keys: list[int]):
        self.keys = keys

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        part = TaskContext.get().partitionId()
        pieces: dict[int, list[pa.RecordBatch]] = {}
        for batch in batches:
            shard = batch.column(_SHARD).to_numpy(zero_copy_only=False)
            rows = batch.drop_columns([_SHARD])
            for s in np.unique(shard):
                pieces.setdefault(int(s), []).append(rows.filter(pa.array(shard == s)))
        for seq, (s, parts) in enumerate(sorted(pieces.items())):
            blob = table_to_ipc(pa.Table.from_batches(parts))
            yield pa.RecordBatch.from_pylist(
                [{"key": self.keys[s], "part": part, "seq": seq, "blob": blob}], schema=pa.schema(_schema(_PACKED))
            )


def _schema(ddl: str) -> list[tuple[str, pa.DataType]]:
    types = {"long": pa.int64(), "int": pa.int32(), "string": pa.string(), "binary": pa.binary()}
    return [(name, types[kind]) for name, kind in (f.split() for f in ddl.split(", "))]


def _shard_rows(shard: int, step: Any) -> pd.DataFrame:
    """A shard's outputs, rejected rows and metrics as the rows :data:`SHARD_ROWS` describes."""
    rows = [("out", q, shard, table_to_ipc(t)) for q, t in step.outputs.items() if t.num_rows]
    rows += [("early", q, shard, table_to_ipc(t)) for q, t in step.early.items()]
    if step.dead is not None and step.dead.num_rows:
        rows.append(("dead", "", shard, table_to_ipc(step.dead)))
    rows.append(("metrics", "", shard, json.dumps(step.metrics).encode()))
    return pd.DataFrame(rows, columns=["kind", "query", "shard", "blob"])


class _ServeShard:
    """``applyInPandasWithState``: one micro-batch of one shard (its state one binary column)."""

    def __init__(self, work: ShardWork, keys: list[int], fault: tuple[int, str] | None, early: tuple[str, int] | None = None):
        self.work = work
        self.shard_of = {k: i for i, k in enumerate(keys)}
        self.fault = fault  # (step, marker file): kill this Python worker once, mid-batch
        self.early = early  # the driver's EarlyInbox address (None: no early writes)

    def __call__(self, key: tuple, frames: Iterator[pd.DataFrame], state) -> Iterator[pd.DataFrame]:
        from pyspark import TaskContext

        shard = self.shard_of[int(key[0])]
        task = TaskContext.get()
        attempt = task.taskAttemptId()
        token = task.getLocalProperty(TOKEN_PROPERTY) if self.early is not None else None
        send = None
        if token:
            send = lambda outputs: send_early(self.early, token, shard, attempt, outputs)  # noqa: E731
        blob = state.get[0] if state.exists else None
        packed = [f[f["part"] != TICK_PART] for f in frames]  # a drain tick carries no rows
        packed = [f for f in packed if len(f)]
        pieces = pd.concat(packed).sort_values(["part", "seq"]) if packed else None
        inputs = [] if pieces is None else [ipc_to_table(b) for b in pieces["blob"]]
        step = self.work.step(shard, None if blob is None else bytes(blob), inputs, early=send)
        step.metrics["attempt"] = attempt
        self._maybe_kill(shard, step.metrics["step"])
        state.update((step.state,))
        yield _shard_rows(shard, step)

    def _maybe_kill(self, shard: int, step: int) -> None:
        if self.fault is None or self.fault[0] != step:
            return
        marker = Path(self.fault[1])
        if marker.exists():  # killed once already: the retried task goes on
            return
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(f"shard {shard} step {step}\n")
        print(f"sparkqos: fault injection: SIGKILL of shard {shard}'s worker in step {step}", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)


class _FinishShard:
    """``mapInArrow`` over the state store's rows: drain each shard at the end of a finite input."""

    def __init__(self, work: ShardWork, keys: list[int]):
        self.work = work
        self.shard_of = {k: i for i, k in enumerate(keys)}

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for key, blob in zip(batch.column("key").to_pylist(), batch.column("state").to_pylist(), strict=True):
                shard = self.shard_of[int(key)]
                frame = _shard_rows(shard, self.work.finish(shard, blob))
                yield pa.RecordBatch.from_pandas(frame, schema=pa.schema(_schema(SHARD_ROWS)), preserve_index=False)


class ShardedStream:
    """A query set served by K sparkqos executors inside Spark tasks (module docstring).

    ``start()`` returns the real ``StreamingQuery``; ``lastProgress`` / ``recentProgress`` give one
    record per trigger with every shard's work folded in (the same shape as the driver lane's,
    :mod:`sparkqos.runtime.progress`), also written to the metrics table under ``output``.
    ``finish()`` (after ``stop()``, or after an available-now query ended) drains every shard and
    flushes its windows, writing the last outputs as the next batch id; the stream cannot be
    started again after it.
    """

    def __init__(self, df, compiled: CompiledPlan, config: RunConfig, shards: int, shard_by: str):
        check_number("shards", shards, low=1, integer=True, error=RunnerError)
        if not isinstance(shard_by, str) or shard_by not in df.columns:
            raise not_one_of(
                RunnerError,
                f"shard_by must name a column of the stream, got {shard_by!r} (columns: {df.columns})",
                "shard_by",
                shard_by,
                df.columns,
            )
        if config.trigger.once:
            raise RunnerError(
                "the sharded lane runs on a processing-time or an available-now trigger: once=True runs one "
                "micro-batch, and a shard's backlog needs more; give Trigger(availableNow=True) to read what is "
                "there and drain the shards",
                parameter="trigger",
                value=config.trigger,
                expected="Trigger(processingTime=...) or Trigger(availableNow=True)",
            )
        check_shardable(compiled, shard_by)
        self.df = df
        self.compiled = compiled
        self.config = config
        self.shards = int(shards)
        self.shard_by = shard_by
        # Pickled to the executors: no callbacks, sinks or progress (they stay on the driver).
        outputs = config.outputs
        remote = config.replace(
            on_progress=None, on_delays=None, fault=None, outputs=dataclasses.replace(outputs, sink=None, dead_letter=None)
        )
        self.work = ShardWork(compiled, remote, self.shards)
        self.sink: Sink = outputs.make_sink(config.recovery.fsync)
        self.dead_letter = outputs.make_dead_letter(config.recovery.fsync)
        self.progress = ProgressReporter(config.name, compiled.plan, outputs.output, config.on_progress)
        #: reported for a trigger in which no shard ran (no input, no backlog)
        self._idle_strategy = strategy_in_force(config.make_scheduler(compiled.plan))
        self.phase_s: dict[str, float] = dict.fromkeys(("stateful", "sink", "progress"), 0.0)
        self.last_batch = -1
        self.query = None
        self._keys: list[int] | None = None
        self._gate = StopGate()  # a new one at each start()
        self._inbox: EarlyInbox | None = None  # while started, with early writes

    @property
    def output(self) -> Path | None:
        return self.config.outputs.output

    @property
    def recentProgress(self) -> list[dict[str, Any]]:
        return self.progress.recent

    @property
    def lastProgress(self) -> dict[str, Any] | None:
        return self.progress.last

    @property
    def _spark_checkpoint(self) -> Path:
        return self.config.recovery.checkpoint / "spark"

    @property
    def _finished_marker(self) -> Path:
        return self.config.recovery.checkpoint / "sparkqos-sharded-finished"

    @property
    def _ticks(self) -> Ticks:
        return Ticks(self.config.recovery.checkpoint / "sparkqos-drain-ticks.json")

    # -- Spark -----------------------------------------------------------------------------------
    def _shard_fault(self) -> tuple[int, str] | None:
        steps = self.config.faults.get("in_shard")
        if not steps:
            return None
        step = min(steps)
        return step, str(self.config.recovery.checkpoint / "faults" / f"in_shard-{step}")

    def restore(self) -> int:
        """The last batch Spark committed (-1: none), after which ``start()`` resumes: the shards'
        state is in Spark's state store and Spark restores it, so there is nothing to load here."""
        commits = [int(p.name) for p in (self._spark_checkpoint / "commits").glob("[0-9]*")]
        return max(commits, default=-1)

    def start(self):
        """Start the streaming query (Spark restores its state and replays an uncommitted batch)."""
        if self._finished_marker.exists():
            raise RunnerError(
                f"this sharded stream was drained by finish() ({self._finished_marker}); start a new one with a fresh checkpoint"
            )
        spark = self.df.sparkSession
        self._gate = StopGate()
        self._keys = partition_keys(spark, self.shards)
        keyed = self.df.withColumn(_SHARD, F.pmod(F.hash(F.col(self.shard_by)), F.lit(self.shards)).cast("int"))
        packed = keyed.mapInArrow(_Pack(self._keys), _PACKED)
        spark.dataSource.register(TickSource)
        ticks = (
            spark.readStream.format(TickSource.name())
            .option("path", str(self._ticks.path))
            .option("keys", ",".join(str(k) for k in self._keys))
            .load()
        )
        self._inbox = self._early_inbox(spark)
        early = None if self._inbox is None else self._inbox.address
        served = (
            packed.unionByName(ticks)
            .groupBy("key")
            .applyInPandasWithState(
                _ServeShard(self.work, self._keys, self._shard_fault(), early),
                SHARD_ROWS,
                "state binary",
                "append",
                GroupStateTimeout.NoTimeout,
            )
        )
        writer = (
            served.writeStream.foreachBatch(self._batch)
            .option("checkpointLocation", str(self._spark_checkpoint))
            .queryName(self.config.name)
            .trigger(**self.config.trigger.spark_kwargs())
        )
        previous = spark.conf.get("spark.sql.shuffle.partitions")
        spark.conf.set("spark.sql.shuffle.partitions", str(self.shards))  # the state partitions: one per shard
        try:
            self.query = writer.start()
        finally:
            spark.conf.set("spark.sql.shuffle.partitions", previous)
        return self.query

    def _early_inbox(self, spark) -> EarlyInbox | None:
        """The driver's end of the early writes (:mod:`sparkqos.spark.shard_early`), when a class
        stands above the lowest with class shares on, the sink takes parts, ``early_write_s`` is
        not 0 and the session has a SparkContext to hand the tasks a token (not under Spark Connect)."""
        if self._inbox is not None:
            return self._inbox
        continuous = self.config.continuous
        off = continuous is not None and continuous.early_write_s == 0
        if off or not (self.work.early_queries and self.sink.supports_parts):
            return None
        try:
            spark.sparkContext  # noqa: B018 - Spark Connect has none
        except Exception:  # noqa: BLE001
            return None
        return EarlyInbox(self.sink, spark.conf.get("spark.driver.host"))

    def stop(self, wait_s: float = 5.0) -> None:
        """Stop the streaming query between triggers (waiting up to ``wait_s`` for the running one;
        :func:`~sparkqos.spark.batch.stop_between_triggers`)."""
        stop_between_triggers(self.query, wait_s, self._gate)
        if self._inbox is not None:
            self._inbox.shutdown()
            self._inbox = None

    def _batch(self, batch_df, batch_id: int) -> None:
        with stop_as_spark_reads_it(batch_id):
            self._gate.enter(batch_df)  # a stop waiting for this trigger lands here, before its shards run
            started = time.time()
            t0 = time.perf_counter()
            early = None
            if self._inbox is not None:
                context = batch_df.sparkSession.sparkContext
                context.setLocalProperty(TOKEN_PROPERTY, self._inbox.open(batch_id))
            try:
                rows = batch_df.toArrow()  # the shards run here; Spark commits their state with this job
            finally:
                if self._inbox is not None:
                    early = self._inbox.close()
                    context.setLocalProperty(TOKEN_PROPERTY, None)
            self.phase_s["stateful"] += time.perf_counter() - t0
            self._fault("after_run", batch_id)
            progress = self._commit(batch_id, rows, started, early)
            backlog = [s["shard"] for s in progress["shards"] if s["queuedRows"]]
            if backlog:  # before Spark commits this batch: a replay of it asks again
                self._ticks.ask(backlog)

    def finish(self) -> dict[str, Any]:
        """End of a finite input (stop the query first, or let an available-now query end): drain
        every shard and flush its windows, as a Spark job over the state store's newest committed
        version, and write the outputs as the next batch."""
        if self.query is not None and self.query.isActive:
            raise RunnerError("finish(): stop() the streaming query first")
        if self._inbox is not None:  # an available-now query ends without stop()
            self._inbox.shutdown()
            self._inbox = None
        spark = self.df.sparkSession
        keys = self._keys if self._keys is not None else partition_keys(spark, self.shards)
        batch_id = self.restore() + 1
        if self._planned_with_input(batch_id):
            # its rows are in no committed state: the drain would lose them (Spark replays the
            # batch on start()); a batch of drain ticks only is redone by the drain under its id
            raise RunnerError(
                f"finish(): batch {batch_id} took new input but Spark did not commit it (the query stopped inside it); "
                "start() the stream again so Spark completes it, stop() it between triggers, then finish()"
            )
        started = time.time()
        if batch_id == 0:
            rows = pa.table({name: pa.array([], t) for name, t in _schema(SHARD_ROWS)})
        else:
            state = spark.read.format("statestore").load(str(self._spark_checkpoint))
            flat = state.select(F.col("key.key").alias("key"), F.col("value.groupState.state").alias("state"))
            rows = flat.mapInArrow(_FinishShard(self.work, keys), SHARD_ROWS).toArrow()
        progress = self._commit(batch_id, rows, started)
        self._finished_marker.write_text(f"{batch_id}\n")
        return progress

    def _planned_with_input(self, batch_id: int) -> bool:
        """Whether Spark's offset log holds batch ``batch_id`` with the input's offsets beyond the
        batch before it (a batch of new rows), not only the drain ticks' (a stop often falls inside
        a micro-batch that drains a backlog)."""
        offsets = self._spark_checkpoint / "offsets"
        planned = offsets / str(batch_id)
        if not planned.exists():
            return False
        before = offsets / str(batch_id - 1)
        if not before.exists():
            return True

        def sources(path: Path) -> list[str]:  # the log's lines: version, metadata, one per source
            return [line for line in path.read_text().splitlines()[2:] if not is_tick_offset(line)]

        return sources(planned) != sources(before)

    # -- the driver's part of a trigger ----------------------------------------------------------
    def _commit(self, batch_id: int, rows: pa.Table, started: float, early: EarlyBatch | None = None) -> dict[str, Any]:
        """Write the shards' outputs of batch ``batch_id`` (replacing it whole, or keeping the
        parts written early when they are exactly the early rows of the results), their dead
        letters, and the progress record folding their metrics."""
        t0 = time.perf_counter()
        kinds = rows.column("kind").to_pylist()
        queries = rows.column("query").to_pylist()
        shards = rows.column("shard").to_pylist()
        blobs = rows.column("blob").to_pylist()
        parts: dict[str, list[pa.Table]] = {q: [] for q in self.compiled.plan.queries}
        sent: dict[str, list[pa.Table]] = {q: [] for q in self.compiled.plan.queries}
        dead_parts, shard_metrics, sent_by = [], [], set()
        for kind, query, shard, blob in zip(kinds, queries, shards, blobs, strict=True):
            if kind == "out":
                parts[query].append(ipc_to_table(blob))
            elif kind == "early":
                sent[query].append(ipc_to_table(blob))
                sent_by.add(shard)
            elif kind == "dead":
                dead_parts.append(ipc_to_table(blob))
            else:
                shard_metrics.append(json.loads(blob))
        attempts = {m["shard"]: m["attempt"] for m in shard_metrics if m["shard"] in sent_by}
        keep = early is not None and bool(attempts) and early.kept(attempts)
        if not keep:  # the rows sent early are written with the rest, replacing any part
            parts = {q: sent[q] + ts for q, ts in parts.items()}
        outputs = {q: self._concat(q, ts) for q, ts in parts.items()}
        dead = None
        if dead_parts:
            dead = pa.concat_tables(dead_parts)
            dead = dead.set_column(0, "batch_id", pa.array(np.full(dead.num_rows, batch_id), pa.int64()))
            if self.dead_letter is None:
                raise RunnerError(
                    f"batch {batch_id}: {dead.num_rows} bad row(s), first: {dead.column('reason')[0].as_py()} "
                    "(give dead_letter= or output= to keep them)"
                )
        if self.dead_letter is not None:
            self.dead_letter.write(batch_id, dead)
        if keep:
            self.sink.write(batch_id, sink_tables(outputs), keep_parts=True)
        else:
            self.sink.write(batch_id, sink_tables(outputs))
        written = time.time()
        delays = {
            q: written - t.column(ARRIVAL).to_numpy(zero_copy_only=False) if t.num_rows else np.empty(0)
            for q, t in outputs.items()
        }
        rows_out = {q: t.num_rows for q, t in outputs.items()}
        if keep:  # the parts' rows count their delay from their own write
            for q, ds in early.parts.delays.items():
                delays[q] = np.concatenate([*ds, delays[q]])
                rows_out[q] += early.parts.rows[q]
        if self.config.on_delays is not None:
            self.config.on_delays(batch_id, delays)
        t1 = time.perf_counter()
        self.phase_s["sink"] += t1 - t0
        self._fault("after_sink", batch_id)
        progress = self._report(batch_id, started, shard_metrics, rows_out, delays)
        progress["earlyRows"] = sum(early.parts.rows.values()) if keep else 0
        self.last_batch = batch_id
        self.phase_s["progress"] += time.perf_counter() - t1
        self._fault("after_progress", batch_id)
        return progress

    def _concat(self, query: str, tables: list[pa.Table]) -> pa.Table:
        if tables:
            return pa.concat_tables(tables)
        schema = self.compiled.operators[self.compiled.root(query)].schema
        return schema.empty_table()

    def _report(self, batch_id: int, started: float, shards: list[dict[str, Any]], rows_out, delays) -> dict[str, Any]:
        """One progress record for the trigger: the shards' metrics summed (queues, rows, busy
        and CPU seconds), the strategy most shards ran and its mean scores."""
        plan = self.compiled.plan
        rows = {op: sum(m["queuedRows"][op] for m in shards) for op in plan.names}
        nbytes = {op: sum(m["queuedBytes"][op] for m in shards) for op in plan.names}
        ran = Counter(m["strategy"] for m in shards)
        strategy = ran.most_common(1)[0][0] if ran else self._idle_strategy[0]
        scores = mean_scores([m["scores"] for m in shards if m["strategy"] == strategy])
        progress = self.progress.report(
            batch_id,
            started,
            rows_in=sum(m["rowsIn"] for m in shards),
            dead_rows=sum(m["deadRows"] for m in shards),
            served=RunReport(
                rows_consumed=sum(m["consumed"] for m in shards),
                seconds=sum(m["busyS"] for m in shards),
                cpu_s=sum(m["cpuS"] for m in shards),
            ),
            rows_out=rows_out,
            delays=delays,
            state=QueuedSizes(rows, nbytes),
            strategy=(strategy, scores),
        )
        # each shard that ran: where, which of its micro-batches, its work and state size
        keep = ("shard", "step", "rowsIn", "consumed", "busyS", "strategy", "stateBytes", "pid", "ppid", "budgetS")
        progress["shards"] = [{k: m[k] for k in keep} | {"queuedRows": sum(m["queuedRows"].values())} for m in shards]
        return progress

    def _fault(self, point: str, batch_id: int) -> None:
        if batch_id in self.config.faults.get(point, ()):
            print(f"sparkqos: fault injection: SIGKILL at {point} of batch {batch_id}", file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
