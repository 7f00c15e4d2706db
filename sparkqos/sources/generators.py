"""Streaming sources on PySpark's Python Data Source API: bursty ON/OFF, shifting Poisson, replay.

Bursty follows Jiang §5.1 and the Chain paper §6 (Pareto ON a = 1.4 / OFF a = 1.2 flows); poisson
follows the thesis §6.1 (a mean redrawn every few seconds, occasional 2× bursts).

Use ``register(spark)`` once, then ``spark.readStream.format("sparkqos.bursty")`` (or
``"sparkqos.poisson"``, ``"sparkqos.replay"``). Every row carries its arrival time in ``ts``
(``timestamp[us, tz=UTC]``).

Replayability: an offset is ``{"origin_us", "t_us", "seed"}`` — stream time ``t_us`` microseconds
after the wall-clock ``origin_us`` the stream started at. The rows of any range ``[t0, t1)`` are a
pure function of the options, the seed and the range, and do not depend on how the stream was cut
into batches: randomness is drawn per (flow, second of stream time) from generators seeded by
those keys, and payload values are hashes of (seed, flow, arrival µs). So a query restarted from
its checkpoint re-reads exactly the rows it had read. Without a ``seed`` option a random seed is
drawn once and kept in the offsets. Without a ``start`` option the offsets also carry a ``phase``
while the query starts, so that stream time starts only once Spark is up (sparkqos.sources.datasources).

Options (keys are case-insensitive, values strings as Spark passes them):

=========================  =================================================================
all synthetic sources      ``rate`` mean rows/s (100), ``seed``, ``payload`` sensor|packet,
                           ``sensors`` (64; poisson) / ``flows`` (64; bursty: one sensor per flow),
                           ``zones`` (8 locations), ``start`` origin (epoch seconds or ISO-8601;
                           default: when the query first starts), ``duration`` seconds after
                           which the stream ends, ``maxSecondsPerTrigger`` cap on one batch's
                           stream time, ``numPartitions`` (1), ``warmup`` (true: without
                           ``start``, stream time starts once Spark ran a first empty batch;
                           see sparkqos.sources.datasources)
bursty                     ``onScale`` minimum ON period (1 s), ``offScale`` minimum OFF
                           period (60 s; see below)
poisson                    ``period`` seconds between mean changes (5), ``spread`` (0.3),
                           ``burstProbability`` (0.25), ``burstFactor`` (2.0); ``rate`` is the
                           long-run mean including bursts
replay                     ``path`` (CSV or Parquet), ``format`` (from the extension),
                           ``timestampColumn`` (ts), ``speed`` (1.0 = the trace's own pace,
                           2 = twice as fast, ``max`` = all at once), ``retime`` (false: rows
                           exactly as recorded; true: the timestamp column becomes the replay time),
                           ``start``, ``maxSecondsPerTrigger``, ``warmup``
=========================  =================================================================

Bursty defaults: Jiang §5.1 gives one Pareto minimum for ON and OFF; with 64 flows that keeps
~24 flows ON at any time and per-second counts vary little (CV ≈ 0.17, ``offScale=1``). The
default ``offScale`` of 60 s leaves ~0.6 flows ON on average, so traffic comes in bursts with
quiet gaps (CV of per-second counts ≈ 1.2). Flows start in their stationary regime, so the
expected rate is exactly ``rate``; a single run's mean converges slowly, as self-similar traffic
does (one-hour runs range about 0.7-1.45 × ``rate``).

Replay reads the file on the executors for every batch (fine for traces up to some hundred MB;
on a cluster the path must be visible to every executor).

Payloads: sensor ``(sensor_id int, location string, temperature double, humidity double, ts)``,
with rare fire readings above 60 °C; packet ``(src string, dst string, size int, protocol string, ts)``.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkqos.errors import SourceError, check_choice, check_number
from sparkqos.sim.arrivals import flow_on_rate, flow_periods, shifted_rate

__all__ = ["BurstyGenerator", "PoissonGenerator", "ReplayTrace", "payload_table", "per_second_counts"]

US = 1_000_000
TS_TYPE = pa.timestamp("us", tz="UTC")
SENSOR_SCHEMA = pa.schema(
    [
        ("sensor_id", pa.int32()),
        ("location", pa.string()),
        ("temperature", pa.float64()),
        ("humidity", pa.float64()),
        ("ts", TS_TYPE),
    ]
)
PACKET_SCHEMA = pa.schema(
    [("src", pa.string()), ("dst", pa.string()), ("size", pa.int32()), ("protocol", pa.string()), ("ts", TS_TYPE)]
)
PAYLOADS = {"sensor": SENSOR_SCHEMA, "packet": PACKET_SCHEMA}
#: probability that a sensor reading is a fire reading (60-90 °C)
FIRE_PROBABILITY = 0.002


class _Options:
    """Case-insensitive string options with typed getters whose errors name the option and value."""

    def __init__(self, source: str, options: Mapping[str, str], known: set[str]):
        self.source = source
        self.values = {str(k).lower(): v for k, v in dict(options).items()}
        unknown = sorted(set(self.values) - {k.lower() for k in known} - {"path"})
        if unknown:
            raise SourceError(f"{source}: unknown option(s) {unknown}; known options are {sorted(known)}")

    def _raw(self, key: str) -> str | None:
        v = self.values.get(key.lower())
        return None if v is None else str(v).strip()

    def number(self, key: str, default: float | None, low: float | None = 0.0, strict: bool = True) -> float | None:
        raw = self._raw(key)
        if raw is None:
            return default
        try:
            value = float(raw)
        except ValueError:
            raise SourceError(f"{self.source}: option {key} must be a number, got {raw!r}") from None
        return check_number(key, value, low=low, low_open=strict, error=SourceError, where=f"{self.source}: option ")

    def integer(self, key: str, default: int | None, low: int = 1) -> int | None:
        raw = self._raw(key)
        if raw is None:
            return default
        try:
            value = int(raw)
        except ValueError:
            raise SourceError(f"{self.source}: option {key} must be an integer, got {raw!r}") from None
        return check_number(key, value, low=low, integer=True, error=SourceError, where=f"{self.source}: option ")

    def choice(self, key: str, default: str, choices: tuple[str, ...]) -> str:
        raw = self._raw(key)
        if raw is None:
            return default
        return check_choice(key, raw.lower(), choices, error=SourceError, where=f"{self.source}: option ")

    def boolean(self, key: str, default: bool) -> bool:
        raw = self._raw(key)
        if raw is None:
            return default
        if raw.lower() not in ("true", "false"):
            raise SourceError(f"{self.source}: option {key} must be true or false, got {raw!r}")
        return raw.lower() == "true"

    def timestamp_us(self, key: str) -> int | None:
        raw = self._raw(key)
        if raw is None:
            return None
        try:
            return int(round(float(raw) * US))
        except ValueError:
            pass
        try:
            dt = datetime.fromisoformat(raw.replace("Z", "+00:00"))
        except ValueError:
            raise SourceError(f"{self.source}: option {key} must be epoch seconds or an ISO-8601 time, got {raw!r}") from None
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=UTC)
        return int(round(dt.timestamp() * US))

    def string(self, key: str, default: str | None = None) -> str | None:
        raw = self._raw(key)
        return default if raw is None else raw


_COMMON = {
    "rate",
    "seed",
    "payload",
    "zones",
    "start",
    "duration",
    "maxSecondsPerTrigger",
    "maxRowsPerTrigger",
    "clockOffset",
    "numPartitions",
    "warmup",
}


def _now_us() -> int:
    return time.time_ns() // 1000


# -- deterministic payloads ------------------------------------------------------------------------

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser: a bijective scramble of uint64 values (vectorised, wraps on overflow)."""
    x = x ^ (x >> np.uint64(30))
    x = x * _M1
    x = x ^ (x >> np.uint64(27))
    x = x * _M2
    return x ^ (x >> np.uint64(31))


