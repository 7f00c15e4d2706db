"""SessionWindowAggregate: Spark's ``groupBy(session_window(ts, gap), keys).agg(...)`` on event time.

What a PySpark transform's ``withWatermark(...).groupBy(F.session_window("ts", "5 minutes"), "user").agg(...)``
compiles to (:mod:`sparkqos.compile.sessions`). Sessions are Spark's: a row at event time ``t``
(microseconds) opens the session ``[t, t + gap)`` of its key; sessions of one key are taken in
order of their start, and one starting at or before the end of the session before it joins it,
the joined session ending at the larger of the two ends (Spark's MergingSessionsIterator). So a
session ends ``gap`` after its last row. Rows with a null time are dropped, as Spark's plan
filters them. The output is Spark's: a ``session_window`` struct ``<start, end>`` of timestamps,
the grouping keys, then the aggregates with the functions, types and null rules of
:class:`~sparkqos.executor.operators.EventWindowAggregate`; first/last take the row of the
session's earliest/latest event time (ties: the first/last to arrive), as Spark's batch engine
does, which merges per-time partial aggregates in time order; collect_list lists a session's values
in the order of its pieces' starts (one start: arrival order) — Spark's batch order when rows come
in time order, and as Spark's streaming merge of a session in state with newer rows orders them
(Spark's batch run of rows out of time order sorts them by time first).

Streaming (Spark's append mode for session windows): with a watermark delay the watermark is the
largest event time seen minus the delay; a session is emitted once the watermark reaches its end
and leaves the state, and a row whose own session ``[t, t + gap)`` already ended at the watermark
is late: dropped and counted in ``late_rows``. Without a watermark (a finite DataFrame) every
session is emitted at :meth:`flush`. State: one row of partial aggregates per open session and
key, with its start and end (bounded by the watermark), serialisable (Arrow IPC).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkqos.errors import PlanError, check_number
from sparkqos.executor.expressions import ARRIVAL, SEQ
from sparkqos.executor.operators.base import group_codes, normal_key
from sparkqos.executor.operators.event_window import EventWindowAggregate, WindowAgg


class SessionWindowAggregate(EventWindowAggregate):
    """Aggregates of ``aggs`` by ``keys`` over the session windows of ``time_col``, a session
    closing ``gap_us`` microseconds after its last row; ``delay_us`` is the watermark delay
    (None: no watermark, emit at the end).

    >>> import pyarrow as pa
    >>> from sparkqos.executor.queues import stamp, with_internal
    >>> ts = pa.timestamp("us", tz="UTC")
    >>> op = SessionWindowAggregate(["k"], [WindowAgg("count_all", None, "n")], "t", 5_000_000, delay_us=0)
    >>> _ = op.bind("q/session", [with_internal(pa.schema([("k", pa.string()), ("t", ts)]))])
    >>> op.process(stamp(pa.record_batch({"k": ["a", "a"], "t": pa.array([1_000_000, 4_000_000], ts)}), 0.0, 0))
    >>> out = op.process(stamp(pa.record_batch({"k": ["b"], "t": pa.array([20_000_000], ts)}), 1.0, 2))
    >>> s = out.column("session_window").to_pylist()[0]
    >>> out.column("n").to_pylist(), s["start"].second, s["end"].second, op.state_rows()
    ([2], 1, 9, 1)
    """

    def __init__(
        self,
        keys: Sequence[str],
        aggs: Sequence[WindowAgg],
        time_col: str,
        gap_us: int,
        delay_us: int | None = None,
        window_name: str = "session_window",
    ):
        check_number("gap_us", gap_us, integer=True, low=1, error=PlanError, where="session window ")
        super().__init__(keys, aggs, time_col, gap_us, None, 0, delay_us, window_name)

    @property
    def gap_us(self) -> int:
        """The session gap in microseconds."""
        return self.size_us

    def copy(self) -> SessionWindowAggregate:
        return SessionWindowAggregate(self.keys, self.aggs, self.time_col, self.gap_us, self.delay_us, self.window_name)

    # -- building --------------------------------------------------------------------------------
    def _output_schema(self) -> pa.Schema:
        schema = super()._output_schema()
        # first/last of merged sessions: the value of the piece whose time is the earliest/latest,
        # the time of a piece being its start/end, or with ignorenulls the time of its first/last
        # non-null value (a state column of its own, "<partial>_t"). The other partials merge
        # grouped by session.
        self._picks = [
            (f"p{i}", a.fn, f"p{i}_t" if a.ignore_nulls else ("__ws" if a.fn == "first" else "__we"))
            for i, a in enumerate(self.aggs)
            if a.fn in ("first", "last")
        ]
        picked = {name for name, _, _ in self._picks}
        self._merge_specs = [s for s in self._specs[True] if s[0] not in picked] + [("__ws", "min"), ("__we", "max")]
        partials = [(name, column) for name, column in self._columns[True][len(self._group) :] if name not in picked]
        self._merge_columns = [("__ws", "__ws_min"), *partials, ("__we", "__we_max")]
        return schema

    def _window_arrays(self, part: pa.Table) -> list[Any]:
        start = pc.cast(part.column("__ws").combine_chunks(), self._time_type)
        end = pc.cast(part.column("__we").combine_chunks(), self._time_type)
        return [pa.StructArray.from_arrays([start, end], fields=list(self.schema.field(0).type))]

    def _ends(self, state: pa.Table) -> pa.ChunkedArray:
        return state.column("__we")

    # -- running ---------------------------------------------------------------------------------
    def _sessions(self, batch: pa.RecordBatch) -> tuple[pa.Table | None, int, int | None]:
        """The rows of ``batch`` as one session per key and event time (partials of the rows
        of that time, in arrival order), without the late rows; how many were late; the largest
        event time (µs; None without one)."""
        t = batch.column(self.time_col)
        if t.null_count:
            batch = batch.filter(t.is_valid())
            t = batch.column(self.time_col)
        us = t.view(pa.int64()).to_numpy(zero_copy_only=False)
        if not len(us):
            return None, 0, None
        newest = int(us.max())
        on_time = us + self.gap_us > self._closed_until
        late = int(len(us) - on_time.sum())
        if late:
            batch, us = batch.filter(pa.array(on_time)), us[on_time]
            if not len(us):
                return None, late, newest
        rows = {"__ws": pa.array(us)} | {k: normal_key(batch.column(k)) for k in self.keys} | self._inputs(batch)
        rows[ARRIVAL], rows[SEQ] = batch.column(ARRIVAL), batch.column(SEQ)
        part = self._aggregate(pa.table(rows), combine=False)
        part = part.append_column("__we", pc.add(part.column("__ws"), self.gap_us))
        for name, _, time in self._picks:
            if time not in part.column_names:  # ignorenulls: the time of a non-null value
                v = part.column(name)
                part = part.append_column(time, pc.if_else(v.is_valid(), part.column("__ws"), pa.scalar(None, pa.int64())))
        return part, late, newest

    def _merge(self, table: pa.Table) -> pa.Table:
        """The sessions of ``table`` with those of a key that overlap merged, Spark's rule: in
        order of start, a session starting at or before the largest end so far joins it. On equal
        starts the earlier row of ``table`` (the state's, which came first) goes first."""
        n = table.num_rows
        codes = group_codes([table.column(k) for k in self.keys], n)
        ws = table.column("__ws").to_numpy()
        we = table.column("__we").to_numpy()
        order = np.lexsort((np.arange(n), ws, codes))
        c, s = codes[order], ws[order]
        # The running largest end within each key: keys sort first, so key·m + rank of the end
        # only grows across a key's rows and resets at the next key.
        ends, rank = np.unique(we[order], return_inverse=True)
        so_far = ends[np.maximum.accumulate(c * len(ends) + rank.reshape(-1)) % len(ends)]
        new = np.ones(n, dtype=bool)
        new[1:] = (c[1:] != c[:-1]) | (s[1:] > so_far[:-1])
        table = table.take(order)
        if new.all():
            return table
        sid = np.cumsum(new) - 1
        g = table.append_column("__sid", pa.array(sid)).group_by(["__sid"], use_threads=False)
        g = g.aggregate(self._merge_specs).sort_by("__sid")
        merged = {name: g.column(column) for name, column in self._merge_columns}
        heads = pa.array(np.flatnonzero(new))  # a session's rows are together: its key is its first row's
        merged |= {k: table.column(k).take(heads) for k in self.keys}
        sessions = int(sid[-1]) + 1
        for i, partial, _ in self._numpy:
            if self.aggs[i].fn not in ("first", "last"):  # those are picked by time below
                merged |= partial.combine(table, sid, sessions)
        for name, fn, time in self._picks:
            merged |= _pick(table, sid, order, name, fn, time)
        return pa.table({n: merged[n] for n in table.column_names}).cast(table.schema)

    def process(self, batch: pa.RecordBatch, port: int = 0) -> pa.RecordBatch | None:
        part, late, newest = self._sessions(batch)
        self.late_rows += late
        if part is not None:
            held = self._state
            self._state = self._merge(part if held is None or not held.num_rows else pa.concat_tables([held, part]))
        if newest is not None:
            self._max_time = newest if self._max_time is None else max(self._max_time, newest)
        if self.delay_us is None or self._max_time is None:
            return None
        return self._emit(self._max_time - self.delay_us)


def _pick(table: pa.Table, sid: np.ndarray, pos: np.ndarray, name: str, fn: str, time: str) -> dict[str, pa.Array]:
    """Per session ``sid`` (ascending over ``table``'s rows): ``name`` of its piece with the
    earliest (``first``) or latest (``last``) ``time`` — a null time never chosen while another
    is not — ties to the earlier/later ``pos`` (arrival); and that time, when a column of its own."""
    t = table.column(time).combine_chunks()
    valid = t.is_valid().to_numpy(zero_copy_only=False)
    fill = np.iinfo(np.int64).max if fn == "first" else np.iinfo(np.int64).min
    key = np.where(valid, t.fill_null(0).to_numpy(zero_copy_only=False), fill)
    idx = np.lexsort((pos, key, sid))
    s = sid[idx]
    edge = np.ones(len(s), dtype=bool)
    if fn == "first":
        edge[1:] = s[1:] != s[:-1]
    else:
        edge[:-1] = s[1:] != s[:-1]
    chosen = pa.array(idx[edge])
    out = {name: table.column(name).take(chosen)}
    if time.startswith(name):
        out[time] = t.take(chosen)
    return out
