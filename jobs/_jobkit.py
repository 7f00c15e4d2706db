"""What the monitoring jobs share (jobs/sensor_monitor.py, jobs/vessel_monitor.py): the command line
(``--config``, ``--set``, ``--duration``, ``--output``, ``--checkpoint``, ``--fresh``, ``--quiet``,
``--fault``), the ``job`` and ``scheduler`` sections of their configuration, and the run itself —
restore, start, run until the duration or Ctrl-C, stop between triggers, drain what is queued
(``job.finish``), print the per-class summary and render the report.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import importlib.util
import math
import os
import shutil
import signal
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from sparkqos import schedulers
from sparkqos.config import ConfigError, Key, describe, load_config
from sparkqos.errors import RunnerError, SparkqosError
from sparkqos.report.console import LEGEND
from sparkqos.runtime.config import DEFAULT_TRIGGER_S, StrategyConfig, parse_faults

ROOT = Path(__file__).resolve().parent.parent


def job_section(name: str, shard_by: str, duration_s: float = 60.0) -> dict[str, Key]:
    """The ``job`` keys; the defaults (0.1 s trigger, continuous) are sparkqos.stream's, measured in the README.
    ``shard_by`` is the column the job's sharded lane splits its stream by (``job.shards`` > 0)."""
    return {
        "name": Key(str, name, "query name (metrics 'run')"),
        "duration_s": Key(
            float,
            duration_s,
            "seconds to run, from the first micro-batch (after Spark's start-up); 0 = until stopped",
            low=0,
        ),
        "trigger_s": Key(float, DEFAULT_TRIGGER_S, "micro-batch interval", low=0, low_open=True),
        "budget_s": Key(float, 0.0, "executor seconds per trigger when not continuous; 0 = the trigger interval", low=0),
        "continuous": Key(bool, True, "serve the queues between triggers too, on a worker thread"),
        "top_class_s": Key(
            float,
            None,
            "seconds a trigger serves at once, top class first; "
            "unset = a tenth of the budget (or of the period between triggers, when they come later)",
            low=0,
            optional=True,
        ),
        "early_write_s": Key(
            float,
            None,
            "least seconds between the worker's early writes (classes above the lowest); 0 = triggers only; unset = 0.05",
            low=0,
            optional=True,
        ),
        "warm_up_s": Key(
            float,
            3.0,
            "seconds Spark's read path runs on synthetic rows before the stream starts (a cold JVM is slow at first); 0 = off",
            low=0,
        ),
        "worker_nice": Key(
            int, 0, "the continuous worker's thread runs this much below the job's priority; 0 = the same", low=0, high=19
        ),
        "threads": Key(
            int,
            0,
            "threads a run of a row-wise operator may use (UDFs declared thread-safe only); 0 = one per usable core",
            low=0,
        ),
        "fsync": Key(
            bool,
            False,
            "fsync the job's checkpoints and outputs so they survive a machine's crash (Spark's own logs beside them are not)",
        ),
        "output": Key(str, f"output/{name}", "outputs, metrics and report"),
        "sink": Key(
            str,
            "parquet",
            "where outputs go: Parquet files in <output>/outputs, or Delta tables in <output>/delta (needs deltalake)",
            choices=("parquet", "delta"),
        ),
        "checkpoint": Key(str, "", "checkpoint folder; empty = <output>/_checkpoint"),
        "report": Key(bool, True, "render the HTML report at the end"),
        "finish": Key(
            bool, False, "at the end of a finite input (a replayed trace): drain every queue and write the last outputs"
        ),
        "shards": Key(
            int,
            0,
            "the sharded lane: this many executors inside Spark tasks, state in Spark's state store; 0 = the driver lane",
            low=0,
        ),
        "shard_by": Key(str, shard_by, "the column the sharded lane splits the stream by (every query keeps its state per it)"),
    }


