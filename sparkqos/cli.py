"""Command line: ``python -m sparkqos simulate WORKLOAD.toml --scheduler NAME --until T [--json]``,
``python -m sparkqos report OUTPUT_DIR`` and ``python -m sparkqos trace vessels [--file NAME]
[--out PATH] [--limit N]`` (the recorded AIS trace for the replay source; needs the ``data`` extra)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from sparkqos import schedulers
from sparkqos.errors import SparkqosError, check_number


def _param(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def _time(text: str) -> float:
    try:
        return check_number("time", float(text), low=0)
    except ValueError:  # not a number, or ArgumentError (a ValueError): argparse wants its own error
        raise argparse.ArgumentTypeError(f"expected a finite time >= 0, got {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m sparkqos", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sim = sub.add_parser("simulate", help="run a workload file in the simulator")
    sim.add_argument("workload", help="a workload TOML file (see conf/workloads/)")
    sim.add_argument(
        "--scheduler", "-s", default="fifo", help=f"strategy name, one of: {', '.join(schedulers.available())} (default: fifo)"
    )
    sim.add_argument(
        "--param",
        "-p",
        action="append",
        type=_param,
        default=[],
        metavar="KEY=VALUE",
        help="a strategy parameter (repeatable); VALUE is read as JSON when it parses",
    )
    sim.add_argument(
        "--until", "-u", type=_time, default=None, help="stop at this time (default: run until every queue has drained)"
    )
    sim.add_argument("--run", choices=["one", "quantum"], default=None, help="override the workload's run rule")
    sim.add_argument("--slotted", choices=["true", "false"], default=None, help="override the workload's slotted dispatch")
    sim.add_argument("--json", action="store_true", help="print snapshots and outputs as JSON")
    rep = sub.add_parser("report", help="render an HTML report with figures from a metrics table")
    rep.add_argument("output_dir", help="a job's or experiment's output folder (holding metrics/)")
    rep.add_argument("--title", default=None)
    rep.add_argument(
        "--classes",
        default=None,
        metavar="H,C,N",
        help="the query classes, highest priority first: the order of the figures and tables (default: as they appear)",
    )
    sub.add_parser("supported", help="print what runs natively, what Spark evaluates and what is refused (docs/transforms.md)")
    trace = sub.add_parser("trace", help="build a recorded trace for the sparkqos.replay source")
    trace.add_argument("kind", choices=["vessels"], help="vessels: AIS position reports (pip install -e '.[data]')")
    trace.add_argument(
        "--file",
        default="US_coastal_2020_06_30",
        help="US_coastal_2020_06_30 (one day, default), NYHarbor_2020_12_first_week, or a path to a .traj file",
    )
    trace.add_argument("--out", default=None, help="the Parquet trace to write (default: output/traces/vessels_FILE.parquet)")
    trace.add_argument("--limit", type=int, default=None, help="keep the first N reports in time order")
    trace.add_argument("--refresh", action="store_true", help="rebuild even if the cached trace is up to date")
    trace.add_argument("--json", action="store_true", help="print the statistics as JSON")
    return parser


def _trace(args: argparse.Namespace) -> int:
    from sparkqos.workloads.ais import dead_letter_path, vessel_trace

    path, stats = vessel_trace(args.out, file=args.file, limit=args.limit, refresh=args.refresh)
    if args.json:
        json.dump({"trace": str(path), "dead_letters_path": str(dead_letter_path(path)), **stats.to_json()}, sys.stdout)
        sys.stdout.write("\n")
        return 0
    print(f"trace:        {path}")
    print(f"dead letters: {dead_letter_path(path)}")
    print(stats.summary())
    return 0


def _simulate(args: argparse.Namespace) -> int:
    from sparkqos.sim import load_workload

    workload = load_workload(args.workload)
    if args.run is not None:
        workload.run = args.run
    if args.slotted is not None:
        workload.slotted = args.slotted == "true"
    scheduler = schedulers.get(args.scheduler, **dict(args.param))
    result = workload.simulator(scheduler).run(until=args.until)
    if args.json:
        json.dump(result.to_json(), sys.stdout)
        sys.stdout.write("\n")
        return 0
    print(f"{workload.source}: {workload.plan!r}, run={workload.run}, slotted={workload.slotted}, scheduler={scheduler!r}")
    print(f"{'time':>6} {'queued':>12} {'output (cumulative)':>20}")
    for t, q in sorted(result.snapshots.items()):
        print(f"{t:>6} {q:>12.4f} {result.cumulative_output(t):>20.4f}")
    print(
        f"outputs: {len(result.outputs)} parcels, {result.total_output:.4f} tuples, "
        f"mean delay {result.mean_delay():.4f}, peak queued {result.peak_queued():.4f}, picks {result.picks}"
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "simulate":
            return _simulate(args)
        if args.command == "report":
            from sparkqos.report import render

            page = render(args.output_dir, title=args.title, classes=args.classes.split(",") if args.classes else None)
            print(f"report written to {page}")
            return 0
        if args.command == "trace":
            return _trace(args)
        if args.command == "supported":
            from sparkqos.compile.supported import supported_markdown

            print(supported_markdown())
            return 0
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except SparkqosError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    parser.error(f"unknown command {args.command!r}")
    return 2
