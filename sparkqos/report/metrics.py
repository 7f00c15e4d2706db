"""The metrics table: one row per trigger (or simulator window) and per query, plus one plan row.

Both the Spark runner and the simulator experiments write it, and ``python -m sparkqos report``
reads it. Column names follow Spark's progress reports where one exists (``durationMs``,
``inputRowsPerSecond``, ``processedRowsPerSecond``) next to our own.

Files: ``<dir>/metrics/part-<run>-<batch>.parquet``, one per (run, batch), written atomically, so a
replayed trigger overwrites its row set instead of duplicating it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sparkqos.atomic import write_atomic
from sparkqos.errors import ArgumentError

#: ``query`` value of the row that sums the whole plan.
PLAN_ROW = "*"

SCHEMA = pa.schema(
    [
        ("run", pa.string()),  # experiment label: a strategy name, "adaptive", a job name
        ("batchId", pa.int64()),
        ("time_s", pa.float64()),  # end of the trigger/window, seconds (virtual time in the simulator)
        ("query", pa.string()),  # query name, or "*" for the plan
        ("klass", pa.string()),
        ("rowsIn", pa.float64()),
        ("rowsOut", pa.float64()),
        ("queuedRows", pa.float64()),
        ("queuedBytes", pa.float64()),
        ("delayMean_s", pa.float64()),
        ("delayP50_s", pa.float64()),
        ("delayP99_s", pa.float64()),
        ("delayMax_s", pa.float64()),
        ("strategy", pa.string()),  # strategy in force
        ("scores", pa.string()),  # JSON {candidate: score} (adaptive), or "{}"
        ("durationMs", pa.float64()),
        ("inputRowsPerSecond", pa.float64()),
        ("processedRowsPerSecond", pa.float64()),
        # runner only (NaN elsewhere): rows dead-lettered, rows the executor consumed, seconds it
        # was busy and that over the wall time since the previous trigger's record, CPU seconds
        # its threads used and that over the same wall time (cores)
        ("deadLetteredRows", pa.float64()),
        ("executorRows", pa.float64()),
        ("executorBusyS", pa.float64()),
        ("executorBusyFraction", pa.float64()),
        ("executorCpuS", pa.float64()),
        ("executorCores", pa.float64()),
        # runner only: how far behind the stream is (sparkqos.runtime.intake): seconds of event
        # time, rows, the catch-up ETA in seconds (inf: falling behind), and seconds the trigger
        # waited for the executor before it took the batch in
        ("backlogS", pa.float64()),
        ("backlogRows", pa.float64()),
        ("catchUpEtaS", pa.float64()),
        ("intakeWaitS", pa.float64()),
        # rows the query's parts evaluated by Spark gave this trigger, and the seconds Spark took
        # for them (the plan row: all parts); NaN where no part is evaluated by Spark
        ("sparkRows", pa.float64()),
        ("sparkS", pa.float64()),
        # runner only: rows shed (sparkqos.runtime.shedding), the query's latency target, rows
        # written later than it and whether none were (1/0; the plan row: every query with a
        # target); NaN without a policy or target
        ("shedRows", pa.float64()),
        ("sloTargetS", pa.float64()),
        ("sloViolations", pa.float64()),
        ("sloMet", pa.float64()),
        # runner only, per query: where the delay of the rows written went, mean seconds per
        # row (sparkqos.runtime.decompose), and how far behind its oldest queued row is
        ("delayPartWait_s", pa.float64()),
        ("delayPartSpark_s", pa.float64()),
        ("delayPartTrigger_s", pa.float64()),
        ("delayPartQueue_s", pa.float64()),
        ("delayPartRun_s", pa.float64()),
        ("delayPartSink_s", pa.float64()),
        ("behindS", pa.float64()),
        # runner only, plan row: queued bytes held in memory and spilled to disk
        ("queuedMemoryBytes", pa.float64()),
        ("spilledBytes", pa.float64()),
    ]
)

_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def delay_summary(delays: Sequence[float] | np.ndarray, weights: Sequence[float] | np.ndarray | None = None) -> dict[str, float]:
    """Mean, p50, p99 and max of tuple delays (weighted by tuple amounts when given).

    >>> delay_summary([1.0, 2.0, 3.0, 10.0])["delayP50_s"]
    2.0
    >>> math.isnan(delay_summary([])["delayMean_s"])
    True
    """
    d = np.asarray(delays, dtype=float)
    if d.size == 0:
        nan = float("nan")
        return {"delayMean_s": nan, "delayP50_s": nan, "delayP99_s": nan, "delayMax_s": nan}
    w = np.ones_like(d) if weights is None else np.asarray(weights, dtype=float)
    order = np.argsort(d, kind="stable")
    d, w = d[order], w[order]
    cum = np.cumsum(w)
    total = cum[-1]

    def quantile(q: float) -> float:
        return float(d[min(np.searchsorted(cum, q * total - 1e-12 * total), d.size - 1)])

    return {
        "delayMean_s": float(np.sum(d * w) / total) if total > 0 else float("nan"),
        "delayP50_s": quantile(0.5),
        "delayP99_s": quantile(0.99),
        "delayMax_s": float(d[-1]),
    }


class DelayDigest:
    """Bounded summary of a long stream of delays: exact count, mean and max, and a uniform
    reservoir sample of at most ``capacity`` values for percentiles (memory stays constant
    however long a job runs).

    >>> d = DelayDigest(capacity=1000, seed=1)
    >>> for k in range(100):
    ...     d.add(np.arange(k * 100, (k + 1) * 100) / 10000)
    >>> d.count, round(d.mean, 5), d.max, abs(d.percentile(50) - 0.5) < 0.05
    (10000, 0.49995, 0.9999, True)
    """

    def __init__(self, capacity: int = 100_000, seed: int | None = 0):
        self.capacity = capacity
        self.count = 0
        self.total = 0.0
        self.max = float("nan")
        self._sample = np.empty(0)
        self._rng = np.random.default_rng(seed)

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else float("nan")

    def add(self, values: np.ndarray) -> None:
        values = np.asarray(values, dtype=float)
        if values.size == 0:
            return
        self.total += float(values.sum())
        self.max = float(values.max()) if self.count == 0 else max(self.max, float(values.max()))
        seen = self.count
        self.count += values.size
        room = self.capacity - self._sample.size
        if room > 0:
            self._sample = np.concatenate([self._sample, values[:room]])
            values, seen = values[room:], seen + min(room, values.size)
        if values.size:
            # reservoir sampling (Algorithm R, vectorised): value i of the stream replaces a random
            # slot with probability capacity / (its position + 1)
            positions = seen + np.arange(values.size)
            slots = (self._rng.random(values.size) * (positions + 1)).astype(np.int64)
            keep = slots < self.capacity
            self._sample[slots[keep]] = values[keep]

    def percentile(self, q: float) -> float:
        return float(np.percentile(self._sample, q)) if self._sample.size else float("nan")


def row(**values: Any) -> dict[str, Any]:
    """A metrics row with every column present (missing numbers are NaN, strings empty)."""
    out: dict[str, Any] = {}
    for field in SCHEMA:
        v = values.pop(field.name, None)
        if v is None:
            if pa.types.is_string(field.type):
                v = "{}" if field.name == "scores" else ""
            elif pa.types.is_integer(field.type):
                v = 0
            else:
                v = float("nan")
        if field.name == "scores" and not isinstance(v, str):
            v = json.dumps(v, sort_keys=True)
        out[field.name] = v
    if values:
        raise ArgumentError(f"unknown metrics columns {sorted(values)}; the table has {SCHEMA.names}")
    return out


def write_batch(directory: str | Path, run: str, batch_id: int, rows: Iterable[Mapping[str, Any]]) -> Path:
    """Write one (run, batch) set of rows atomically; writing the same pair again replaces it."""
    folder = Path(directory) / "metrics"
    folder.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist([row(**dict(r)) for r in rows], schema=SCHEMA)
    target = folder / f"part-{_SAFE.sub('_', run)}-{int(batch_id):09d}.parquet"
    return write_atomic(target, lambda f: pq.write_table(table, f), fsync=False)


def read(directory: str | Path, run: str | None = None, newest: int | None = None) -> pa.Table:
    """Every metrics row under ``directory`` (its ``metrics/`` folder, or the folder itself); with
    ``run``, only that run's files, and with ``newest``, only its newest that many batches (a
    client polling a long run reads a few files, not the whole table)."""
    folder = Path(directory)
    if (folder / "metrics").is_dir():
        folder = folder / "metrics"
    # write_batch names files part-<run>-<9-digit batch>.parquet, so name order is batch order.
    pattern = "part-*.parquet" if run is None else f"part-{_SAFE.sub('_', run)}-{'[0-9]' * 9}.parquet"
    files = sorted(p for p in folder.glob(pattern))
    if newest is not None:
        files = files[-newest:] if newest > 0 else []
    if not files:
        raise FileNotFoundError(f"no metrics files (part-*.parquet) under {str(directory)!r}")
    return pa.concat_tables([_conformed(pq.read_table(f)) for f in files])


def _conformed(table: pa.Table) -> pa.Table:
    """A metrics file in today's schema: columns added since it was written are NaN."""
    for field in SCHEMA:
        if field.name not in table.column_names:
            table = table.append_column(field, pa.nulls(table.num_rows, field.type).fill_null(float("nan")))
    return table.select(SCHEMA.names).cast(SCHEMA)


