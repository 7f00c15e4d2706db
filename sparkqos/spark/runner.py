"""The foreachBatch runner: a streaming DataFrame + a query set + a strategy → a StreamingQuery.

Each trigger (DESIGN.md, Spark integration):

1. ``batch_df.toArrow()``; each row's arrival is the source's event timestamp column when there is
   one (``ts`` by default), else the trigger's start;
2. the rows are queued at the leaves of every query that reads the stream (each query its copy);
3. the executor serves units the strategy picks for the trigger's budget (default: the trigger
   interval); what is left stays queued — that backlog is what the strategies manage;
4. the trigger's outputs of all queries go to the sink in one call, idempotent per batch id;
5. leftover queues, operator state and strategy/controller state are checkpointed atomically
   before ``foreachBatch`` returns, then the metrics rows are written.

Exactly-once: a batch Spark replays after a crash either was checkpointed by us (we skip it: its
outputs are in the sink, its effect in our state) or was not (we restore the checkpoint of the
batch before it and run it again; the sink replaces whatever an earlier attempt wrote).
Bad input never stops the query: rows that do not fit the stream's schema or break its
``checks`` (:class:`~sparkqos.spark.deadletter.RowChecks`) go to the dead-letter table
(``<output>/deadletter``) with their reason, in the same trigger, replaced like outputs on replay;
the progress counts them (``numInputRows`` = ``processedRows`` + ``deadLetteredRows``).

Fault injection for crash tests: ``fault="after_sink:3"`` (or the environment variable
``SPARKQOS_FAULT`` when the job does not pass ``fault``) SIGKILLs this process at that point of
batch 3; points are :data:`FAULT_POINTS`, several may be given comma-separated.
Only this package imports pyspark.
"""

from __future__ import annotations

import base64
import math
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkqos import schedulers
from sparkqos.report import metrics
from sparkqos.executor.loop import EMIT, Executor
from sparkqos.errors import RunnerError, SchemaMismatch
from sparkqos.executor.expressions import ARRIVAL, INTERNAL
from sparkqos.executor.plan import CompiledPlan
from sparkqos.query.builder import QuerySet
from sparkqos.schedulers.base import Scheduler
from sparkqos.spark.checkpoint import CheckpointStore
from sparkqos.spark.deadletter import DeadLetterSink, RowChecks
from sparkqos.spark.sinks import MemorySink, ParquetSink, Sink

#: Arrival column looked for when none is named.
DEFAULT_ARRIVAL_COLUMN = "ts"

#: Where a crash can be injected, in the order a trigger passes them.
FAULT_POINTS = ("before_ingest", "after_ingest", "after_run", "after_sink", "after_checkpoint", "after_progress")


def parse_faults(text: str | None) -> dict[str, set[int]]:
    """``"after_sink:3,before_ingest:5"`` → ``{"after_sink": {3}, "before_ingest": {5}}``.

    >>> parse_faults("after_sink:3, after_sink:4")
    {'after_sink': {3, 4}}
    """
    out: dict[str, set[int]] = {}
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        point, _, batch = item.partition(":")
        if point not in FAULT_POINTS or not batch.strip().isdigit():
            raise RunnerError(f"fault {item!r} must be POINT:BATCH_ID with POINT one of {', '.join(FAULT_POINTS)}")
        out.setdefault(point, set()).add(int(batch))
    return out


