"""Where rows go: a stream's batches into the operators reading it, an operator's output into its
consumer's queue or its query's results.

:class:`Dataflow` is the executor's routing room. It never chooses what runs (that is
:mod:`sparkqos.executor.dispatch`) and never serialises anything (that is
:mod:`sparkqos.executor.snapshot`): it checks and stamps input, delivers every run's output in
order and keeps each query's results until a runner takes them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkqos.errors import SchedulerError, SchemaMismatch
from sparkqos.executor.expressions import ARRIVAL, INTERNAL
from sparkqos.executor.operators import PhysicalOperator
from sparkqos.executor.operators.base import MicroBatchOperator, TriggerEndOperator
from sparkqos.executor.plan import CompiledPlan
from sparkqos.executor.queues import stamp
from sparkqos.executor.report import RunReport
from sparkqos.executor.state import ExecutorState

__all__ = ["EMIT", "Dataflow"]

#: The column of a result row's emit time (seconds on the executor's clock).
EMIT = "__emit"


class Dataflow:
    """The routes of ``compiled``'s plan over ``state``'s queues, and the results delivered so far.

    ``clock`` stamps arrivals when a batch comes without its own times.
    """

    def __init__(self, compiled: CompiledPlan, state: ExecutorState, clock: Callable[[], float]):
        self.compiled = compiled
        self.plan = plan = compiled.plan
        self.state = state
        self.clock = clock
        self.ops: dict[str, PhysicalOperator] = compiled.operators
        #: Each stream's readers, as (operator, input port).
        self.targets: dict[str, list[tuple[str, int]]] = {s: [] for s in plan.streams}
        #: Each operator's consumer, as (operator, input port); None at a query's root.
        self.next: dict[str, tuple[str, int] | None] = {}
        for op in plan:
            for port, src in enumerate(op.inputs):
                if src in self.targets:
                    self.targets[src].append((op.name, port))
            consumer = plan.consumer(op.name)
            self.next[op.name] = None if consumer is None else (consumer, plan[consumer].inputs.index(op.name))
        self.query = {op.name: plan.query_of(op.name) for op in plan}
        #: Operators whose output is due at each trigger's end, bottom-up (see end_trigger).
        self.trigger_end = [n for n in self.bottom_up(plan.names) if isinstance(self.ops[n], TriggerEndOperator)]
        # Streams arrive in order; order-preserving operators over ordered inputs stay ordered.
        self.ordered: dict[str, bool] = {}
        for name in plan.names:
            self._ordered_output(name)
        #: The next sequence number of each stream's rows.
        self.seq = {s: 0 for s in plan.streams}
        self.outputs: dict[str, list[tuple[pa.RecordBatch, float]]] = {q: [] for q in compiled.roots}

    def _ordered_output(self, name: str) -> bool:
        if name not in self.ordered:
            op = self.ops[name]
            self.ordered[name] = op.preserves_order and all(
                i in self.targets or self._ordered_output(i) for i in self.plan[name].inputs
            )
        return self.ordered[name]

    def bottom_up(self, names: Iterable[str]) -> list[str]:
        """``names`` ordered so that an operator comes before every operator above it."""
        depth = {n: len(self.plan.upstream_path(n)) for n in names}  # operators up to the root
        return sorted(depth, key=lambda n: (-depth[n], self.plan.index[n]))

    # -- input -------------------------------------------------------------------------------------
    def _check_schema(self, stream: str, batch: pa.RecordBatch) -> pa.RecordBatch:
        expected = self.compiled.sources[stream]
        if isinstance(batch, pa.Table):
            batch = (
                batch.combine_chunks().to_batches()[0] if batch.num_rows else pa.RecordBatch.from_pylist([], schema=batch.schema)
            )
        if not isinstance(batch, pa.RecordBatch):
            raise SchemaMismatch(f"stream {stream!r} takes pyarrow RecordBatches, got {type(batch).__name__}")
        for field in expected:
            idx = batch.schema.get_field_index(field.name)
            if idx < 0:
                raise SchemaMismatch(
                    f"stream {stream!r}: the batch has no column {field.name!r} ({field.type}); it has {batch.schema.names}"
                )
            got = batch.schema.field(idx).type
            if got != field.type:
                raise SchemaMismatch(f"stream {stream!r}: column {field.name!r} is {got}, expected {field.type}")
        extra = [n for n in batch.schema.names if expected.get_field_index(n) < 0]
        if extra:
            raise SchemaMismatch(f"stream {stream!r}: unexpected column(s) {extra}; the stream has {expected.names}")
        if batch.schema.names != expected.names:
            batch = batch.select(expected.names)
        return batch

    def ingest(self, stream: str, batch: pa.RecordBatch | pa.Table, arrival: float | np.ndarray | None = None) -> int:
        """See :meth:`sparkqos.executor.loop.Executor.ingest`."""
        if stream not in self.targets:
            raise SchemaMismatch(f"unknown stream {stream!r}; the plan reads {list(self.plan.streams)}")
        if self.state.finished:
            raise SchedulerError(f"stream {stream!r}: input arrived after finish()")
        batch = self._check_schema(stream, batch)
        n = batch.num_rows
        if n == 0:
            return 0
        if arrival is not None and np.ndim(arrival) == 1:
            t = np.asarray(arrival, dtype=np.float64)
            if t.shape != (n,) or not np.all(np.isfinite(t)):
                raise SchemaMismatch(
                    f"stream {stream!r}: need {n} finite arrival times, got "
                    f"{t.shape[0]} with {int(np.sum(~np.isfinite(t)))} not finite"
                )
            oldest, ordered = float(t.min()), bool(np.all(t[1:] >= t[:-1]))
        else:
            t = self.clock() if arrival is None else float(arrival)
            if not math.isfinite(t):
                raise SchemaMismatch(f"stream {stream!r}: arrival time must be finite, got {t!r}")
            oldest, ordered = t, True
        stamped = stamp(batch, t, self.seq[stream])
        self.seq[stream] += n
        for op, port in self.targets[stream]:
            self.state.enqueue(op, port, stamped, oldest, ordered)
            self.state.record_input(n)
        return n

    # -- output --------------------------------------------------------------------------------------
    def deliver(self, name: str, batches: Iterable[pa.RecordBatch], now: float) -> None:
        """Pass what ``name`` produced at ``now`` on: into its consumer's queue, or at a query's
        root into the query's results (booking each row's delay)."""
        target = self.next[name]
        state = self.state
        if target is None:
            sink = self.outputs[self.query[name]]
            for b in batches:
                n = b.num_rows
                if not n:
                    continue
                arrivals = pc.sum(b.column(ARRIVAL)).as_py()
                state.record_output(n, n * now - arrivals)
                sink.append((b, now))  # the emit column is built when results are read
        else:
            ordered = self.ordered[name]
            for b in batches:
                if b.num_rows:
                    state.enqueue(target[0], target[1], b, None, ordered)

    def flush(self, name: str) -> bool:
        """Deliver what ``name`` holds back until the input ends (windows, blocking joins);
        True when it gave anything."""
        out = self.ops[name].flush()
        if out:
            self.deliver(name, out, self.clock())
        return bool(out)

    def end_trigger(self, serve: Callable[[list[str]], RunReport]) -> RunReport:
        """See :meth:`sparkqos.executor.loop.Executor.end_trigger`; ``serve(operators)`` runs the
        operators above each one whose output came due."""
        report = RunReport()
        for name in self.trigger_end:
            if isinstance(self.ops[name], MicroBatchOperator):  # every row of the micro-batch reaches it first
                report.add(serve([*self.below(name), name]))
            out = self.ops[name].end_trigger()
            if not out:
                continue
            self.deliver(name, out, self.clock())
            above = self.plan.upstream_path(name)[1:]
            if above:
                report.add(serve(above))
        return report

    def below(self, name: str) -> list[str]:
        """The operators whose rows reach ``name``, bottom-up."""
        found: list[str] = []
        todo = [i for i in self.plan[name].inputs if i in self.ops]
        while todo:
            n = todo.pop()
            if n not in found:
                found.append(n)
                todo.extend(i for i in self.plan[n].inputs if i in self.ops)
        return self.bottom_up(found)

    # -- results --------------------------------------------------------------------------------------
    def result(self, query: str, internal: bool = False) -> pa.Table:
        """Everything ``query`` delivered so far (with ``__arrival``/``__seq``/``__emit`` when
        ``internal``)."""
        root = self.compiled.root(query)
        schema = self.ops[root].schema.append(pa.field(EMIT, pa.float64()))
        batches = [b.append_column(EMIT, pa.array(np.full(b.num_rows, t))) for b, t in self.outputs[query]]
        table = pa.Table.from_batches(batches, schema=schema)
        if internal:
            return table
        return table.select([n for n in table.column_names if n not in INTERNAL and n != EMIT])

    def take_outputs(self, queries: Iterable[str] | None = None) -> dict[str, pa.Table]:
        """What every query (or each of ``queries``) delivered since the last call (with
        ``__arrival``/``__seq``/``__emit``), and forget it: a streaming runner hands each trigger's
        outputs to its sink this way."""
        out = {}
        for query in self.outputs if queries is None else queries:
            out[query] = self.result(query, internal=True)
            self.outputs[query] = []
        return out

    def delays(self, query: str) -> pa.Array:
        """Per-row delay (emit − arrival) of ``query``'s outputs."""
        t = self.result(query, internal=True)
        return pc.subtract(t.column(EMIT), t.column(ARRIVAL)).combine_chunks()
