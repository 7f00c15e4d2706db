"""The executor's queues and statistics as strategies see them (the SchedulerState contract)."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from contextlib import nullcontext

import pyarrow as pa

from sparkqos.executor.plan import CompiledPlan
from sparkqos.executor.queues import BatchQueue
from sparkqos.model.state import EngineState
from sparkqos.model.stats import DEFAULT_WEIGHT, StatisticsGatherer


class ExecutorState(EngineState):
    """Queues and statistics of a running plan, as strategies see them.

    Selectivity and cost are the gatherer's smoothed estimates, *published* (and
    :attr:`stats_version` bumped) only when one moves by more than ``tolerance`` (relative) from
    the value last published, so priority strategies do not rebuild after every run.
    """

    def __init__(
        self,
        compiled: CompiledPlan,
        clock: Callable[[], float],
        w: float = DEFAULT_WEIGHT,
        tolerance: float = 0.2,
        memory_limit_bytes: int | None = None,
        spill_dir: str | None = None,
        shed: bool = False,
    ):
        super().__init__(compiled.plan)
        self.operators = compiled.operators
        self.clock = clock
        self.ports: dict[str, list[BatchQueue]] = {
            name: [BatchQueue(s) for s in op.input_schemas] for name, op in compiled.operators.items()
        }
        self.stats = StatisticsGatherer(w, start=None)
        self.tolerance = tolerance
        self._version = 0
        self._total_rows = 0
        self._total_bytes = 0
        self.finished = False
        self._blocking = [op.name for op in self.plan if op.blocking]
        self._below = {name: self._upstream(name) for name in self._blocking}
        # Overload: queued bytes in memory above the limit spill to disk or, when
        # shedding was asked for, are dropped and counted per query.
        self.memory_limit_bytes = memory_limit_bytes
        self.shed = shed
        self._spill_root = spill_dir
        self._spill_dir: str | None = None
        self.spilled_bytes_total = 0
        self._spilled_queues: set[BatchQueue] = set()  # every queue that ever spilled (_relieve)
        self.shed_rows: dict[str, int] = {}
        self.peak_memory_bytes = 0
        self._query_of = {op.name: self.plan.query_of(op.name) for op in self.plan}
        self._priority = {op.name: self.plan.classes.get(self.plan.class_of(op.name), 0.0) for op in self.plan}
        self.locks: dict[str, threading.RLock] | None = None  # per-operator locks when clusters run in threads

    def _upstream(self, name: str) -> list[str]:
        out, todo = [], [name]
        while todo:
            for i in self.plan[todo.pop()].inputs:
                if i in self.ports:
                    out.append(i)
                    todo.append(i)
        return out

    # -- SchedulerState ----------------------------------------------------------------------------
    @property
    def now(self) -> float:
        return self.clock()

    def _guard(self, op: str):
        return self.locks[op] if self.locks is not None else nullcontext()

    def queued(self, op: str) -> float:
        return sum(q.rows for q in self.ports[op])

    def queued_bytes(self, op: str) -> float:
        return sum(q.nbytes for q in self.ports[op])

    def oldest(self, op: str) -> float | None:
        best = None
        with self._guard(op):  # scans the queue's entries, which a running operator changes
            for q in self.ports[op]:
                o = q.oldest
                if o is not None and (best is None or o < best):
                    best = o
        return best

    @property
    def spilled_bytes(self) -> int:
        """Queued bytes currently on disk: of the queues that ever spilled (only :meth:`_relieve`
        spills, restored queues included, as they come back through :meth:`enqueue`), so no
        queue is scanned while nothing spilled — every enqueue under a memory limit asks, and a
        large plan has hundreds of queues."""
        return sum(q.spilled_bytes for q in self._spilled_queues)

    @property
    def memory_bytes(self) -> int:
        """Queued bytes held in memory."""
        return self._total_bytes - self.spilled_bytes

    def output_rate(self, op: str) -> float:
        rate = self.stats.operator(op).output_rate
        return rate if rate is not None else self._sel[op] / self._cost[op]

    @property
    def total_queued(self) -> float:
        return self._total_rows

    @property
    def total_queued_bytes(self) -> float:
        return self._total_bytes

    @property
    def stats_version(self) -> int:
        return self._version

    # -- engine side ---------------------------------------------------------------------------------
    def final(self, op: str) -> bool:
        """No more input can reach ``op``: end of input and, for a blocking operator, everything
        below it drained (what its ``run`` and ``runnable`` take as ``final``)."""
        return self.finished and all(not any(self.ports[u]) for u in self._below.get(op, ()))

    def mark_running(self, op: str) -> None:
        """``op`` runs outside the executor's lock (a cluster thread): its queues change meanwhile,
        so it is not offered until :meth:`after_run` books the run."""
        self._runnable.discard(op)

    def refresh(self, op: str) -> bool:
        """Re-test whether ``op`` can run; True when it just became runnable."""
        was = op in self._runnable
        ports = self.ports[op]
        final = self.final(op)
        with self._guard(op):
            ok = self.operators[op].runnable(ports, final)
        if ok:
            self._runnable.add(op)
            return not was
        self._runnable.discard(op)
        return False

    def enqueue(self, op: str, port: int, batch: pa.RecordBatch, oldest: float | None = None, ordered: bool = False) -> None:
        q = self.ports[op][port]
        with self._guard(op):
            before = q.nbytes
            q.push(batch, oldest, ordered)
            self._total_rows += batch.num_rows
            self._total_bytes += q.nbytes - before
        if self.memory_limit_bytes is not None:
            self._relieve()
        self.refresh(op)
        self.notify(op)

    def _relieve(self) -> None:
        """Bring the queued bytes in memory under the limit: spill (or shed) the newest batches
        of the lowest class's queues first, those holding most in memory first; each queue keeps
        its head batch in memory."""
        mem = self.memory_bytes
        self.peak_memory_bytes = max(self.peak_memory_bytes, mem)
        excess = mem - self.memory_limit_bytes
        if excess <= 0:
            return
        # the lowest classes first (the top class's rows stay in memory while others can go), the
        # queues holding most first within a class
        priority = self._priority
        queues = sorted(
            ((q.memory_bytes, name, q) for name, ports in self.ports.items() for q in ports),
            key=lambda e: (priority[e[1]], -e[0]),
        )
        for held, name, q in queues:
            if excess <= 0 or held <= 0:
                break
            with self._guard(name):
                if self.shed:
                    before_rows, before_bytes = q.rows, q.nbytes
                    mem_before = q.memory_bytes
                    dropped = q.drop_tail(excess)
                    self._total_rows -= before_rows - q.rows
                    self._total_bytes -= before_bytes - q.nbytes
                    excess -= mem_before - q.memory_bytes
                    if dropped:
                        query = self._query_of[name]
                        self.shed_rows[query] = self.shed_rows.get(query, 0) + dropped
                        self.record_input(-(before_rows - q.rows))  # shed, not released by work
                else:
                    if self._spill_dir is None:
                        root = self._spill_root
                        if root is not None:
                            os.makedirs(root, exist_ok=True)
                        self._spill_dir = tempfile.mkdtemp(prefix="sparkqos-spill-", dir=root)
                    freed = q.spill_tail(self._spill_dir, excess)
                    if freed:
                        self._spilled_queues.add(q)
                    self.spilled_bytes_total += freed
                    excess -= freed
            if self.shed:
                self.refresh(name)

    def shed_before(self, op: str, port: int, bound: float) -> list[pa.RecordBatch]:
        """Remove and return the rows at the front of ``op``'s queue ``port`` that arrived before
        ``bound`` (load shedding a user chose, :mod:`sparkqos.runtime.targets`); counted per query
        in :attr:`shed_rows`."""
        q = self.ports[op][port]
        with self._guard(op):
            rows, nbytes = q.rows, q.nbytes
            out = q.take_before(bound, inclusive=False, limit=q.rows)
            gone_rows, gone_bytes = rows - q.rows, nbytes - q.nbytes
        if gone_rows:
            self._total_rows -= gone_rows
            self._total_bytes -= gone_bytes
            self.record_input(-gone_rows)  # shed, not released by work
            query = self._query_of[op]
            self.shed_rows[query] = self.shed_rows.get(query, 0) + gone_rows
            self.refresh(op)
        return out

    def close(self) -> None:
        """Remove the spill folder (spilled rows are gone after this)."""
        if self._spill_dir is not None:
            shutil.rmtree(self._spill_dir, ignore_errors=True)
            self._spill_dir = None

    def after_run(self, op: str, rows_before: int, bytes_before: int, delta: bool = False) -> None:
        """Book a run of ``op``: its queues held ``rows_before`` / ``bytes_before`` before it (or,
        with ``delta``, those are the rows / bytes it took)."""
        ports = self.ports[op]
        if delta:
            self._total_rows -= rows_before
            self._total_bytes -= bytes_before
        else:
            self._total_rows -= rows_before - sum(q.rows for q in ports)
            self._total_bytes -= bytes_before - sum(q.nbytes for q in ports)
        self.refresh(op)
        if self.finished:
            # A blocking join whose other inputs just drained for good can now finish its input.
            for j in self._blocking:
                if op in self._below[j] and self.refresh(j):
                    self.notify(j)

    def record_run(self, op: str, consumed: int, produced: int, seconds: float) -> None:
        self.stats.record_run(op, consumed, produced, max(seconds, 0.0))
        self.record_work(max(seconds, 0.0))
        s = self.stats.operator(op)
        moved = False
        for new, published in ((s.selectivity, self._sel), (s.cost, self._cost)):
            if new is None:
                continue
            old = published[op]
            if abs(new - old) > self.tolerance * max(abs(old), 1e-12):
                moved = True
        if moved:
            if s.selectivity is not None:
                self._sel[op] = s.selectivity
            if s.cost is not None and s.cost > 0:
                self._cost[op] = s.cost
            self._version += 1

    def record_output(self, rows: int, delay_total: float) -> None:
        self.record_delivery(rows, delay_total)
        if rows:
            self.stats.record_output(rows, delay_total / rows)
