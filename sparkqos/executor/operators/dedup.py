"""Deduplicate: Spark's ``dropDuplicates(keys)`` and ``dropDuplicatesWithinWatermark(keys)`` on a stream.

What a PySpark transform's ``withWatermark("ts", "5 seconds").dropDuplicates(["sensor_id", "ts"])``
compiles to (:mod:`sparkqos.compile.keyed`): the first row (in arrival order) of each key comes
out, later rows of a key already seen are dropped. Keys compare as Spark groups them: null is a
key of its own, -0.0 equals 0.0, every NaN equals every NaN.

Streaming, with a watermark delay on the event-time column ``time_col`` (Spark's streaming
deduplication): the watermark is the largest event time seen in earlier batches minus the delay,
as in EventWindowAggregate. A row whose event time is at or below the watermark is late: dropped
and counted in ``late_rows``. After each batch the seen keys the watermark has passed are
forgotten: for ``dropDuplicates`` with ``time_col`` among the keys, a key whose event time is at
or below the watermark (a later row of it would be late anyway); for
``dropDuplicatesWithinWatermark``, a key whose first row's event time plus the delay is at or
below it (a null event time counts as 0, as Spark reads it). Rows with a null event time are
never late, and a ``dropDuplicates`` key with a null event time is kept for good, as in Spark.
Without a watermark (a finite DataFrame, where Spark ignores ``withWatermark``, or a stream
whose user accepts state that grows), and with ``dropDuplicates`` keys that leave out the
watermarked column, every key is kept to the end. State (the keys seen — :meth:`state_rows` —
plus each key's expiry within the watermark) is bounded by the watermark when the keys include
its column, and serialisable (Arrow IPC).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkqos.errors import ExpressionError, PlanError, check_number
from sparkqos.executor.operators.base import TableStateOperator, group_codes
from sparkqos.executor.operators.ordering import orderable

_EXPIRES = "__expires"


class Deduplicate(TableStateOperator):
    """The first row of each ``keys`` value; ``time_col`` and ``delay_us`` give the watermark
    (None: none), ``within_watermark`` Spark's ``dropDuplicatesWithinWatermark``.

    >>> import pyarrow as pa
    >>> from sparkqos.executor.queues import stamp, with_internal
    >>> op = Deduplicate(["k"])
    >>> _ = op.bind("q/dedup", [with_internal(pa.schema([("k", pa.string()), ("v", pa.int64())]))])
    >>> op.process(stamp(pa.record_batch({"k": ["a", "b", "a"], "v": [1, 2, 3]}), 0.0, 0)).column("v").to_pylist()
    [1, 2]
    >>> op.process(stamp(pa.record_batch({"k": ["b", "c"], "v": [4, 5]}), 1.0, 3)).column("v").to_pylist()
    [5]
    """

    STATE_TABLE = "keys"
    STATE_VALUES = ("_max_time", "late_rows")

    kind = "filter"
    selectivity = 0.5
    preserves_order = True

    def __init__(
        self, keys: Sequence[str], time_col: str | None = None, delay_us: int | None = None, within_watermark: bool = False
    ):
        super().__init__()
        self.keys = list(keys)
        if not self.keys:
            raise PlanError("a deduplication needs at least one key column")
        check_number("delay_us", delay_us, integer=True, low=0, none_ok=True, error=PlanError, where="deduplication ")
        if delay_us is not None and time_col is None:
            raise PlanError("a deduplication with a watermark delay needs its event-time column (time_col)")
        if within_watermark and delay_us is None:
            raise PlanError("dropDuplicatesWithinWatermark needs a watermark delay (delay_us)")
        self.time_col, self.delay_us, self.within_watermark = time_col, delay_us, within_watermark
        self._state: pa.Table | None = None
        self._max_time: int | None = None
        self.late_rows = 0

    def copy(self) -> Deduplicate:
        return Deduplicate(self.keys, self.time_col, self.delay_us, self.within_watermark)

    def _output_schema(self) -> pa.Schema:
        src = self.input_schemas[0]
        for name in [*self.keys, *([self.time_col] if self.time_col else [])]:
            if src.get_field_index(name) < 0:
                raise ExpressionError(f"operator {self.name!r}: unknown column {name!r}; columns are {src.names}")
        for name in self.keys:
            if not orderable(src.field(name).type):  # how keys compare: Spark's ordering ties equal ones
                raise ExpressionError(f"operator {self.name!r}: cannot compare key column {name!r} ({src.field(name).type})")
        if self.time_col is not None and not pa.types.is_timestamp(src.field(self.time_col).type):
            raise ExpressionError(f"operator {self.name!r}: event-time column {self.time_col!r} must be a timestamp")
        return src

    @property
    def watermark_us(self) -> int | None:
        """The current watermark (µs), None before any event time or without a delay."""
        if self.delay_us is None or self._max_time is None:
            return None
        return self._max_time - self.delay_us

    def process(self, batch: pa.RecordBatch, port: int = 0) -> pa.RecordBatch | None:
        n = batch.num_rows
        if n == 0:
            return None
        time = None if self.time_col is None else pc.cast(batch.column(self.time_col), pa.int64())
        rows = np.arange(n)
        watermark = self.watermark_us
        if watermark is not None:
            late = pc.fill_null(pc.less_equal(time, watermark), False).to_numpy(zero_copy_only=False)
            self.late_rows += int(late.sum())
            rows = rows[~late]
        state = self._state
        held = 0 if state is None else state.num_rows
        taken = pa.array(rows)
        keys = [batch.column(k).take(taken) for k in self.keys]
        if held:
            keys = [pa.concat_arrays([state.column(k).combine_chunks(), a]) for k, a in zip(self.keys, keys, strict=True)]
        codes = group_codes(keys, held + len(rows))
        new = codes[held:]
        groups, first = np.unique(new, return_index=True)
        first = np.sort(first[~np.isin(groups, codes[:held])])
        emitted = rows[first]
        if len(emitted):
            picked = pa.array(emitted)
            part = {k: batch.column(k).take(picked) for k in self.keys}
            if self.within_watermark:
                t = pc.fill_null(time.take(picked), 0)
                part[_EXPIRES] = pc.add(t, self.delay_us)
            part_table = pa.table(part)
            self._state = part_table if not held else pa.concat_tables([state, part_table.cast(state.schema)])
        if time is not None and len(time) - time.null_count:
            m = int(pc.max(time).as_py())
            self._max_time = m if self._max_time is None else max(self._max_time, m)
        self._evict()
        if not len(emitted):
            return None
        return batch.take(pa.array(emitted))

    def _evict(self) -> None:
        """Forget the keys the watermark has passed (a later row of them would be late)."""
        watermark, state = self.watermark_us, self._state
        if watermark is None or state is None or state.num_rows == 0:
            return
        if self.within_watermark:
            gone = pc.less_equal(state.column(_EXPIRES), watermark)
        elif self.time_col in self.keys:
            gone = pc.fill_null(pc.less_equal(pc.cast(state.column(self.time_col), pa.int64()), watermark), False)
        else:  # Spark keeps such keys for good (the compiler warns: GrowingStateWarning)
            return
        if pc.any(gone).as_py():
            self._state = state.filter(pc.invert(gone))
