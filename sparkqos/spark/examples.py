"""The sensor-network queries as PySpark transforms: what the main job, the FAIR-pools benchmark
and the throughput benchmark run (the same four queries as :func:`sparkqos.examples.sensor_queries`,
written as ordinary PySpark code).

* ``fire`` (class H): hot and dry readings;
* ``anomaly`` (class C): readings out of their usual range through a costly step;
* ``zone_stats`` (class N): per-zone count / mean temperature / max humidity per event-time window;
* ``archive`` (class N): every reading through a costly step, for logging.

The costly steps are the papers' synthetic operator (:func:`sparkqos.synthetic`): declared
``work_us`` µs of CPU per row when sparkqos runs them, a plain hash filter on Spark.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sparkqos.errors import check_number
from sparkqos.examples import SENSOR_CLASSES
from sparkqos.spark.synthetic import synthetic

__all__ = ["SENSOR_CLASSES", "SENSOR_QUERY_CLASSES", "sensor_transforms"]

#: The class of each sensor query.
SENSOR_QUERY_CLASSES = {"fire": "H", "anomaly": "C", "zone_stats": "N", "archive": "N"}

_READING = ("sensor_id", "location", "temperature", "humidity", "ts")


def sensor_transforms(
    work_us: float = 20.0, window_s: float = 10.0, watermark_s: float = 2.0
) -> dict[str, Callable[[DataFrame], DataFrame]]:
    """The four sensor queries over a DataFrame of sensor readings (``sparkqos.bursty``'s sensor
    payload: sensor_id, location, temperature, humidity, ts); ``work_us`` µs of declared CPU per
    row for the costly steps, ``window_s``-second zone windows closed ``watermark_s`` seconds
    after their end."""
    check_number("work_us", work_us, low=0)
    check_number("window_s", window_s, low=0, low_open=True)
    check_number("watermark_s", watermark_s, low=0)
    cost_s = work_us * 1e-6

    def fire(df: DataFrame) -> DataFrame:
        return df.where((F.col("temperature") > 55) & (F.col("humidity") < 25)).select(*_READING)

    def anomaly(df: DataFrame) -> DataFrame:
        unusual = df.where((F.col("temperature") > 29.0) | (F.col("humidity") > 71.0))
        return synthetic(unusual, 0.5, cost_s=cost_s, seed=11, key="sensor_id").select(*_READING)

    def zone_stats(df: DataFrame) -> DataFrame:
        return (
            df.withWatermark("ts", f"{watermark_s:g} seconds")
            .groupBy(F.window("ts", f"{window_s:g} seconds"), "location")
            .agg(
                F.count(F.lit(1)).alias("count"),
                F.avg("temperature").alias("avg_temperature"),
                F.max("humidity").alias("max_humidity"),
            )
        )

    def archive(df: DataFrame) -> DataFrame:
        return synthetic(df, 1.0, cost_s=cost_s, seed=12, key="sensor_id").select(*_READING)

    return {"fire": fire, "anomaly": anomaly, "zone_stats": zone_stats, "archive": archive}
