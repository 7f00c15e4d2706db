"""Where a row's delay goes: the five places a row waits, measured per output row.

A row's delay (its sink write minus its event time) is split into consecutive parts:

* ``wait``: from its event time until Spark began the micro-batch that took it in — the row sits
  in the source (the trigger interval, a trigger that overran, intake back-pressure);
* ``spark``: Spark's own per-trigger work before ``foreachBatch`` is called (offsets, the
  write-ahead log, planning). Spark starts a processing-time micro-batch on a multiple of its
  interval, or at once when the one before overran, so the micro-batch began at the later of
  the previous ``foreachBatch``'s return and the last interval tick (an estimate: Spark does not
  tell ``foreachBatch`` when its trigger began);
* ``trigger``: sparkqos's trigger work until the row was queued (the Spark-evaluated parts of
  queries, ``toArrow``, checks, ingest);
* ``queue`` and ``run``: in the executor, until the row's output was produced; ``run`` is the
  time its query's operators take for one run each (their mean run length), ``queue`` the rest;
* ``sink``: from its output's production until the sink write returned (an early write of the top
  class, or the trigger's commit).

:class:`IngestLog` remembers, per stream, which sequence numbers each trigger queued and when;
an output row's ``__seq`` finds its trigger (a window or aggregate row: the trigger of the row it
carries the sequence number of). Rows the log no longer knows (taken in before a restart) count
in the delay, not in the parts.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np
import pyarrow as pa

from sparkqos.executor.expressions import ARRIVAL, SEQ
from sparkqos.executor.loop import EMIT

__all__ = ["PARTS", "DelayParts", "IngestLog", "column", "micro_batch_start", "seqs_of"]

#: The parts of a delay, in the order a row passes them.
PARTS = ("wait", "spark", "trigger", "queue", "run", "sink")


def micro_batch_start(started: float, returned: float | None, interval_s: float | None) -> float:
    """When Spark began the micro-batch whose ``foreachBatch`` started at ``started``: the later of
    the previous ``foreachBatch``'s return and the last interval tick before ``started``
    (processing-time triggers fire on multiples of the interval; one that overran fires at once).

    >>> micro_batch_start(100.30, 100.10, 0.25), micro_batch_start(100.62, 100.55, 0.25)
    (100.25, 100.55)
    >>> micro_batch_start(7.0, None, 0.25), micro_batch_start(7.0, 6.5, None)
    (7.0, 6.5)
    """
    if returned is None:
        return started
    tick = math.floor(started / interval_s) * interval_s if interval_s else returned
    return min(started, max(returned, tick))


class IngestLog:
    """Per stream: the sequence numbers each trigger queued, with the micro-batch's start, the
    ``foreachBatch`` call and the moment they were queued (the newest ``keep`` triggers)."""

    def __init__(self, keep: int = 20_000):
        self.keep = keep
        self._log: dict[str, deque[tuple[int, int, float, float, float]]] = {}
        # the log as an array, built at the first lookup after an add (a trigger adds once and
        # looks up once per query and early part)
        self._arrays: dict[str, np.ndarray] = {}

    def add(self, stream: str, first_seq: int, rows: int, batch_start: float, started: float, queued: float) -> None:
        if rows > 0:
            log = self._log.setdefault(stream, deque(maxlen=self.keep))
            log.append((first_seq, first_seq + rows, batch_start, started, queued))
            self._arrays.pop(stream, None)

    def times(self, stream: str, seqs: np.ndarray) -> np.ndarray:
        """For each sequence number of ``stream``: (micro-batch start, foreachBatch call, queued),
        NaN where the log does not know it. Shape (len(seqs), 3).

        >>> log = IngestLog()
        >>> log.add("s", 0, 10, 1.0, 1.1, 1.2); log.add("s", 10, 5, 2.0, 2.1, 2.2)
        >>> log.times("s", np.array([3, 12, 20])).tolist()
        [[1.0, 1.1, 1.2], [2.0, 2.1, 2.2], [nan, nan, nan]]
        """
        out = np.full((len(seqs), 3), np.nan)
        log = self._log.get(stream)
        if not log or not len(seqs):
            return out
        entries = self._arrays.get(stream)
        if entries is None:
            entries = self._arrays[stream] = np.array(log, dtype=np.float64)
        idx = np.searchsorted(entries[:, 0], seqs, side="right") - 1
        ok = (idx >= 0) & (seqs < entries[np.clip(idx, 0, None), 1])
        out[ok] = entries[idx[ok], 2:5]
        return out


class DelayParts:
    """Sums of each part over one trigger's written rows, per query (mean = sum / rows)."""

    def __init__(self) -> None:
        self.sums: dict[str, np.ndarray] = {}
        self.rows: dict[str, int] = {}

    def add(self, query: str, table: pa.Table, written: float, times: np.ndarray, run_s: float) -> None:
        """``table``: rows of ``query`` written at ``written`` (with ``__arrival``, ``__emit``);
        ``times``: :meth:`IngestLog.times` of their sequence numbers; ``run_s``: one run of each
        of the query's operators."""
        if not table.num_rows:
            return
        arrival = table.column(ARRIVAL).to_numpy(zero_copy_only=False)
        emit = table.column(EMIT).to_numpy(zero_copy_only=False)
        known = ~np.isnan(times[:, 0])
        if not known.any():
            return
        a, e = arrival[known], emit[known]
        batch_start, started, queued = times[known, 0], times[known, 1], times[known, 2]
        executor = np.maximum(e - queued, 0.0)
        run = np.minimum(executor, run_s)
        parts = np.stack(
            [
                np.maximum(batch_start - a, 0.0),
                started - batch_start,
                queued - started,
                executor - run,
                run,
                np.maximum(written - e, 0.0),
            ]
        )
        self.sums[query] = self.sums.get(query, 0.0) + parts.sum(axis=1)
        self.rows[query] = self.rows.get(query, 0) + int(known.sum())

    def means(self, query: str) -> dict[str, float]:
        """Mean seconds per part of ``query``'s rows (NaN without rows), as ``delayPart<Name>_s``."""
        n = self.rows.get(query, 0)
        sums = self.sums.get(query)
        return {column(p): float(sums[i] / n) if n else math.nan for i, p in enumerate(PARTS)}


def column(part: str) -> str:
    """The metrics column of a part: ``delayPartWait_s`` …"""
    return f"delayPart{part.capitalize()}_s"


def seqs_of(table: pa.Table) -> np.ndarray:
    """The ``__seq`` column of an output table."""
    return table.column(SEQ).to_numpy(zero_copy_only=False)
