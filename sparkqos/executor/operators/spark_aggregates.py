"""SparkAggregates: the aggregates of a groupBy that Spark computes, over each group's buffered rows.

An aggregate function sparkqos has no native version of (``approx_count_distinct``,
``percentile_approx``, a pandas UDAF…) is computed by Spark, so its result is Spark's by
construction. The aggregation below keeps, for each group, the rows those aggregates read (a
``collect_list`` of a struct of their columns: the buffer column), as part of its own state and
bounded as that state is (a window's until the watermark passes its end). When a group is emitted
its row, buffer included, comes here and waits, in this operator's state, for the end of the
trigger: there the runner's evaluator (``evaluator``, set on the session the stream uses; the
executor never imports Spark) computes every such aggregate of every waiting group in one Spark
job, and the rows go on with the buffer column replaced by the aggregates' values. At the end of
a finite input :meth:`flush` does the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import pyarrow as pa
import pyarrow.compute as pc

from sparkqos.errors import ExpressionError, RunnerError
from sparkqos.executor.expressions import ARRIVAL, INTERNAL, SEQ
from sparkqos.executor.operators.base import TableStateOperator, TriggerEndOperator

__all__ = ["BUFFER", "GROUP", "Evaluator", "SparkAggregates"]

#: The aggregation's column of each group's buffered rows.
BUFFER = "__rows"

#: Column of the flattened rows naming the emitted group (0, 1, … in the order of the rows given).
GROUP = "__group"


class Evaluator(Protocol):
    """Computes aggregates by Spark: ``evaluate(rows, groups)`` takes the buffered rows of
    ``groups`` groups (their columns and :data:`GROUP`) and returns one row per group, in group
    order, one column per aggregate. It pickles without its session's objects: a plan pickled for
    another process (Spark Connect's ``foreachBatch`` runs on the server's Python worker) keeps what
    can travel, and the micro-batch's session is given to it there."""

    def evaluate(self, rows: pa.Table, groups: int) -> pa.Table: ...


class SparkAggregates(TableStateOperator, TriggerEndOperator):
    """Replaces the buffer column ``buffer`` (a list of structs: each group's rows) of every row
    it is given by the aggregates Spark computes over those rows, named and typed as
    ``results``; ``functions`` says what they are in a PySpark user's words (for explain()).

    >>> import pyarrow as pa
    >>> from sparkqos.executor.queues import stamp, with_internal
    >>> class Count:  # a stand-in for Spark: the number of rows of each group
    ...     def evaluate(self, rows, groups):
    ...         n = [rows.column("__group").to_pylist().count(g) for g in range(groups)]
    ...         return pa.table({"n": pa.array(n, pa.int64())})
    >>> rows = pa.list_(pa.struct([("x", pa.float64())]))
    >>> op = SparkAggregates("__rows", pa.schema([("n", pa.int64())]), ["count(x)"], Count())
    >>> _ = op.bind("q/agg", [with_internal(pa.schema([("k", pa.string()), ("__rows", rows)]))])
    >>> batch = pa.record_batch({"k": ["a", "b"], "__rows": pa.array([[{"x": 1.0}, {"x": 2.0}], [{"x": 3.0}]], rows)})
    >>> op.process(stamp(batch, 0.0, 0)) is None, op.state_rows()
    (True, 2)
    >>> [(r["k"], r["n"]) for r in op.end_trigger()[0].to_pylist()], op.state_rows()
    ([('a', 2), ('b', 1)], 0)
    """

    kind = "aggregate"
    STATE_TABLE = "emitted"

    def __init__(self, buffer: str, results: pa.Schema, functions: Sequence[str], evaluator: Evaluator | None = None):
        super().__init__()
        self.buffer, self.results, self.functions = buffer, results, list(functions)
        #: Set by the runner on the session the stream uses; None in a plan built elsewhere.
        self.evaluator = evaluator
        self._state: pa.Table | None = None

    def copy(self) -> SparkAggregates:
        return SparkAggregates(self.buffer, self.results, self.functions, self.evaluator)

    def _output_schema(self) -> pa.Schema:
        src = self.input_schemas[0]
        i = src.get_field_index(self.buffer)
        if i < 0 or not pa.types.is_list(src.field(i).type) or not pa.types.is_struct(src.field(i).type.value_type):
            raise ExpressionError(f"operator {self.name!r}: no buffer column {self.buffer!r} of rows to aggregate")
        kept = [f for f in src if f.name != self.buffer and f.name not in INTERNAL]
        names = [f.name for f in kept] + self.results.names
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ExpressionError(f"operator {self.name!r}: output column(s) {sorted(dup)} defined twice")
        return pa.schema(kept + list(self.results) + [src.field(ARRIVAL), src.field(SEQ)])

    def process(self, batch: pa.RecordBatch, port: int = 0) -> pa.RecordBatch | None:
        table = pa.Table.from_batches([batch])
        self._state = table if self._state is None else pa.concat_tables([self._state, table])
        return None

    def end_trigger(self) -> list[pa.RecordBatch]:
        """Every group emitted since the last trigger's end, with the aggregates Spark computes."""
        waiting, self._state = self._state, None
        if waiting is None or not waiting.num_rows:
            return []
        if self.evaluator is None:
            self._state = waiting
            raise RunnerError(
                f"operator {self.name!r}: aggregates Spark computes ({', '.join(self.functions)}) need the session "
                "the queries were compiled on; compile them in this process"
            )
        waiting = waiting.combine_chunks()
        buffers = waiting.column(self.buffer).combine_chunks()
        flat = pc.list_flatten(buffers)
        parents = pc.list_parent_indices(buffers)
        rows = pa.table(
            [flat.field(i) for i in range(flat.type.num_fields)] + [pc.cast(parents, pa.int64())],
            names=[*(f.name for f in flat.type), GROUP],
        )
        try:
            values = self.evaluator.evaluate(rows, waiting.num_rows)
        except BaseException:
            self._state = waiting  # nothing lost: the groups wait for the next try
            raise
        if values.num_rows != waiting.num_rows:
            raise RunnerError(f"operator {self.name!r}: Spark gave {values.num_rows} rows for {waiting.num_rows} groups")
        arrays = [waiting.column(f.name) for f in self.schema if f.name not in self.results.names]
        arrays = arrays[:-2] + [values.column(i) for i in range(values.num_columns)] + arrays[-2:]
        out = pa.Table.from_arrays(
            [a if a.type == f.type else pc.cast(a, f.type) for a, f in zip(arrays, self.schema, strict=True)],
            schema=self.schema,
        )
        return out.combine_chunks().to_batches() or []

    def flush(self) -> list[pa.RecordBatch]:
        return self.end_trigger()
