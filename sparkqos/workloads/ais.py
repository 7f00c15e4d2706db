"""A recorded AIS vessel stream: tracktable's ``.traj`` files as a replayable trace.

The PyPI package ``tracktable-data`` (extra ``data``: ``pip install -e '.[data]'``) ships real AIS
position reports: ``US_coastal_2020_06_30`` (235,967 reports, 1,395 vessels, one day) and
``NYHarbor_2020_12_first_week`` (172,679 reports, 7 days). Each line of a ``.traj`` file is one
track, in tracktable's text layout::

    *T*, track id, domain, point count, property count[, name, type, value]...,
    *P*, domain, dimensions, has object id, has timestamp, property count[, name, type]...,
    then per point: object id (the MMSI), "YYYY-MM-DD HH:MM:SS", longitude, latitude[, properties]

(older files have no track id). :func:`parse_traj` turns a file into a time-ordered Arrow table
``mmsi int64, ts timestamp[us, UTC], lon double, lat double, track string, point int32`` (the
track's id and the report's position in it) and a dead-letter table: a report with a missing field,
an unparsable time, a non-numeric or out-of-range coordinate (|lat| > 90, |lon| > 180) or an MMSI
that is not a positive integer is kept there with its raw text and the reason, never dropped; so
is a whole line whose header cannot be read or whose field count does not match its header.
Rows with the same second keep the file's order, so a replay releases them together and in order.

Dead letters have the columns of ``sparkqos.io.deadletter.DEAD_LETTER_SCHEMA`` (so
``read_dead_letters`` and the reports read them alike): ``batch_id`` is the file's line (1-based,
one track), ``row`` the report's position in that track (null when the whole line is rejected),
``reason``, ``column`` (``mmsi``, ``ts``, ``lon``, ``lat``, or null for a line) and ``record``,
the raw text as JSON (the report's four fields, or ``{"text": line}``).

:func:`vessel_trace` builds the Parquet trace once into a cache folder for the ``sparkqos.replay``
source (``timestampColumn`` ``ts``; ``speed`` 50 or 200 keeps the recorded inter-arrival pattern,
compressed). Parsing is vectorised (pyarrow compute over all reports at once): the day file parses
in about a second. Spark-free: pyarrow, numpy and the standard library only.

>>> good, dead = parse_traj_text(
...     '*T*,t1,terrestrial,2,0,*P*,terrestrial,2,1,1,0,'
...     '367000001,2020-06-30 00:00:05,-74.0,40.6,367000001,2020-06-30 00:00:0x,-74.1,40.7'
... )
>>> good.select(["mmsi", "lon", "lat"]).to_pylist()
[{'mmsi': 367000001, 'lon': -74.0, 'lat': 40.6}]
>>> dead.select(["batch_id", "row", "reason"]).to_pylist()
[{'batch_id': 1, 'row': 1, 'reason': "ts '2020-06-30 00:00:0x' is not a time YYYY-MM-DD HH:MM:SS"}]
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sparkqos.atomic import write_atomic
from sparkqos.errors import SourceError, check_number
from sparkqos.io.deadletter import DEAD_LETTER_SCHEMA

__all__ = [
    "AIS_FILES",
    "Burstiness",
    "DEAD_LETTER_SCHEMA",
    "TRACE_SCHEMA",
    "TraceStats",
    "dead_letter_path",
    "parse_traj",
    "parse_traj_text",
    "trace_stats",
    "traj_file",
    "vessel_trace",
    "write_trace",
]

US = 1_000_000
TS_TYPE = pa.timestamp("us", tz="UTC")
TRACE_SCHEMA = pa.schema(
    [
        ("mmsi", pa.int64()),
        ("ts", TS_TYPE),
        ("lon", pa.float64()),
        ("lat", pa.float64()),
        ("track", pa.string()),
        ("point", pa.int32()),
    ]
)
#: The AIS files of tracktable-data (name → what they hold).
AIS_FILES = {
    "US_coastal_2020_06_30": "235,967 reports from 1,395 vessels off the US coasts, 2020-06-30 (one day)",
    "NYHarbor_2020_12_first_week": "172,679 reports from New York harbour, 2020-12-01 to 12-07",
}
_PACKAGE = "tracktable_data"
_FOLDER = "python_example_data"
_INSTALL_HINT = "pip install -e '.[data]'  (or: pip install 'tracktable-data>=1.7')"
_TIME_FORMAT = "%Y-%m-%d %H:%M:%S"
_DOMAINS = {"terrestrial", "cartesian2d", "cartesian3d", "generic"}
_FIELDS = ("mmsi", "ts", "lon", "lat")
_INTEGER = r"^[0-9]{1,18}$"
_DECIMAL = r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?$"
_LIMITS = {"lon": 180.0, "lat": 90.0}


class _BadLine(Exception):
    """A line whose header or layout cannot be read (its reason)."""


def traj_file(file: str = "US_coastal_2020_06_30") -> Path:
    """The ``.traj`` file ``file``: a name from :data:`AIS_FILES` (found in the installed
    tracktable-data package) or a path to any ``.traj`` file."""
    if file.endswith(".traj") or os.sep in file or "/" in file:
        path = Path(file)
        if not path.is_file():
            raise SourceError(f"vessel trace: file {file!r} does not exist")
        return path
    if file not in AIS_FILES:
        raise SourceError(f"vessel trace: unknown file {file!r}; expected one of {sorted(AIS_FILES)} or a path to a .traj file")
    try:
        import importlib.resources as resources

        folder = resources.files(_PACKAGE) / _FOLDER
    except ModuleNotFoundError:
        raise SourceError(
            f"vessel trace: the recorded AIS data is not installed (package tracktable-data); install it with {_INSTALL_HINT}"
        ) from None
    path = Path(str(folder / f"{file}.traj"))
    if not path.is_file():
        raise SourceError(
            f"vessel trace: {path} is missing from the installed tracktable-data; reinstall it with {_INSTALL_HINT}"
        )
    return path


# -- parsing ---------------------------------------------------------------------------------------


def _int_field(fields: list[str], i: int, what: str) -> int:
    try:
        return int(fields[i].strip())
    except (IndexError, ValueError):
        got = repr(fields[i].strip()) if i < len(fields) else "nothing"
        raise _BadLine(f"header: {what} must be an integer, got {got}") from None


def _header(fields: list[str]) -> tuple[str, int, int, int]:
    """(track id, point count, fields per point, index of the first point field) of a track line."""
    if fields[0].strip() != "*T*":
        raise _BadLine(f"a track line starts with *T*, got {fields[0].strip()[:40]!r}")
    try:
        p = [f.strip() for f in fields].index("*P*")
    except ValueError:
        raise _BadLine("header: no *P* (point header) field") from None
    i = 1
    track = ""
    if i < p and fields[i].strip() not in _DOMAINS:  # newer files: a track id before the domain
        track, i = fields[i].strip(), i + 1
    i += 1  # domain
    n = _int_field(fields, i, "point count")
    props = _int_field(fields, i + 1, "track property count")
    if n < 0 or props < 0 or i + 2 + 3 * props != p:
        raise _BadLine(f"header: {n} points and {props} track properties do not fit the {p - i - 2} fields before *P*")
    dims = _int_field(fields, p + 2, "dimensions")
    has_id = _int_field(fields, p + 3, "has object id")
    has_ts = _int_field(fields, p + 4, "has timestamp")
    point_props = _int_field(fields, p + 5, "point property count")
    if (dims, has_id, has_ts) != (2, 1, 1) or point_props < 0:
        raise _BadLine(
            f"point header: expected 2 dimensions with object id and timestamp, got dimensions={dims}, "
            f"object id={has_id}, timestamp={has_ts}, properties={point_props}"
        )
    return track, n, 4 + point_props, p + 6 + 2 * point_props


def _line_letter(line_no: int, reason: str, text: str) -> dict:
    return {"batch_id": line_no, "row": None, "reason": reason, "column": None, "record": json.dumps({"text": text})}


def parse_traj_text(text: str) -> tuple[pa.Table, pa.Table]:
    """(reports in time order, dead letters) of a ``.traj`` file's text; see the module docstring."""
    raw: dict[str, list[str]] = {f: [] for f in _FIELDS}
    tracks: list[str] = []
    counts: list[int] = []
    lines: list[int] = []
    dead_lines: list[dict] = []
    for line_no, line in enumerate(text.split("\n"), start=1):  # not splitlines: \x1c or \u2028 inside a line stay there
        line = line.removesuffix("\r")
        if not line.strip():
            continue  # a blank line holds no report
        fields = line.split(",")
        try:
            track, n, stride, first = _header(fields)
            found = len(fields) - first
            if found != n * stride:
                raise _BadLine(
                    f"the header declares {n} points of {stride} fields ({n * stride} fields) but the line has {found}"
                )
        except _BadLine as exc:
            dead_lines.append(_line_letter(line_no, str(exc), line))
            continue
        for k, name in enumerate(_FIELDS):
            raw[name].extend(fields[first + k :: stride])
        tracks.append(track)
        counts.append(n)
        lines.append(line_no)
    good, dead = _reports(raw, np.asarray(tracks, dtype=object), np.asarray(counts, np.int64), np.asarray(lines, np.int64))
    if dead_lines:
        dead = pa.concat_tables([pa.Table.from_pylist(dead_lines, schema=DEAD_LETTER_SCHEMA), dead])
        dead = dead.sort_by([("batch_id", "ascending"), ("row", "ascending")])
    return good, dead


