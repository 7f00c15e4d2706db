"""What a checkpoint holds of an executor, and how it comes back: the executor's snapshot room.

A snapshot is the leftover input queues (Arrow IPC bytes, or Arrow tables for a checkpoint that
stores tables), each operator's own state, the streams' sequence numbers, the statistics, the
totals and the strategy's state. It is read from and written into the executor's
:class:`~sparkqos.executor.state.ExecutorState`, its :class:`~sparkqos.executor.dataflow.Dataflow`
(operators and sequence numbers) and its strategy; nothing here runs an operator.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from sparkqos.errors import SchemaMismatch
from sparkqos.executor.dataflow import Dataflow
from sparkqos.executor.queues import BatchQueue
from sparkqos.executor.state import ExecutorState
from sparkqos.model.stats import StatisticsGatherer
from sparkqos.schedulers.base import Scheduler

__all__ = ["load_queue_tables", "load_state", "queue_tables", "to_state"]


def queue_tables(state: ExecutorState) -> dict[str, pa.Table]:
    """Leftover rows of every non-empty input queue, keyed ``"operator#port"`` (with the
    executor's internal columns), for a checkpoint that stores Arrow tables."""
    out = {}
    for name, ports in state.ports.items():
        for port, q in enumerate(ports):
            batches = list(q.batches())
            if batches:
                out[f"{name}#{port}"] = pa.Table.from_batches(batches)
    return out


def load_queue_tables(state: ExecutorState, tables: dict[str, pa.Table]) -> None:
    """Queue again what :func:`queue_tables` returned (into a fresh executor of the same plan)."""
    for key, table in tables.items():
        name, _, port = key.rpartition("#")
        if name not in state.ports or not port.isdigit() or int(port) >= len(state.ports[name]):
            raise SchemaMismatch(f"checkpointed queue {key!r} does not belong to this plan")
        for batch in table.to_batches():
            if batch.num_rows:
                state.enqueue(name, int(port), batch)


def to_state(dataflow: Dataflow, state: ExecutorState, scheduler: Scheduler, queues: bool = True) -> dict[str, Any]:
    """Leftover queues (unless ``queues=False``: see :func:`queue_tables`) and operator state
    (Arrow IPC bytes), sequence numbers, statistics and the strategy's own state."""
    out = {
        "operators": {n: op.to_state() for n, op in dataflow.ops.items()},
        "seq": dict(dataflow.seq),
        "stats": state.stats.to_dict(),
        "scheduler": scheduler.state_dict(),
        "totals": state.totals(),
    }
    if queues:
        out["queues"] = {n: [q.to_ipc() for q in ports] for n, ports in state.ports.items()}
    return out


def load_state(dataflow: Dataflow, state: ExecutorState, scheduler: Scheduler, data: dict[str, Any]) -> None:
    """Restore :func:`to_state` into a fresh executor of the same plan."""
    for name, blobs in data.get("queues", {}).items():
        for port, blob in enumerate(blobs):
            for batch in BatchQueue.from_ipc(blob).batches():
                state.enqueue(name, port, batch)
    for name, s in data["operators"].items():
        dataflow.ops[name].from_state(s)
    dataflow.seq.update(data["seq"])
    state.stats = StatisticsGatherer.from_dict(data["stats"])
    if "totals" in data:  # a checkpoint without totals starts them at 0
        state.load_totals(data["totals"])
    scheduler.load_state_dict(data["scheduler"])
    # A restored strategy state that does not fit this plan (CQC's classes...) must fail here,
    # where a job catches restore errors, not at the first pick. The strategy itself attaches at
    # its first pick, once the queues are back (a round-robin ring keeps its place only then),
    # so a throwaway copy attaches now.
    probe = scheduler.clone()
    probe.load_state_dict(data["scheduler"])
    probe.attach(state)
    probe.detach()