def scheduler_section(candidates: list[str] | None = None) -> dict[str, Key]:
    return {
        "strategy": Key(
            str, "adaptive", "the scheduling strategy (adaptive: picks among the candidates)", choices=schedulers.available
        ),
        "candidates": Key(
            list,
            list(candidates or ["fifo", "chain", "pc", "cqc"]),
            "the strategies adaptive picks among, once per trigger: names, or {name = ..., params = {...}} tables",
            choices=lambda: [s for s in schedulers.available() if s != "adaptive"],
        ),
        "qos": Key(str, "balanced", "QoS template name or TOML path (adaptive)"),
        "seed": Key(int, 0, "seed of adaptive's roulette wheel (the same seed, the same picks)"),
        "class_shares": Key(bool, True, "CQC's class shares above the strategy, which orders the work inside each class"),
        "slo": Key(
            dict,
            {},
            'latency targets by query or class, {H = "500ms", C = "2s"} (--set scheduler.slo=H:500ms,C:2s): '
            "earliest deadline first while a target is at risk, met or missed per trigger",
        ),
        "shed": Key(
            dict,
            {},
            'load shedding by query or class, {N = "30s"}: under sustained overload, rows that fell further behind '
            "are dropped, counted and dead-lettered; none without",
        ),
    }


def parse_args(
    doc: str, config: Path, schema: dict, argv: list[str] | None = None, extra: Any = None
) -> tuple[argparse.Namespace, dict]:
    """The job's arguments and its configuration (the file, then ``--set`` overrides, checked
    against ``schema``); ``extra(cfg)`` checks more and raises ConfigError."""
    parser = argparse.ArgumentParser(
        description=doc,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=textwrap.fill(f"console: {LEGEND}.", 100)
        + f"\n\nconfiguration keys ({config.relative_to(ROOT)}):\n"
        + describe(schema),
    )
    parser.add_argument("--config", default=str(config), help="the job's configuration file (default: %(default)s)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        dest="overrides",
        help="override one configuration key (repeatable); the keys are listed below",
    )
    parser.add_argument("--duration", type=float, help="seconds to run from the first micro-batch: --set job.duration_s=…")
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
    cfg = load_config(schema, path=args.config, overrides=overrides)
    if cfg["scheduler"]["strategy"] == "adaptive":
        from sparkqos.adaptive.qos import resolve

        try:
            resolve(cfg["scheduler"]["qos"])
        except SparkqosError as exc:
            raise ConfigError(f"scheduler.qos: {exc}") from None
    from sparkqos.runtime.targets import parse_durations

    for key in ("slo", "shed"):  # before Spark starts: a bad duration names its key
        parse_durations(f"scheduler.{key}", cfg["scheduler"][key])
    check_extras(cfg)
    if extra is not None:
        extra(cfg)
    return args, cfg


#: The configuration values that need an optional extra: (section, key, value) -> (module, extra).
#: spark-submit.sh installs the extra when it sees the value; keep the two in step.
EXTRAS = {("job", "sink", "delta"): ("deltalake", "delta")}


def check_extras(cfg: dict) -> None:
    """A ConfigError, before Spark starts, when the configuration needs a package that is not
    installed (``job.sink = "delta"`` without deltalake)."""
    for (section, key, value), (module, extra) in EXTRAS.items():
        if cfg.get(section, {}).get(key) == value and importlib.util.find_spec(module) is None:
            raise ConfigError(
                f"{section}.{key} = {value!r} needs the {module} package, which is not installed: "
                f"pip install 'sparkqos[{extra}]' (./spark-submit.sh installs it by itself)"
            )


#: The lock files of the folders this process runs on (by folder), held open until it exits.
_HELD: dict[Path, Any] = {}


def hold(folder: Path) -> None:
    """Lock ``folder`` for this process until it exits (``flock`` on ``.<name>.lock`` beside it,
    which holds the process id). Raises ConfigError naming the process that holds it already:
    two runs on one checkpoint would each delete (``--fresh``) or overwrite what the other wrote.
    A folder this process holds already stays held (a job run again in the same process)."""
    folder = folder.resolve()
    if folder in _HELD:
        return
    folder.parent.mkdir(parents=True, exist_ok=True)
    lock = (folder.parent / f".{folder.name}.lock").open("a+")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        holder = lock.read().strip() or "unknown"
        lock.close()
        raise ConfigError(
            f"{folder} is in use by another run of a job (process {holder}): stop that run, or give this one "
            "another --output (or --checkpoint)"
        ) from None
    lock.seek(0)
    lock.truncate()
    lock.write(str(os.getpid()))
    lock.flush()
    _HELD[folder] = lock


def release() -> None:
    """Let go of every folder :func:`hold` locked (the process's exit does it too)."""
    while _HELD:
        with contextlib.suppress(OSError):
            _HELD.popitem()[1].close()


