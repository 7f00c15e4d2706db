"""PhysicalOperator, the base of the executor's operators, and helpers the operators share (thesis §3.2.2).

An operator is bound to its input schemas when a plan is built (:meth:`PhysicalOperator.bind`,
which type-checks its expressions and returns the output schema), then runs on the rows the
executor hands it from its input queues (:meth:`PhysicalOperator.run`).
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkqos.errors import CheckpointError, PlanError
from sparkqos.executor.expressions import INTERNAL
from sparkqos.executor.operators.ordering import order_ranks
from sparkqos.executor.queues import BatchQueue
from sparkqos.executor.slices import SlicePool


def user_names(schema: pa.Schema) -> list[str]:
    """Column names of ``schema`` without the executor's columns."""
    return [n for n in schema.names if n not in INTERNAL]


def table_to_ipc(table: pa.Table) -> bytes:
    """``table`` as Arrow IPC stream bytes (operator state in checkpoints)."""
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue()


def ipc_to_table(data: bytes) -> pa.Table:
    """The table :func:`table_to_ipc` wrote."""
    return pa.ipc.open_stream(data).read_all()


def normal_key(x: pa.Array) -> pa.Array:
    """``x`` as Spark compares keys: -0.0 with 0.0 and every NaN together (it normalises float keys,
    also inside structs and arrays)."""
    t = x.type
    if pa.types.is_floating(t):
        zero = pa.scalar(0.0, t)
        return pc.if_else(pc.is_nan(x), pa.scalar(math.nan, t), pc.add(x, zero))
    if not _holds_floats(t):
        return x
    if isinstance(x, pa.ChunkedArray):
        x = x.combine_chunks()
    mask = x.is_null() if x.null_count else None
    if pa.types.is_struct(t):
        return pa.StructArray.from_arrays([normal_key(x.field(i)) for i in range(t.num_fields)], fields=list(t), mask=mask)
    lengths = pc.list_value_length(x).fill_null(0).to_numpy(zero_copy_only=False)
    offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
    return pa.ListArray.from_arrays(offsets, normal_key(pc.list_flatten(x)), type=t, mask=mask)


def _holds_floats(t: pa.DataType) -> bool:
    if pa.types.is_floating(t):
        return True
    if pa.types.is_struct(t):
        return any(_holds_floats(f.type) for f in t)
    return pa.types.is_list(t) and _holds_floats(t.value_type)


def group_codes(columns: Sequence[pa.Array | pa.ChunkedArray], rows: int) -> np.ndarray:
    """One integer per row, equal for rows whose ``columns`` hold equal keys (Spark's grouping:
    null is a key of its own, floats normalised by :func:`normal_key`); all zeros without columns."""
    codes = np.zeros(rows, dtype=np.int64)
    for column in columns:
        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks()
        if pa.types.is_nested(column.type):  # a struct or an array: equal when Spark's ordering ties them
            index = order_ranks(column)
            size = int(index.max()) + 1 if len(index) else 1
        else:
            encoded = pc.dictionary_encode(normal_key(column), null_encoding="encode")
            index = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
            size = len(encoded.dictionary)
        codes = _dense_codes(codes * max(size, 1) + index)
    return codes


def _dense_codes(combined: np.ndarray) -> np.ndarray:
    """``combined`` renumbered 0, 1, … in the order of its values (so a code of several columns
    stays below rows²): by a table of the values when their range is small, else by sorting."""
    if not len(combined):
        return combined.astype(np.int64)
    top = int(combined.max()) + 1
    if top <= 4 * len(combined) + 1024:
        present = np.zeros(top, dtype=bool)
        present[combined] = True
        return (np.cumsum(present) - 1)[combined].astype(np.int64)
    _, codes = np.unique(combined, return_inverse=True)
    return codes.astype(np.int64).reshape(-1)


