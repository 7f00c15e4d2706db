"""The sensor-network queries as PySpark transforms: what the main job, the FAIR-pools benchmark
and the throughput benchmark run.

* ``fire`` (class H): hot and dry readings;
* ``anomaly`` (class C): every reading scored by a model of normal readings
  (:class:`sparkqos.workloads.sensors.ReadingModel`, a kernel density estimate scored with numpy in a
  pandas UDF); the readings it finds unlikely, with their score;
* ``zone_stats`` (class N): per-zone count / mean temperature / max humidity per event-time window;
* ``archive`` (class N): every reading keyed by a hash of its sensor id (``sha2``, computed
  natively, bit-exact with Spark), enriched from a static sensor registry (a stream–static join:
  site, and the sensor's calibration offset applied) and encoded as a JSON record by a pandas
  UDF, for logging.

The two costly steps cost what their work costs: the model's grows with its reference sample
(``model_size``), the archive's is a join and an encoding. (The papers' synthetic operator of
declared cost, :func:`sparkqos.synthetic`, is for the experiments; the builder-level
:func:`sparkqos.workloads.sensors.sensor_queries` keeps it for the executor's own tests and benchmarks.)
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from sparkqos.errors import check_number
from sparkqos.executor.threadsafe import thread_safe
from sparkqos.workloads.sensors import SENSOR_CLASSES, ReadingModel

__all__ = ["SENSOR_CLASSES", "SENSOR_QUERY_CLASSES", "SENSORS", "sensor_registry", "sensor_transforms"]

#: The class of each sensor query.
SENSOR_QUERY_CLASSES = {"fire": "H", "anomaly": "C", "zone_stats": "N", "archive": "N"}
#: Sensors in the registry (the bursty source's flows are sensor ids 0..63).
SENSORS = 64

_READING = ("sensor_id", "location", "temperature", "humidity", "ts")
_SITES = ("north-wing", "south-wing", "plant-room", "loading-dock", "roof")


def sensor_registry(spark: SparkSession, sensors: int = SENSORS) -> DataFrame:
    """The static table ``sensor_id int, site string, offset double`` the archive is enriched from:
    each sensor's site and the calibration offset (°C) its readings need. Ids past ``sensors``
    are unknown to the registry (the archive keeps their readings, with null site)."""
    rows = [(i, _SITES[i * 7 % len(_SITES)], round(((i * 37) % 21 - 10) / 20.0, 2)) for i in range(sensors)]
    return spark.createDataFrame(rows, "sensor_id int, site string, offset double")


def _scorer(model: ReadingModel):
    """The pandas UDF scoring readings with ``model`` (its reference sample travels with it)."""
    from pyspark.sql.functions import pandas_udf

    def score(temperature, humidity):  # pandas Series in, Series out
        import pandas as pd

        return pd.Series(
            model.score(temperature.to_numpy(float, na_value=float("nan")), humidity.to_numpy(float, na_value=float("nan")))
        )

    return pandas_udf(thread_safe(score), "double")  # numpy on its arguments and a read-only model


def _encoder():
    """The pandas UDF encoding an enriched reading as one JSON record."""
    from pyspark.sql.functions import pandas_udf

    def encode(sensor_id, site, location, calibrated, humidity, ts):  # pandas Series in, Series out
        import pandas as pd

        frame = pd.DataFrame({"sensor": sensor_id, "site": site, "zone": location, "temp_c": calibrated, "rh": humidity, "t": ts})
        lines = frame.to_json(orient="records", lines=True, double_precision=6)
        return pd.Series(lines.splitlines() if len(frame) else [], dtype=object)

    return pandas_udf(thread_safe(encode), "string")  # a pandas frame of its own arguments


def sensor_transforms(
    model_size: int = 2048, window_s: float = 10.0, watermark_s: float = 2.0
) -> dict[str, Callable[[DataFrame], DataFrame]]:
    """The four sensor queries over a DataFrame of sensor readings (``sparkqos.bursty``'s sensor
    payload: sensor_id, location, temperature, humidity, ts); an anomaly model fitted on
    ``model_size`` reference readings; ``window_s``-second zone windows closed ``watermark_s``
    seconds after their end."""
    check_number("model_size", model_size, integer=True, low=16)
    check_number("window_s", window_s, low=0, low_open=True)
    check_number("watermark_s", watermark_s, low=0)
    model = ReadingModel(reference=model_size)
    score = _scorer(model)
    encode = _encoder()

    def fire(df: DataFrame) -> DataFrame:
        return df.where((F.col("temperature") > 55) & (F.col("humidity") < 25)).select(*_READING)

    def anomaly(df: DataFrame) -> DataFrame:
        scored = df.withColumn("score", score("temperature", "humidity"))
        return scored.where(F.col("score") > F.lit(model.threshold)).select(*_READING, "score")

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
        # each logged record carries a hash of its sensor id, the key log readers join on
        keyed = df.withColumn("sensor_key", F.sha2(F.col("sensor_id").cast("string"), 256))
        enriched = keyed.join(sensor_registry(df.sparkSession), on="sensor_id", how="left").withColumn(
            "calibrated", F.col("temperature") + F.coalesce(F.col("offset"), F.lit(0.0))
        )
        record = encode("sensor_id", "site", "location", "calibrated", "humidity", F.col("ts").cast("double"))
        return enriched.select(*_READING, "sensor_key", "site", record.alias("record"))

    return {"fire": fire, "anomaly": anomaly, "zone_stats": zone_stats, "archive": archive}
