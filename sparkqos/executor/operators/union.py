"""Union: the rows of several inputs with the same columns, merged in arrival order (thesis §3.2.2)."""

from __future__ import annotations

import pyarrow as pa

from sparkqos.errors import PlanError, check_number
from sparkqos.executor.operators.base import PhysicalOperator, user_names


class Union(PhysicalOperator):
    """Rows of all inputs (same column names and types), oldest head first.

    >>> import pyarrow as pa
    >>> from sparkqos.executor.queues import BatchQueue, stamp, with_internal
    >>> sch = with_internal(pa.schema([("v", pa.int64())]))
    >>> op = Union(2)
    >>> _ = op.bind("q/union", [sch, sch])
    >>> a, b = BatchQueue(sch), BatchQueue(sch)
    >>> a.push(stamp(pa.record_batch({"v": [1, 2]}), 2.0, 0))
    >>> b.push(stamp(pa.record_batch({"v": [3]}), 1.0, 0))
    >>> n, out = op.run([a, b], 10)
    >>> n, [v for batch in out for v in batch.column("v").to_pylist()]
    (3, [3, 1, 2])
    """

    kind = "union"

    def __init__(self, arity: int = 2):
        super().__init__()
        self.arity = check_number("arity", arity, integer=True, low=2, error=PlanError, where="union ")

    def copy(self) -> Union:
        return Union(self.arity)

    def _output_schema(self) -> pa.Schema:
        first = self.input_schemas[0]
        for i, s in enumerate(self.input_schemas[1:], start=1):
            if set(s.names) != set(first.names):
                raise PlanError(f"operator {self.name!r}: input {i} has columns {user_names(s)}, input 0 has {user_names(first)}")
            for f in first:
                other = s.field(f.name).type
                if other != f.type:
                    raise PlanError(f"operator {self.name!r}: column {f.name!r} is {f.type} in input 0 but {other} in input {i}")
        return first

    def run(self, ports, limit, final=False):
        out, consumed = [], 0
        names = self.schema.names
        while consumed < limit:
            live = [p for p in ports if p]
            if not live:
                break
            port = min(live, key=lambda p: p.head_arrival)
            head_rows = port._batches[0][1]
            for b in port.take(min(limit - consumed, head_rows)):
                consumed += b.num_rows
                out.append(b if b.schema.names == names else b.select(names))
        return consumed, out

    def process(self, batch: pa.RecordBatch, port: int = 0) -> pa.RecordBatch:
        return batch.select(self.schema.names)