class PhysicalOperator:
    """Base of the executor's operators.

    ``kind`` is the plan kind (``filter``, ``map``, ``union``, ``join``, ``aggregate``);
    ``selectivity`` / ``cost_s`` are the initial estimates the plan starts from before the
    statistics gatherer measures them.
    """

    kind = "filter"
    arity = 1
    selectivity = 1.0
    cost_s = 1e-6
    #: Output rows keep the order of input rows (so arrival order survives).
    preserves_order = False
    #: :meth:`process` of a batch is the concatenation of :meth:`process` of its slices, and it
    #: keeps no state: a run may be computed slice by slice at once
    #: (:class:`~sparkqos.executor.slices.SlicePool`).
    row_wise = False

    def __init__(self) -> None:
        self.name = "?"
        self.input_schemas: list[pa.Schema] = []
        self.schema: pa.Schema | None = None

    # -- building ------------------------------------------------------------------------------
    def bind(self, name: str, input_schemas: Sequence[pa.Schema]) -> pa.Schema:
        """Type-check against the input schemas (with the executor's columns) and return the
        output schema. Raises :class:`ExpressionError` / :class:`PlanError` naming ``name``."""
        if len(input_schemas) != self.arity:
            raise PlanError(f"operator {name!r} takes {self.arity} input(s), got {len(input_schemas)}")
        self.name = name
        self.input_schemas = list(input_schemas)
        self.schema = self._output_schema()
        return self.schema

    def _output_schema(self) -> pa.Schema:
        return self.input_schemas[0]

    def copy(self) -> PhysicalOperator:
        """A fresh, unbound operator with the same parameters (each query gets its own)."""
        raise NotImplementedError

    # -- running -------------------------------------------------------------------------------
    def runnable(self, ports: Sequence[BatchQueue], final: bool) -> bool:
        """Whether :meth:`run` can consume something; ``final``: no more input can reach the
        empty ports."""
        return any(ports)

    def run(
        self, ports: Sequence[BatchQueue], limit: int, final: bool = False, pool: SlicePool | None = None
    ) -> tuple[int, list[pa.RecordBatch]]:
        """Consume up to ``limit`` rows from the input queues; returns (rows consumed, output).
        ``pool``: the run of a :attr:`row_wise` operator is computed on it, slice by slice."""
        port = ports[0]
        nbytes = port.nbytes
        taken = port.take(limit)
        if not taken:
            return 0, []
        # One kernel call per run: copying a few slices together is cheaper than calling every
        # kernel once per slice.
        batch = taken[0] if len(taken) == 1 else pa.concat_batches(taken)
        try:
            res = self.process(batch) if pool is None else pool.map(self.process, batch)
        except BaseException:
            # A user's function (a UDF) may raise: its input goes back to the front of the queue,
            # so the executor still holds every row it was given.
            port.put_back(taken, nbytes - port.nbytes)
            raise
        return batch.num_rows, ([] if res is None or res.num_rows == 0 else [res])

    def process(self, batch: pa.RecordBatch, port: int = 0) -> pa.RecordBatch | None:
        raise NotImplementedError

    def flush(self) -> list[pa.RecordBatch]:
        """End of input: whatever the operator still holds back."""
        return []

    # -- state ---------------------------------------------------------------------------------
    def to_state(self) -> dict[str, Any]:
        return {}

    def from_state(self, state: dict[str, Any]) -> None:
        if state:
            raise CheckpointError(f"operator {self.name!r} holds no state, got {sorted(state)}")

    def state_rows(self) -> int:
        return 0


class TriggerEndOperator(PhysicalOperator):
    """An operator whose output is due at the end of each trigger rather than after each run:
    what one trigger writes of it is what it gives then, however many times the strategy ran it
    in that trigger (an aggregate in Spark's update output mode). The executor asks for it once
    per trigger (:meth:`~sparkqos.executor.loop.Executor.end_trigger`) and runs the operators
    above on it, so the trigger's own write holds it; at the end of a finite input
    :meth:`flush` gives it."""

    def end_trigger(self) -> list[pa.RecordBatch]:
        """What is due at the end of this trigger; forgotten once given."""
        raise NotImplementedError


class MicroBatchOperator(TriggerEndOperator):
    """A trigger-end operator whose output at a trigger's end must cover every row of that
    trigger's micro-batch (a user's stateful function, which Spark calls once per key and
    micro-batch): before asking it, the executor serves the operators below it and the operator
    itself until their queues are empty, so no row of the micro-batch is still on its way."""


class TableStateOperator(PhysicalOperator):
    """An operator whose state is one Arrow table (``_state``, None when empty) and a few plain
    values: checkpointed as the table's IPC bytes under :attr:`STATE_TABLE` and each attribute
    of :attr:`STATE_VALUES` under its name without the leading underscore."""

    #: The checkpoint key of the state table.
    STATE_TABLE: str = "state"
    #: Attributes saved beside it.
    STATE_VALUES: tuple[str, ...] = ()
    _state: pa.Table | None = None

    def state_rows(self) -> int:
        return 0 if self._state is None else self._state.num_rows

    def to_state(self) -> dict[str, Any]:
        out: dict[str, Any] = {self.STATE_TABLE: None if self._state is None else table_to_ipc(self._state)}
        out.update({a.lstrip("_"): getattr(self, a) for a in self.STATE_VALUES})
        return out

    def from_state(self, state: dict[str, Any]) -> None:
        blob = state[self.STATE_TABLE]
        self._state = None if blob is None else ipc_to_table(blob)
        for a in self.STATE_VALUES:
            setattr(self, a, state[a.lstrip("_")])


class WindowStateOperator(TableStateOperator):
    """A window aggregation: the partial aggregates of its open windows are the state table, kept
    with the watermark's inputs (the newest event time, windows closed until) and the late rows."""

    STATE_TABLE = "partials"
    STATE_VALUES = ("_max_time", "_closed_until", "late_rows")
    kind = "aggregate"
    selectivity = 0.1


class SidedStateOperator(PhysicalOperator):
    """A two-input operator whose state is one Arrow table per input (``_state``, None when
    empty) and the newest event time seen on each (``_max_time``): checkpointed as IPC bytes under
    ``state`` and the times under ``max_time``, with each attribute of :attr:`STATE_VALUES` under
    its own name."""

    #: Attributes saved beside the tables and times.
    STATE_VALUES: tuple[str, ...] = ()
    _state: list[pa.Table | None]
    _max_time: list[float]

    def state_rows(self) -> int:
        return sum(0 if s is None else s.num_rows for s in self._state)

    def to_state(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "state": [None if s is None else table_to_ipc(s) for s in self._state],
            "max_time": list(self._max_time),
        }
        out.update({a: getattr(self, a) for a in self.STATE_VALUES})
        return out

    def from_state(self, state: dict[str, Any]) -> None:
        self._state = [None if s is None else ipc_to_table(s) for s in state["state"]]
        self._max_time = list(state["max_time"])
        for a in self.STATE_VALUES:
            setattr(self, a, state[a])
