"""A second real job: recorded AIS vessel positions monitored under sparkqos scheduling.

    ./spark-submit.sh jobs/vessel_monitor.py [--duration 60] [--set source.speed=1200] [--set section.key=value ...]

One day of real AIS position reports off the US coasts (235,967 reports from 1,185 vessels; see
sparkqos/workloads/ais.py) is turned once into a time-ordered Parquet trace (reports that cannot be
read go to dead letters beside it, with their reasons) and replayed with ``sparkqos.replay`` at
``source.speed`` times the recorded pace: the real inter-arrival pattern, compressed. Six
continuous queries, written as ordinary PySpark transforms (sparkqos.workloads.vessels): restricted-zone
alerts (class H), speed anomalies and sharp course changes from consecutive positions of each
vessel (class C), loitering in a window, per-area counts per window and an archive enriched with
each vessel's flag state (class N). It prints one line per trigger and a summary table per class at the end, like the main
job; outputs, metrics and an HTML report go under the output folder, leftover queues and state
under the checkpoint (a second run continues from it; ``--fresh`` starts over). spark-submit.sh
installs the ``data`` extra (the package tracktable-data) on first use, as the line below asks.
"""

# sparkqos-extras: data
# sparkqos-java-options: -XX:TieredStopAtLevel=1 -XX:+UseSerialGC
# (as the main job: see jobs/sensor_monitor.py)

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _jobkit, also when imported as jobs.vessel_monitor

import _jobkit as kit  # noqa: E402

from sparkqos.config import ConfigError, Key  # noqa: E402

ROOT = kit.ROOT
QUERIES = ("geofence", "speeding", "turning", "loitering", "area_counts", "archive")  # sparkqos.workloads.vessels

SCHEMA = {
    "job": kit.job_section("vessel_monitor", shard_by="mmsi"),
    "source": {
        "file": Key(str, "US_coastal_2020_06_30", "AIS file of tracktable-data, or a path to a .traj file"),
        "speed": Key(float, 1200.0, "replay pace: recorded seconds per wall second", low=0, low_open=True),
    },
    "scheduler": kit.scheduler_section(),
    "queries": {
        "run": Key(list, list(QUERIES), "which of the queries to run", choices=lambda: list(QUERIES)),
        "window_min": Key(float, 60.0, "area counts window, recorded minutes", low=0, low_open=True),
        "loiter_min": Key(float, 15.0, "loitering window, recorded minutes", low=0, low_open=True),
    },
}


def parse_args(argv: list[str] | None = None):
    return kit.parse_args(__doc__, ROOT / "conf" / "vessel_monitor.toml", SCHEMA, argv)


def main(argv: list[str] | None = None) -> int:
    try:
        args, cfg = parse_args(argv)
    except ConfigError as exc:
        print(f"vessel_monitor: configuration error: {exc}", file=sys.stderr)
        return 2
    from sparkqos.errors import SourceError
    from sparkqos.workloads.ais import dead_letter_path, vessel_trace

    src = cfg["source"]
    try:
        trace, stats = vessel_trace(file=src["file"], cache_dir=ROOT / "output" / "traces")
    except SourceError as exc:
        print(f"vessel_monitor: {exc}", file=sys.stderr)
        return 2
    try:
        output, checkpoint = kit.folders(args, cfg["job"])
    except ConfigError as exc:
        print(f"vessel_monitor: {exc}", file=sys.stderr)
        return 2

    from sparkqos import sources
    from sparkqos.workloads.vessels import VESSEL_PRIORITIES, VESSEL_QUERY_CLASSES, vessel_transforms

    print("vessel_monitor: starting Spark …", flush=True)
    spark = kit.session(cfg["job"]["name"])
    sources.register(spark)
    df = (
        spark.readStream.format("sparkqos.replay")
        .option("path", str(trace))
        .option("speed", str(src["speed"]))
        .option("retime", "true")
        .load()
    )
    qcfg = cfg["queries"]
    every = vessel_transforms(spark, time_scale=src["speed"], window_min=qcfg["window_min"], loiter_min=qcfg["loiter_min"])
    made = kit.make_stream(df, every, VESSEL_QUERY_CLASSES, VESSEL_PRIORITIES, "geofence", cfg, args, (output, checkpoint))
    if isinstance(made, int):
        return made
    handle, monitor = made
    print(
        f"vessel_monitor: trace {trace} ({stats.rows:,} reports, {stats.dead_letters:,} dead letters in "
        f"{dead_letter_path(trace)}), replayed at {src['speed']:g}x ({stats.rows_per_s * src['speed']:,.0f} rows/s mean)",
        flush=True,
    )
    return kit.run(spark, handle, cfg, monitor, f"{len(handle.compiled.plan.queries)} queries")


if __name__ == "__main__":
    sys.exit(main())