def from_simulation(
    result, plan, run: str, window: float = 1.0, strategy: str | None = None, decisions: Sequence[Mapping[str, Any]] = ()
) -> list[dict[str, Any]]:
    """Metrics rows for a simulator run, one window of ``window`` time units per batch.

    ``decisions`` (adaptive's log: dicts with ``time``, ``pick`` and ``scores``) set the strategy
    in force per window."""
    end = max(result.snapshots, default=0)
    n_windows = max(int(math.ceil(end / window)), 1)
    per_window: list[list] = [[] for _ in range(n_windows)]
    for o in result.outputs:
        k = min(int(o.time // window), n_windows - 1)
        per_window[k].append(o)
    decisions = sorted(decisions, key=lambda d: d["time"])
    rows = []
    di, current, scores = 0, strategy or run, {}
    for k in range(n_windows):
        t_end = (k + 1) * window
        while di < len(decisions) and decisions[di]["time"] <= t_end:
            current, scores = decisions[di]["pick"], decisions[di].get("scores", {})
            di += 1
        queued = result.snapshots.get(int(round(t_end)), result.snapshots.get(end, 0.0))
        outs = per_window[k]
        by_query: dict[str, list] = {}
        for o in outs:
            by_query.setdefault(o.query, []).append(o)
        common = dict(run=run, batchId=k, time_s=t_end, strategy=current, scores=scores)
        for qname, query in plan.queries.items():
            qo = by_query.get(qname, [])
            rows.append(
                row(
                    query=qname,
                    klass=query.klass,
                    rowsOut=float(sum(o.amount for o in qo)),
                    **delay_summary([o.delay for o in qo], [o.amount for o in qo]),
                    **common,
                )
            )
        rows.append(
            row(
                query=PLAN_ROW,
                klass=PLAN_ROW,
                rowsOut=float(sum(o.amount for o in outs)),
                queuedRows=float(queued),
                queuedBytes=float(queued),
                processedRowsPerSecond=float(sum(o.amount for o in outs)) / window,
                **delay_summary([o.delay for o in outs], [o.amount for o in outs]),
                **common,
            )
        )
    return rows