def _uniform(seed: int, flow: np.ndarray, ts_us: np.ndarray, salt: int) -> np.ndarray:
    """U[0, 1) values that depend only on (seed, flow, arrival µs, salt)."""
    with np.errstate(over="ignore"):  # uint64 arithmetic is meant to wrap
        head = np.array([seed & 0xFFFFFFFFFFFFFFFF], np.uint64) * _GOLDEN + np.uint64(salt)
        key = _mix(head) + flow.astype(np.uint64) * _GOLDEN
        x = _mix(ts_us.astype(np.uint64) ^ _mix(key))
    return (x >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def _pick(names: list[str], u: np.ndarray) -> pa.Array:
    idx = np.minimum((u * len(names)).astype(np.int64), len(names) - 1)
    return pa.array(names, pa.string()).take(pa.array(idx))


def payload_table(kind: str, seed: int, flow: np.ndarray, ts_us: np.ndarray, zones: int = 8) -> pa.Table:
    """Rows of payload ``kind`` for arrivals ``(flow, ts_us)``; values are hashes, not draws, so
    the same arrival always carries the same values.

    >>> t = payload_table("sensor", 7, np.array([0, 1]), np.array([5, 9]))
    >>> t.column_names, t.schema.field("ts").type
    (['sensor_id', 'location', 'temperature', 'humidity', 'ts'], TimestampType(timestamp[us, tz=UTC]))
    >>> t.equals(payload_table("sensor", 7, np.array([0, 1]), np.array([5, 9])))
    True
    """
    flow = np.asarray(flow, dtype=np.int64)
    ts_us = np.asarray(ts_us, dtype=np.int64)
    ts = pa.array(ts_us, pa.int64()).cast(TS_TYPE)
    u = [_uniform(seed, flow, ts_us, salt) for salt in range(4)]
    if kind == "sensor":
        base = 18.0 + (flow * 7 % 10)  # each sensor has its own typical temperature
        noise = (u[0] + u[1] - 1.0) * 3.0  # triangular noise in [-3, 3]
        fire = u[2] < FIRE_PROBABILITY
        temperature = np.where(fire, 60.0 + 30.0 * u[3], base + noise)
        humidity = np.where(fire, 10.0 + 10.0 * u[1], 40.0 + 30.0 * u[3] + (flow % 5))
        location = pa.array([f"zone-{z}" for z in range(zones)], pa.string()).take(pa.array(flow % zones))
        columns = [
            pa.array(flow, pa.int32()),
            location,
            pa.array(np.round(temperature, 2)),
            pa.array(np.round(humidity, 2)),
            ts,
        ]
        return pa.Table.from_arrays(columns, schema=SENSOR_SCHEMA)
    if kind == "packet":
        src = pc.binary_join_element_wise(
            "10.0.", pa.array(flow // 256).cast(pa.string()), ".", pa.array(flow % 256).cast(pa.string()), ""
        )
        host = (u[0] * 1024).astype(np.int64)
        dst = pc.binary_join_element_wise(
            "192.168.", pa.array(host // 256).cast(pa.string()), ".", pa.array(host % 256).cast(pa.string()), ""
        )
        # packet sizes cluster at minimum, 576 and MTU sizes, as in IP traces
        size = np.where(u[1] < 0.4, 64, np.where(u[1] < 0.6, 576, 1500)) - (u[2] * 24).astype(np.int64)
        protocol = np.where(u[3] < 0.8, 0, np.where(u[3] < 0.98, 1, 2))
        proto = pa.array(["tcp", "udp", "icmp"], pa.string()).take(pa.array(protocol))
        return pa.Table.from_arrays([src, dst, pa.array(size, pa.int32()), proto, ts], schema=PACKET_SCHEMA)
    raise SourceError(f"unknown payload {kind!r}; expected one of {sorted(PAYLOADS)}")


# -- generators (pure functions of options, seed and a time range) ---------------------------------


def per_second_counts(ts_us: np.ndarray, t0_us: int, t1_us: int) -> np.ndarray:
    """Rows per whole second of ``[t0_us, t1_us)`` (times relative to the stream origin)."""
    edges = np.arange(t0_us, t1_us + 1, US)
    return np.histogram(ts_us, bins=edges)[0]


class BurstyGenerator:
    """Superposed ON/OFF flows: Pareto ON (a = 1.4) / OFF (a = 1.2) periods, Poisson arrivals while ON.

    Within an ON period a flow sends a Poisson process (exponential inter-arrival times) at the
    rate that makes all flows together average ``rate`` rows/s. Flow f's periods come from a
    generator seeded (seed, 0, f); its arrivals in second k from one seeded (seed, 1, f, k).

    >>> g = BurstyGenerator(rate=50.0, flows=8, seed=3)
    >>> flow, ts = g.arrivals(0, 10 * US)
    >>> f2, t2 = g.arrivals(4 * US, 7 * US)   # a sub-range has exactly the same arrivals
    >>> bool(np.array_equal(t2, ts[(ts >= 4 * US) & (ts < 7 * US)]))
    True
    """

    def __init__(self, rate: float = 100.0, flows: int = 64, on_scale: float = 1.0, off_scale: float = 60.0, seed: int = 0):
        # Parameters are named as the source's options are.
        for name, value in (("rate", rate), ("onScale", on_scale), ("offScale", off_scale)):
            check_number(name, value, low=0, low_open=True, error=SourceError, where="bursty: ")
        check_number("flows", flows, low=1, integer=True, error=SourceError, where="bursty: ")
        self.rate, self.flows, self.seed = float(rate), flows, int(seed)
        self.on_scale, self.off_scale = float(on_scale), float(off_scale)
        self.on_rate = flow_on_rate(self.rate, flows, self.on_scale, self.off_scale)
        self._reset()

    def _reset(self) -> None:
        self._periods = [
            flow_periods(np.random.default_rng([self.seed, 0, f]), self.on_scale, off_scale=self.off_scale, stationary=True)
            for f in range(self.flows)
        ]
        self._on: list[list[tuple[float, float]]] = [[] for _ in range(self.flows)]  # ON periods, in order
        self._horizon = [-math.inf] * self.flows  # periods are known up to this time
        self._from = -math.inf  # ON periods ending before this were dropped

    def __getstate__(self) -> dict:  # the period cache and live generators stay on the driver
        return {k: getattr(self, k) for k in ("rate", "flows", "on_scale", "off_scale", "seed")}

    def __setstate__(self, state: dict) -> None:
        self.__init__(**state)

    def on_periods(self, t0: float, t1: float) -> list[list[tuple[float, float]]]:
        """Per flow, the ON periods (clipped) overlapping [t0, t1) seconds."""
        if t0 < self._from:  # asked for a range older than the pruned cache: walk again from 0
            self._reset()
        result = []
        for f in range(self.flows):
            while self._horizon[f] < t1:
                start, end, on = next(self._periods[f])
                self._horizon[f] = end
                if on:
                    self._on[f].append((start, end))
            result.append([(max(a, t0), min(b, t1)) for a, b in self._on[f] if b > t0 and a < t1])
        return result

    def prune(self, before: float) -> None:
        """Forget ON periods that end before ``before`` seconds (committed data)."""
        for f in range(self.flows):
            self._on[f] = [(a, b) for a, b in self._on[f] if b > before]
        self._from = max(self._from, before)

    def arrivals(self, t0_us: int, t1_us: int, on: list | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(flow, ts_us)`` of every arrival in [t0_us, t1_us), sorted by time."""
        k0, k1 = t0_us // US, -(-t1_us // US)
        if on is None:
            on = self.on_periods(float(k0), float(k1))
        return _bursty_arrivals(self.seed, self.on_rate, on, t0_us, t1_us)


def _bursty_arrivals(seed: int, on_rate: float, on: list, t0_us: int, t1_us: int) -> tuple[np.ndarray, np.ndarray]:
    k0, k1 = t0_us // US, -(-t1_us // US)
    flows, times = [], []
    for f, periods in enumerate(on):
        # split each ON period at whole seconds so second k's draws never depend on the range asked
        per_second: dict[int, list[tuple[float, float]]] = {}
        for a, b in periods:
            k = max(int(math.floor(a)), k0)
            while k < k1 and k < b:
                lo, hi = max(a, k), min(b, k + 1)
                if hi > lo:
                    per_second.setdefault(k, []).append((lo, hi))
                k += 1
        for k, pieces in per_second.items():
            rng = np.random.default_rng([seed, 1, f, k])
            for lo, hi in pieces:
                n = rng.poisson(on_rate * (hi - lo))
                if n:
                    times.append(np.floor(rng.uniform(lo, hi, n) * US).astype(np.int64))
                    flows.append(np.full(n, f, np.int64))
    return _select(flows, times, t0_us, t1_us)


def _select(flows: list, times: list, t0_us: int, t1_us: int) -> tuple[np.ndarray, np.ndarray]:
    if not times:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    flow, ts = np.concatenate(flows), np.concatenate(times)
    keep = (ts >= t0_us) & (ts < t1_us)
    flow, ts = flow[keep], ts[keep]
    order = np.lexsort((flow, ts))
    return flow[order], ts[order]


class PoissonGenerator:
    """Poisson arrivals whose mean is redrawn every ``period`` seconds, with occasional bursts.

    Period p's mean comes from a generator seeded (seed, 2, p) through ``shifted_rate`` (thesis
    §6.1); second k's arrivals from one seeded (seed, 3, k). ``rate`` is the long-run mean: the
    per-period base is rate / (1 + burst_probability·(burst_factor − 1)).

    >>> g = PoissonGenerator(rate=20.0, seed=1)
    >>> sensor, ts = g.arrivals(0, 3 * US)
    >>> len(ts) > 0, bool((np.diff(ts) >= 0).all())
    (True, True)
    """

    def __init__(
        self,
        rate: float = 100.0,
        sensors: int = 64,
        period: float = 5.0,
        spread: float = 0.3,
        burst_probability: float = 0.25,
        burst_factor: float = 2.0,
        seed: int = 0,
    ):
        # Parameters are named as the source's options are.
        where = "poisson: "
        for name, value in (("rate", rate), ("burstFactor", burst_factor), ("period", period)):
            check_number(name, value, low=0, low_open=True, error=SourceError, where=where)
        check_number("spread", spread, low=0, high=1, high_open=True, error=SourceError, where=where)
        check_number("burstProbability", burst_probability, low=0, high=1, error=SourceError, where=where)
        check_number("sensors", sensors, low=1, integer=True, error=SourceError, where=where)
        self.rate, self.sensors, self.period = float(rate), sensors, float(period)
        self.spread, self.burst_probability, self.burst_factor = spread, burst_probability, burst_factor
        self.seed = int(seed)
        self.base_rate = self.rate / (1 + burst_probability * (burst_factor - 1))

    def second_rate(self, k: int) -> float:
        """The Poisson mean in force during second ``k``."""
        p = int(math.floor(k / self.period + 1e-9))
        rng = np.random.default_rng([self.seed, 2, p])
        return shifted_rate(rng, self.base_rate, self.spread, self.burst_probability, self.burst_factor)

    def arrivals(self, t0_us: int, t1_us: int) -> tuple[np.ndarray, np.ndarray]:
        """``(sensor, ts_us)`` of every arrival in [t0_us, t1_us), sorted by time."""
        flows, times = [], []
        for k in range(t0_us // US, -(-t1_us // US)):
            rng = np.random.default_rng([self.seed, 3, k])
            n = rng.poisson(self.second_rate(k))
            if n:
                times.append(np.floor((k + rng.random(n)) * US).astype(np.int64))
                flows.append(rng.integers(0, self.sensors, n))
        return _select(flows, times, t0_us, t1_us)


# -- Spark plumbing shared by the synthetic sources ------------------------------------------------


#: (path, format, timestamp column) → ((mtime_ns, size), (table, trace µs, in time order)).
_TRACES: dict[tuple[str, str, str], tuple[tuple[int, int], tuple[pa.Table, np.ndarray, bool]]] = {}


class ReplayTrace:
    """A recorded file (CSV or Parquet) with a timestamp column, and its rows by trace-time range.

    Trace time of a row = its timestamp − the earliest timestamp (µs). The timestamp column is
    normalised to ``timestamp[us, tz=UTC]`` (naive times are taken as UTC); other columns are kept
    exactly. Rows of a range keep the file's order.
    """

    def __init__(self, path: str | os.PathLike, timestamp_column: str = "ts", format: str | None = None):
        self.path = str(path)
        self.timestamp_column = timestamp_column
        if format is None:
            ext = Path(self.path).suffix.lower()
            format = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}.get(ext)
            if format is None:
                raise SourceError(f"replay: cannot tell the format of {self.path!r} from its extension; set option format")
        check_choice("format", format, ("csv", "parquet"), error=SourceError, where="replay: ")
        if not Path(self.path).is_file():
            raise SourceError(f"replay: file {self.path!r} does not exist")
        self.format = format

    def table(self) -> pa.Table:
        """The whole file with its timestamp column normalised (read once per process while the
        file is unchanged: every trigger of a replay reads from it)."""
        return self._cached()[0]

    def _cached(self) -> tuple[pa.Table, np.ndarray, bool]:
        st = os.stat(self.path)
        key = (self.path, self.format, self.timestamp_column)
        stamp = (st.st_mtime_ns, st.st_size)
        hit = _TRACES.get(key)
        if hit is not None and hit[0] == stamp:
            return hit[1]
        table = self._read()
        trace = self.trace_us(table)
        ordered = bool(np.all(trace[1:] >= trace[:-1])) if len(trace) > 1 else True
        _TRACES.pop(key, None)
        while len(_TRACES) >= 4:  # a few traces per process; the oldest goes first
            _TRACES.pop(next(iter(_TRACES)))
        _TRACES[key] = (stamp, (table, trace, ordered))
        return table, trace, ordered

    def _read(self) -> pa.Table:
        if self.format == "csv":
            from pyarrow import csv

            table = csv.read_csv(
                self.path, convert_options=csv.ConvertOptions(column_types={self.timestamp_column: pa.timestamp("us")})
            )
        else:
            import pyarrow.parquet as pq

            table = pq.read_table(self.path)
        if self.timestamp_column not in table.column_names:
            raise SourceError(
                f"replay: {self.path!r} has no timestamp column {self.timestamp_column!r}; columns are {table.column_names}"
            )
        i = table.column_names.index(self.timestamp_column)
        col = table.column(i)
        if not pa.types.is_timestamp(col.type):
            raise SourceError(f"replay: column {self.timestamp_column!r} must hold timestamps, got {col.type} in {self.path!r}")
        if col.null_count:
            raise SourceError(f"replay: column {self.timestamp_column!r} has {col.null_count} null timestamps")
        if col.type.tz is None:
            col = pc.assume_timezone(col, "UTC")
        col = col.cast(TS_TYPE)
        return table.set_column(i, pa.field(self.timestamp_column, TS_TYPE), col)

    def schema(self) -> pa.Schema:
        return self.table().schema

    def trace_us(self, table: pa.Table | None = None) -> np.ndarray:
        """Trace time (µs since the earliest timestamp) of every row of ``table`` (default: the file)."""
        if table is None:
            return self._cached()[1]
        ts = table.column(self.timestamp_column).cast(pa.int64()).to_numpy()
        return ts - ts.min() if len(ts) else ts

    def rows(self, t0_us: int, t1_us: int) -> pa.Table:
        """Rows with trace time in [t0_us, t1_us), in file order."""
        return self.range(t0_us, t1_us)[0]

    def range(self, t0_us: int, t1_us: int) -> tuple[pa.Table, np.ndarray]:
        """Rows with trace time in [t0_us, t1_us), in file order, and their trace times. A file in
        time order is sliced (binary search), any other is filtered."""
        table, trace, ordered = self._cached()
        if ordered:
            lo, hi = np.searchsorted(trace, [t0_us, t1_us], side="left")
            return table.slice(int(lo), int(hi - lo)), trace[lo:hi]
        keep = (trace >= t0_us) & (trace < t1_us)
        return table.filter(pa.array(keep)), trace[keep]
