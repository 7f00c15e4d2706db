"""The vessel job's queries (sparkqos.workloads.vessels) and the job's configuration.

* On real recorded AIS reports (a slice of tracktable-data's day, when the ``data`` extra is
  installed) and on hand-made reports (always), ``sparkqos.run`` gives the rows Spark's own engine
  gives for all six queries (the speed anomalies and turns: Spark's batch run of the lags, which
  its streaming engine does not have).
* Served by ``sparkqos.stream`` over the replayed recorded trace (the job's classes and priorities,
  default settings), the rows after ``finish()`` are those of Spark's own streaming run of the same
  transforms over the same replay (the lags: Spark's batch run, as above; the windows Spark's
  append mode never closes: Spark's batch run).
* The job refuses bad configuration with a message naming the key, before Spark starts.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sparkqos
from sparkqos.testing import assert_same_rows
from sparkqos.workloads.ais import TRACE_SCHEMA
from sparkqos.workloads.vessels import RESTRICTED_ZONES, VESSEL_PRIORITIES, VESSEL_QUERY_CLASSES, vessel_transforms
from tests.conftest import closed_by, replay, spark_streams, stream_to_end

ROOT = Path(__file__).resolve().parent.parent
HAS_DATA = importlib.util.find_spec("tracktable_data") is not None
UTC = dt.UTC
T0 = dt.datetime(2020, 6, 30, 12, 0, tzinfo=UTC)


def handmade() -> pa.Table:
    """Reports that hit every query: a vessel crossing a restricted zone, one jumping, one
    loitering, one turning, flags known and unknown, two vessels reporting in the same second."""
    south, north, west, east = RESTRICTED_ZONES["norfolk_naval_station"]
    rows = []

    def add(mmsi, minute, lon, lat, track="t", point=0):
        rows.append((mmsi, T0 + dt.timedelta(minutes=minute), lon, lat, track, point))

    for i in range(12):  # approaching and crossing the zone
        add(367_000_001, i, west - 0.05 + i * 0.01, (south + north) / 2, "a", i)
    for i in range(8):  # loitering, then a jump of a degree in 17 minutes (a position fix gone wrong)
        add(538_000_002, 2 * i, -80.0 + i * 1e-4, 25.0, "b", i)
    add(538_000_002, 31, -79.0, 25.0, "b", 8)  # in the next 30-minute window
    for i in range(6):  # an MMSI whose digits name no flag state
        add(999_000_003, 3 * i, -120.0, 34.0 + i * 0.01, "c", i)
    for i, (lon, lat) in enumerate([(-70.0, 42.0), (-69.99, 42.0), (-69.98, 42.0), (-69.98, 42.01), (-69.98, 42.02)]):
        add(366_000_006, 10 + 4 * i, lon, lat, "f", i)  # east, then a right-angle turn to the north
    add(316_000_004, 5, -123.0, 48.5, "d", 0)
    add(316_000_005, 5, -123.1, 48.5, "e", 0)  # the same second as the one above
    cols = list(zip(*rows, strict=True))
    return pa.table([pa.array(list(c), f.type) for c, f in zip(cols, TRACE_SCHEMA, strict=True)], schema=TRACE_SCHEMA)


def compare(spark, table: pa.Table, strategies=("fifo", "chain")) -> dict[str, int]:
    """Rows per query, after checking each equals Spark's under every strategy."""
    df = spark.createDataFrame(table).coalesce(1)
    queries = vessel_transforms(spark)
    want = {name: transform(df).toArrow() for name, transform in queries.items()}  # Spark's rows, asked once
    for strategy in strategies:
        got = sparkqos.run(df, queries, strategy=strategy)
        for name in queries:
            assert_same_rows(got[name], want[name], f"{name} under {strategy}", rel=1e-12)
    return {name: t.num_rows for name, t in got.items()}


def test_handmade_reports_give_sparks_rows(spark_sql):
    counts = compare(spark_sql, handmade())
    assert set(counts) == set(VESSEL_QUERY_CLASSES) and all(counts.values()), counts


