"""The vessel-tracking queries of jobs/vessel_monitor.py, as ordinary PySpark transforms.

They read AIS position reports (``mmsi, ts, lon, lat, track, point``: the recorded trace of
:mod:`sparkqos.workloads.ais`, replayed by ``sparkqos.replay``):

* ``geofence`` (class H): reports inside a restricted zone (:data:`RESTRICTED_ZONES`, boxes around
  naval stations), each with its zone's name — alert rows;
* ``speeding`` (class C): a vessel's speed over ground from its previous report (``lag`` over the
  vessel's reports in time order: per-key state across batches) above :data:`SPEED_LIMIT_KNOTS` —
  position jumps no ship makes; the distance is a haversine in a numpy pandas UDF;
* ``turning`` (class C): sharp course changes — the bearing of a vessel's last leg against its
  leg before (two ``lag`` steps over its reports in time order), turns above
  :data:`TURN_MIN_DEG` between legs of at least :data:`TURN_MIN_LEG_NM` each (shorter legs are
  position noise);
* ``loitering`` (class N): vessels with at least :data:`LOITER_MIN_REPORTS` reports in a
  ``loiter_min``-minute event-time window that stayed inside a box of :data:`LOITER_BOX_DEG`;
* ``area_counts`` (class N): reports per one-degree cell per ``window_min``-minute window;
* ``archive`` (class N): every report enriched with its flag state, joined from a static table of
  the MMSI's Maritime Identification Digits (:data:`FLAG_STATES`; a stream–static left join).

Loitering is class N, not C: its rows can be written only once their event-time window has
closed, so its delay is at least the time from the vessel's newest report in the window to the
window's end plus the watermark's lateness, whatever the scheduler does (measured: with loitering
in class C, class C's mean delay sat above class N's). The class-C queries answer per report.

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
    "TURN_MIN_DEG",
    "VESSEL_PRIORITIES",
    "VESSEL_QUERY_CLASSES",
    "flag_table",
    "vessel_transforms",
]

#: The class of each vessel query, and the classes' priorities (CQC's weights).
VESSEL_QUERY_CLASSES = {
    "geofence": "H",
    "speeding": "C",
    "turning": "C",
    "loitering": "N",
    "area_counts": "N",
    "archive": "N",
}
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
#: Course changes: turns sharper than this between two legs, each at least this long.
TURN_MIN_DEG = 60.0
TURN_MIN_LEG_NM = 0.25
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


def _turn():
    """A pandas UDF: the course change in degrees (0-180) at the middle one of three consecutive
    reports, or null when either leg is shorter than :data:`TURN_MIN_LEG_NM`."""
    from pyspark.sql.functions import pandas_udf

    def turn(lat, lon, lat1, lon1, lat2, lon2):  # pandas Series in, Series out
        import numpy as np
        import pandas as pd

        def leg(a_lat, a_lon, b_lat, b_lon):
            """Initial bearing (degrees) and great-circle length (nm) from a to b."""
            p1, p2 = np.radians(a_lat.to_numpy(float)), np.radians(b_lat.to_numpy(float))
            dlon = np.radians(b_lon.to_numpy(float) - a_lon.to_numpy(float))
            bearing = np.degrees(
                np.arctan2(np.sin(dlon) * np.cos(p2), np.cos(p1) * np.sin(p2) - np.sin(p1) * np.cos(p2) * np.cos(dlon))
            )
            a = np.sin((p2 - p1) / 2) ** 2 + np.cos(p1) * np.cos(p2) * np.sin(dlon / 2) ** 2
            return bearing, 2 * _NM_PER_RADIAN * np.arcsin(np.sqrt(np.clip(a, 0.0, 1.0)))

        before, len_before = leg(lat2, lon2, lat1, lon1)
        last, len_last = leg(lat1, lon1, lat, lon)
        change = np.abs((last - before + 180.0) % 360.0 - 180.0)
        long_enough = (len_before >= TURN_MIN_LEG_NM) & (len_last >= TURN_MIN_LEG_NM)
        return pd.Series(np.where(long_enough, change, np.nan))

    return pandas_udf(turn, "double")


def _geofence(df: DataFrame) -> DataFrame:
    """The reports inside a restricted zone, with the zone's name."""
    zone = None
    for name, (south, north, west, east) in RESTRICTED_ZONES.items():
        inside = F.col("lat").between(south, north) & F.col("lon").between(west, east)
        zone = F.when(inside, F.lit(name)) if zone is None else zone.when(inside, F.lit(name))
    return df.withColumn("zone", zone).where(F.col("zone").isNotNull()).select("mmsi", "ts", "lon", "lat", "zone")


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
    turn = _turn()

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

    def turning(df: DataFrame) -> DataFrame:
        w = Window.partitionBy("mmsi").orderBy("ts", "point")
        return (
            df.withColumn("lat1", F.lag("lat").over(w))
            .withColumn("lon1", F.lag("lon").over(w))
            .withColumn("lat2", F.lag("lat", 2).over(w))
            .withColumn("lon2", F.lag("lon", 2).over(w))
            .where(F.col("lat2").isNotNull())
            .withColumn("turn_deg", turn("lat", "lon", "lat1", "lon1", "lat2", "lon2"))
            .where(F.col("turn_deg") > TURN_MIN_DEG)
            .select("mmsi", "ts", "lon", "lat", "turn_deg")
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

    return dict(
        geofence=_geofence, speeding=speeding, turning=turning, loitering=loitering, area_counts=area_counts, archive=archive
    )
