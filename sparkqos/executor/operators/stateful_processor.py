"""TransformWithState: a user's ``StatefulProcessor``, Spark's ``groupBy(keys).transformWithStateInPandas``.

What ``df.groupBy("k").transformWithStateInPandas(Counter(), "k string, n long", "append",
"EventTime")`` compiles to (:mod:`sparkqos.compile.group_state`): a processor (PySpark's
``pyspark.sql.streaming.StatefulProcessor``) whose ``init(handle)`` declares its state variables
(``handle.getValueState``, ``getListState``, ``getMapState``), whose ``handleInputRows(key, rows,
timerValues)`` is called per key with an iterator of pandas DataFrames of that key's rows and
yields DataFrames of the output schema, and whose ``handleExpiredTimer(key=, timerValues=,
expiredTimerInfo=)`` is called per timer that fired.

Spark runs the processor once per micro-batch and partition: a fresh copy of it (its worker loads
the pickled processor for each task), ``init`` with a handle, ``handleInputRows`` once per key of
the micro-batch's rows, then ``handleExpiredTimer`` once per timer whose time has come, in order
of expiry, then ``close``. So does this operator, once per micro-batch (a
:class:`~sparkqos.executor.operators.base.MicroBatchOperator`: runs only queue the rows; at the
trigger's end the rows taken since the last one are the micro-batch). What the processor keeps
in its own attributes lasts one micro-batch, as in Spark; what it keeps in state variables and
timers lasts, in this operator's state (checkpointed with the executor's, Arrow IPC).

Time, per ``timeMode`` as Spark gives it:

* ``None``: ``TimerValues`` are -1 and -1; timers are refused, as Spark refuses them;
* ``ProcessingTime``: the processing time is the trigger's clock (``clock`` at the micro-batch),
  the watermark -1; a timer fires at the first micro-batch whose processing time is at or past it;
* ``EventTime``: the watermark is Spark's (the largest event time of earlier micro-batches minus
  the ``withWatermark`` delay, never moving back; 0 before any); a timer fires once the watermark
  is at or past it, and rows at or before the previous micro-batch's watermark are late: dropped
  and counted in ``late_rows``. At the end of a finite input :meth:`flush` runs, as Spark's
  micro-batch without data once the watermark moved, a last one that fires the timers it passed.

The frames hold every column of the DataFrame, as Spark's worker builds them: timestamps naive in
the session's time zone, integer columns as int64, float columns as float64, a column name that
is not a Python identifier renamed ``_<position>`` (pandas' ``itertuples``, through which Spark
passes the rows), at most ``max_rows_per_frame`` rows each. State values are tuples of the
declared types; ``get`` gives Python values (timestamps naive, in the session's time zone), and a
value the declared type cannot hold fails in the call that gave it. A state variable with a TTL
(``ttlDurationMs``; Spark takes one in ``ProcessingTime`` mode only) holds each value with its
expiry, the processing time of the micro-batch that wrote it plus the TTL: from the first
micro-batch whose processing time reaches it, the value is gone (and dropped at that
micro-batch's end, as Spark cleans up). ``listTimers`` and a map's
``iterator``/``keys``/``values`` give their items in ascending order of time and in order of
insertion (Spark's come in its store's byte order, which no processor should rely on).
"""

from __future__ import annotations

import collections
import datetime
import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from zoneinfo import ZoneInfo

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from sparkqos.errors import ExpressionError, PlanError, UdfError
from sparkqos.executor.expressions import ARRIVAL, INTERNAL, SEQ
from sparkqos.executor.operators.base import MicroBatchOperator, group_codes, ipc_to_table, table_to_ipc
from sparkqos.executor.operators.group_state import (
    check_grouped_input,
    drop_late,
    end_micro_batch,
    frame_to_arrow,
    spark_frame,
    state_type_supported,
)

__all__ = ["STATE_KINDS", "TIME_MODES", "ExpiredTimerInfo", "StateVariable", "TimerValues", "TransformWithState"]

