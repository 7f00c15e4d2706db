"""Load shedding a user chose (``shed={"N": "30s"}``): a query's rows that fell too far behind.

Aurora sheds load where its QoS graphs say the loss hurts least; here the user says it per query
or class instead: a query with a shedding age drops the rows waiting at its leaves (the queues fed
by the stream) whose event time is more than that age behind the newest event time taken in.
Such rows exist only while the query cannot keep up for that long — sustained overload; a burst it
catches up within the age loses nothing. A query without an age never loses a row.

What is shed is never silent: counted per query (``shedRows`` in progress and the summary) and
written to the dead-letter table with reason ``shed`` (``column`` names the query, ``row`` is the
row's position in its stream, ``record`` the row). The decision reads only the queues and event
times, both restored from the checkpoint, so a replayed batch sheds the rows the checkpoint's
state gives it; its dead letters replace the earlier attempt's, as its outputs do.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from sparkqos.executor.expressions import INTERNAL, SEQ
from sparkqos.executor.plan import CompiledPlan
from sparkqos.executor.state import ExecutorState
from sparkqos.io.deadletter import dead_letters

__all__ = ["Shedder"]

#: The dead-letter reason of a shed row.
SHED = "shed"


class Shedder:
    """Sheds the rows of each query of ``ages`` (query → seconds) that fell further behind than
    its age (see the module)."""

    def __init__(self, compiled: CompiledPlan, ages: dict[str, float]):
        plan = compiled.plan
        streams = set(plan.streams)
        self.ages = dict(ages)
        #: The queues a query's rows enter it by: (operator, port) of its leaves.
        self.leaves = {
            q: [(op, port) for op in plan.queries[q].operators for port, src in enumerate(plan[op].inputs) if src in streams]
            for q in self.ages
        }

    def shed(self, state: ExecutorState, stream_time: float, batch_id: int) -> tuple[pa.Table | None, dict[str, int]]:
        """Drop what fell more than its query's age behind ``stream_time`` (the newest event time
        taken in); the dead letters of batch ``batch_id`` (None: nothing shed) and rows per query.

        Queries of one class usually shed the same rows of the stream at the same trigger (their
        queues wait alike); their records' JSON is then built once and given to each query's
        dead letters (it is the text of the row, whichever query dropped it)."""
        letters, counts = [], {}
        built: list[tuple[pa.Schema, np.ndarray, pa.Table]] = []  # records' schema, rows, their letters
        for query, age in self.ages.items():
            bound = stream_time - age
            for op, port in self.leaves[query]:
                batches = [b for b in state.shed_before(op, port, bound) if b.num_rows]
                if not batches:
                    continue
                table = pa.Table.from_batches(batches)
                counts[query] = counts.get(query, 0) + table.num_rows
                seqs = np.asarray(table.column(SEQ).to_numpy(zero_copy_only=False))
                records = table.drop_columns([c for c in table.column_names if c in INTERNAL])
                n = table.num_rows
                same = next(
                    (t for schema, rows, t in built if schema.equals(records.schema) and np.array_equal(rows, seqs)), None
                )
                if same is not None:
                    letters.append(
                        same.set_column(same.schema.get_field_index("column"), "column", pa.array([query] * n, pa.string()))
                    )
                    continue
                letters.append(dead_letters(records, batch_id, seqs, [SHED] * n, [query] * n))
                built.append((records.schema, seqs, letters[-1]))
        return (pa.concat_tables(letters) if letters else None), counts
