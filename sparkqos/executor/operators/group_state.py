"""PandasWithState: a user's own stateful function, Spark's ``groupBy(keys).applyInPandasWithState``.

What ``df.groupBy("user").applyInPandasWithState(func, "user string, n long", "n long", "update",
GroupStateTimeout.EventTimeTimeout)`` compiles to (:mod:`sparkqos.compile.group_state`): ``func``
is called with a key (a tuple, its values as Spark's worker gives them: ``numpy.int64`` for a
long, ``str`` for a string), an iterator of pandas DataFrames holding that key's rows (the
columns the DataFrame had, converted as Spark converts them) and a :class:`GroupState`, and
yields pandas DataFrames of the declared output schema.

Spark calls the function once per key per micro-batch. So do runs here: a run only queues its
rows in this operator's state, and at the end of the trigger
(:meth:`~sparkqos.executor.operators.base.TriggerEndOperator.end_trigger`; a
:class:`~sparkqos.executor.operators.base.MicroBatchOperator`, so the executor first serves the
operators below it until every row of the trigger's micro-batch has reached it) the rows taken
since the last one are that micro-batch: every key among them is called once with its rows in
arrival order, then every key whose timeout has passed without rows is called with
``hasTimedOut`` true and one empty DataFrame, as Spark does. The timeouts, as Spark defines them:

* ``NoTimeout``: never;
* ``ProcessingTimeTimeout``: ``setTimeoutDuration(ms)`` times the key out at the first trigger
  whose processing time (the wall clock at the trigger's end, ``getCurrentProcessingTimeMs``) is
  past the trigger's time plus ``ms``;
* ``EventTimeTimeout``: ``setTimeoutTimestamp(ms)`` times it out once the watermark passes ``ms``.
  The watermark is Spark's: the largest event time (``time_col``, in ms) of earlier micro-batches
  minus the delay, never moving back; rows at or before the previous micro-batch's watermark are
  late: dropped and counted in ``late_rows``.

A timeout holds for the call that set it: each call starts with none, as in Spark. State kept per
key: the value (a tuple of the declared state type, held as Arrow: ``update`` converts it, so a
value the type cannot hold raises at once) and the timeout; ``remove()`` forgets the value, and a
key with neither is dropped. At the end of a finite input :meth:`flush` takes the rows still
queued as a last micro-batch and then, as Spark's micro-batch without data after the input ends,
times out the keys the last watermark passed (Spark runs ``applyInPandasWithState`` on streams
only). State (the keys' values and timeouts,
the rows waiting for the trigger's end, the watermark) is serialisable (Arrow IPC).
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any
from zoneinfo import ZoneInfo

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from sparkqos.errors import ExpressionError, PlanError, UdfError
from sparkqos.executor.expressions import ARRIVAL, INTERNAL, SEQ
from sparkqos.executor.operators.base import MicroBatchOperator, group_codes, ipc_to_table, table_to_ipc
from sparkqos.executor.udf import udf_type_supported

__all__ = [
    "TIMEOUTS",
    "GroupState",
    "PandasWithState",
    "frame_to_arrow",
    "frame_type_supported",
    "spark_frame",
    "state_type_supported",
]

#: Spark's GroupStateTimeout values.
TIMEOUTS = ("NoTimeout", "ProcessingTimeTimeout", "EventTimeTimeout")
NO_TIMESTAMP = -1
_VALUE, _TIMEOUT = "__value", "__timeout"


def state_type_supported(t: pa.DataType) -> bool:
    """Whether a state, input or output field may have type ``t``: a UDF's types (integers,
    floats, strings, booleans) and timestamps."""
    return udf_type_supported(t) or pa.types.is_timestamp(t)


def frame_type_supported(t: pa.DataType, nested: bool = False) -> bool:
    """Whether a column of type ``t`` may reach the function's frames, converted as Spark's worker
    converts it: besides :func:`state_type_supported`'s types, decimals, dates, binary, arrays and
    structs of them (a timestamp inside an array or a struct, or a map, is not: Spark converts
    those its own way)."""
    if pa.types.is_timestamp(t):
        return not nested
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return frame_type_supported(t.value_type, True)
    if pa.types.is_struct(t):
        return all(frame_type_supported(f.type, True) for f in t)
    return (
        state_type_supported(t)
        or pa.types.is_decimal(t)
        or pa.types.is_date32(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_null(t)
    )


def check_grouped_input(op: str, src: pa.Schema, keys: Sequence[str], columns: Sequence[str], time_col: str | None) -> None:
    """The input of a user's function over groups, checked: every column it reads is in ``src``,
    the keys of types its state can hold, the other columns of types a pandas frame carries."""
    for name in [*keys, *columns, *([time_col] if time_col else [])]:
        if src.get_field_index(name) < 0:
            raise ExpressionError(f"operator {op!r}: unknown column {name!r}; columns are {src.names}")
    for name in keys:
        if not state_type_supported(src.field(name).type):
            raise ExpressionError(f"operator {op!r}: key column {name!r} of type {src.field(name).type}")
    for name in columns:
        if not frame_type_supported(src.field(name).type):
            raise ExpressionError(f"operator {op!r}: column {name!r} of type {src.field(name).type}")


def drop_late(rows: pa.Table, time_col: str, late_ms: int) -> tuple[pa.Table, int]:
    """``rows`` without those at or before ``late_ms`` (the previous micro-batch's watermark, ms),
    as Spark drops late rows before an event-time stateful function; and how many it dropped."""
    t = pc.cast(rows.column(time_col), pa.int64())
    is_late = pc.fill_null(pc.less_equal(t, late_ms * 1000), False)
    return rows.filter(pc.invert(is_late)), int(pc.sum(is_late).as_py() or 0)


def end_micro_batch(op: Any, rows: pa.Table | None, late: int, outputs: list[pa.RecordBatch]) -> list[pa.RecordBatch]:
    """What a grouped function's operator (``op``: PandasWithState, TransformWithState) does once a
    micro-batch's calls succeeded: counts the late rows, takes in the newest event time and arrival
    of the rows it read, moves its watermark on (the next micro-batch's), and gives its outputs as
    one batch for the operators above rather than one per key."""
    op.late_rows += late
    if rows is not None and op.time_col is not None and rows.num_rows:
        newest = pc.max(pc.cast(rows.column(op.time_col), pa.int64())).as_py()
        if newest is not None:
            op._max_time_ms = max(op._max_time_ms or newest // 1000, newest // 1000)
    if rows is not None and rows.num_rows:
        op._newest = (float(pc.max(rows.column(ARRIVAL)).as_py()), int(pc.max(rows.column(SEQ)).as_py()))
    if len(outputs) > 1:
        outputs = pa.Table.from_batches(outputs).combine_chunks().to_batches()
    if op.delay_us is not None and op._max_time_ms is not None:
        op._late_ms = op._watermark_ms
        op._watermark_ms = max(op._watermark_ms, op._max_time_ms - op.delay_us // 1000)
    return outputs


def spark_frame(table: pa.Table, time_zone: str) -> pd.DataFrame:
    """``table`` as Spark's worker gives it to pandas: timestamps naive, in the session's time zone."""
    columns = {}
    for name in table.column_names:
        s = table.column(name).to_pandas()
        if pa.types.is_timestamp(table.schema.field(name).type):
            s = pd.to_datetime(s, utc=True).dt.tz_convert(time_zone).dt.tz_localize(None)
        columns[name] = s
    return pd.DataFrame(columns) if columns else pd.DataFrame(index=range(table.num_rows))


def frame_to_arrow(df: Any, output: pa.Schema, time_zone: str) -> pa.Table | None:
    """A DataFrame a user's function yielded, as Spark takes it: columns by name when they are all
    strings, else by position; NaN is null; values cast to the declared types (``output``); a
    naive timestamp is in the session's time zone. None for an empty DataFrame without columns."""
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"yielded {type(df).__name__}; it must yield pandas.DataFrame")
    if len(df.columns) == 0 and df.empty:
        return None
    if len(df.columns) != len(output):
        raise TypeError(f"yielded a DataFrame of {len(df.columns)} columns; the output schema has {len(output)}")
    by_name = all(isinstance(c, str) for c in df.columns)
    arrays = []
    for i, f in enumerate(output):
        if by_name and f.name not in df.columns:
            raise TypeError(f"yielded a DataFrame without column {f.name!r}; its columns are {list(df.columns)}")
        s = df[f.name] if by_name else df.iloc[:, i]
        if pa.types.is_timestamp(f.type):
            s = pd.to_datetime(s)
            if s.dt.tz is None:
                s = s.dt.tz_localize(time_zone)
            s = s.dt.tz_convert("UTC")
        a = pa.Array.from_pandas(s, mask=s.isna().to_numpy())
        arrays.append(a if a.type == f.type else pc.cast(a, f.type, safe=False))
    return pa.Table.from_arrays(arrays, schema=output)


class GroupState:
    """The state of one key, as PySpark's ``pyspark.sql.streaming.state.GroupState`` offers it to
    the function of ``applyInPandasWithState``: ``exists``, ``get``, ``getOption``, ``update``,
    ``remove``, ``hasTimedOut``, ``setTimeoutDuration``, ``setTimeoutTimestamp``,
    ``getCurrentProcessingTimeMs``, ``getCurrentWatermarkMs`` (a misuse raises ``ValueError`` or
    ``RuntimeError`` with PySpark's reason). ``value`` is the held state as Arrow gives it
    (timestamps in UTC); the function sees timestamps as Spark gives them, naive in the session's
    ``time_zone``, and a naive one it stores is read in that zone; :attr:`stored` is the value to
    hold.

    >>> s = GroupState(None, pa.struct([("n", pa.int64())]), 1_000, 0, "ProcessingTimeTimeout", False, False)
    >>> s.exists, s.getOption
    (False, None)
    >>> s.update((3,)); s.setTimeoutDuration(500)
    >>> s.get, s.timeout_ms
    ((3,), 1500)
    """

    NO_TIMESTAMP = NO_TIMESTAMP

    def __init__(
        self,
        value: tuple[Any, ...] | None,
        value_type: pa.StructType,
        processing_time_ms: int,
        watermark_ms: int,
        timeout_conf: str,
        has_timed_out: bool,
        watermark_present: bool,
        time_zone: str = "UTC",
    ):
        self._type, self._zone = value_type, ZoneInfo(time_zone)
        self._value = None if value is None else self._local(value)
        self._processing_time_ms, self._watermark_ms = processing_time_ms, watermark_ms
        self._timeout_conf, self._has_timed_out, self._watermark_present = timeout_conf, has_timed_out, watermark_present
        #: The timeout this call set (Spark starts every call without one).
        self.timeout_ms = NO_TIMESTAMP

    def _local(self, values: Sequence[Any]) -> tuple[Any, ...]:
        return tuple(
            v.astimezone(self._zone).replace(tzinfo=None) if isinstance(v, datetime.datetime) and v.tzinfo else v for v in values
        )

    @property
    def stored(self) -> tuple[Any, ...] | None:
        """The value to hold (timestamps aware), None when removed or never set."""
        if self._value is None:
            return None
        return tuple(v.replace(tzinfo=self._zone) if isinstance(v, datetime.datetime) else v for v in self._value)

    @property
    def exists(self) -> bool:
        return self._value is not None

    @property
    def get(self) -> tuple[Any, ...]:
        if self._value is None:
            raise ValueError("[STATE_NOT_EXISTS] State is either not defined or has already been removed.")
        return self._value

    @property
    def getOption(self) -> tuple[Any, ...] | None:  # noqa: N802 - PySpark's name
        return self._value

    @property
    def hasTimedOut(self) -> bool:  # noqa: N802 - PySpark's name
        return self._has_timed_out

    def update(self, newValue: tuple[Any, ...]) -> None:  # noqa: N803 - PySpark's name
        if newValue is None:
            raise TypeError("[CANNOT_BE_NONE] Argument `newValue` cannot be None.")
        values = [v.item() if isinstance(v, np.generic) else v for v in newValue]
        values = [
            v.to_pydatetime() if isinstance(v, pd.Timestamp) else v for v in values
        ]  # pandas' timestamps as datetimes; a naive one is in the session's time zone
        values = [v.replace(tzinfo=self._zone) if isinstance(v, datetime.datetime) and not v.tzinfo else v for v in values]
        try:  # held as the declared type: a value it cannot hold fails here, in the call that gave it
            row = pa.array([dict(zip(self._type.names, values, strict=True))], self._type)[0].as_py()
        except (pa.ArrowException, ValueError, TypeError) as e:
            raise ValueError(f"state {tuple(newValue)!r} does not fit the state type {self._type}: {e}") from None
        self._value = self._local([row[n] for n in self._type.names])

    def remove(self) -> None:
        self._value = None

    def setTimeoutDuration(self, durationMs: int) -> None:  # noqa: N802,N803 - PySpark's names
        if isinstance(durationMs, str):
            raise TypeError("[NOT_EXPECTED_TYPE] Argument `durationMs` should be int, got str.")
        if self._timeout_conf != "ProcessingTimeTimeout":
            raise RuntimeError(
                "[CANNOT_WITHOUT] Cannot set timeout duration without enabling processing time timeout in applyInPandasWithState."
            )
        if durationMs <= 0:
            raise ValueError(f"[VALUE_NOT_POSITIVE] Value for `durationMs` must be positive, got {durationMs!r}.")
        self.timeout_ms = int(durationMs) + self._processing_time_ms

    def setTimeoutTimestamp(self, timestampMs: Any) -> None:  # noqa: N802,N803 - PySpark's names
        if self._timeout_conf != "EventTimeTimeout":
            raise RuntimeError(
                "[CANNOT_WITHOUT] Cannot set timeout timestamp without enabling event time timeout in applyInPandasWithState."
            )
        if hasattr(timestampMs, "timestamp"):  # a datetime, as PySpark takes it (naive: local time)
            timestampMs = timestampMs.timestamp() * 1000
        if timestampMs <= 0:
            raise ValueError(f"[VALUE_NOT_POSITIVE] Value for `timestampMs` must be positive, got {timestampMs!r}.")
        if self._watermark_present and timestampMs < self._watermark_ms:
            raise ValueError(
                f"[INVALID_TIMEOUT_TIMESTAMP] Timeout timestamp ({timestampMs}) cannot be earlier than the current "
                f"watermark ({self._watermark_ms})."
            )
        self.timeout_ms = int(timestampMs)

    def getCurrentWatermarkMs(self) -> int:  # noqa: N802 - PySpark's name
        if not self._watermark_present:
            raise RuntimeError(
                "[CANNOT_WITHOUT] Cannot get event time watermark timestamp without setting watermark before "
                "applyInPandasWithState."
            )
        return self._watermark_ms

    def getCurrentProcessingTimeMs(self) -> int:  # noqa: N802 - PySpark's name
        return self._processing_time_ms

    def __str__(self) -> str:
        return f"GroupState({self._value})" if self.exists else "GroupState(<undefined>)"


class PandasWithState(MicroBatchOperator):
    """Calls ``fn(key, frames, state)`` per key of ``keys`` on the rows of each micro-batch (see
    the module docstring); ``columns`` are the columns the function's frames hold, ``output`` the
    declared output schema, ``state_type`` the declared state (a struct type), ``timeout`` one of
    :data:`TIMEOUTS`; ``time_col`` / ``delay_us`` the watermark (None: none). ``time_zone`` is the
    session's, in which Spark gives pandas its timestamps; ``clock`` gives the processing time.

    >>> from sparkqos.executor.queues import stamp, with_internal
    >>> def count(key, frames, state):
    ...     n = (state.get[0] if state.exists else 0) + sum(len(f) for f in frames)
    ...     state.update((n,))
    ...     yield pd.DataFrame({"k": [key[0]], "n": [n]})
    >>> op = PandasWithState(["k"], ["k"], count, pa.schema([("k", pa.string()), ("n", pa.int64())]),
    ...                      pa.struct([("n", pa.int64())]), "NoTimeout")
    >>> _ = op.bind("q/state", [with_internal(pa.schema([("k", pa.string())]))])
    >>> op.process(stamp(pa.record_batch({"k": ["a", "b", "a"]}), 0.0, 0))  # runs only queue their rows
    >>> sorted((r["k"], r["n"]) for r in op.end_trigger()[0].to_pylist())  # a trigger's end: each key once
    [('a', 2), ('b', 1)]
    >>> op.process(stamp(pa.record_batch({"k": ["a"]}), 1.0, 3))
    >>> [(r["k"], r["n"]) for r in op.end_trigger()[0].to_pylist()], op.end_trigger()
    ([('a', 3)], [])
    """

    kind = "aggregate"
    selectivity = 0.5
    cost_s = 2e-5

    def __init__(
        self,
        keys: Sequence[str],
        columns: Sequence[str],
        fn: Callable[..., Any],
        output: pa.Schema,
        state_type: pa.StructType,
        timeout: str,
        time_col: str | None = None,
        delay_us: int | None = None,
        query: str = "?",
        udf: str = "<udf>",
        time_zone: str = "UTC",
        clock: Callable[[], float] = time.time,
    ):
        super().__init__()
        if timeout not in TIMEOUTS:
            raise PlanError(f"applyInPandasWithState: unknown timeout {timeout!r}; Spark's are {TIMEOUTS}")
        if timeout == "EventTimeTimeout" and delay_us is None:
            raise PlanError("applyInPandasWithState with EventTimeTimeout needs a watermark (time_col, delay_us)")
        if delay_us is not None and time_col is None:
            raise PlanError("applyInPandasWithState: a watermark delay needs its event-time column (time_col)")
        self.keys, self.columns, self.fn = list(keys), list(columns), fn
        self.output, self.state_type, self.timeout = output, state_type, timeout
        self.time_col, self.delay_us = time_col, delay_us
        self.query, self.udf, self.time_zone, self.clock = query, udf, time_zone, clock
        #: Per key: its columns, the value (struct of state_type, null: none) and the timeout (ms).
        self._state: pa.Table | None = None
        #: The rows taken since the last trigger's end (this micro-batch's).
        self._pending: pa.Table | None = None
        #: Spark's watermark for the next micro-batch and the one before it (ms).
        self._watermark_ms = 0
        self._late_ms = 0
        self._max_time_ms: int | None = None
        self._newest = (0.0, 0)
        self.late_rows = 0

    def copy(self) -> PandasWithState:
        return PandasWithState(
            self.keys,
            self.columns,
            self.fn,
            self.output,
            self.state_type,
            self.timeout,
            self.time_col,
            self.delay_us,
            self.query,
            self.udf,
            self.time_zone,
            self.clock,
        )

    def _output_schema(self) -> pa.Schema:
        src = self.input_schemas[0]
        check_grouped_input(self.name, src, self.keys, self.columns, self.time_col)
        for where, fields in (("output", list(self.output)), ("state", list(self.state_type))):
            for f in fields:
                if not state_type_supported(f.type):
                    raise ExpressionError(f"operator {self.name!r}: {where} field {f.name!r} of type {f.type}")
        if self.time_col is not None and not pa.types.is_timestamp(src.field(self.time_col).type):
            raise ExpressionError(f"operator {self.name!r}: event-time column {self.time_col!r} must be a timestamp")
        clash = [f.name for f in self.output if f.name in INTERNAL]
        if clash:
            raise ExpressionError(f"operator {self.name!r}: output column(s) {clash} are sparkqos's own")
        return pa.schema([*self.output, src.field(ARRIVAL), src.field(SEQ)])

    # -- running -------------------------------------------------------------------------------
    def process(self, batch: pa.RecordBatch, port: int = 0) -> pa.RecordBatch | None:
        if batch.num_rows:
            table = pa.Table.from_batches([batch])
            self._pending = table if self._pending is None else pa.concat_tables([self._pending, table])
        return None

    @property
    def watermark_present(self) -> bool:
        return self.delay_us is not None

    def end_trigger(self) -> list[pa.RecordBatch]:
        """The micro-batch of the rows taken since the last trigger's end: each key among them
        called once, then each key timed out."""
        return self._micro_batch()

    def flush(self) -> list[pa.RecordBatch]:
        out = self._micro_batch()
        if self.timeout == "EventTimeTimeout":  # Spark's micro-batch without data once the watermark moved
            out += self._micro_batch()
        return out

    def _micro_batch(self) -> list[pa.RecordBatch]:
        pending = self._pending
        watermark_ms = self._watermark_ms
        if pending is None and not self._may_time_out(watermark_ms):
            return []
        now_ms = int(self.clock() * 1000)
        rows = pending
        late = 0
        if rows is not None and self.timeout == "EventTimeTimeout" and self._max_time_ms is not None:
            rows, late = drop_late(rows, self.time_col, self._late_ms)
        state = self._state
        held = 0 if state is None else state.num_rows
        entries: dict[int, tuple[Any, int]] = {}  # held row → (value or None, timeout), after its call
        added: list[tuple[pa.Table, Any, int]] = []  # new keys: (their first row's keys, value, timeout)
        outputs: list[pa.RecordBatch] = []
        threshold = now_ms if self.timeout == "ProcessingTimeTimeout" else watermark_ms
        try:
            called_held: set[int] = set()
            if rows is not None and rows.num_rows:
                rows = rows.combine_chunks()
                n = rows.num_rows
                keys = [rows.column(k) for k in self.keys]
                if held:
                    keys = [
                        pa.concat_arrays([state.column(k).combine_chunks(), a.combine_chunks()])
                        for k, a in zip(self.keys, keys, strict=True)
                    ]
                codes = group_codes(keys, held + n)
                first_held = dict(zip(codes[:held].tolist(), range(held), strict=True))  # one state row per key
                new = codes[held:]
                order = np.argsort(new, kind="stable")
                bounds = np.flatnonzero(np.diff(new[order])) + 1
                groups = sorted(np.split(order, bounds), key=lambda g: g[0])  # keys in order of their first row
                for group in groups:
                    part = rows.take(pa.array(group))
                    at = first_held.get(int(new[group[0]]))
                    value = None if at is None else self._held_value(at)
                    st = self._group_state(value, now_ms, watermark_ms, False)
                    outputs += self._call(part.select(self.keys), [part.select(self.columns)], st, part)
                    if at is None:
                        added.append((part.select(self.keys).slice(0, 1), st.stored, st.timeout_ms))
                    else:
                        called_held.add(at)
                        entries[at] = (st.stored, st.timeout_ms)
            if held and self.timeout != "NoTimeout":
                tos = state.column(_TIMEOUT).to_numpy()
                for at in np.flatnonzero((tos != NO_TIMESTAMP) & (tos < threshold)).tolist():
                    if at in called_held:
                        continue
                    st = self._group_state(self._held_value(at), now_ms, watermark_ms, True)
                    empty = pa.table({c: pa.array([], self.input_schemas[0].field(c).type) for c in self.columns})
                    outputs += self._call(state.select(self.keys).slice(at, 1), [empty], st, None)
                    entries[at] = (st.stored, st.timeout_ms)
        except BaseException:
            self._pending = pending  # nothing taken: the micro-batch runs again
            raise
        self._commit(entries, added)
        self._pending = None
        return end_micro_batch(self, rows, late, outputs)

    def _may_time_out(self, watermark_ms: int) -> bool:
        if self.timeout == "NoTimeout" or self._state is None or not self._state.num_rows:
            return False
        return self.timeout == "ProcessingTimeTimeout" or bool(
            pc.any(
                pc.and_(
                    pc.not_equal(self._state.column(_TIMEOUT), NO_TIMESTAMP), pc.less(self._state.column(_TIMEOUT), watermark_ms)
                )
            ).as_py()
        )

    def _held_value(self, at: int) -> tuple[Any, ...] | None:
        row = self._state.column(_VALUE)[at].as_py()
        return None if row is None else tuple(row[n] for n in self.state_type.names)

    def _group_state(self, value: Any, now_ms: int, watermark_ms: int, timed_out: bool) -> GroupState:
        watermark = watermark_ms if self.watermark_present else NO_TIMESTAMP
        return GroupState(
            value, self.state_type, now_ms, watermark, self.timeout, timed_out, self.watermark_present, self.time_zone
        )

    def _commit(self, entries: dict[int, tuple[Any, int]], added: list[tuple[pa.Table, Any, int]]) -> None:
        """The state after the calls: each called key's value and timeout; a key with neither is dropped."""
        state = self._state
        parts = []
        if state is not None and state.num_rows:
            keep = np.ones(state.num_rows, dtype=bool)
            values = state.column(_VALUE).to_pylist()
            tos = state.column(_TIMEOUT).to_pylist()
            for at, (value, to) in entries.items():
                values[at] = None if value is None else dict(zip(self.state_type.names, value, strict=True))
                tos[at] = to
                keep[at] = value is not None or to != NO_TIMESTAMP
            parts.append(self._state_table(state.select(self.keys), values, tos).filter(pa.array(keep)))
        for keys, value, to in added:
            if value is not None or to != NO_TIMESTAMP:
                v = None if value is None else dict(zip(self.state_type.names, value, strict=True))
                parts.append(self._state_table(keys, [v], [to]))
        self._state = pa.concat_tables(parts).combine_chunks() if parts else None

    def _state_table(self, keys: pa.Table, values: list[Any], timeouts: list[int]) -> pa.Table:
        schema = self.input_schemas[0]
        columns = {k: keys.column(k).cast(schema.field(k).type) for k in self.keys}
        columns[_VALUE] = pa.array(values, self.state_type)
        columns[_TIMEOUT] = pa.array(timeouts, pa.int64())
        return pa.table(columns)

    # -- the function --------------------------------------------------------------------------
    def _frame(self, table: pa.Table) -> pd.DataFrame:
        return spark_frame(table, self.time_zone)

    def _call(self, keys: pa.Table, parts: list[pa.Table], st: GroupState, rows: pa.Table | None) -> list[pa.RecordBatch]:
        key_frame = self._frame(keys.slice(0, 1))
        key = tuple(key_frame[k].iloc[0] for k in self.keys)
        frames: Iterator[pd.DataFrame] = (self._frame(p) for p in parts)
        try:
            result = self.fn(key, frames, st)
            if isinstance(result, pd.DataFrame):
                raise TypeError("returned a pandas.DataFrame; it must return (or yield) an iterator of DataFrames")
            out = [self._to_arrow(df) for df in result]
        except UdfError:
            raise
        except Exception as e:
            raise UdfError(self.query, self.udf, f"raised {type(e).__name__}: {e}") from e
        if rows is None:
            arrival, seq = self._newest
        else:
            arrival, seq = float(pc.max(rows.column(ARRIVAL)).as_py()), int(pc.max(rows.column(SEQ)).as_py())
        batches = []
        for table in out:
            if table is None or not table.num_rows:
                continue
            n = table.num_rows
            arrays = [*table.columns, pa.array(np.full(n, arrival), self.schema.field(ARRIVAL).type)]
            arrays.append(pa.array(np.full(n, seq), self.schema.field(SEQ).type))
            batches += pa.Table.from_arrays(arrays, schema=self.schema).combine_chunks().to_batches()
        return batches

    def _to_arrow(self, df: Any) -> pa.Table | None:
        return frame_to_arrow(df, self.output, self.time_zone)

    # -- state ---------------------------------------------------------------------------------
    def state_rows(self) -> int:
        return sum(0 if t is None else t.num_rows for t in (self._state, self._pending))

    def to_state(self) -> dict[str, Any]:
        return {
            "groups": None if self._state is None else table_to_ipc(self._state),
            "pending": None if self._pending is None else table_to_ipc(self._pending),
            "watermark_ms": self._watermark_ms,
            "late_ms": self._late_ms,
            "max_time_ms": self._max_time_ms,
            "newest": list(self._newest),
            "late_rows": self.late_rows,
        }

    def from_state(self, state: dict[str, Any]) -> None:
        self._state = None if state["groups"] is None else ipc_to_table(state["groups"])
        self._pending = None if state["pending"] is None else ipc_to_table(state["pending"])
        self._watermark_ms, self._late_ms = int(state["watermark_ms"]), int(state["late_ms"])
        self._max_time_ms = state["max_time_ms"]
        arrival, seq = state["newest"]
        self._newest = (float(arrival), int(seq))
        self.late_rows = int(state["late_rows"])
