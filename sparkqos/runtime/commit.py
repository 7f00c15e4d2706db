"""What a trigger commits, and its sink write: the delays of the rows written and where they went.

A trigger takes its :class:`Commit` while the executor is still (the continuous worker paused),
hands the executor back, and only then writes it: :class:`CommitWriter` writes the outputs to the
sink in one call (keeping the worker's early parts of the batch), takes each row's delay once that
write has returned — end to end, the moment the row is in its sink minus its event time (for a
window, the newest row it covers); rows written early count from their own write — splits it into
the places the row waited (:mod:`sparkqos.runtime.decompose`), and gives the progress record's
columns per query: rows shed, latency targets met, the parts of the delay, how far behind.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from sparkqos.executor.expressions import ARRIVAL
from sparkqos.executor.loop import Executor
from sparkqos.executor.plan import CompiledPlan
from sparkqos.io.sinks import Sink
from sparkqos.model.plan import Plan
from sparkqos.runtime.checkpoint import CheckpointStore, encode_state
from sparkqos.runtime.decompose import DelayParts, IngestLog, seqs_of
from sparkqos.runtime.early import EarlyParts, EarlyWriter, sink_tables
from sparkqos.runtime.intake import ClassBacklog
from sparkqos.runtime.progress import QueuedSizes, strategy_in_force
from sparkqos.runtime.segments import Snapshot, queue_parts
from sparkqos.runtime.service import Service
from sparkqos.schedulers.base import Scheduler

__all__ = ["Commit", "CommitWriter", "oldest_queued"]


@dataclass
class Commit:
    """What a trigger commits, taken while the executor is still: the outputs since the last
    commit, the parts the worker wrote of the batch early (None: none), the queues (a snapshot of
    their immutable Arrow batches), the state as checkpoint bytes, the queue sizes and the
    strategy in force for the progress record. Writing it needs nothing live, so the worker goes
    on meanwhile."""

    outputs: dict[str, pa.Table]
    early: EarlyParts | None
    queues: Snapshot
    state: bytes
    queued: QueuedSizes
    strategy: tuple[str, dict[str, float]]
    #: Per query, the event time of its oldest queued row (NaN: none queued).
    oldest: dict[str, float]
    #: Queued bytes in memory and spilled to disk.
    spilled: tuple[int, int]

    @classmethod
    def take(
        cls,
        batch_id: int,
        executor: Executor,
        store: CheckpointStore,
        early: EarlyWriter | None,
        scheduler: Scheduler,
        plan: Plan,
        state: dict[str, Any],
    ) -> Commit:
        """What batch ``batch_id`` commits, taken while the caller alone holds ``executor``:
        ``state`` is the loop's part of the checkpoint's JSON, beside the executor's state and the
        queues' segment layout."""
        # the queues by reference to their segments: only batches new since the last checkpoint
        # are written (runtime/segments.py), spilled ones are linked, not read back
        queues = store.segments.snapshot(queue_parts(executor.state))
        state = {
            "executor": encode_state(executor.to_state(queues=False)),
            "batch_id": batch_id,
            **state,
            "segments": queues.layout,
        }
        return cls(
            outputs=executor.take_outputs(),
            early=early.commit(batch_id) if early is not None else None,
            queues=queues,
            state=store.state_bytes(batch_id, state),
            queued=QueuedSizes.of(executor.state, plan),
            strategy=strategy_in_force(scheduler),
            oldest=oldest_queued(executor.state, plan),
            spilled=(executor.state.memory_bytes, executor.state.spilled_bytes),
        )


def oldest_queued(state: Any, plan: Any) -> dict[str, float]:
    """Per query of ``plan``, the event time of the oldest row queued at its operators (NaN: none)."""
    out = {}
    for q, query in plan.queries.items():
        times = [t for t in (state.oldest(op) for op in query.operators) if t is not None]
        out[q] = min(times) if times else math.nan
    return out


def _first_stream(plan: Any, operators: Any) -> str | None:
    streams = set(plan.streams)
    return next((src for op in operators for src in plan[op].inputs if src in streams), None)


class CommitWriter:
    """Writes a trigger's :class:`Commit` to ``sink`` and measures it (see the module)."""

    def __init__(
        self,
        compiled: CompiledPlan,
        sink: Sink,
        executor: Executor,
        ingest_log: IngestLog,
        service: Service,
        on_delays: Callable[[int, dict[str, np.ndarray]], None] | None,
    ):
        plan = compiled.plan
        self.plan = plan
        self.sink = sink
        self.executor = executor
        self.ingest_log = ingest_log
        self.service = service
        self.on_delays = on_delays
        self.class_backlog = ClassBacklog(plan)
        #: The stream each query's rows are counted in (its first leaf's), for the delay's parts.
        self._stream_of = {q: _first_stream(plan, query.operators) for q, query in plan.queries.items()}

    def write(self, batch_id: int, commit: Commit) -> tuple[dict[str, int], dict[str, np.ndarray], DelayParts]:
        """The sink write of ``commit`` (keeping the worker's early parts of the batch, if any);
        returns the rows out, the delays per query and where those delays went."""
        outputs = commit.outputs
        if commit.early is not None:
            self.sink.write(batch_id, sink_tables(outputs), keep_parts=True)
        else:
            self.sink.write(batch_id, sink_tables(outputs))
        written = time.time()
        delays = {
            q: written - t.column(ARRIVAL).to_numpy(zero_copy_only=False) if t.num_rows else np.empty(0)
            for q, t in outputs.items()
        }
        rows_out = {q: t.num_rows for q, t in outputs.items()}
        parts = DelayParts()
        for q, t in outputs.items():
            self._add_parts(parts, q, t, written)
        if commit.early is not None:
            for q, early in commit.early.delays.items():
                delays[q] = np.concatenate([*early, delays.get(q, np.empty(0))])
                rows_out[q] = rows_out.get(q, 0) + commit.early.rows[q]
            for q, t, at in commit.early.tables:
                self._add_parts(parts, q, t, at)
        if self.on_delays is not None:
            self.on_delays(batch_id, delays)
        return rows_out, delays, parts

    def _add_parts(self, parts: DelayParts, query: str, table: pa.Table, written: float) -> None:
        if table.num_rows:
            stream = self._stream_of[query]
            times = self.ingest_log.times(stream, seqs_of(table)) if stream is not None else np.full((table.num_rows, 3), np.nan)
            parts.add(query, table, written, times, self.service.run_s(self.executor.state, query))

    def query_columns(
        self, commit: Commit, delays: dict[str, np.ndarray], parts: DelayParts, shed: dict[str, int]
    ) -> dict[str, dict[str, float]]:
        """Per query, the progress columns beyond the executor's: shed rows, latency target and
        its violations, the parts of the delay, how far behind and the catch-up ETA."""
        behind = self.class_backlog.observe(time.time(), commit.queued, commit.oldest)
        return {
            q: {
                "shedRows": float(shed.get(q, 0)),
                **self.service.slo_columns(q, delays.get(q, np.empty(0))),
                **parts.means(q),
                **behind[q],
            }
            for q in self.plan.queries
        }