#: Spark's TimeMode values, as ``transformWithStateInPandas`` takes them.
TIME_MODES = ("None", "ProcessingTime", "EventTime")
#: The state variables a handle declares.
STATE_KINDS = ("value", "list", "map")
_NAN = object()  # a NaN inside a key: Spark groups every NaN together


@dataclass(frozen=True)
class StateVariable:
    """A state variable ``init`` declares: its name, kind (:data:`STATE_KINDS`), value type, for a
    map the type of its user keys, and its TTL (``ttlDurationMs``, None: none)."""

    name: str
    kind: str
    value_type: pa.StructType
    key_type: pa.StructType | None = None
    ttl_ms: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in STATE_KINDS:
            raise PlanError(f"state variable {self.name!r}: unknown kind {self.kind!r}; kinds are {STATE_KINDS}")
        if (self.kind == "map") != (self.key_type is not None):
            raise PlanError(f"state variable {self.name!r}: a map state, and only a map state, has a key type")
        if self.ttl_ms is not None and self.ttl_ms <= 0:
            raise PlanError(f"state variable {self.name!r}: a TTL is a positive number of ms, got {self.ttl_ms}")


class TimerValues:
    """PySpark's ``TimerValues``: the micro-batch's processing time and watermark (ms, -1: none)."""

    def __init__(self, currentProcessingTimeInMs: int = -1, currentWatermarkInMs: int = -1):  # noqa: N803
        self._processing_time_ms, self._watermark_ms = currentProcessingTimeInMs, currentWatermarkInMs

    def getCurrentProcessingTimeInMs(self) -> int:  # noqa: N802 - PySpark's name
        return self._processing_time_ms

    def getCurrentWatermarkInMs(self) -> int:  # noqa: N802 - PySpark's name
        return self._watermark_ms


class ExpiredTimerInfo:
    """PySpark's ``ExpiredTimerInfo``: the expiry (ms) of the timer that fired."""

    def __init__(self, expiryTimeInMs: int = -1):  # noqa: N803
        self._expiry_ms = expiryTimeInMs

    def getExpiryTimeInMs(self) -> int:  # noqa: N802 - PySpark's name
        return self._expiry_ms


# -- values ------------------------------------------------------------------------------------------
def _canon(values: Iterable[Any]) -> tuple[Any, ...]:
    """A key as a dict key: every NaN one value, -0.0 as 0.0 (Spark's grouping)."""
    return tuple(
        _NAN if isinstance(v, float) and math.isnan(v) else (0.0 if v == 0.0 and isinstance(v, float) else v) for v in values
    )


def _uncanon(key: tuple[Any, ...]) -> list[Any]:
    return [math.nan if v is _NAN else v for v in key]


class _Types:
    """Converts values of a struct type between what a processor gives and gets (timestamps
    naive, in the session's time zone) and what Arrow holds (timestamps in UTC)."""

    def __init__(self, struct: pa.StructType, zone: ZoneInfo):
        self.struct, self.zone, self.names = struct, zone, [f.name for f in struct]

    def take(self, value: Any, what: str) -> tuple[Any, ...]:
        """``value`` (a tuple or Row of the struct's fields) as ``get`` gives it back; raises when
        the declared type cannot hold it."""
        if value is None:
            raise TypeError(f"{what} cannot be None")
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence | np.ndarray):
            raise TypeError(f"{what} {value!r} must be a tuple of {len(self.names)} value(s) ({self.struct})")
        values = [v.item() if isinstance(v, np.generic) else v for v in value]
        values = [v.to_pydatetime() if isinstance(v, pd.Timestamp) else v for v in values]
        values = [v.replace(tzinfo=self.zone) if isinstance(v, datetime.datetime) and not v.tzinfo else v for v in values]
        if len(values) != len(self.names):
            raise TypeError(f"{what} {tuple(value)!r} has {len(values)} value(s); its type {self.struct} has {len(self.names)}")
        try:
            row = pa.array([dict(zip(self.names, values, strict=True))], self.struct)[0].as_py()
        except (pa.ArrowException, ValueError, TypeError) as e:
            raise ValueError(f"{what} {tuple(value)!r} does not fit its type {self.struct}: {e}") from None
        return self.local(row[n] for n in self.names)

    def local(self, values: Iterable[Any]) -> tuple[Any, ...]:
        return tuple(
            v.astimezone(self.zone).replace(tzinfo=None) if isinstance(v, datetime.datetime) and v.tzinfo else v for v in values
        )

    def read(self, held: dict[str, Any]) -> tuple[tuple[Any, ...], int | None]:
        """A value and its expiry as the checkpoint holds them (``{"value": ..., "expiry": ...}``)."""
        return self.local(held["value"][n] for n in self.names), held["expiry"]

    def stored(self, value: tuple[Any, ...]) -> dict[str, Any]:
        return {
            n: v.replace(tzinfo=self.zone) if isinstance(v, datetime.datetime) else v
            for n, v in zip(self.names, value, strict=True)
        }