def parse_traj(path: str | os.PathLike) -> tuple[pa.Table, pa.Table]:
    """(reports in time order, dead letters) of the ``.traj`` file at ``path`` (module docstring).
    Bytes that are not UTF-8 become U+FFFD and make their field fail its check."""
    return parse_traj_text(Path(path).read_bytes().decode("utf-8", errors="replace"))


def _reports(raw: dict[str, list[str]], tracks: np.ndarray, counts: np.ndarray, lines: np.ndarray) -> tuple[pa.Table, pa.Table]:
    """Check and convert every report at once; the first failing field (mmsi, ts, lon, lat) is the reason."""
    n = len(raw["mmsi"])
    text = {f: pc.utf8_trim_whitespace(pa.array(raw[f], pa.string())) for f in _FIELDS}
    text["ts"] = pc.utf8_trim(text["ts"], characters='"')
    bad = np.zeros(n, dtype=bool)
    column = np.full(n, None, dtype=object)
    reason = np.full(n, None, dtype=object)

    def reject(mask: np.ndarray, name: str, why) -> None:
        fresh = np.flatnonzero(mask & ~bad)
        values = text[name].take(pa.array(fresh, pa.int64())).to_pylist() if fresh.size else []
        for i, v in zip(fresh, values, strict=True):
            reason[i] = why(v)
            column[i] = name
        bad[fresh] = True

    def mask(array: pa.Array) -> np.ndarray:
        return np.asarray(array.to_numpy(zero_copy_only=False), dtype=bool)

    for name in _FIELDS:
        reject(mask(pc.equal(pc.utf8_length(text[name]), 0)), name, lambda v, f=name: f"missing {f}")

    is_int = mask(pc.match_substring_regex(text["mmsi"], _INTEGER))
    mmsi = pc.cast(pc.if_else(pa.array(is_int), text["mmsi"], "0"), pa.int64()).to_numpy()
    reject(~is_int | (mmsi <= 0), "mmsi", lambda v: f"mmsi {v!r} is not a positive integer")

    parsed = pc.strptime(text["ts"], format=_TIME_FORMAT, unit="s", error_is_null=True)
    # strptime rolls impossible dates over (June 31 becomes July 1): a time must print back as read
    printed = pc.strftime(pc.fill_null(parsed, 0), format=_TIME_FORMAT)
    unparsable = pc.or_kleene(pc.is_null(parsed), pc.not_equal(printed, text["ts"]))
    reject(mask(unparsable), "ts", lambda v: f"ts {v!r} is not a time YYYY-MM-DD HH:MM:SS")
    ts_us = pc.fill_null(parsed.cast(pa.timestamp("us")).cast(pa.int64()), 0).to_numpy()

    coords = {}
    for name in ("lon", "lat"):
        is_num = mask(pc.match_substring_regex(text[name], _DECIMAL))
        value = pc.cast(pc.if_else(pa.array(is_num), text[name], "0"), pa.float64()).to_numpy()
        reject(~is_num, name, lambda v, f=name: f"{f} {v!r} is not a number")
        limit = _LIMITS[name]
        reject(
            ~np.isfinite(value) | (np.abs(value) > limit),
            name,
            lambda v, f=name, lim=limit: f"{f} {v} is outside [-{lim:g}, {lim:g}]",
        )
        coords[name] = value

    line_of = np.repeat(lines, counts)
    point = np.arange(n, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    keep = np.flatnonzero(~bad)
    order = keep[np.argsort(ts_us[keep], kind="stable")]  # same second: the file's order
    good = pa.Table.from_arrays(
        [
            pa.array(mmsi[order], pa.int64()),
            pa.array(ts_us[order], pa.int64()).cast(TS_TYPE),
            pa.array(coords["lon"][order], pa.float64()),
            pa.array(coords["lat"][order], pa.float64()),
            pa.array(np.repeat(tracks, counts)[order] if n else [], pa.string()),
            pa.array(point[order], pa.int32()),
        ],
        schema=TRACE_SCHEMA,
    )
    rejected = np.flatnonzero(bad)
    originals = {f: pa.array(raw[f], pa.string()).take(pa.array(rejected, pa.int64())).to_pylist() for f in _FIELDS}
    records = [json.dumps({f: originals[f][j] for f in _FIELDS}) for j in range(rejected.size)]
    dead = pa.Table.from_arrays(
        [
            pa.array(line_of[rejected], pa.int64()),
            pa.array(point[rejected], pa.int64()),
            pa.array(reason[rejected].tolist(), pa.string()),
            pa.array(column[rejected].tolist(), pa.string()),
            pa.array(records, pa.string()),
        ],
        schema=DEAD_LETTER_SCHEMA,
    )
    return good, dead


# -- the trace and its statistics ------------------------------------------------------------------


@dataclass(frozen=True)
class Burstiness:
    """How bursty a trace is: per-second counts run over every second from the first report to the
    last (empty seconds count); ``rows_per_s`` is their mean, ``cv`` their coefficient of
    variation, ``poisson_cv`` = 1/√mean what Poisson arrivals at the same rate would give, and
    ``max_per_s`` the busiest second."""

    rows_per_s: float
    cv: float
    poisson_cv: float
    max_per_s: int


@dataclass(frozen=True)
class TraceStats:
    """What a trace holds (``rate``: how bursty it is) and what its parse set aside."""

    source: str
    rows: int
    vessels: int
    tracks: int
    start: str
    end: str
    span_s: int
    rate: Burstiness
    dead_letters: int
    dead_reasons: dict[str, int]
    parse_s: float

    @property
    def rows_per_s(self) -> float:
        return self.rate.rows_per_s

    @property
    def cv(self) -> float:
        return self.rate.cv

    @property
    def poisson_cv(self) -> float:
        return self.rate.poisson_cv

    @property
    def max_per_s(self) -> int:
        return self.rate.max_per_s

    def to_json(self) -> dict:
        """The statistics as one flat JSON object (the rate's fields beside the others)."""
        out = asdict(self)
        return {**{k: v for k, v in out.items() if k != "rate"}, **out["rate"]}

    @classmethod
    def from_json(cls, data: dict) -> TraceStats:
        """What :meth:`to_json` gave."""
        rate = Burstiness(**{f: data[f] for f in ("rows_per_s", "cv", "poisson_cv", "max_per_s")})
        return cls(rate=rate, **{k: v for k, v in data.items() if k not in Burstiness.__dataclass_fields__})

    def summary(self) -> str:
        """The lines the CLI prints."""
        reasons = ", ".join(f"{k}: {v}" for k, v in self.dead_reasons.items()) or "none"
        return "\n".join(
            [
                f"source:      {self.source}",
                f"rows:        {self.rows:,} reports from {self.vessels:,} vessels ({self.tracks:,} tracks)",
                f"time span:   {self.start} .. {self.end} ({self.span_s:,} s)",
                f"rate:        {self.rows_per_s:.3f} rows/s mean, at most {self.max_per_s} in one second",
                f"burstiness:  CV of per-second counts {self.cv:.3f} (Poisson at the same rate: {self.poisson_cv:.3f})",
                f"dead letters: {self.dead_letters} ({reasons})",
                f"parse time:  {self.parse_s:.2f} s",
            ]
        )


def _reason_kind(reason: str) -> str:
    """A dead letter's reason without its value (``lat '95.0' is outside …`` → ``lat out of range``)."""
    if reason.startswith("missing "):
        return reason
    for name in _FIELDS:
        if reason.startswith(f"{name} "):
            return f"{name} out of range" if "outside" in reason else f"{name} unparsable"
    return "bad line"


def trace_stats(good: pa.Table, dead: pa.Table, source: str = "", parse_s: float = 0.0) -> TraceStats:
    """:class:`TraceStats` of a parsed trace."""
    ts = good.column("ts").cast(pa.int64()).to_numpy() if good.num_rows else np.empty(0, np.int64)
    if ts.size:
        seconds = ts // US
        counts = np.bincount(seconds - seconds.min())
        mean = float(counts.mean())
        cv = float(counts.std() / mean)
        span = int(counts.size)
        start, end = (str(good.column("ts")[i].as_py().isoformat()) for i in (0, good.num_rows - 1))
    else:
        counts, mean, cv, span, start, end = np.zeros(1, np.int64), 0.0, 0.0, 0, "", ""
    reasons: dict[str, int] = {}
    for r in dead.column("reason").to_pylist():
        kind = _reason_kind(r)
        reasons[kind] = reasons.get(kind, 0) + 1
    return TraceStats(
        source=source,
        rows=good.num_rows,
        vessels=len(pc.unique(good.column("mmsi"))),
        tracks=len(pc.unique(good.column("track"))),
        start=start,
        end=end,
        span_s=span,
        rate=Burstiness(rows_per_s=mean, cv=cv, poisson_cv=1 / np.sqrt(mean) if mean else 0.0, max_per_s=int(counts.max())),
        dead_letters=dead.num_rows,
        dead_reasons=dict(sorted(reasons.items())),
        parse_s=round(parse_s, 3),
    )


def dead_letter_path(trace: str | os.PathLike) -> Path:
    """Where :func:`write_trace` puts the dead letters of the trace at ``trace``."""
    trace = Path(trace)
    return trace.with_name(trace.stem + ".dead_letters.parquet")


def write_trace(good: pa.Table, dead: pa.Table, out: str | os.PathLike) -> tuple[Path, Path]:
    """Write the trace to ``out`` (Parquet) and its dead letters beside it (always, even when there
    are none, so a reader sees "no bad records" rather than a missing file); both atomically."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    dead_path = dead_letter_path(out)
    write_atomic(dead_path, lambda f: pq.write_table(dead, f))
    write_atomic(out, lambda f: pq.write_table(good, f))
    return out, dead_path


def _fingerprint(path: Path, limit: int | None) -> str:
    st = path.stat()
    return hashlib.sha256(f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{limit}".encode()).hexdigest()[:16]


def vessel_trace(
    path: str | os.PathLike | None = None,
    file: str = "US_coastal_2020_06_30",
    limit: int | None = None,
    cache_dir: str | os.PathLike = "output/traces",
    refresh: bool = False,
) -> tuple[Path, TraceStats]:
    """The Parquet trace of the AIS file ``file`` (a name of :data:`AIS_FILES` or a ``.traj`` path)
    and its :class:`TraceStats`, built once and reused: at ``path`` (default
    ``cache_dir/vessels_<file>[_limitN].parquet``), dead letters beside it, statistics in a
    ``.stats.json`` sidecar. It is rebuilt when the source file or ``limit`` changed, or ``refresh``.
    ``limit`` keeps the first N reports in time order (dead letters are all kept).

    Replay it with ``spark.readStream.format("sparkqos.replay").option("path", str(trace))``
    and ``option("speed", 50)`` (or 200) to compress the recorded pace.
    """
    if limit is not None:
        check_number("limit", limit, low=1, integer=True, error=SourceError, where="vessel trace: ")
    source = traj_file(file)
    if path is None:
        stem = Path(file).stem if file.endswith(".traj") else file
        path = Path(cache_dir) / f"vessels_{stem}{'' if limit is None else f'_limit{limit}'}.parquet"
    path = Path(path)
    sidecar = path.with_name(path.stem + ".stats.json")
    fingerprint = _fingerprint(source, limit)
    if not refresh and path.is_file() and dead_letter_path(path).is_file() and sidecar.is_file():
        try:
            saved = json.loads(sidecar.read_text())
            if saved.get("fingerprint") == fingerprint:
                return path, TraceStats.from_json(saved["stats"])
        except (ValueError, KeyError, TypeError):
            pass  # an unreadable sidecar: build again
    began = time.perf_counter()
    good, dead = parse_traj(source)
    parse_s = time.perf_counter() - began
    if limit is not None:
        good = good.slice(0, limit)
    stats = trace_stats(good, dead, source=source.name, parse_s=parse_s)
    write_trace(good, dead, path)
    payload = json.dumps({"fingerprint": fingerprint, "stats": stats.to_json()}, indent=1).encode()
    write_atomic(sidecar, lambda f: f.write(payload))
    return path, stats
