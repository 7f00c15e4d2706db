"""The Spark data sources (Python Data Source API): ``sparkqos.bursty``, ``sparkqos.poisson``,
``sparkqos.replay``. The generators behind them (``sparkqos.sources.generators``) are Spark-free.

Sources start at the query's start: with no ``start`` option, a finite speed and a
processing-time trigger, stream time does not run while Spark starts the query. Otherwise the
first batch that reads rows would pay for Spark's start-up (its job, its Python workers, the
foreachBatch callback: seconds), and the stream time it covered would land in the next trigger
as one large, old batch (docs/benchmarks.md has the figures). So such an offset
carries a ``phase``:
``warmup`` (from ``initialOffset``) → ``ready`` (batch 0: one read task with no rows; Spark starts
up on it) → ``started`` (batch 1, no rows: the origin is re-anchored at the wall clock of that
``latestOffset`` call, keeping the stream time reached) → normal batches. The phases live in the
offsets, so a restart from a checkpoint taken before ``started`` warms up again and one taken
after it continues as before. ``warmup=false`` keeps the stream anchored at ``initialOffset``.

Reading on the driver (``numPartitions`` 1, the default): a micro-batch's rows are read when Spark
plans its offset, by the source's own Python process, and reach the JVM as Arrow with that offset
(Spark's path for a ``SimpleDataSourceStreamReader``): no read task and no Python worker per
micro-batch, which makes ``toArrow()`` of a batch and Spark's part of a trigger cheaper (figures
in docs/ARCHITECTURE.md). A batch replayed after a restart, whose rows are no longer held,
is read by a task. With ``numPartitions`` > 1 the rows are read by that many tasks.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
from pyspark.errors import PySparkNotImplementedError
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition, SimpleDataSourceStreamReader
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from sparkqos.errors import SourceError
from sparkqos.sim.arrivals import flow_on_rate
from sparkqos.sources.generators import (
    _COMMON,
    PAYLOADS,
    TS_TYPE,
    US,
    BurstyGenerator,
    PoissonGenerator,
    ReplayTrace,
    _bursty_arrivals,
    _now_us,
    _Options,
    payload_table,
)
from sparkqos.sources.pyenv import check_python_workers


def register(spark) -> None:
    """Register ``sparkqos.bursty``, ``sparkqos.poisson`` and ``sparkqos.replay`` on ``spark``,
    after checking that Spark's Python workers can run them (:func:`~sparkqos.sources.pyenv.check_python_workers`:
    for a local master it points them at the driver's Python, else it says what to set)."""
    check_python_workers(spark)
    for source in (BurstySource, PoissonSource, ReplaySource):
        spark.dataSource.register(source)


# -- option parsing --------------------------------------------------------------------------------


#: Offset phases while the query starts (see the module docstring), in order.
WARMUP, READY, STARTED = "warmup", "ready", "started"

#: Rows one micro-batch takes at most unless ``maxRowsPerTrigger`` says otherwise (0: no limit).
#: After downtime the stream time missed is read in batches of at most this many rows, so a
#: resumed query catches up at a bounded rate instead of taking the whole gap at once.
MAX_ROWS_PER_TRIGGER = 100_000