# -- the handle and its state variables -----------------------------------------------------------------
class _Store:
    """Every state variable's values and the timers, per grouping key (as :func:`_canon` gives it)."""

    def __init__(self) -> None:
        self.values: dict[str, dict[tuple[Any, ...], Any]] = {}
        self.timers: dict[tuple[Any, ...], tuple[int, ...]] = {}

    def copy(self) -> _Store:
        """A copy to fall back on: the values are never changed in place, so copying the dicts suffices."""
        out = _Store()
        out.values = {n: dict(v) for n, v in self.values.items()}
        out.timers = dict(self.timers)
        return out


class _Variable:
    """A state variable of the key being called. Each value is held with its expiry (ms, None
    without a TTL): Spark's TTL sets it to the micro-batch's processing time plus the TTL when the
    value is written, and from the micro-batch whose processing time reaches it the value is gone."""

    def __init__(self, handle: ProcessorHandle, variable: StateVariable):
        self._handle, self._name = handle, variable.name
        self._types = _Types(variable.value_type, handle._zone)
        self._keys = None if variable.key_type is None else _Types(variable.key_type, handle._zone)
        self._ttl_ms = variable.ttl_ms

    @property
    def _all(self) -> dict[tuple[Any, ...], Any]:
        return self._handle._store.values.setdefault(self._name, {})

    @property
    def _key(self) -> tuple[Any, ...]:
        return self._handle._current_key()

    def _get(self) -> Any:
        return self._all.get(self._key)

    def _set(self, value: Any) -> None:
        if value is None:
            self._all.pop(self._key, None)
        else:
            self._all[self._key] = value

    def _held(self, value: tuple[Any, ...]) -> tuple[tuple[Any, ...], int | None]:
        return value, None if self._ttl_ms is None else self._handle._now_ms + self._ttl_ms

    def _live(self, held: tuple[tuple[Any, ...], int | None] | None) -> bool:
        return held is not None and (held[1] is None or self._handle._now_ms < held[1])

    def clear(self) -> None:
        self._set(None)


class ValueState(_Variable):
    """PySpark's ``ValueState``: one value per grouping key."""

    def exists(self) -> bool:
        return self._live(self._get())

    def get(self) -> tuple[Any, ...] | None:
        held = self._get()
        return held[0] if self._live(held) else None

    def update(self, newValue: Any) -> None:  # noqa: N803 - PySpark's name
        self._set(self._held(self._types.take(newValue, f"value state {self._name!r}:")))


class ListState(_Variable):
    """PySpark's ``ListState``: a list of values per grouping key."""

    def _items(self) -> list[tuple[Any, ...]]:
        return [v for v, e in self._get() or () if self._live((v, e))]

    def exists(self) -> bool:
        return bool(self._items())

    def get(self) -> Iterator[tuple[Any, ...]]:
        return iter(self._items())

    def _values(self, values: Any) -> tuple[tuple[tuple[Any, ...], int | None], ...]:
        if values is None or isinstance(values, (str, bytes)):
            raise TypeError(f"list state {self._name!r}: {values!r} is not a list of tuples")
        out = tuple(self._held(self._types.take(v, f"list state {self._name!r}:")) for v in values)
        if not out:  # as Spark's state store refuses one
            raise ValueError(
                "[ILLEGAL_STATE_STORE_VALUE.EMPTY_LIST_VALUE] Cannot write empty list values to State Store for "
                f"StateName {self._name}"
            )
        return out

    def put(self, newState: Any) -> None:  # noqa: N803 - PySpark's name
        self._set(self._values(newState))

    def appendValue(self, newState: Any) -> None:  # noqa: N802,N803 - PySpark's names
        self._set((*(self._get() or ()), self._held(self._types.take(newState, f"list state {self._name!r}:"))))

    def appendList(self, newState: Any) -> None:  # noqa: N802,N803 - PySpark's names
        self._set((*(self._get() or ()), *self._values(newState)))


