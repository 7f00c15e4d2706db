"""The sensor-network query set used by the main job, the experiments and the benchmarks.

Over one stream of sensor readings (the ``sparkqos.bursty`` source's sensor payload):

* ``fire`` (class H): hot and dry readings — the critical query;
* ``anomaly`` (class C): readings out of their usual range, scored by a costly model;
* ``zone_stats`` (class N): per-zone count / mean temperature / max humidity per 10 s window;
* ``archive`` (class N): every reading enriched for logging (costly, keeps everything).

``work_us`` scales the declared per-row CPU work of the two costly steps (synthetic operators,
docs/ARCHITECTURE.md "Operators in the executor"), so the same plan can run near capacity on any machine.

>>> qs = sensor_queries()
>>> sorted(q.klass for q in qs.build().plan.queries.values())
['C', 'H', 'N', 'N']
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sparkqos.compile.builder import QuerySet
from sparkqos.errors import check_number
from sparkqos.executor.expressions import avg, col, count, max_

#: Class priorities (CQC's 6/3/1).
SENSOR_CLASSES = {"H": 6.0, "C": 3.0, "N": 1.0}

#: The plan's view of a sensor reading: event time as float seconds since the epoch.
SENSOR_SCHEMA = pa.schema(
    [
        ("sensor_id", pa.int32()),
        ("location", pa.string()),
        ("temperature", pa.float64()),
        ("humidity", pa.float64()),
        ("ts", pa.float64()),
    ]
)


def sensor_queries(work_us: float = 20.0, window_s: float = 10.0, classes: dict[str, float] | None = None) -> QuerySet:
    """The four sensor queries; ``work_us`` µs of declared work per row for the costly steps."""
    check_number("work_us", work_us, low=0)
    qs = QuerySet(classes=classes or SENSOR_CLASSES)
    s = qs.stream("sensors", SENSOR_SCHEMA)
    (
        s.where((col("temperature") > 55) & (col("humidity") < 25))
        .select("sensor_id", "location", "temperature", "humidity", "ts")
        .sink("fire", klass="H")
    )
    (
        s.where((col("temperature") > 29.0) | (col("humidity") > 71.0))
        .synthetic(selectivity=0.5, cost_s=work_us * 1e-6, seed=11)
        .select("sensor_id", "location", "temperature", "humidity", "ts")
        .sink("anomaly", klass="C")
    )
    (
        s.window_agg("location", [count(), avg("temperature"), max_("humidity")], time_col="ts", size=window_s).sink(
            "zone_stats", klass="N"
        )
    )
    (
        s.synthetic(selectivity=1.0, cost_s=work_us * 1e-6, seed=12)
        .select("sensor_id", "location", "temperature", "humidity", "ts")
        .sink("archive", klass="N")
    )
    return qs


class ReadingModel:
    """The main job's anomaly model: a kernel density estimate of normal sensor readings.

    It is fitted once, from ``reference`` normal readings of the sensor source's own payload
    (seeded, fires left out): features are temperature and humidity scaled by their standard
    deviations, the kernel a Gaussian with Scott's bandwidth (``n^(-1/6)`` in two dimensions).
    A reading's score is minus the log of its density; a reading is anomalous when its score is
    above the ``quantile`` of the scores of a second, held-out normal sample. Scoring costs
    about ``8 × reference`` floating-point operations per reading, all in numpy (which releases
    the GIL), so the step's cost comes from the work itself: double ``reference``, double it.

    >>> m = ReadingModel(reference=512)
    >>> bool(m.score(np.array([75.0]), np.array([12.0]))[0] > m.threshold)
    True
    """

    #: Rows scored per numpy pass: the two work arrays (rows × reference doubles each, 512 KiB at
    #: the job's 2048) stay in a core's L2 cache from one pass to the next.
    CHUNK_ROWS = 32

    def __init__(self, reference: int = 4096, quantile: float = 0.995, seed: int = 101):
        check_number("reference", reference, integer=True, low=16)
        check_number("quantile", quantile, low=0, high=1, low_open=True, high_open=True)
        sample = self._normal_readings(2 * reference, seed)
        self.scale = sample.std(axis=0)
        fit, held_out = sample[:reference], sample[reference:]
        self.centers = np.ascontiguousarray((fit / self.scale).T)  # 2 × reference
        self.bandwidth = reference ** (-1.0 / 6.0)
        self.threshold = float(np.quantile(self.score(held_out[:, 0], held_out[:, 1]), quantile))

    @staticmethod
    def _normal_readings(n: int, seed: int) -> np.ndarray:
        from sparkqos.sources.generators import payload_table

        flows = np.arange(n, dtype=np.int64) % 64
        t = payload_table("sensor", seed, flows, np.arange(n, dtype=np.int64) * 1000)
        readings = np.column_stack([t.column("temperature").to_numpy(), t.column("humidity").to_numpy()])
        return readings[readings[:, 0] < 55.0]  # leave the fires out: the model learns normal readings

    def score(self, temperature: np.ndarray, humidity: np.ndarray) -> np.ndarray:
        """Minus the log density of each reading (NaN where either value is missing or NaN).

        Per reading and reference point: the squared scaled distance ``dt² + dh²``, times
        ``-1 / (2 bandwidth²)``, its ``exp``; summed per reading. Every pass writes into one of two
        work arrays allocated once per call (no temporaries), so a pass reads what the one before
        left in the cache."""
        t = np.asarray(temperature, dtype=np.float64) / self.scale[0]
        h = np.asarray(humidity, dtype=np.float64) / self.scale[1]
        n = t.shape[0]
        out = np.empty(n)
        ct, ch = self.centers
        k = -0.5 / (self.bandwidth * self.bandwidth)
        d2 = np.empty((min(self.CHUNK_ROWS, n), ct.shape[0]))
        dh = np.empty_like(d2)
        for lo in range(0, n, self.CHUNK_ROWS):
            hi = min(lo + self.CHUNK_ROWS, n)
            a, b = d2[: hi - lo], dh[: hi - lo]
            np.subtract(t[lo:hi, None], ct, out=a)
            a *= a
            np.subtract(h[lo:hi, None], ch, out=b)
            b *= b
            a += b
            a *= k
            np.exp(a, out=a)
            with np.errstate(divide="ignore"):
                out[lo:hi] = -np.log(np.add.reduce(a, axis=1) / ct.shape[0])
        return out


def sensor_trace(
    path, rows: int, seconds: float, seed: int, fire_probability: float = 0.002, temperature_spread: float = 12.0
) -> pa.Table:
    """Write (and return) a recorded sensor trace for the ``sparkqos.replay`` source: ``rows``
    readings spread uniformly over ``seconds`` of event time, a ``fire_probability`` share of them
    hot and dry, the rest at 18 °C + U(0, ``temperature_spread``)."""
    rng = np.random.default_rng(seed)
    ts = 1_700_000_000_000_000 + np.sort(rng.integers(0, int(seconds * 1e6), rows))
    fire = rng.random(rows) < fire_probability
    table = pa.table(
        {
            "sensor_id": pa.array(rng.integers(0, 64, rows), pa.int32()),
            "location": pa.array(np.array([f"zone-{i}" for i in range(8)])[rng.integers(0, 8, rows)]),
            "temperature": pa.array(
                np.where(fire, 60 + 30 * rng.random(rows), 18 + temperature_spread * rng.random(rows)).round(2)
            ),
            "humidity": pa.array(np.where(fire, 10 + 10 * rng.random(rows), 40 + 34 * rng.random(rows)).round(2)),
            "ts": pa.array(ts.astype("int64"), pa.timestamp("us", tz="UTC")),
        }
    )
    pq.write_table(table, path)
    return table


def sensor_trace_files(folder, rows: int, files: int, rows_per_s: float, seed: int, fire_probability: float = 0.05) -> int:
    """A :func:`sensor_trace` of ``rows`` readings at ``rows_per_s`` of event time, written as
    ``files`` Parquet files of consecutive rows in the new folder ``folder`` (a file source reading
    one per micro-batch replays it in order); the rows written."""
    folder = Path(folder)
    folder.mkdir(parents=True)
    whole = folder.parent / f"{folder.name}-whole.parquet"
    table = sensor_trace(whole, rows, seconds=rows / rows_per_s, seed=seed, fire_probability=fire_probability)
    whole.unlink()
    step = -(-rows // files)
    for i in range(files):
        pq.write_table(table.slice(i * step, step), folder / f"part-{i:05d}.parquet")
    return table.num_rows