def _b64(obj: Any) -> Any:
    """JSON-able copy of executor state: bytes become {"b64": ...}."""
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return {"b64": base64.b64encode(bytes(obj)).decode("ascii")}
    if isinstance(obj, dict):
        return {k: _b64(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_b64(v) for v in obj]
    return obj


def _unb64(obj: Any) -> Any:
    if isinstance(obj, dict):
        if set(obj) == {"b64"}:
            return base64.b64decode(obj["b64"])
        return {k: _unb64(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_unb64(v) for v in obj]
    return obj


def _seconds(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A timestamp or numeric column as float seconds since the epoch (dividing as Spark's
    ``cast(ts as double)`` does, so both engines see the same numbers)."""
    if pa.types.is_timestamp(column.type):
        per_second = {"s": 1.0, "ms": 1e3, "us": 1e6, "ns": 1e9}[column.type.unit]
        return pc.cast(column, pa.int64()).to_numpy(zero_copy_only=False).astype(np.float64) / per_second
    return pc.cast(column, pa.float64()).to_numpy(zero_copy_only=False)


class QosStream:
    """A continuous query set served by a sparkqos strategy inside Spark's micro-batches.

    Build it with :func:`sparkqos.stream`; ``start()`` returns the real ``StreamingQuery``.
    ``lastProgress`` / ``recentProgress`` give the metrics of the last triggers in Spark's style
    (plus ``queuedRows``, ``delayMsP99``, ``strategy``…); ``on_progress`` is called with each, and
    ``on_delays(batch_id, {query: seconds})`` with every output row's delay.
    """

    def __init__(
        self,
        df,
        queries: QuerySet | CompiledPlan,
        *,
        stream: str | None = None,
        strategy: str | Scheduler = "adaptive",
        strategy_params: Mapping[str, Any] | None = None,
        qos: Any = None,
        trigger_s: float | str = 2.0,
        budget_s: float | None = None,
        checkpoint: str | Path,
        sink: Sink | None = None,
        output: str | Path | None = None,
        arrival_col: str | None = None,
        name: str = "sparkqos",
        keep_checkpoints: int = 3,
        whole_batches: bool = True,
        on_progress: Callable[[dict[str, Any]], None] | None = None,
        on_delays: Callable[[int, dict[str, np.ndarray]], None] | None = None,
        executor_args: Mapping[str, Any] | None = None,
        checks: RowChecks | None = None,
        dead_letter: DeadLetterSink | str | Path | None = None,
        fault: str | None = None,
    ):
        if not getattr(df, "isStreaming", False):
            raise RunnerError("sparkqos.stream needs a streaming DataFrame (spark.readStream…); "
                              "for a static DataFrame run the executor directly (sparkqos.executor.replay)")
        compiled = queries.build() if isinstance(queries, QuerySet) else queries
        if not isinstance(compiled, CompiledPlan):
            raise RunnerError(f"queries must be a QuerySet or a CompiledPlan, got {type(queries).__name__}")
        streams = list(compiled.sources)
        if stream is None:
            if len(streams) != 1:
                raise RunnerError(f"the query set reads streams {streams}: say which one this DataFrame feeds (stream=...)")
            stream = streams[0]
        elif stream not in compiled.sources:
            raise RunnerError(f"stream {stream!r} is not read by the query set; it reads {streams}")
        if trigger_s == "available_now":
            self.trigger_s = None
        else:
            if isinstance(trigger_s, bool) or not isinstance(trigger_s, (int, float)) or not trigger_s > 0 or not math.isfinite(trigger_s):
                raise RunnerError(f"trigger_s must be a number of seconds > 0 or 'available_now', got {trigger_s!r}")
            self.trigger_s = float(trigger_s)
        if budget_s is not None and (isinstance(budget_s, bool) or not isinstance(budget_s, (int, float))
                                     or not budget_s > 0 or not math.isfinite(budget_s)):
            raise RunnerError(f"budget_s must be a number of seconds > 0, got {budget_s!r}")
        self.budget_s = float(budget_s) if budget_s is not None else (self.trigger_s or 1.0)
        self.df = df
        self.compiled = compiled
        self.stream = stream
        self.name = name
        self.scheduler = self._make_scheduler(strategy, dict(strategy_params or {}), qos)
        self.checkpoint_dir = Path(checkpoint)
        self.store = CheckpointStore(self.checkpoint_dir / "sparkqos", keep=keep_checkpoints)
        self.output = Path(output) if output is not None else None
        self.sink = sink if sink is not None else (ParquetSink(self.output / "outputs") if self.output else MemorySink())
        schema = compiled.sources[stream]
        if arrival_col is None and DEFAULT_ARRIVAL_COLUMN in schema.names:
            arrival_col = DEFAULT_ARRIVAL_COLUMN
        elif arrival_col is not None and arrival_col not in schema.names:
            raise RunnerError(f"arrival_col {arrival_col!r} is not a column of stream {stream!r} ({schema.names})")
        self.arrival_col = arrival_col
        self.on_progress = on_progress
        self.on_delays = on_delays
        self.checks = checks if checks is not None else RowChecks()
        if dead_letter is None and self.output is not None:
            dead_letter = self.output / "deadletter"
        self.dead_letter = dead_letter if dead_letter is None or isinstance(dead_letter, DeadLetterSink) else DeadLetterSink(dead_letter)
        self.dead_lettered_total = 0
        self._faults = parse_faults(fault if fault is not None else os.environ.get("SPARKQOS_FAULT"))
        self.executor = Executor(compiled.fresh(), self.scheduler, clock=time.time,
                                 whole_batches=whole_batches, **dict(executor_args or {}))
        self.last_batch = -1
        self.recentProgress: list[dict[str, Any]] = []
        self.query = None
        self._last_start: float | None = None
        self._restored = False

    # -- set-up ----------------------------------------------------------------------------------
    def _make_scheduler(self, strategy: str | Scheduler, params: dict[str, Any], qos: Any) -> Scheduler:
        if isinstance(strategy, Scheduler):
            if params or qos is not None:
                raise RunnerError("give strategy_params/qos with a strategy name, not with a Scheduler instance")
            return strategy
        if strategy == "adaptive":
            if qos is not None:
                params.setdefault("qos", qos)
            if self.trigger_s is not None:
                params.setdefault("period", self.trigger_s)  # score and pick once per trigger
            candidates = params.get("candidates", schedulers.get("adaptive").candidates)
            names = [candidates] if isinstance(candidates, str) else list(candidates)
            members = {n: dict(v) for n, v in dict(params.get("member_params") or {}).items()}
            for n in names:
                if isinstance(n, str) and n in schedulers.available():
                    sized = self._time_params(n, members.get(n, {}))
                    if sized:
                        members[n] = sized
            if members:
                params["member_params"] = members
        elif qos is not None:
            raise RunnerError(f"qos applies to the 'adaptive' strategy, not to {strategy!r}")
        else:
            params = self._time_params(strategy, params) if strategy in schedulers.available() else params
        return schedulers.get(strategy, **params)

    def _time_params(self, name: str, params: dict[str, Any]) -> dict[str, Any]:
        """Strategies state their time parameters in the papers' time units; on Spark a unit is a
        second of executor time. Left unset, CQC's round ``k`` (default 20) becomes the trigger's
        budget — so a round (every class's share) fits in one trigger — and a ``quantum`` (the
        longest unit of work, default 1) a tenth of it, so one unit cannot overrun the budget."""
        from sparkqos.schedulers.cqc import Cqc

        instance = schedulers.get(name)
        defaults = instance.params()
        out = dict(params)
        if isinstance(instance, Cqc) and "k" not in out:
            out["k"] = self.budget_s
        if "quantum" in defaults and defaults["quantum"] is not None and "quantum" not in out:
            out["quantum"] = self.budget_s / 10
        return out

    def restore(self) -> int:
        """Load the newest checkpoint (if any) into the executor; returns its batch id or -1.
        A torn or corrupt checkpoint raises CheckpointCorrupt instead of starting empty."""
        if self._restored:
            return self.last_batch
        ckpt = self.store.load_latest()
        if ckpt is not None:
            self.executor.load_state(_unb64(ckpt.state["executor"]))
            self.executor.load_queue_tables(ckpt.queues)
            self.last_batch = ckpt.batch_id
            self.dead_lettered_total = int(ckpt.state.get("dead_lettered_total", 0))
        self._restored = True
        return self.last_batch

    def start(self):
        """Restore from the checkpoint and start the streaming query; returns the StreamingQuery."""
        self.restore()
        writer = (self.df.writeStream.foreachBatch(self._process)
                  .option("checkpointLocation", str(self.checkpoint_dir / "spark"))
                  .queryName(self.name))
        if self.trigger_s is None:
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=f"{self.trigger_s} seconds")
        self.query = writer.start()
        return self.query

    def stop(self, wait_s: float = 5.0) -> None:
        """Stop the streaming query between triggers: wait up to ``wait_s`` for the running
        trigger to end first. Stopping inside a trigger that is reading a Python data source made
        Spark's stream thread die of a StackOverflowError in its own error handling (harmless —
        the trigger is replayed on restart — but a page of stack trace)."""
        query = self.query
        if query is None:
            return
        by = time.time() + wait_s
        while query.isActive and query.status.get("isTriggerActive") and time.time() < by:
            time.sleep(0.05)
        query.stop()

    # -- progress --------------------------------------------------------------------------------
    @property
    def lastProgress(self) -> dict[str, Any] | None:
        return self.recentProgress[-1] if self.recentProgress else None

    def strategy_in_force(self) -> tuple[str, dict[str, float]]:
        s = self.scheduler
        current = getattr(s, "current", None)
        if isinstance(current, str):
            decisions = getattr(s, "decisions", [])
            return current, dict(decisions[-1]["scores"]) if decisions else {}
        return s.name or type(s).__name__, {}

    # -- the trigger -----------------------------------------------------------------------------
    def _arrivals(self, table: pa.Table, started: float) -> np.ndarray | float:
        if self.arrival_col is None or table.num_rows == 0:
            return started
        t = _seconds(table.column(self.arrival_col))
        bad = ~np.isfinite(t)
        if bad.any():
            t = t.copy()
            t[bad] = started  # a missing event time is stamped at ingestion
        return t

    def _conform(self, table: pa.Table) -> pa.Table:
        """Timestamps become float seconds where the plan declares numbers (the executor's
        windows run on numeric seconds). Other columns stay as they came: the checks cast them,
        and a dead letter keeps the whole original row."""
        schema = self.compiled.sources[self.stream]
        for field in schema:
            if field.name in table.column_names:
                i = table.column_names.index(field.name)
                col = table.column(i)
                if pa.types.is_timestamp(col.type) and pa.types.is_floating(field.type):
                    table = table.set_column(i, field.name, pa.array(_seconds(col), pa.float64()))
        return table

    def _fault(self, point: str, batch_id: int) -> None:
        if batch_id in self._faults.get(point, ()):
            print(f"sparkqos: fault injection: SIGKILL at {point} of batch {batch_id}", file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

    def process(self, table: pa.Table, batch_id: int) -> dict[str, Any] | None:
        """One trigger on an Arrow table (what ``foreachBatch`` does after ``toArrow()``)."""
        started = time.time()
        self.restore()
        if batch_id <= self.last_batch:
            return None  # replayed after a crash: checkpointed already, its outputs are in the sink
        self._fault("before_ingest", batch_id)
        rows_in = table.num_rows
        dead = None
        if rows_in:
            schema = self.compiled.sources[self.stream]
            good, dead = self.checks.split(self._conform(table), schema, batch_id)
            if dead.num_rows and self.dead_letter is None:
                raise SchemaMismatch(f"batch {batch_id} of stream {self.stream!r}: {dead.num_rows} bad row(s), first: "
                                     f"{dead.column('reason')[0].as_py()} (give dead_letter= or output= to keep them)")
            if good.num_rows:
                self.executor.ingest(self.stream, good, arrival=self._arrivals(good, started))
        self._fault("after_ingest", batch_id)
        report = self.executor.run(self.budget_s)
        self._fault("after_run", batch_id)
        return self._commit(batch_id, started, rows_in, report.rows_consumed, dead)

    def finish(self, budget_s: float | None = None) -> dict[str, Any]:
        """End of a finite input: drain every queue, flush windows and joins, and write the last
        outputs as batch ``last + 1`` (stop the StreamingQuery first)."""
        self.restore()
        started = time.time()
        report = self.executor.finish(budget_s)
        return self._commit(self.last_batch + 1, started, 0, report.rows_consumed)

    def _commit(self, batch_id: int, started: float, rows_in: int, consumed: int,
                dead: pa.Table | None = None) -> dict[str, Any]:
        outputs = self.executor.take_outputs()
        delays = {q: pc.subtract(t.column(EMIT), t.column(ARRIVAL)).to_numpy(zero_copy_only=False) if t.num_rows else np.empty(0)
                  for q, t in outputs.items()}
        if self.on_delays is not None:
            self.on_delays(batch_id, delays)
        dead_rows = 0 if dead is None else dead.num_rows
        if self.dead_letter is not None:
            self.dead_letter.write(batch_id, dead)
        self.sink.write(batch_id, {q: t.drop_columns([c for c in t.column_names if c in INTERNAL or c == EMIT])
                                   for q, t in outputs.items()})
        self._fault("after_sink", batch_id)
        self.store.save(batch_id, self.executor.queue_tables(),
                        {"executor": _b64(self.executor.to_state(queues=False)), "batch_id": batch_id,
                         "dead_lettered_total": self.dead_lettered_total + dead_rows})
        self._fault("after_checkpoint", batch_id)
        self.last_batch = batch_id
        self.dead_lettered_total += dead_rows
        progress = self._progress(batch_id, started, rows_in, consumed, outputs, delays, dead_rows)
        self._fault("after_progress", batch_id)
        return progress

    def _progress(self, batch_id, started, rows_in, consumed, outputs, delays, dead_rows: int = 0) -> dict[str, Any]:
        now = time.time()
        duration = now - started
        since = now - self._last_start if self._last_start is not None else duration
        self._last_start = started
        strategy, scores = self.strategy_in_force()
        ex_state = self.executor.state
        plan = self.compiled.plan
        rows = []
        all_delays = [d for d in delays.values() if d.size]
        total_out = int(sum(t.num_rows for t in outputs.values()))
        common = dict(run=self.name, batchId=batch_id, time_s=now, strategy=strategy, scores=scores,
                      durationMs=duration * 1000.0, rowsIn=float(rows_in),
                      inputRowsPerSecond=rows_in / since if since > 0 else math.nan,
                      processedRowsPerSecond=consumed / duration if duration > 0 else math.nan)
        per_query = []
        for qname, query in plan.queries.items():
            queued = sum(ex_state.queued(op) for op in query.operators)
            queued_bytes = sum(ex_state.queued_bytes(op) for op in query.operators)
            r = metrics.row(query=qname, klass=query.klass, rowsOut=float(outputs[qname].num_rows),
                            queuedRows=float(queued), queuedBytes=float(queued_bytes),
                            **metrics.delay_summary(delays[qname]), **common)
            rows.append(r)
            per_query.append(r)
        plan_row = metrics.row(query=metrics.PLAN_ROW, klass=metrics.PLAN_ROW, rowsOut=float(total_out),
                               queuedRows=float(ex_state.total_queued), queuedBytes=float(ex_state.total_queued_bytes),
                               **metrics.delay_summary(np.concatenate(all_delays) if all_delays else []), **common)
        rows.append(plan_row)
        if self.output is not None:
            metrics.write_batch(self.output, self.name, batch_id, rows)
        progress = {
            "id": self.name, "batchId": batch_id, "timestamp": now,
            "numInputRows": rows_in, "numOutputRows": total_out,
            "processedRows": rows_in - dead_rows, "deadLetteredRows": dead_rows,
            "inputRowsPerSecond": common["inputRowsPerSecond"],
            "processedRowsPerSecond": common["processedRowsPerSecond"],
            "durationMs": {"triggerExecution": duration * 1000.0},
            "queuedRows": plan_row["queuedRows"], "queuedBytes": plan_row["queuedBytes"],
            "delayMsMean": plan_row["delayMean_s"] * 1000.0, "delayMsP50": plan_row["delayP50_s"] * 1000.0,
            "delayMsP99": plan_row["delayP99_s"] * 1000.0, "delayMsMax": plan_row["delayMax_s"] * 1000.0,
            "strategy": strategy, "scores": scores,
            "queries": per_query,
        }
        self.recentProgress.append(progress)
        del self.recentProgress[:-100]
        if self.on_progress is not None:
            self.on_progress(progress)
        return progress

    def _process(self, batch_df, batch_id: int) -> None:
        self.process(batch_df.toArrow(), batch_id)


def stream(df, queries: QuerySet | CompiledPlan, **kwargs: Any) -> QosStream:
    """``sparkqos.stream(streaming_df, queries, strategy=..., qos=..., budget_s=..., checkpoint=...)``:
    see :class:`QosStream`. ``.start()`` gives the StreamingQuery."""
    return QosStream(df, queries, **kwargs)