class MapState(_Variable):
    """PySpark's ``MapState``: a map of user keys to values per grouping key."""

    def _map(self) -> dict[tuple[Any, ...], tuple[tuple[Any, ...], int | None]]:
        return self._get() or {}

    def _entries(self) -> list[tuple[tuple[Any, ...], tuple[Any, ...]]]:
        return [(k, held[0]) for k, held in self._map().items() if self._live(held)]

    def _user_key(self, key: Any) -> tuple[Any, ...]:
        assert self._keys is not None
        return self._keys.take(key, f"map state {self._name!r} key:")

    def exists(self) -> bool:
        return bool(self._entries())

    def getValue(self, key: Any) -> tuple[Any, ...] | None:  # noqa: N802 - PySpark's name
        held = self._map().get(self._user_key(key))
        return held[0] if self._live(held) else None

    def containsKey(self, key: Any) -> bool:  # noqa: N802 - PySpark's name
        return self._live(self._map().get(self._user_key(key)))

    def updateValue(self, key: Any, value: Any) -> None:  # noqa: N802 - PySpark's name
        entry = self._held(self._types.take(value, f"map state {self._name!r} value:"))
        self._set({**self._map(), self._user_key(key): entry})

    def iterator(self) -> Iterator[tuple[tuple[Any, ...], tuple[Any, ...]]]:
        return iter(self._entries())

    def keys(self) -> Iterator[tuple[Any, ...]]:
        return iter([k for k, _ in self._entries()])

    def values(self) -> Iterator[tuple[Any, ...]]:
        return iter([v for _, v in self._entries()])

    def removeKey(self, key: Any) -> None:  # noqa: N802 - PySpark's name
        held = dict(self._map())
        held.pop(self._user_key(key), None)
        self._set(held or None)


_KINDS = {"value": ValueState, "list": ListState, "map": MapState}


class ProcessorHandle:
    """PySpark's ``StatefulProcessorHandle`` for one micro-batch: the state variables ``init``
    declared (the names and types the compiler read, see :class:`StateVariable`), and the timers
    of the key being called."""

    def __init__(self, store: _Store, variables: dict[str, StateVariable], time_mode: str, now_ms: int, zone: ZoneInfo):
        self._store, self._variables, self._time_mode = store, variables, time_mode
        self._now_ms, self._zone = now_ms, zone
        self._key: tuple[Any, ...] | None = None

    def _current_key(self) -> tuple[Any, ...]:
        if self._key is None:
            raise RuntimeError("state is read and written in handleInputRows and handleExpiredTimer only, not in init()")
        return self._key

    def _variable(self, name: str, kind: str) -> Any:
        v = self._variables.get(name)
        if v is None or v.kind != kind:
            raise RuntimeError(
                f"{kind} state {name!r} was not declared when sparkqos compiled the query; init() declares "
                f"{sorted((x.kind, x.name) for x in self._variables.values())}"
            )
        return _KINDS[kind](self, v)

    def getValueState(self, stateName: str, schema: Any = None, ttlDurationMs: int | None = None) -> ValueState:  # noqa: N802,N803
        return self._variable(stateName, "value")

    def getListState(self, stateName: str, schema: Any = None, ttlDurationMs: int | None = None) -> ListState:  # noqa: N802,N803
        return self._variable(stateName, "list")

    def getMapState(  # noqa: N802 - PySpark's name
        self,
        stateName: str,
        userKeySchema: Any = None,
        valueSchema: Any = None,
        ttlDurationMs: int | None = None,  # noqa: N803
    ) -> MapState:
        return self._variable(stateName, "map")

    def _check_timers(self) -> None:
        if self._time_mode == "None":
            raise RuntimeError("[UNSUPPORTED_OPERATION] Timers with TimeMode.None are not supported")

    def registerTimer(self, expiryTimestampMs: int) -> None:  # noqa: N802,N803 - PySpark's names
        self._check_timers()
        key = self._current_key()
        held = self._store.timers.get(key, ())
        ms = int(expiryTimestampMs)
        if ms not in held:
            self._store.timers[key] = tuple(sorted((*held, ms)))

    def deleteTimer(self, expiryTimestampMs: int) -> None:  # noqa: N802,N803 - PySpark's names
        self._check_timers()
        key = self._current_key()
        held = tuple(t for t in self._store.timers.get(key, ()) if t != int(expiryTimestampMs))
        if held:
            self._store.timers[key] = held
        else:
            self._store.timers.pop(key, None)

    def listTimers(self) -> Iterator[int]:  # noqa: N802 - PySpark's name
        self._check_timers()
        return iter(self._store.timers.get(self._current_key(), ()))

    def deleteIfExists(self, stateName: str) -> None:  # noqa: N802,N803 - PySpark's names
        self._store.values.pop(stateName, None)


