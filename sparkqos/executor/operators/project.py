"""Project: computed columns (SQL ``SELECT``; a map operator, thesis §3.2.2)."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from sparkqos.errors import ExpressionError
from sparkqos.executor.expressions import ARRIVAL, INTERNAL, SEQ, Expr, as_expr, evaluate_array
from sparkqos.executor.operators.base import PhysicalOperator


class Project(PhysicalOperator):
    """Computed columns (``select``/``map``); the executor's columns ride along.

    >>> import pyarrow as pa
    >>> from sparkqos.executor.expressions import col
    >>> from sparkqos.executor.queues import stamp, with_internal
    >>> op = Project(["id", (col("v") * 2).alias("v2")])
    >>> op.bind("q/select", [with_internal(pa.schema([("id", pa.string()), ("v", pa.int64())]))]).names
    ['id', 'v2', '__arrival', '__seq']
    """

    kind = "map"
    preserves_order = True
    row_wise = True

    def __init__(self, exprs: Sequence[Expr | str]):
        super().__init__()
        if not exprs:
            raise ExpressionError("select() needs at least one column or expression")
        self.exprs = [as_expr(e) for e in exprs]

    def copy(self) -> Project:
        return Project(self.exprs)

    def _output_schema(self) -> pa.Schema:
        src = self.input_schemas[0]
        fields = []
        seen: set[str] = set()
        empty = pa.RecordBatch.from_pylist([], schema=src)
        for e in self.exprs:
            e.check(src, self.name)
            name = e.name
            if name in INTERNAL:
                raise ExpressionError(f"operator {self.name!r}: column {name!r} is reserved for the executor")
            if name in seen:
                raise ExpressionError(f"operator {self.name!r}: two output columns are named {name!r}; use .alias()")
            seen.add(name)
            t = evaluate_array(e, empty).type  # exactly what pyarrow will produce
            fields.append(pa.field(name, t))
        return pa.schema(fields + [src.field(ARRIVAL), src.field(SEQ)])

    def process(self, batch: pa.RecordBatch, port: int = 0) -> pa.RecordBatch:
        arrays = [evaluate_array(e, batch) for e in self.exprs]
        arrays += [batch.column(ARRIVAL), batch.column(SEQ)]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)