def folders(args: argparse.Namespace, job: dict) -> tuple[Path, Path]:
    """(output, checkpoint), held by this process until it exits (:func:`hold`: another run on
    either is refused); ``--fresh`` empties both first."""
    output = Path(job["output"])
    checkpoint = Path(job["checkpoint"]) if job["checkpoint"] else output / "_checkpoint"
    hold(output)
    if not checkpoint.resolve().is_relative_to(output.resolve()):  # else the output's lock covers it
        hold(checkpoint)
    if args.fresh:
        shutil.rmtree(output, ignore_errors=True)
        shutil.rmtree(checkpoint, ignore_errors=True)
    return output, checkpoint


def stream_options(cfg: dict, args: argparse.Namespace, checkpoint: Path, output: Path, monitor: Any) -> dict[str, Any]:
    """``sparkqos.stream`` keywords from the ``job`` and ``scheduler`` sections."""
    job, sched = cfg["job"], cfg["scheduler"]
    adaptive = sched["strategy"] == "adaptive"
    return {
        "strategy": StrategyConfig(
            sched["strategy"],
            params={"candidates": sched["candidates"], "seed": sched["seed"]} if adaptive else {},
            qos=sched["qos"] if adaptive else None,
            class_shares=sched["class_shares"],
        ),
        "slo": sched["slo"],
        "shed": sched["shed"],
        "trigger_s": job["trigger_s"],
        "budget_s": job["budget_s"] or None,
        "continuous": job["continuous"],
        "top_class_s": job["top_class_s"],
        "early_write_s": job["early_write_s"],
        "worker_nice": job["worker_nice"],
        "warm_up_s": job["warm_up_s"],
        "checkpoint": checkpoint,
        "fsync": job["fsync"],
        "threads": job["threads"] or None,
        "output": output,
        "sink": _delta_sink(output) if job["sink"] == "delta" else None,
        "name": job["name"],
        "on_progress": monitor.on_progress,
        "on_delays": monitor.on_delays,
        "fault": args.fault,
    } | ({"shards": job["shards"], "shard_by": job["shard_by"]} if job["shards"] else {})


def make_stream(
    df: Any, every: dict, classes: dict, priorities: dict, watch: str, cfg: dict, args: argparse.Namespace, folders: tuple
) -> tuple[Any, Any] | int:
    """The queries of ``every`` that ``queries.run`` names, over ``df``, as a sparkqos stream on the
    lane ``job.shards`` picks, with the monitor of the console lines (``watch``: the query whose
    p99 each line shows): (handle, monitor), or the exit code of a configuration error."""
    name = cfg["job"]["name"]
    queries = {q: every[q] for q in cfg["queries"]["run"]}
    if not queries:
        print(f"{name}: configuration error: queries.run names no query", file=sys.stderr)
        return 2
    print(f"{name}: compiling {len(queries)} queries …", flush=True)
    from sparkqos import stream
    from sparkqos.errors import NotShardable
    from sparkqos.report.console import ClassMonitor

    klass_of = {q: classes[q] for q in queries}
    by_priority = sorted(priorities, key=lambda k: -priorities[k])  # the summary's and the report's order
    monitor = ClassMonitor(klass_of, watch=watch, classes=by_priority, print_fn=None if args.quiet else print)
    output, checkpoint = folders
    options = stream_options(cfg, args, checkpoint, output, monitor)
    for key in ("slo", "shed"):
        options[key] = for_running_classes(name, key, options[key], priorities, klass_of)
    try:
        handle = stream(df, queries, classes=klass_of, priorities=priorities, **options)
    except NotShardable as exc:  # a query the sharded lane cannot run: say which and how to leave it out
        print(
            f"{name}: configuration error: job.shards > 0 runs the sharded lane, and {exc}; "
            "leave that query out with --set 'queries.run=[...]' or run the driver lane (job.shards=0)",
            file=sys.stderr,
        )
        return 2
    return handle, monitor


def for_running_classes(name: str, key: str, targets: dict, priorities: dict, klass_of: dict) -> dict:
    """``scheduler.slo`` or ``scheduler.shed`` without the job's classes that no query of
    ``queries.run`` is of (the default targets name every class; a run of some queries has
    nothing to target there), saying which were left out. Any other name goes on to ``stream``,
    which refuses one that is neither a query nor a class of the plan.

    >>> for_running_classes("job", "slo", {"H": "1s", "C": "2s", "fire": "1s"}, {"H": 3, "C": 2}, {"fire": "H"})
    job: scheduler.slo for class C left out: no query of queries.run is of it
    {'H': '1s', 'fire': '1s'}
    """
    idle = sorted(k for k in targets if k in priorities and k not in klass_of.values() and k not in klass_of)
    if idle:
        print(f"{name}: scheduler.{key} for class {', '.join(idle)} left out: no query of queries.run is of it")
    return {k: v for k, v in targets.items() if k not in idle}


