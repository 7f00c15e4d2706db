"""The metrics table: one row per trigger (or simulator window) and per query, plus one plan row.

Both the Spark runner and the simulator experiments write it, and ``python -m sparkqos report``
reads it. Column names follow Spark's progress reports where one exists (``durationMs``,
``inputRowsPerSecond``, ``processedRowsPerSecond``) next to our own.

Files: ``<dir>/metrics/part-<run>-<batch>.parquet``, one per (run, batch), written atomically, so a
replayed trigger overwrites its row set instead of duplicating it. A long run would leave one small
file per trigger (36,000 an hour at a 0.1 s trigger), so :class:`MetricsWriter` merges every
:data:`COMPACT_EVERY` batches but the newest :data:`COMPACT_MARGIN` into one
``compact-<run>-<first>-<last>.parquet`` and removes their small files. Reading, the newest write
of a (run, batch) counts: a small file left by a crash between the merge and the removal is older
than the merged file and is skipped; a batch written again later (a replay) is newer and replaces
the merged file's rows of it.
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
import pyarrow.compute as pc
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
_SMALL = re.compile(r"^part-(?P<run>.+)-(?P<first>\d{9})\.parquet$")
_MERGED = re.compile(r"^compact-(?P<run>.+)-(?P<first>\d{9})-(?P<last>\d{9})\.parquet$")

#: Batches whose files :class:`MetricsWriter` merges into one.
COMPACT_EVERY = 256
#: The newest batches a merge leaves in files of their own: a batch stopped after its report but
#: before Spark committed it is written again, and the newest few are what a client polls.
COMPACT_MARGIN = 16


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
    return _write_small(Path(directory) / "metrics", run, batch_id, _table(rows))


def _table(rows: Iterable[Mapping[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist([row(**dict(r)) for r in rows], schema=SCHEMA)


def _small_path(folder: Path, run: str, batch_id: int) -> Path:
    return folder / f"part-{_SAFE.sub('_', run)}-{int(batch_id):09d}.parquet"


def _merged_path(folder: Path, run: str, first: int, last: int) -> Path:
    return folder / f"compact-{_SAFE.sub('_', run)}-{int(first):09d}-{int(last):09d}.parquet"


#: One metrics file: (run as named in the file, first batch, last batch, merged, path).
_Unit = tuple[str, int, int, bool, Path]


def _units(folder: Path, safe: str | None = None) -> list[_Unit]:
    """The metrics files in ``folder`` (only run ``safe``'s, as file names spell it, when given),
    in run and batch order."""
    units = []
    for path in folder.glob("*.parquet"):
        m = _SMALL.match(path.name)
        merged = m is None
        if merged:
            m = _MERGED.match(path.name)
            if m is None:
                continue
        if safe is not None and m["run"] != safe:
            continue
        first = int(m["first"])
        units.append((m["run"], first, int(m["last"]) if merged else first, merged, path))
    units.sort(key=lambda u: u[:3])
    return units


def _write_small(folder: Path, run: str, batch_id: int, table: pa.Table) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return write_atomic(_small_path(folder, run, batch_id), lambda f: pq.write_table(table, f), fsync=False)


class MetricsWriter:
    """One run's metrics under ``directory``: each batch's rows in a file of its own as
    :func:`write_batch` writes them and, once ``every`` + ``margin`` batches are held, every batch
    but the newest ``margin`` merged into one file (written atomically before their small files are
    removed; see the module). The rows of the batches not merged yet are held in memory, so a
    merge reads nothing back; the small files an earlier process of the run left (a run stopped
    and started again) are read once, here, and merged with the rest. ``every=None`` never
    merges."""

    def __init__(self, directory: str | Path, run: str, every: int | None = COMPACT_EVERY, margin: int = COMPACT_MARGIN):
        if every is not None and (not isinstance(every, int) or every < 2):
            raise ArgumentError(f"every must be an integer >= 2 or None, got {every!r}")
        if not isinstance(margin, int) or margin < 0:
            raise ArgumentError(f"margin must be an integer >= 0, got {margin!r}")
        self.folder = Path(directory) / "metrics"
        self.run = run
        self.every = every
        self.margin = margin
        self._held: dict[int, pa.Table] = {}
        if every is not None and self.folder.is_dir():
            self._adopt(_units(self.folder, _SAFE.sub("_", run)))

    def _adopt(self, units: list[_Unit]) -> None:
        """Hold the rows of the run's small files an earlier process left, but for those a merged
        file written after them holds (a crash's leftovers, which readers skip)."""
        merged = [(first, last, path.stat().st_mtime_ns) for _, first, last, is_merged, path in units if is_merged]
        for _, b, _, is_merged, path in units:
            if is_merged:
                continue
            written = path.stat().st_mtime_ns
            if not any(first <= b <= last and when >= written for first, last, when in merged):
                self._held[b] = _conformed(pq.read_table(path))

    def write(self, batch_id: int, rows: Iterable[Mapping[str, Any]]) -> Path:
        """Write batch ``batch_id``'s rows (again: they replace the earlier ones); merge when due."""
        table = _table(rows)
        path = _write_small(self.folder, self.run, batch_id, table)
        if self.every is not None:
            self._held[int(batch_id)] = table
            if len(self._held) >= self.every + self.margin:
                self._merge()
        return path

    def _merge(self) -> None:
        ids = sorted(self._held)
        done = ids[: len(ids) - self.margin]
        merged = pa.concat_tables([self._held[b] for b in done])
        write_atomic(_merged_path(self.folder, self.run, done[0], done[-1]), lambda f: pq.write_table(merged, f), fsync=False)
        for b in done:
            _small_path(self.folder, self.run, b).unlink(missing_ok=True)
            del self._held[b]


def read(directory: str | Path, run: str | None = None, newest: int | None = None) -> pa.Table:
    """Every metrics row under ``directory`` (its ``metrics/`` folder, or the folder itself), in
    run and batch order; with ``run``, only that run's, and with ``newest``, only its newest that
    many batches (a client polling a long run reads a few files, not the whole table)."""
    folder = Path(directory)
    if (folder / "metrics").is_dir():
        folder = folder / "metrics"
    units = _units(folder, None if run is None else _SAFE.sub("_", run))
    if newest is not None:
        keep, batches = [], 0
        for u in reversed(units):
            if batches >= newest:
                break
            keep.append(u)
            batches += u[2] - u[1] + 1
        units = keep[::-1]
    if not units:
        raise FileNotFoundError(f"no metrics files (part-*.parquet) under {str(directory)!r}")
    table = pa.concat_tables(_newest_writes(units))
    if newest is not None:
        ids = sorted(set(table.column("batchId").to_pylist()))[-newest:] if newest > 0 else []
        table = table.filter(pc.is_in(table.column("batchId"), value_set=pa.array(ids, pa.int64())))
    return table


def _newest_writes(units: list[_Unit]) -> list[pa.Table]:
    """The units' tables, each (run, batch) from the file written last: a small file older than
    a merged file holding its batch is skipped, a newer one replaces the merged file's rows."""
    small = {(u[0], u[1]): u[4] for u in units if not u[3]}
    tables: dict[Path, pa.Table] = {}
    skip: set[Path] = set()
    for run_, _, _, merged, path in units:
        if not merged:
            continue
        table = _conformed(pq.read_table(path))
        when = path.stat().st_mtime_ns
        newer = []
        for b in set(table.column("batchId").to_pylist()):
            other = small.get((run_, b))
            if other is None:
                continue
            if other.stat().st_mtime_ns > when:
                newer.append(b)
            else:
                skip.add(other)
        if newer:
            table = table.filter(pc.invert(pc.is_in(table.column("batchId"), value_set=pa.array(newer, pa.int64()))))
        tables[path] = table
    return [tables[u[4]] if u[3] else _conformed(pq.read_table(u[4])) for u in units if u[4] not in skip]


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