# -- the operator -------------------------------------------------------------------------------------
def _frame_names(names: Sequence[str]) -> list[str]:
    """The column names a frame gets through ``itertuples`` (invalid identifiers, keywords, names
    with a leading underscore and repeats become ``_<position>``)."""
    return list(collections.namedtuple("Pandas", names, rename=True)._fields) if len(names) < 255 else list(range(len(names)))


class TransformWithState(MicroBatchOperator):
    """Runs a user's stateful processor per key of ``keys`` on the rows of each micro-batch (see the
    module docstring). ``make_processor()`` gives a fresh processor, called once per micro-batch;
    ``variables`` are the state variables its ``init`` declares; ``columns`` the DataFrame's
    columns (the frames' columns); ``output`` the declared output schema; ``time_mode`` one of
    :data:`TIME_MODES`; ``time_col`` / ``delay_us`` the watermark (None: none); ``time_zone`` the
    session's; ``clock`` gives the processing time.

    >>> from sparkqos.executor.queues import stamp, with_internal
    >>> class Count:
    ...     def init(self, handle):
    ...         self.n = handle.getValueState("n", "n long")
    ...     def handleInputRows(self, key, rows, timerValues):
    ...         n = (self.n.get() or (0,))[0] + sum(len(f) for f in rows)
    ...         self.n.update((n,))
    ...         yield pd.DataFrame({"k": [key[0]], "n": [n]})
    ...     def close(self):
    ...         pass
    >>> op = TransformWithState(["k"], ["k"], Count, [StateVariable("n", "value", pa.struct([("n", pa.int64())]))],
    ...                         pa.schema([("k", pa.string()), ("n", pa.int64())]), "None")
    >>> _ = op.bind("q/processor", [with_internal(pa.schema([("k", pa.string())]))])
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
        make_processor: Callable[[], Any],
        variables: Sequence[StateVariable],
        output: pa.Schema,
        time_mode: str,
        time_col: str | None = None,
        delay_us: int | None = None,
        query: str = "?",
        udf: str = "<processor>",
        time_zone: str = "UTC",
        clock: Callable[[], float] = time.time,
        max_rows_per_frame: int = 10_000,
    ):
        super().__init__()
        if time_mode not in TIME_MODES:
            raise PlanError(f"transformWithStateInPandas: unknown time mode {time_mode!r}; Spark's are {TIME_MODES}")
        if time_mode == "EventTime" and delay_us is None:
            raise PlanError("transformWithStateInPandas with timeMode EventTime needs a watermark (time_col, delay_us)")
        if delay_us is not None and time_col is None:
            raise PlanError("transformWithStateInPandas: a watermark delay needs its event-time column (time_col)")
        names = [v.name for v in variables]
        if len(set(names)) != len(names):
            raise PlanError(f"transformWithStateInPandas: state variables declared twice: {names}")
        self.keys, self.columns, self.make_processor = list(keys), list(columns), make_processor
        self.variables = {v.name: v for v in variables}
        self.output, self.time_mode, self.time_col, self.delay_us = output, time_mode, time_col, delay_us
        self.query, self.udf, self.time_zone, self.clock = query, udf, time_zone, clock
        self.max_rows_per_frame = max_rows_per_frame
        self._zone = ZoneInfo(time_zone)
        self._store = _Store()
        #: Per key as :func:`_canon` gives it: the key's Arrow values (one row of the key columns).
        self._key_rows: dict[tuple[Any, ...], dict[str, Any]] = {}
        #: The rows taken since the last trigger's end (this micro-batch's).
        self._pending: pa.Table | None = None
        #: Spark's watermark for the next micro-batch and the one before it (ms).
        self._watermark_ms = 0
        self._late_ms = 0
        self._max_time_ms: int | None = None
        self._newest = (0.0, 0)
        self.late_rows = 0

    def copy(self) -> TransformWithState:
        return TransformWithState(
            self.keys,
            self.columns,
            self.make_processor,
            list(self.variables.values()),
            self.output,
            self.time_mode,
            self.time_col,
            self.delay_us,
            self.query,
            self.udf,
            self.time_zone,
            self.clock,
            self.max_rows_per_frame,
        )

    def _output_schema(self) -> pa.Schema:
        src = self.input_schemas[0]
        check_grouped_input(self.name, src, self.keys, self.columns, self.time_col)
        fields = [("output", f) for f in self.output]
        for v in self.variables.values():
            fields += [(f"state {v.name!r}", f) for f in [*v.value_type, *(v.key_type or [])]]
        for where, f in fields:
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

    def end_trigger(self) -> list[pa.RecordBatch]:
        """The micro-batch of the rows taken since the last trigger's end: each key among them
        called once, then each timer whose time has come."""
        return self._micro_batch()

    def flush(self) -> list[pa.RecordBatch]:
        out = self._micro_batch()
        if self.time_mode == "EventTime":  # Spark's micro-batch without data once the watermark moved
            out += self._micro_batch()
        return out

    def _threshold(self, now_ms: int) -> int | None:
        """Timers at or before this have fired (None: no timers in this time mode)."""
        return {"ProcessingTime": now_ms, "EventTime": self._watermark_ms}.get(self.time_mode)

    def _due(self, threshold: int | None) -> list[tuple[int, tuple[Any, ...]]]:
        if threshold is None:
            return []
        return sorted(
            ((t, key) for key, ts in self._store.timers.items() for t in ts if t <= threshold), key=lambda x: (x[0], repr(x[1]))
        )

    def _micro_batch(self) -> list[pa.RecordBatch]:
        pending = self._pending
        now_ms = int(self.clock() * 1000)
        if pending is None and not self._due(self._threshold(now_ms)):
            return []
        rows, late = pending, 0
        if rows is not None and self.time_mode == "EventTime" and self._max_time_ms is not None:
            rows, late = drop_late(rows, self.time_col, self._late_ms)
        saved, saved_keys = self._store.copy(), dict(self._key_rows)
        watermark = self._watermark_ms if self.time_mode == "EventTime" else -1
        values = {"None": TimerValues(), "ProcessingTime": TimerValues(now_ms)}.get(self.time_mode) or TimerValues(
            now_ms, watermark
        )
        handle = ProcessorHandle(self._store, self.variables, self.time_mode, now_ms, self._zone)
        outputs: list[pa.RecordBatch] = []
        try:
            processor = self._user("make_processor", self.make_processor)
            self._user("init", processor.init, handle)
            if rows is not None and rows.num_rows:
                rows = rows.combine_chunks()
                codes = group_codes([rows.column(k) for k in self.keys], rows.num_rows)
                order = np.argsort(codes, kind="stable")
                bounds = np.flatnonzero(np.diff(codes[order])) + 1
                for group in sorted(np.split(order, bounds), key=lambda g: g[0]):  # keys in order of their first row
                    part = rows.take(pa.array(group))
                    key_row = part.select(self.keys).slice(0, 1).to_pylist()[0]
                    key = _canon(key_row[k] for k in self.keys)
                    self._key_rows.setdefault(key, key_row)
                    handle._key = key
                    frames = self._frames(part.select(self.columns))
                    result = self._user("handleInputRows", processor.handleInputRows, self._user_key(key), frames, values)
                    outputs += self._emit("handleInputRows", result, part)
            for expiry, key in self._due(self._threshold(now_ms)):
                if expiry not in self._store.timers.get(key, ()):  # deleted by an earlier call of this micro-batch
                    continue
                handle._key = key
                info = ExpiredTimerInfo(expiry)
                result = self._user(
                    "handleExpiredTimer",
                    processor.handleExpiredTimer,
                    key=self._user_key(key),
                    timerValues=values,
                    expiredTimerInfo=info,
                )
                outputs += self._emit("handleExpiredTimer", result, None)
                handle.deleteTimer(expiry)
            handle._key = None
            self._user("close", processor.close)
        except BaseException:
            self._store, self._key_rows = saved, saved_keys  # nothing taken: the micro-batch runs again
            raise
        self._expire(now_ms)
        self._forget_idle_keys()
        self._pending = None
        return end_micro_batch(self, rows, late, outputs)

    def _expire(self, now_ms: int) -> None:
        """Spark's TTL clean-up at the end of a micro-batch: values whose expiry it reached go."""

        def live(held: tuple[Any, int | None]) -> bool:
            return held[1] is None or now_ms < held[1]

        for v in self.variables.values():
            values = self._store.values.get(v.name)
            if v.ttl_ms is None or not values:
                continue
            for key, held in list(values.items()):
                if v.kind == "value":
                    kept = held if live(held) else None
                elif v.kind == "list":
                    kept = tuple(x for x in held if live(x)) or None
                else:
                    kept = {u: x for u, x in held.items() if live(x)} or None
                if kept is None:
                    del values[key]
                else:
                    values[key] = kept

    def _forget_idle_keys(self) -> None:
        held = set(self._store.timers).union(*(v.keys() for v in self._store.values.values()))
        for key in [k for k in self._key_rows if k not in held]:
            del self._key_rows[key]

    # -- the processor ---------------------------------------------------------------------------
    def _user(self, what: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``call(*args, **kwargs)``, a failure named as the processor's."""
        try:
            return call(*args, **kwargs)
        except UdfError:
            raise
        except Exception as e:
            raise UdfError(self.query, self.udf, f"{what} raised {type(e).__name__}: {e}") from e

    def _user_key(self, key: tuple[Any, ...]) -> tuple[Any, ...]:
        """The grouping key as Spark's worker gives it: the values of a row of its frame."""
        row = self._key_rows[key]
        table = pa.table({k: pa.array([row[k]], self.input_schemas[0].field(k).type) for k in self.keys})
        return tuple(next(spark_frame(table, self.time_zone).itertuples(index=False)))

    def _frames(self, table: pa.Table) -> Iterator[pd.DataFrame]:
        names = _frame_names(table.column_names)
        for start in range(0, table.num_rows, self.max_rows_per_frame):
            frame = spark_frame(table.slice(start, self.max_rows_per_frame), self.time_zone)
            for name in frame.columns:  # Spark's rows pass through Python values: ints and floats widen
                if pd.api.types.is_integer_dtype(frame[name].dtype) or frame[name].dtype == np.float32:
                    frame[name] = frame[name].astype(np.float64 if frame[name].dtype == np.float32 else np.int64)
            frame.columns = names
            yield frame

    def _emit(self, what: str, result: Any, rows: pa.Table | None) -> list[pa.RecordBatch]:
        def tables() -> list[pa.Table | None]:
            if isinstance(result, pd.DataFrame):
                raise TypeError("returned a pandas.DataFrame; it must return (or yield) an iterator of DataFrames")
            return [frame_to_arrow(df, self.output, self.time_zone) for df in result]

        out = self._user(what, tables)
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

    # -- state ---------------------------------------------------------------------------------
    def state_rows(self) -> int:
        held = sum(len(v) for v in self._store.values.values()) + len(self._store.timers)
        return held + (0 if self._pending is None else self._pending.num_rows)

    def _key_table(self, keys: list[tuple[Any, ...]]) -> dict[str, pa.Array]:
        schema = self.input_schemas[0]
        return {k: pa.array([self._key_rows[key][k] for key in keys], schema.field(k).type) for k in self.keys}

    def _variable_table(self, v: StateVariable) -> pa.Table:
        """One state variable per key: its value(s), each with its expiry (null without a TTL)."""
        held = self._store.values.get(v.name, {})
        keys = list(held)
        types = _Types(v.value_type, self._zone)
        fields = [("value", v.value_type), ("expiry", pa.int64())]

        def item(x: tuple[tuple[Any, ...], int | None]) -> dict[str, Any]:
            return {"value": types.stored(x[0]), "expiry": x[1]}

        if v.kind == "value":
            column = pa.array([item(held[k]) for k in keys], pa.struct(fields))
        elif v.kind == "list":
            column = pa.array([[item(x) for x in held[k]] for k in keys], pa.list_(pa.struct(fields)))
        else:
            assert v.key_type is not None
            user = _Types(v.key_type, self._zone)
            entry = pa.struct([("key", v.key_type), *fields])
            column = pa.array([[{"key": user.stored(u), **item(x)} for u, x in held[k].items()] for k in keys], pa.list_(entry))
        return pa.table({**self._key_table(keys), "__value": column})

    def to_state(self) -> dict[str, Any]:
        keys = list(self._store.timers)
        expiries = pa.array([list(self._store.timers[k]) for k in keys], pa.list_(pa.int64()))
        return {
            "variables": {v.name: table_to_ipc(self._variable_table(v)) for v in self.variables.values()},
            "timers": table_to_ipc(pa.table({**self._key_table(keys), "__timers": expiries})),
            "pending": None if self._pending is None else table_to_ipc(self._pending),
            "watermark_ms": self._watermark_ms,
            "late_ms": self._late_ms,
            "max_time_ms": self._max_time_ms,
            "newest": list(self._newest),
            "late_rows": self.late_rows,
        }

    def _read_keys(self, table: pa.Table) -> list[tuple[Any, ...]]:
        out = []
        for row in table.select(self.keys).to_pylist():
            key = _canon(row[k] for k in self.keys)
            self._key_rows.setdefault(key, row)
            out.append(key)
        return out

    def from_state(self, state: dict[str, Any]) -> None:
        self._store, self._key_rows = _Store(), {}
        for name, blob in state["variables"].items():
            v = self.variables[name]
            table = ipc_to_table(blob)
            types = _Types(v.value_type, self._zone)
            held: dict[tuple[Any, ...], Any] = {}
            for key, value in zip(self._read_keys(table), table.column("__value").to_pylist(), strict=True):
                if v.kind == "value":
                    held[key] = types.read(value)
                elif v.kind == "list":
                    held[key] = tuple(types.read(x) for x in value)
                else:
                    assert v.key_type is not None
                    user = _Types(v.key_type, self._zone)
                    held[key] = {user.local(e["key"][n] for n in user.names): types.read(e) for e in value}
            if held:
                self._store.values[name] = held
        timers = ipc_to_table(state["timers"])
        for key, ts in zip(self._read_keys(timers), timers.column("__timers").to_pylist(), strict=True):
            self._store.timers[key] = tuple(ts)
        self._pending = None if state["pending"] is None else ipc_to_table(state["pending"])
        self._watermark_ms, self._late_ms = int(state["watermark_ms"]), int(state["late_ms"])
        self._max_time_ms = state["max_time_ms"]
        arrival, seq = state["newest"]
        self._newest = (float(arrival), int(seq))
        self.late_rows = int(state["late_rows"])