class _TimeReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets ``{"origin_us", "t_us", "seed"}`` (plus ``phase`` while warming up, see the module
    docstring); available stream time follows the wall clock."""

    speed = 1.0

    def __init__(self, opts: _Options):
        self.warmup = opts.boolean("warmup", True)
        self.start_us = opts.timestamp_us("start")
        duration = opts.number("duration", None)
        self.duration_us = None if duration is None else int(round(duration * US))
        cap = opts.number("maxSecondsPerTrigger", None)
        self.cap_us = None if cap is None else max(1, int(round(cap * US)))
        self.max_rows = opts.integer("maxRowsPerTrigger", MAX_ROWS_PER_TRIGGER, low=0) or None
        self.clock_offset_us = int(round((opts.number("clockOffset", 0.0, low=None)) * US))
        self.partitions_n = opts.integer("numPartitions", 1)
        seed = opts.integer("seed", None, low=0)
        self.seed = seed
        self._target_wall_us: int | None = None

    def _now_us(self) -> int:
        """The wall clock as this source sees it (``clockOffset`` seconds added: simulated downtime in tests)."""
        return _now_us() + self.clock_offset_us

    def getDefaultReadLimit(self) -> ReadLimit:
        """``maxRowsPerTrigger`` (default :data:`MAX_ROWS_PER_TRIGGER`) as Spark's admission control spells it."""
        return ReadAllAvailable() if self.max_rows is None else ReadMaxRows(self.max_rows)

    def initialOffset(self) -> dict:
        origin = self.start_us if self.start_us is not None else self._now_us()
        seed = self.seed if self.seed is not None else secrets.randbelow(2**31)
        offset = {"origin_us": origin, "t_us": 0, "seed": seed}
        if self.warmup and self.start_us is None:
            offset["phase"] = WARMUP
        return offset

    def prepareForTriggerAvailableNow(self) -> None:
        self._target_wall_us = self._now_us()

    def _end_us(self, start: dict) -> int | None:
        """Stream time where the stream ends (None: endless)."""
        return self.duration_us

    def latestOffset(self, start: dict, limit: ReadLimit | None = None) -> dict:
        # The engine may pass ReadAllAvailable; maxSecondsPerTrigger is the user's explicit cap and
        # still applies (under availableNow the query then takes several batches to the target).
        # ``limit`` None (the simple reader's own call) means this reader's default read limit.
        phase = start.get("phase", STARTED)
        if phase != STARTED and self._target_wall_us is None and not math.isinf(self.speed):
            if phase == WARMUP:  # an empty batch: Spark starts its job, workers and callback on it
                return {**start, "phase": READY}
            # Spark is up: stream time runs from now on, from where it stands (an empty batch).
            origin = self._now_us() - int(start["t_us"] / self.speed)
            return {**start, "origin_us": origin, "phase": STARTED}
        wall = self._now_us() if self._target_wall_us is None else self._target_wall_us
        end = self._end_us(start)
        if math.isinf(self.speed):
            t = end
        else:
            t = int(self.speed * (wall - start["origin_us"]))
            if end is not None:
                t = min(t, end)
        if self.cap_us is not None:
            t = min(t, start["t_us"] + self.cap_us)
        max_rows = self.max_rows if limit is None else getattr(limit, "max_rows", None)
        if max_rows is not None and t > start["t_us"]:
            t = self._row_cut(start, t, max_rows)
        return {**start, "t_us": max(start["t_us"], t)}

    def _row_cut(self, start: dict, t_us: int, max_rows: int) -> int:
        """The end of the longest range [start, end) up to ``t_us`` with at most ``max_rows`` rows.
        Rows are counted on their timestamps only (:meth:`_arrival_us`), over a window of about
        twice the stream time ``max_rows`` rows take at the mean rate, so planning costs the same
        however far behind the stream is."""
        t0 = start["t_us"]
        window = self._window_us(max_rows)
        end = t_us if window is None else min(t_us, t0 + window)
        ts = self._arrival_us(start, t0, end)
        return end if len(ts) <= max_rows else int(ts[max_rows])

    def _window_us(self, max_rows: int) -> int | None:
        """Stream time that holds about ``2 * max_rows`` rows at the mean rate (None: no bound)."""
        rate = self.mean_rate()
        return None if rate is None else max(US, int(2 * max_rows / rate * US))

    def mean_rate(self) -> float | None:
        """Mean rows per second of stream time, when the source has one (a recorded trace has none)."""
        return None

    def _arrival_us(self, start: dict, t0: int, t1: int) -> np.ndarray:
        """Stream times (µs, sorted) of the rows in [t0, t1)."""
        raise NotImplementedError

    def _slices(self, start: dict, end: dict) -> list[tuple[int, int]]:
        t0, t1 = start["t_us"], end["t_us"]
        if end.get("phase") == READY:
            return [(t0, t0)]  # the warm-up batch: one read task with no rows starts Spark's Python workers
        if t1 <= t0:
            return []
        n = max(1, min(self.partitions_n, t1 - t0))
        cuts = [t0 + (t1 - t0) * i // n for i in range(n + 1)]
        return [(cuts[i], cuts[i + 1]) for i in range(n) if cuts[i + 1] > cuts[i]]

    def commit(self, end: dict) -> None:
        pass


class _Prefetch(SimpleDataSourceStreamReader, SupportsTriggerAvailableNow):
    """A :class:`_TimeReader` as a simple reader (read on the driver, module docstring):
    ``read(start)`` plans the next offset and reads its rows, as Arrow record batches, which
    Spark's stream runner takes as they are."""

    def __init__(self, reader: _TimeReader):
        self.reader = reader

    def initialOffset(self) -> dict:
        return self.reader.initialOffset()

    def prepareForTriggerAvailableNow(self) -> None:
        self.reader.prepareForTriggerAvailableNow()

    def _batches(self, start: dict, end: dict) -> list[pa.RecordBatch]:
        return [b for p in self.reader.partitions(start, end) for b in self.reader.read(p) if b.num_rows]

    def read(self, start: dict):
        end = self.reader.latestOffset(start, None)
        return iter(self._batches(start, end)), end

    def readBetweenOffsets(self, start: dict, end: dict):
        return iter(self._batches(start, end))

    def commit(self, end: dict) -> None:
        self.reader.commit(end)


class _TimeSource(DataSource):
    """A source of a :class:`_TimeReader`: read on the driver with one partition (the default),
    else by ``numPartitions`` tasks."""

    def _reader(self) -> _TimeReader:
        raise NotImplementedError

    def streamReader(self, schema) -> DataSourceStreamReader:
        reader = self._reader()
        if reader.partitions_n == 1:  # Spark then asks simpleStreamReader()
            raise PySparkNotImplementedError(errorClass="NOT_IMPLEMENTED", messageParameters={"feature": "streamReader"})
        return reader

    def simpleStreamReader(self, schema) -> SimpleDataSourceStreamReader:
        return _Prefetch(self._reader())


class _BurstyReader(_TimeReader):
    def __init__(self, opts: _Options):
        super().__init__(opts)
        self.rate = opts.number("rate", 100.0)
        self.flows = opts.integer("flows", 64)
        self.on_scale = opts.number("onScale", 1.0)
        self.off_scale = opts.number("offScale", 60.0)
        self.payload = opts.choice("payload", "sensor", tuple(PAYLOADS))
        self.zones = opts.integer("zones", 8)
        BurstyGenerator(self.rate, self.flows, self.on_scale, self.off_scale)  # validate now, on the driver
        self._generators: dict[int, BurstyGenerator] = {}

    def __getstate__(self) -> dict:  # workers need the options, not the driver's period caches
        return {k: v for k, v in self.__dict__.items() if k != "_generators"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._generators = {}

    def _generator(self, seed: int) -> BurstyGenerator:
        if seed not in self._generators:
            self._generators[seed] = BurstyGenerator(self.rate, self.flows, self.on_scale, self.off_scale, seed)
        return self._generators[seed]

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        gen = self._generator(start["seed"])
        parts = []
        for t0, t1 in self._slices(start, end):
            on = gen.on_periods(float(t0 // US), float(-(-t1 // US)))
            parts.append(InputPartition({"t0": t0, "t1": t1, "origin": start["origin_us"], "seed": start["seed"], "on": on}))
        return parts

    def commit(self, end: dict) -> None:
        if end["seed"] in self._generators:
            self._generators[end["seed"]].prune(end["t_us"] // US - 1)

    def mean_rate(self) -> float | None:
        return self.rate

    def _arrival_us(self, start: dict, t0: int, t1: int) -> np.ndarray:
        return self._generator(start["seed"]).arrivals(t0, t1)[1]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        p = partition.value
        on_rate = flow_on_rate(self.rate, self.flows, self.on_scale, self.off_scale)
        flow, ts = _bursty_arrivals(p["seed"], on_rate, p["on"], p["t0"], p["t1"])
        table = payload_table(self.payload, p["seed"], flow, ts + p["origin"], self.zones)
        yield from table.to_batches()


class _PoissonReader(_TimeReader):
    def __init__(self, opts: _Options):
        super().__init__(opts)
        self.params = {
            "rate": opts.number("rate", 100.0),
            "sensors": opts.integer("sensors", 64),
            "period": opts.number("period", 5.0),
            "spread": opts.number("spread", 0.3, strict=False),
            "burst_probability": opts.number("burstProbability", 0.25, strict=False),
            "burst_factor": opts.number("burstFactor", 2.0),
        }
        self.payload = opts.choice("payload", "sensor", tuple(PAYLOADS))
        self.zones = opts.integer("zones", 8)
        PoissonGenerator(**self.params)  # validate now, on the driver

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return [
            InputPartition({"t0": t0, "t1": t1, "origin": start["origin_us"], "seed": start["seed"]})
            for t0, t1 in self._slices(start, end)
        ]

    def mean_rate(self) -> float | None:
        return self.params["rate"]

    def _arrival_us(self, start: dict, t0: int, t1: int) -> np.ndarray:
        return PoissonGenerator(**self.params, seed=start["seed"]).arrivals(t0, t1)[1]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        p = partition.value
        sensor, ts = PoissonGenerator(**self.params, seed=p["seed"]).arrivals(p["t0"], p["t1"])
        yield from payload_table(self.payload, p["seed"], sensor, ts + p["origin"], self.zones).to_batches()


def _spark_schema(schema: pa.Schema):
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)


class BurstySource(_TimeSource):
    """``spark.readStream.format("sparkqos.bursty")``: self-similar ON/OFF traffic (Jiang §5.1)."""

    _known = _COMMON | {"flows", "onScale", "offScale"}

    @classmethod
    def name(cls) -> str:
        return "sparkqos.bursty"

    def _opts(self) -> _Options:
        return _Options(self.name(), self.options, self._known)

    def schema(self):
        return _spark_schema(PAYLOADS[self._opts().choice("payload", "sensor", tuple(PAYLOADS))])

    def _reader(self) -> _TimeReader:
        return _BurstyReader(self._opts())


class PoissonSource(BurstySource):
    """``spark.readStream.format("sparkqos.poisson")``: Poisson with a shifting mean (thesis §6.1)."""

    _known = _COMMON | {"sensors", "period", "spread", "burstProbability", "burstFactor"}

    @classmethod
    def name(cls) -> str:
        return "sparkqos.poisson"

    def _reader(self) -> _TimeReader:
        return _PoissonReader(self._opts())


# -- replay ----------------------------------------------------------------------------------------


class _ReplayReader(_TimeReader):
    def __init__(self, opts: _Options):
        super().__init__(opts)
        path = opts.string("path")
        if not path:
            raise SourceError("replay: option path (the recorded CSV or Parquet file) is required")
        self.trace = ReplayTrace(path, opts.string("timestampColumn", "ts"), opts.string("format"))
        speed = opts.string("speed", "1")
        if speed.lower() in ("max", "inf"):
            self.speed = math.inf
        else:
            self.speed = opts.number("speed", 1.0)
        self.retime = opts.boolean("retime", False)
        trace = self.trace.trace_us()
        self.duration_us = int(trace.max()) + 1 if len(trace) else 0

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return [InputPartition({"t0": t0, "t1": t1, "origin": start["origin_us"]}) for t0, t1 in self._slices(start, end)]

    def _arrival_us(self, start: dict, t0: int, t1: int) -> np.ndarray:
        return np.sort(self.trace.range(t0, t1)[1])

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        p = partition.value
        rows, offsets = self.trace.range(p["t0"], p["t1"])
        if self.retime:  # the row's timestamp becomes the moment the replay released it
            if math.isinf(self.speed):
                at = np.full(rows.num_rows, p["origin"], np.int64)
            else:
                at = p["origin"] + np.floor(offsets / self.speed).astype(np.int64)
            i = rows.column_names.index(self.trace.timestamp_column)
            rows = rows.set_column(i, rows.schema.field(i), pa.array(at, pa.int64()).cast(TS_TYPE))
        yield from rows.to_batches()


class ReplaySource(_TimeSource):
    """``spark.readStream.format("sparkqos.replay").option("path", ...)``: a recorded trace at its own pace or scaled."""

    _known = {
        "path",
        "format",
        "timestampColumn",
        "speed",
        "retime",
        "start",
        "maxSecondsPerTrigger",
        "maxRowsPerTrigger",
        "clockOffset",
        "numPartitions",
        "warmup",
    }

    @classmethod
    def name(cls) -> str:
        return "sparkqos.replay"

    def _opts(self) -> _Options:
        return _Options(self.name(), self.options, self._known)

    def schema(self):
        opts = self._opts()
        path = opts.string("path")
        if not path:
            raise SourceError("replay: option path (the recorded CSV or Parquet file) is required")
        return _spark_schema(ReplayTrace(path, opts.string("timestampColumn", "ts"), opts.string("format")).schema())

    def _reader(self) -> _TimeReader:
        return _ReplayReader(self._opts())