def _delta_sink(output: Path) -> Any:
    from sparkqos.io.delta import DeltaSink

    return DeltaSink(output / "delta")


def run(spark: Any, handle: Any, cfg: dict, monitor: Any, banner: str) -> int:
    """Restore, print ``banner``, run for ``job.duration_s`` (0: until Ctrl-C/SIGTERM), stop between
    triggers, print the summary, render the report; the exit code."""
    job, sched = cfg["job"], cfg["scheduler"]
    name = job["name"]
    try:
        resumed = handle.restore()
    except SparkqosError as exc:  # e.g. CheckpointCorrupt: say so, never start empty
        print(f"{name}: cannot resume from {handle.config.storage.checkpoint}: {exc}", file=sys.stderr)
        spark.stop()
        return 1
    duration = job["duration_s"]
    over = (
        " over " + ",".join(c if isinstance(c, str) else c["name"] for c in sched["candidates"])
        if sched["strategy"] == "adaptive"
        else ""
    )
    print(
        f"{name}: {banner}, {len(handle.compiled.plan)} operators"
        + (f" in {job['shards']} shards by {job['shard_by']}" if job["shards"] else "")
        + f", strategy {sched['strategy']}{over}, "
        f"trigger {job['trigger_s']:g}s; "
        + (f"runs {duration:g}s from the first micro-batch" if duration else "runs until stopped (Ctrl-C)")
        + (f"; resuming after batch {resumed}" if resumed >= 0 else ""),
        flush=True,
    )
    if monitor.print_fn is not None:
        print(f"{name}: {LEGEND}", flush=True)
    # from here on a SIGTERM or Ctrl-C stops the query between triggers (and lets job.finish drain)
    stop = {"now": False}
    signal.signal(signal.SIGINT, lambda *_: stop.update(now=True))
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    ui = spark.sparkContext.uiWebUrl
    print(f"{name}: starting Spark's streaming query …" + (f" (Spark UI: {ui})" if ui else ""), flush=True)
    query = handle.start()
    reads, warm_s = getattr(handle, "warmed_up", (0, 0.0))
    if reads:
        print(f"{name}: warmed Spark's read path up first: {reads} reads of synthetic rows in {warm_s:.1f} s", flush=True)
    try:
        while not stop["now"] and query.isActive:
            first = monitor.first_batch_at  # the duration counts from the first micro-batch
            deadline = first + duration if duration and first is not None else math.inf
            if time.time() >= deadline:
                break
            query.awaitTermination(min(1.0, max(deadline - time.time(), 0.01)))
    finally:
        monitor.stopping()  # the summary's run length ends here, not after the last trigger and the drain
        handle.stop(wait_s=30.0)  # a trigger longer than that is stopped inside (Spark replays it)
    if query.exception() is not None:
        print(f"{name}: the streaming query failed: {query.exception()}", file=sys.stderr)
        return 1
    if job["finish"]:
        try:
            handle.finish()
        except SparkqosError as exc:  # e.g. stopped inside a batch of new rows: draining would lose them
            print(f"{name}: cannot drain: {exc}", file=sys.stderr)
            spark.stop()
            return 1
    print()
    print(monitor.summary())
    loop = getattr(handle, "loop", None)  # the driver lane: where its triggers' time went
    if loop is not None and any(loop.phase_s.values()):
        spent = sorted(((v, k) for k, v in loop.phase_s.items() if v >= 0.05), reverse=True)
        print("time spent (executor: in and between triggers): " + ", ".join(f"{k} {v:.1f} s" for v, k in spent))
    output = Path(job["output"])
    if job["report"] and (output / "metrics").is_dir():
        from sparkqos.report import render

        print(f"report: {render(output, title=name, classes=monitor.classes)}")
    spark.stop()
    return 0


def session(name: str):
    """The job's SparkSession (UTC, quiet logs)."""
    from pyspark.sql import SparkSession

    from sparkqos.spark.settings import configure

    # the raw local file system for Spark's checkpoint logs: ~35 ms less per trigger on one core
    spark = configure(SparkSession.builder.appName(name).config("spark.sql.session.timeZone", "UTC")).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