@pytest.mark.slow  # 6,000 recorded reports through the six queries; the hand-made reports reach each of them
@pytest.mark.skipif(not HAS_DATA, reason="the data extra is not installed: pip install -e '.[data]'")
def test_recorded_reports_give_sparks_rows(spark_sql, tmp_path):
    from sparkqos.workloads.ais import vessel_trace

    path, stats = vessel_trace(cache_dir=tmp_path, limit=6000)
    assert stats.rows == 6000
    counts = compare(spark_sql, pq.read_table(path), strategies=("adaptive",))
    assert set(counts) == set(VESSEL_QUERY_CLASSES) and counts["archive"] == 6000, counts


@pytest.mark.slow  # the vessel job's queries streamed by sparkqos and by Spark over 4,000 recorded reports
@pytest.mark.skipif(not HAS_DATA, reason="the data extra is not installed: pip install -e '.[data]'")
def test_recorded_reports_stream_like_spark_streams_them(spark_sql, tmp_path):
    """The vessel job's six transforms served by ``sparkqos.stream`` over the replayed
    recorded trace (the job's classes and priorities, the default strategy, continuous serving)
    give, after ``finish()``, the rows of Spark's own streaming run of the same transforms over the
    same replay. Two oracles are Spark's batch run over the static trace instead: for the speed
    anomalies and the sharp turns, whose ``lag`` over a window Spark's streaming engine does not
    run, and for the windows Spark's append mode never closes (its watermark stops with the input;
    ``finish()`` emits them): the windowed queries' rows in windows closed by Spark's last
    watermark equal Spark's streamed rows, and all their rows equal Spark's batch result."""
    from sparkqos.workloads.ais import parse_traj, traj_file, write_trace

    good, dead = parse_traj(traj_file())
    # 03:46 to 04:57 of the recorded day: vessels enter restricted zones (the day's first does at
    # report 7,761), two of the three loitering windows and most area windows close before it ends
    path, _ = write_trace(good.slice(7000, 4000), dead, tmp_path / "vessels.parquet")
    queries = vessel_transforms(spark_sql)  # recorded timestamps: the replay keeps them

    def stream():
        return replay(spark_sql, path, seconds_per_trigger=1200)  # 4 micro-batches

    sink = stream_to_end(stream(), queries, tmp_path / "sparkqos", classes=VESSEL_QUERY_CLASSES, priorities=VESSEL_PRIORITIES)
    lags = ("speeding", "turning")
    streamable = {name: t for name, t in queries.items() if name not in lags}
    spark_run = spark_streams(streamable, stream, tmp_path / "spark")
    static = spark_sql.read.parquet(str(path))
    counts = {}
    for name, transform in queries.items():
        got = sink.table(name)
        counts[name] = got.num_rows
        if name in lags:
            assert_same_rows(got, transform(static).toArrow(), name, rel=1e-12)
            continue
        want = spark_run[name]
        if name in ("loitering", "area_counts"):
            closed = closed_by(got, want.watermark)
            assert_same_rows(closed, want.rows, name, rel=1e-12)
            assert want.rows.num_rows and got.num_rows > closed.num_rows, name  # windows closed, and some still open
            assert_same_rows(got, transform(static).toArrow(), name, rel=1e-12)
        else:
            assert_same_rows(got, want.rows, name, rel=1e-12)
    assert counts["archive"] == 4000 and all(counts.values()), counts


def test_every_query_has_a_class_and_the_transforms_check_their_arguments(spark):
    assert set(vessel_transforms(spark)) == set(VESSEL_QUERY_CLASSES)
    with pytest.raises(sparkqos.SparkqosError, match="time_scale"):
        vessel_transforms(spark, time_scale=0)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("source.speed=0", "speed"),
        ('queries.run=["geofence", "radar"]', "radar"),
        ("scheduler.strategy=fastest", "fastest"),
        ("job.trigger_s=-1", "trigger_s"),
    ],
)
def test_the_job_refuses_bad_configuration_naming_the_key(override, message, capsys):
    sys.path.insert(0, str(ROOT / "jobs"))
    import vessel_monitor

    assert vessel_monitor.main(["--set", override, "--output", "/nonexistent/never"]) == 2
    err = capsys.readouterr().err
    assert "configuration error" in err and message in err
