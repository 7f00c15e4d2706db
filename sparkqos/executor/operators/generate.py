"""Generate: Spark's ``explode`` / ``explode_outer`` / ``posexplode`` / ``posexplode_outer`` of an array.

What a PySpark transform's ``select(..., F.explode(F.split("tags", ",")))`` compiles to
(:mod:`sparkqos.compile.nested`): one output row per element of the array, in row order and
element order, carrying the input columns ``keep`` (and the executor's ``__arrival`` / ``__seq``,
so each element's delay counts from its row). A null or empty array gives no row, or with
``outer`` one row whose element (and position) is null. ``position`` names an ``int32`` column of
each element's 0-based index (posexplode). Stateless: a map operator whose selectivity is the
mean array length.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkqos.errors import ExpressionError
from sparkqos.executor.expressions import ARRIVAL, INTERNAL, SEQ, Expr, evaluate_array
from sparkqos.executor.operators.base import PhysicalOperator


class Generate(PhysicalOperator):
    """The elements of the array ``array`` as column ``element``, beside the input columns ``keep``.

    >>> import pyarrow as pa
    >>> from sparkqos.executor.expressions import col
    >>> from sparkqos.executor.queues import stamp, with_internal
    >>> op = Generate(col("xs"), ["k"], "x", position="pos", outer=True)
    >>> schema = pa.schema([("k", pa.string()), ("xs", pa.list_(pa.int64()))])
    >>> _ = op.bind("q/explode", [with_internal(schema)])
    >>> out = op.process(stamp(pa.record_batch({"k": ["a", "b", "c"], "xs": [[1, 2], [], None]}, schema=schema), 0.0, 0))
    >>> out.column("k").to_pylist(), out.column("pos").to_pylist(), out.column("x").to_pylist()
    (['a', 'a', 'b', 'c'], [0, 1, None, None], [1, 2, None, None])
    """

    kind = "map"
    preserves_order = True

    def __init__(self, array: Expr, keep: Sequence[str], element: str, position: str | None = None, outer: bool = False):
        super().__init__()
        self.array, self.keep, self.element, self.position, self.outer = array, list(keep), element, position, outer

    def copy(self) -> Generate:
        return Generate(self.array, self.keep, self.element, self.position, self.outer)

    def _output_schema(self) -> pa.Schema:
        src = self.input_schemas[0]
        t = self.array.check(src, self.name)
        if not pa.types.is_list(t):
            raise ExpressionError(f"operator {self.name!r}: explode needs an array, got {self.array!r} ({t})")
        fields = []
        for k in self.keep:
            if src.get_field_index(k) < 0:
                raise ExpressionError(f"operator {self.name!r}: unknown column {k!r}; columns are {src.names}")
            fields.append(src.field(k))
        if self.position is not None:
            fields.append(pa.field(self.position, pa.int32()))
        fields.append(pa.field(self.element, t.value_type))
        names = [f.name for f in fields]
        if len(set(names)) != len(names) or set(names) & set(INTERNAL):
            raise ExpressionError(f"operator {self.name!r}: output columns {names} repeat a name or use a reserved one")
        return pa.schema(fields + [src.field(ARRIVAL), src.field(SEQ)])

    def process(self, batch: pa.RecordBatch, port: int = 0) -> pa.RecordBatch | None:
        lists = evaluate_array(self.array, batch)
        lengths = pc.fill_null(pc.list_value_length(lists), 0).to_numpy(zero_copy_only=False).astype(np.int64)
        flat = pc.list_flatten(lists)  # a null array's slot holds nothing here, whatever its offsets
        # Output rows per input row: its elements, or one (null) for a null or empty array when outer.
        rows_per = np.maximum(lengths, 1) if self.outer else lengths
        total = int(rows_per.sum())
        if not total:
            return None
        parents = np.repeat(np.arange(len(lengths)), rows_per)
        position = np.arange(total) - np.repeat(np.cumsum(rows_per) - rows_per, rows_per)
        missing = np.repeat(lengths == 0, rows_per)
        index = np.repeat(np.cumsum(lengths) - lengths, rows_per) + position
        values = flat.take(pa.array(np.where(missing, 0, index), mask=missing)) if len(flat) else pa.nulls(total, flat.type)
        rows = pa.array(parents)
        arrays = [batch.column(k).take(rows) for k in self.keep]
        if self.position is not None:
            arrays.append(pa.array(position, pa.int32(), mask=missing))
        arrays.append(values)
        arrays += [batch.column(ARRIVAL).take(rows), batch.column(SEQ).take(rows)]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)
