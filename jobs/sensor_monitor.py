"""The main job: a sensor network monitored under sparkqos scheduling on Spark Structured Streaming.

    ./spark-submit.sh jobs/sensor_monitor.py [--duration 60] [--set section.key=value ...] [--fault POINT:BATCH]

Four continuous queries, written as ordinary PySpark transforms (sparkqos.spark.examples), over
one bursty stream of sensor readings: fire detection (class H), anomaly scoring (class C), zone
statistics and an archive (class N). The
adaptive controller picks among the configured strategies once per trigger to meet the QoS
template. Prints one line per trigger and a summary table per class at the end; outputs, metrics
and an HTML report go under the output folder, leftover queues and state under the checkpoint
(a second run with the same folders continues where the first stopped).

Crash tests (benchmarks/crash_restart.py) inject faults with ``--fault after_sink:3`` (or the
environment variable ``SPARKQOS_FAULT``, read here and nowhere else): the job SIGKILLs itself at
that point of batch 3 (points: sparkqos.spark.config.FAULT_POINTS).
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import signal
import sys
import time
from pathlib import Path

import numpy as np

from sparkqos import schedulers
from sparkqos.config import ConfigError, Key, describe, load_config
from sparkqos.errors import RunnerError, SparkqosError
from sparkqos.report import metrics
from sparkqos.spark.config import parse_faults

ROOT = Path(__file__).resolve().parent.parent

SCHEMA = {
    "job": {
        "name": Key(str, "sensor_monitor", "query name (metrics 'run')"),
        "duration_s": Key(float, 60.0, "seconds to run; 0 = until stopped", low=0),
        "trigger_s": Key(float, 2.0, "micro-batch interval", low=0, low_open=True),
        "budget_s": Key(float, 1.5, "executor seconds per trigger; 0 = the trigger interval", low=0),
        "continuous": Key(bool, False, "serve the queues between triggers too (issue 13)"),
        "output": Key(str, "output/sensor_monitor", "outputs, metrics and report"),
        "checkpoint": Key(str, "", "checkpoint folder; empty = <output>/_checkpoint"),
        "report": Key(bool, True, "render the HTML report at the end"),
    },
    "source": {
        "format": Key(str, "bursty", choices=("bursty", "poisson", "replay")),
        "rate": Key(float, 4000.0, "mean rows per second", low=0, low_open=True),
        "seed": Key(int, 7),
        "flows": Key(int, 64, "ON/OFF flows (bursty)", low=1),
        "off_scale": Key(float, 8.0, "minimum OFF period, seconds (bursty)", low=0, low_open=True),
        "path": Key(str, "", "recorded file (replay)"),
        "speed": Key(str, "1.0", "replay pace (a number or 'max')"),
        "retime": Key(bool, True, "replay: stamp rows with the replay time (false: keep recorded timestamps)"),
        "max_seconds_per_trigger": Key(float, 0.0, "cap on stream time per batch; 0 = none", low=0),
    },
    "scheduler": {
        "strategy": Key(str, "adaptive", choices=schedulers.available),
        "candidates": Key(
            list, ["fifo", "chain", "pc", "cqc"], choices=lambda: [s for s in schedulers.available() if s != "adaptive"]
        ),
        "qos": Key(str, "balanced", "QoS template name or TOML path (adaptive)"),
        "seed": Key(int, 0),
        "class_shares": Key(bool, False, "CQC's class shares above the strategy, it orders work inside each class (issue 13)"),
    },
    "queries": {
        "work_us": Key(float, 150.0, "declared CPU µs per row of the costly steps", low=0),
        "window_s": Key(float, 10.0, "zone statistics window, seconds", low=0, low_open=True),
        "watermark_s": Key(float, 2.0, "zone statistics: a window closes this long after its end", low=0),
    },
}


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, dict]:
    parser = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="configuration keys (conf/sensor_monitor.toml):\n" + describe(SCHEMA),
    )
    parser.add_argument("--config", default=str(ROOT / "conf" / "sensor_monitor.toml"))
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE", dest="overrides")
    parser.add_argument("--duration", type=float, help="shortcut for --set job.duration_s=…")
    parser.add_argument("--output", help="shortcut for --set job.output=…")
    parser.add_argument("--checkpoint", help="shortcut for --set job.checkpoint=…")
    parser.add_argument("--fresh", action="store_true", help="delete the output and checkpoint folders first")
    parser.add_argument("--quiet", action="store_true", help="no per-trigger lines")
    parser.add_argument(
        "--fault",
        default=os.environ.get("SPARKQOS_FAULT", ""),
        metavar="POINT:BATCH[,...]",
        help="crash tests: SIGKILL this process at that point of that batch (default: $SPARKQOS_FAULT)",
    )
    args = parser.parse_args(argv)
    try:
        parse_faults(args.fault)
    except RunnerError as exc:
        raise ConfigError(f"--fault: {exc}") from None
    overrides = list(args.overrides)
    for flag, key in (("duration", "job.duration_s"), ("output", "job.output"), ("checkpoint", "job.checkpoint")):
        if getattr(args, flag) is not None:
            overrides.append(f"{key}={getattr(args, flag)}")
    cfg = load_config(SCHEMA, path=args.config, overrides=overrides)
    if cfg["source"]["format"] == "replay" and not cfg["source"]["path"]:
        raise ConfigError("source.format = 'replay' needs source.path (a CSV or Parquet file)")
    speed = cfg["source"]["speed"]
    if speed != "max":
        try:
            if not float(speed) > 0:
                raise ValueError
        except ValueError:
            raise ConfigError(f"source.speed must be a number > 0 or 'max', got {speed!r}") from None
    if cfg["scheduler"]["strategy"] == "adaptive":
        from sparkqos.adaptive.qos import resolve

        try:
            resolve(cfg["scheduler"]["qos"])
        except SparkqosError as exc:
            raise ConfigError(f"scheduler.qos: {exc}") from None
    return args, cfg


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
    return opts


def main(argv: list[str] | None = None) -> int:
    try:
        args, cfg = parse_args(argv)
    except ConfigError as exc:
        print(f"sensor_monitor: configuration error: {exc}", file=sys.stderr)
        return 2
    job, sched = cfg["job"], cfg["scheduler"]
    output = Path(job["output"])
    checkpoint = Path(job["checkpoint"]) if job["checkpoint"] else output / "_checkpoint"
    if args.fresh:
        shutil.rmtree(output, ignore_errors=True)
        shutil.rmtree(checkpoint, ignore_errors=True)

    from pyspark.sql import SparkSession

    import sparkqos
    from sparkqos import sources

    spark = SparkSession.builder.appName(job["name"]).config("spark.sql.session.timeZone", "UTC").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    sources.register(spark)
    df = spark.readStream.format(f"sparkqos.{cfg['source']['format']}").options(**source_options(cfg)).load()

    from sparkqos.examples import SENSOR_CLASSES
    from sparkqos.spark.examples import SENSOR_QUERY_CLASSES, sensor_transforms

    qcfg = cfg["queries"]
    queries = sensor_transforms(work_us=qcfg["work_us"], window_s=qcfg["window_s"], watermark_s=qcfg["watermark_s"])
    klass_of = dict(SENSOR_QUERY_CLASSES)
    delays = {k: metrics.DelayDigest() for k in set(klass_of.values())}  # bounded, however long the run
    peak_queued = {"rows": 0.0, "bytes": 0.0}
    peak_class = {k: [0.0, 0.0] for k in delays}  # rows, bytes queued for the class's queries
    strategies: dict[str, int] = {}
    t0 = time.time()

    def on_delays(batch_id: int, per_query: dict[str, np.ndarray]) -> None:
        for q, d in per_query.items():
            delays[klass_of[q]].add(d)

    def on_progress(p: dict) -> None:
        peak_queued["rows"] = max(peak_queued["rows"], p["queuedRows"])
        peak_queued["bytes"] = max(peak_queued["bytes"], p["queuedBytes"])
        strategies[p["strategy"]] = strategies.get(p["strategy"], 0) + 1
        by_class: dict[str, list[float]] = {}
        for q in p["queries"]:
            acc = by_class.setdefault(q["klass"], [0.0, 0.0])
            acc[0] += q["queuedRows"]
            acc[1] += q["queuedBytes"]
        for klass, (r, b) in by_class.items():
            peak_class[klass][0] = max(peak_class[klass][0], r)
            peak_class[klass][1] = max(peak_class[klass][1], b)
        if not args.quiet:
            h = next((q for q in p["queries"] if q["query"] == "fire"), None)
            h_p99 = h["delayP99_s"] * 1000 if h and not math.isnan(h["delayP99_s"]) else float("nan")
            print(
                f"[{time.time() - t0:6.1f}s] batch {p['batchId']:>4}  in {p['numInputRows']:>6}  "
                f"out {p['numOutputRows']:>6}  queued {p['queuedRows']:>8.0f} rows / {p['queuedBytes'] / 1e6:6.2f} MB  "
                f"delay p99 {p['delayMsP99']:>8.1f} ms (fire {h_p99:>7.1f} ms)  strategy {p['strategy']}",
                flush=True,
            )

    strategy_params = {"candidates": sched["candidates"], "seed": sched["seed"]} if sched["strategy"] == "adaptive" else {}
    handle = sparkqos.stream(
        df,
        queries,
        classes=SENSOR_QUERY_CLASSES,
        priorities=SENSOR_CLASSES,
        strategy=sched["strategy"],
        strategy_params=strategy_params,
        qos=sched["qos"] if sched["strategy"] == "adaptive" else None,
        trigger_s=job["trigger_s"],
        budget_s=job["budget_s"] or None,
        continuous=job["continuous"],
        class_shares=sched["class_shares"],
        checkpoint=checkpoint,
        output=output,
        name=job["name"],
        on_progress=on_progress,
        on_delays=on_delays,
        fault=args.fault,
    )
    try:
        resumed = handle.restore()
    except SparkqosError as exc:  # e.g. CheckpointCorrupt: say so, never start empty
        print(f"sensor_monitor: cannot resume from {checkpoint}: {exc}", file=sys.stderr)
        spark.stop()
        return 1
    duration = job["duration_s"]
    print(
        f"sensor_monitor: {len(queries)} queries, {len(handle.loop.executor.plan)} operators, strategy "
        f"{sched['strategy']}{' over ' + ','.join(sched['candidates']) if sched['strategy'] == 'adaptive' else ''}, "
        f"source {cfg['source']['format']} at {cfg['source']['rate']:g} rows/s, trigger {job['trigger_s']:g}s; "
        + (f"runs {duration:g}s" if duration else "runs until stopped (Ctrl-C)")
        + (f"; resuming after batch {resumed}" if resumed >= 0 else ""),
        flush=True,
    )
    query = handle.start()
    stop = {"now": False}
    signal.signal(signal.SIGINT, lambda *_: stop.update(now=True))
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    deadline = t0 + duration if duration else math.inf
    try:
        while not stop["now"] and time.time() < deadline and query.isActive:
            query.awaitTermination(min(1.0, max(deadline - time.time(), 0.01)))
    finally:
        handle.stop()
    if query.exception() is not None:
        print(f"sensor_monitor: the streaming query failed: {query.exception()}", file=sys.stderr)
        return 1

    elapsed = time.time() - t0
    mix = ", ".join(
        f"{k} {v / max(sum(strategies.values()), 1):.0%}" for k, v in sorted(strategies.items(), key=lambda kv: -kv[1])
    )
    print()
    print(
        f"summary after {elapsed:.0f}s, {sum(strategies.values())} triggers; peak queued "
        f"{peak_queued['rows']:.0f} rows / {peak_queued['bytes'] / 1e6:.2f} MB; strategy mix: {mix or '-'}"
    )
    header = (
        f"{'class':<6} {'rows out':>10} {'mean delay ms':>14} {'p99 delay ms':>13} {'max delay ms':>13} "
        f"{'peak queued rows':>17} {'peak queued MB':>15}"
    )
    print(header)
    print("-" * len(header))
    for klass in ("H", "C", "N"):
        d = delays[klass]
        print(
            f"{klass:<6} {d.count:>10} {d.mean * 1000:>14.1f} {d.percentile(99) * 1000:>13.1f} {d.max * 1000:>13.1f} "
            f"{peak_class[klass][0]:>17.0f} {peak_class[klass][1] / 1e6:>15.2f}"
        )
    if job["report"] and (output / "metrics").is_dir():
        from sparkqos.report import render

        print(f"report: {render(output, title=job['name'])}")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
