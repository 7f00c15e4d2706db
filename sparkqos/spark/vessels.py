"""The vessel-tracking queries of jobs/vessel_monitor.py (issue 16), as ordinary PySpark transforms.

They read AIS position reports (``mmsi, ts, lon, lat, track, point``: the recorded trace of
:mod:`sparkqos.sources.ais`, replayed by ``sparkqos.replay``):

* ``geofence`` (class H): reports inside a restricted zone (:data:`RESTRICTED_ZONES`, boxes around
  naval stations), each with its zone's name — alert rows;
* ``speeding`` (class C): a vessel's speed over ground from its previous report (``lag`` over the
  vessel's reports in time order: per-key state across batches) above :data:`SPEED_LIMIT_KNOTS` —
  position jumps no ship makes; the distance is a haversine in a numpy pandas UDF;
* ``loitering`` (class C): vessels with at least :data:`LOITER_MIN_REPORTS` reports in a
  ``loiter_min``-minute event-time window that stayed inside a box of :data:`LOITER_BOX_DEG`;
* ``area_counts`` (class N): reports per one-degree cell per ``window_min``-minute window;
* ``archive`` (class N): every report enriched with its flag state, joined from a static table of
  the MMSI's Maritime Identification Digits (:data:`FLAG_STATES`; a stream–static left join).

Times: the replay moves recorded timestamps to the wall clock, compressed ``time_scale`` times
(the replay's ``speed``), so windows and speeds are written in recorded minutes and knots and
scaled here; ``time_scale=1`` is for the recorded timestamps themselves (``sparkqos.run`` on the
trace, and Spark's own run of the same transforms).
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from sparkqos.errors import check_number

__all__ = [
    "FLAG_STATES",
    "RESTRICTED_ZONES",
    "VESSEL_PRIORITIES",
    "VESSEL_QUERY_CLASSES",
    "flag_table",
    "vessel_transforms",
]

#: The class of each vessel query, and the classes' priorities (CQC's weights).
VESSEL_QUERY_CLASSES = {"geofence": "H", "speeding": "C", "loitering": "C", "area_counts": "N", "archive": "N"}
VESSEL_PRIORITIES = {"H": 6, "C": 3, "N": 1}

#: Restricted zones: name → (south, north, west, east) in degrees, boxes around naval stations.
RESTRICTED_ZONES = {
    "norfolk_naval_station": (36.93, 36.97, -76.34, -76.28),
    "san_diego_naval_base": (32.66, 32.71, -117.16, -117.10),
    "bremerton_naval_shipyard": (47.54, 47.57, -122.66, -122.60),
    "everett_naval_station": (47.97, 48.00, -122.24, -122.21),
    "mayport_naval_station": (30.38, 30.41, -81.42, -81.39),
    "kings_bay_submarine_base": (30.77, 30.82, -81.57, -81.50),
}
#: Implied speeds above this are position jumps (no merchant ship makes 60 knots).
SPEED_LIMIT_KNOTS = 60.0
#: Loitering: at least this many reports in the window, all inside a box this many degrees wide.
LOITER_MIN_REPORTS = 5
LOITER_BOX_DEG = 0.002
#: Flag states by Maritime Identification Digits (the MMSI's first three digits; ITU-R M.585).
FLAG_STATES = {
    303: "United States (Alaska)",
    338: "United States",
    366: "United States",
    367: "United States",
    368: "United States",
    369: "United States",
    316: "Canada",
    345: "Mexico",
    311: "Bahamas",
    319: "Cayman Islands",
    339: "Jamaica",
    378: "British Virgin Islands",
    351: "Panama",
    352: "Panama",
    353: "Panama",
    354: "Panama",
    355: "Panama",
    356: "Panama",
    357: "Panama",
    370: "Panama",
    371: "Panama",
    372: "Panama",
    373: "Panama",
    538: "Marshall Islands",
    636: "Liberia",
    229: "Malta",
    232: "United Kingdom",
    235: "United Kingdom",
    244: "Netherlands",
    246: "Netherlands",
    257: "Norway",
    211: "Germany",
    228: "France",
    431: "Japan",
    440: "Korea",
    477: "Hong Kong",
    413: "China",
    563: "Singapore",
    564: "Singapore",
    565: "Singapore",
    566: "Singapore",
}

_NM_PER_RADIAN = 3440.065  # the Earth's mean radius in nautical miles


def flag_table(spark: SparkSession) -> DataFrame:
    """The static table ``mid int, flag string`` the archive is enriched from."""
    return spark.createDataFrame(sorted(FLAG_STATES.items()), "mid int, flag string")


def _knots(time_scale: float):
    """A pandas UDF: speed in knots between two reports (positions, and times in epoch seconds)."""
    from pyspark.sql.functions import pandas_udf

    def knots(lat, lon, prev_lat, prev_lon, t, prev_t):  # pandas Series in, Series out
        import numpy as np
        import pandas as pd

        p1, p2 = np.radians(prev_lat.to_numpy(float)), np.radians(lat.to_numpy(float))
        dlat = p2 - p1
        dlon = np.radians(lon.to_numpy(float) - prev_lon.to_numpy(float))
        a = np.sin(dlat / 2) ** 2 + np.cos(p1) * np.cos(p2) * np.sin(dlon / 2) ** 2
        nm = 2 * _NM_PER_RADIAN * np.arcsin(np.sqrt(np.clip(a, 0.0, 1.0)))
        hours = (t.to_numpy(float) - prev_t.to_numpy(float)) * time_scale / 3600.0
        with np.errstate(divide="ignore", invalid="ignore"):
            speed = np.where(hours > 0, nm / hours, np.nan)  # two reports in one instant: no speed
        return pd.Series(speed)

    return pandas_udf(knots, "double")


def vessel_transforms(
    spark: SparkSession, time_scale: float = 1.0, window_min: float = 10.0, loiter_min: float = 30.0
) -> dict[str, Callable[[DataFrame], DataFrame]]:
    """The five vessel queries (module docstring) over a DataFrame of AIS reports whose
    timestamps run ``time_scale`` times faster than recorded; ``window_min`` and ``loiter_min``
    are recorded minutes."""
    check_number("time_scale", time_scale, low=0, low_open=True)
    check_number("window_min", window_min, low=0, low_open=True)
    check_number("loiter_min", loiter_min, low=0, low_open=True)
    window = f"{window_min * 60 / time_scale:g} seconds"
    loiter = f"{loiter_min * 60 / time_scale:g} seconds"
    watermark = f"{120 / time_scale:g} seconds"  # two recorded minutes of lateness
    flags = flag_table(spark)
    knots = _knots(time_scale)

    def geofence(df: DataFrame) -> DataFrame:
        zone = None
        for name, (south, north, west, east) in RESTRICTED_ZONES.items():
            inside = F.col("lat").between(south, north) & F.col("lon").between(west, east)
            zone = F.when(inside, F.lit(name)) if zone is None else zone.when(inside, F.lit(name))
        return df.withColumn("zone", zone).where(F.col("zone").isNotNull()).select("mmsi", "ts", "lon", "lat", "zone")

    def speeding(df: DataFrame) -> DataFrame:
        w = Window.partitionBy("mmsi").orderBy("ts", "point")
        return (
            df.withColumn("prev_lat", F.lag("lat").over(w))
            .withColumn("prev_lon", F.lag("lon").over(w))
            .withColumn("prev_ts", F.lag("ts").over(w))
            .where(F.col("prev_ts").isNotNull())
            .withColumn(
                "knots", knots("lat", "lon", "prev_lat", "prev_lon", F.col("ts").cast("double"), F.col("prev_ts").cast("double"))
            )
            .where(F.col("knots") > SPEED_LIMIT_KNOTS)
            .select("mmsi", "ts", "lon", "lat", "prev_lon", "prev_lat", "knots")
        )

    def loitering(df: DataFrame) -> DataFrame:
        return (
            df.withWatermark("ts", watermark)
            .groupBy(F.window("ts", loiter), "mmsi")
            .agg(
                F.count(F.lit(1)).alias("reports"),
                F.min("lat").alias("lat_min"),
                F.max("lat").alias("lat_max"),
                F.min("lon").alias("lon_min"),
                F.max("lon").alias("lon_max"),
            )
            .where(
                (F.col("reports") >= LOITER_MIN_REPORTS)
                & (F.col("lat_max") - F.col("lat_min") < LOITER_BOX_DEG)
                & (F.col("lon_max") - F.col("lon_min") < LOITER_BOX_DEG)
            )
        )

    def area_counts(df: DataFrame) -> DataFrame:
        return (
            df.withColumn("cell_lat", F.floor("lat"))
            .withColumn("cell_lon", F.floor("lon"))
            .withWatermark("ts", watermark)
            .groupBy(F.window("ts", window), "cell_lat", "cell_lon")
            .agg(F.count(F.lit(1)).alias("reports"), F.avg("lat").alias("mean_lat"), F.avg("lon").alias("mean_lon"))
        )

    def archive(df: DataFrame) -> DataFrame:
        with_mid = df.withColumn("mid", F.floor(F.col("mmsi") / 1_000_000).cast("int"))
        return with_mid.join(flags, on="mid", how="left").select("mmsi", "ts", "lon", "lat", "track", "point", "flag")

    return {"geofence": geofence, "speeding": speeding, "loitering": loitering, "area_counts": area_counts, "archive": archive}
