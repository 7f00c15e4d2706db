"""Select: the rows for which a predicate holds (SQL ``WHERE``; a filter operator, thesis §3.2.2)."""

from __future__ import annotations

import pyarrow as pa

from sparkqos.errors import ExpressionError
from sparkqos.executor.expressions import Expr, evaluate_array, kind
from sparkqos.executor.operators.base import PhysicalOperator


class Select(PhysicalOperator):
    """Rows for which ``predicate`` is true (null counts as false, as in SQL ``WHERE``).

    >>> import pyarrow as pa
    >>> from sparkqos.executor.expressions import col
    >>> from sparkqos.executor.queues import stamp, with_internal
    >>> op = Select(col("v") > 1)
    >>> _ = op.bind("q/where", [with_internal(pa.schema([("v", pa.int64())]))])
    >>> op.process(stamp(pa.record_batch({"v": [1, 2, 3]}), 0.0, 0)).column("v").to_pylist()
    [2, 3]
    """

    kind = "filter"
    selectivity = 0.5
    preserves_order = True
    row_wise = True

    def __init__(self, predicate: Expr):
        super().__init__()
        if not isinstance(predicate, Expr):
            raise ExpressionError(f"where() needs an expression such as col('x') > 1, got {predicate!r}")
        self.predicate = predicate

    def copy(self) -> Select:
        return Select(self.predicate)

    def _output_schema(self) -> pa.Schema:
        t = self.predicate.check(self.input_schemas[0], self.name)
        if kind(t) not in ("boolean", "null"):
            raise ExpressionError(f"operator {self.name!r}: the predicate {self.predicate!r} gives {t}, not a boolean")
        return self.input_schemas[0]

    def process(self, batch: pa.RecordBatch, port: int = 0) -> pa.RecordBatch:
        return batch.filter(evaluate_array(self.predicate, batch))
