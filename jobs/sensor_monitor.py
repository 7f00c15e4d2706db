"""The main job: a sensor network monitored under sparkqos scheduling on Spark Structured Streaming.

    ./spark-submit.sh jobs/sensor_monitor.py [--duration 60] [--set section.key=value ...] [--fault POINT:BATCH]

Four continuous queries, written as ordinary PySpark transforms (sparkqos.workloads.sensor_transforms), over
one bursty stream of sensor readings: fire detection (class H), anomaly scoring (class C), zone
statistics and an archive (class N). The
adaptive controller picks among the configured strategies once per trigger to meet the QoS
template. Prints one line per trigger and a summary table per class at the end; outputs, metrics
and an HTML report go under the output folder, leftover queues and state under the checkpoint
(a second run with the same folders continues where the first stopped).

Crash tests (benchmarks/crash_restart.py) inject faults with ``--fault after_sink:3`` (or the
environment variable ``SPARKQOS_FAULT``, read here and nowhere else): the job SIGKILLs itself at
that point of batch 3 (points: sparkqos.runtime.config.FAULT_POINTS).
"""

# sparkqos-java-options: -XX:TieredStopAtLevel=1 -XX:+UseSerialGC
# (spark-submit.sh starts the JVM with them: C1 code only, and the serial collector. On a small
# machine the C2 compiler's threads take a core for the first ten seconds or so, while the first
# micro-batches need it, and G1's concurrent threads compete with the trigger's; the driver's JVM
# work per trigger — offsets, planning, handing Arrow batches over — gains little from either.)

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _jobkit, also when imported as jobs.sensor_monitor

import _jobkit as kit  # noqa: E402

from sparkqos.config import ConfigError, Key  # noqa: E402

ROOT = kit.ROOT
QUERIES = ("fire", "anomaly", "zone_stats", "archive")  # sparkqos.workloads.sensor_transforms

SCHEMA = {
    "job": kit.job_section("sensor_monitor", shard_by="sensor_id"),
    "source": {
        "format": Key(
            str, "bursty", "the source: bursty ON/OFF flows, Poisson, or a recorded file", choices=("bursty", "poisson", "replay")
        ),
        "rate": Key(float, 4000.0, "mean rows per second", low=0, low_open=True),
        "seed": Key(int, 7, "seed of the generated rows (the same seed, the same stream)"),
        "flows": Key(int, 64, "ON/OFF flows (bursty)", low=1),
        "off_scale": Key(float, 8.0, "minimum OFF period, seconds (bursty)", low=0, low_open=True),
        "path": Key(str, "", "recorded file (replay)"),
        "speed": Key(str, "1.0", "replay pace (a number or 'max')"),
        "retime": Key(bool, True, "replay: stamp rows with the replay time (false: keep recorded timestamps)"),
        "max_seconds_per_trigger": Key(float, 0.0, "cap on stream time per batch; 0 = none", low=0),
        "clock_offset_s": Key(
            float, 0.0, "shift the source's clock by this many seconds (negative: behind); rehearses a resume after downtime"
        ),
        "max_rows_per_trigger": Key(
            int, 100_000, "cap on rows per batch (how fast a resumed run catches up a backlog); 0 = none", low=0
        ),
    },
    "scheduler": kit.scheduler_section(),
    "queries": {
        "run": Key(list, list(QUERIES), "which of the queries to run", choices=lambda: list(QUERIES)),
        "model_size": Key(int, 2048, "reference readings of the anomaly model (its cost per reading grows with it)", low=16),
        "window_s": Key(float, 10.0, "zone statistics window, seconds", low=0, low_open=True),
        "watermark_s": Key(float, 2.0, "zone statistics: a window closes this long after its end", low=0),
    },
}


def source_options(cfg: dict) -> dict[str, str]:
    src = cfg["source"]
    if src["format"] == "replay":
        opts = {"path": src["path"], "speed": src["speed"], "retime": str(src["retime"]).lower()}
    else:
        opts = {"rate": str(src["rate"]), "seed": str(src["seed"]), "payload": "sensor"}
        if src["format"] == "bursty":
            opts.update(flows=str(src["flows"]), offScale=str(src["off_scale"]))
    if src["max_seconds_per_trigger"] > 0:
        opts["maxSecondsPerTrigger"] = str(src["max_seconds_per_trigger"])
    opts["maxRowsPerTrigger"] = str(src["max_rows_per_trigger"])
    if src["clock_offset_s"]:
        opts["clockOffset"] = str(src["clock_offset_s"])
    return opts


def check_source(cfg: dict) -> None:
    if cfg["source"]["format"] == "replay" and not cfg["source"]["path"]:
        raise ConfigError("source.format = 'replay' needs source.path (a CSV or Parquet file)")
    speed = cfg["source"]["speed"]
    if speed != "max":
        try:
            if not float(speed) > 0:
                raise ValueError
        except ValueError:
            raise ConfigError(f"source.speed must be a number > 0 or 'max', got {speed!r}") from None


def parse_args(argv: list[str] | None = None):
    return kit.parse_args(__doc__, ROOT / "conf" / "sensor_monitor.toml", SCHEMA, argv, extra=check_source)


def main(argv: list[str] | None = None) -> int:
    try:
        args, cfg = parse_args(argv)
    except ConfigError as exc:
        print(f"sensor_monitor: configuration error: {exc}", file=sys.stderr)
        return 2
    try:
        output, checkpoint = kit.folders(args, cfg["job"])
    except ConfigError as exc:
        print(f"sensor_monitor: {exc}", file=sys.stderr)
        return 2

    from sparkqos import sources
    from sparkqos.workloads.sensor_transforms import SENSOR_QUERY_CLASSES, sensor_transforms
    from sparkqos.workloads.sensors import SENSOR_CLASSES

    name = cfg["job"]["name"]
    print(f"{name}: starting Spark …", flush=True)
    spark = kit.session(name)
    sources.register(spark)
    df = spark.readStream.format(f"sparkqos.{cfg['source']['format']}").options(**source_options(cfg)).load()
    qcfg = cfg["queries"]
    every = sensor_transforms(model_size=qcfg["model_size"], window_s=qcfg["window_s"], watermark_s=qcfg["watermark_s"])
    made = kit.make_stream(df, every, SENSOR_QUERY_CLASSES, SENSOR_CLASSES, "fire", cfg, args, (output, checkpoint))
    if isinstance(made, int):
        return made
    handle, monitor = made
    banner = f"{len(handle.compiled.plan.queries)} queries, source {cfg['source']['format']} at {cfg['source']['rate']:g} rows/s"
    return kit.run(spark, handle, cfg, monitor, banner)


if __name__ == "__main__":
    sys.exit(main())
