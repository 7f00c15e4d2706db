"""Class priority under stress: the main job on one core, beside a busy loop, after 5 minutes
down, and in a burst at twice its capacity with class N shedding — one line each, then the verdict.

    .venv/bin/python benchmarks/stress.py [--duration 60] [--down 300] [--only one-core,neighbour,resume,burst]
        [--rate ROWS_PER_S] [--set section.key=value ...]

Each scenario runs ``./spark-submit.sh jobs/sensor_monitor.py`` in a subprocess with its own
output folder and reads its summary (per class: rows out, mean, p99 and max delay) and its metrics
table (per trigger and query):

* ``one-core``: the job pinned to core 0 (``taskset -c 0``): Spark's JVM, the trigger thread and
  the continuous worker share one core;
* ``neighbour``: the job beside a busy loop (one Python process spinning) on the same machine;
* ``resume``: the job runs 20 s, stops, and is started again ``--down`` seconds later, without
  waiting for them: the first run's source clock is set that far back
  (``source.clock_offset_s``) and the second's is not, so the second run's first micro-batches
  read the rows its source missed meanwhile from the checkpoint's offsets, as a restarted job
  would. Per class, the seconds from the resumed run's first micro-batch until the class's
  per-trigger p99 (the console's "(fire N ms)" for class H) goes under 1 s and stays there for
  10 s;
* ``burst``: the input at twice the job's capacity for ``--duration`` seconds, with
  ``scheduler.shed = {N = SHED}``; the capacity comes from two calibration runs (the second at
  about the capacity, drained, so every query served every row: rows over the executor's busy
  seconds, or Spark's intake when its micro-batches took in less than was offered); then
  ``job.finish`` drains what is left, so the rows the archive query (class N, one output row per
  input row) is missing are exactly the rows it shed.
  The line ends with the rows per second Spark's micro-batches took in (from the first micro-batch
  to the last): below the input rate, the rest waited in the source, where no class goes first.
  ``--rate`` runs the burst at that many rows per second without calibrating (the line still says
  "2x capacity": the rate stands for it), so two settings can be compared at one rate.

``--set section.key=value`` (repeatable) passes a setting to every run of the job, e.g.
``--set job.worker_nice=10`` to compare one setting against the defaults.

The class order holds in a scenario when mean and p99 delay are H < C < N (resume: H catches up
no later than C, C no later than N). The last line's "H p99 max" is over the scenarios other than
``resume``, whose delays count the downtime itself. Figures depend on the machine: compare runs
side by side.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SCENARIOS = ("one-core", "neighbour", "resume", "burst")
CLASSES = ("H", "C", "N")
QUERY_CLASS = {"fire": "H", "anomaly": "C", "zone_stats": "N", "archive": "N"}
ROW = re.compile(r"^([HCN])\s+([\d,.]+)\s+([\d,.]+|-)\s+([\d,.]+|-)\s+([\d,.]+|-)")


#: Settings given with ``--set``: every run of the job gets them, before its scenario's own.
COMMON: list[str] = []


def job(out: Path, duration: float, sets: list[str], prefix: list[str] | None = None, fresh: bool = True) -> tuple[str, float]:
    """Run the main job (from a fresh output folder, or continuing from its checkpoint); its
    console output and wall seconds."""
    cmd = [*(prefix or []), str(ROOT / "spark-submit.sh"), "jobs/sensor_monitor.py", *(["--fresh"] if fresh else [])]
    cmd += ["--duration", str(duration)]
    cmd += ["--set", f"job.output={out}", "--set", "job.report=false"]
    for s in [*COMMON, *sets]:
        cmd += ["--set", s]
    t0 = time.time()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-3000:] + done.stderr[-3000:])
        raise SystemExit(f"stress: the main job failed ({' '.join(cmd)})")
    return done.stdout, time.time() - t0


def summary(console: str) -> dict[str, dict[str, float]]:
    """Per class: rows out, mean, p99 and max delay (ms) from the job's closing table."""
    out = {}
    for line in console.splitlines():
        m = ROW.match(line.strip())
        if m:
            k, rows, mean, p99, mx = m.groups()
            num = lambda v: math.nan if v == "-" else float(v.replace(",", ""))  # noqa: E731
            out[k] = {"rows": num(rows), "mean": num(mean), "p99": num(p99), "max": num(mx)}
    return out


def metrics(out: Path):
    from sparkqos.report import metrics as m

    return m.read(out).to_pylist()


def ordered(s: dict[str, dict[str, float]]) -> bool:
    try:
        return all(s["H"][k] < s["C"][k] < s["N"][k] for k in ("mean", "p99"))
    except KeyError:
        return False


def fmt(s: dict[str, dict[str, float]], key: str) -> str:
    return "/".join(f"{s.get(k, {}).get(key, math.nan):.0f}" for k in CLASSES)


def caught_up_after(rows: list[dict], limit_s: float = 1.0, hold_s: float = 10.0) -> dict[str, float]:
    """Per class, seconds from the first trigger until its per-trigger p99 goes under
    ``limit_s`` and stays there for ``hold_s`` (or to the end of the run; inf: never)."""
    triggers: dict[int, dict] = {}
    for r in rows:
        if r["query"] == "*":
            continue
        t = triggers.setdefault(r["batchId"], {"time": r["time_s"], "p99": {}})
        k = QUERY_CLASS.get(r["query"])
        if k is not None and r["delayP99_s"] == r["delayP99_s"]:
            t["p99"][k] = max(t["p99"].get(k, 0.0), r["delayP99_s"])
    order = sorted(triggers.values(), key=lambda t: t["time"])
    out = dict.fromkeys(CLASSES, math.inf)
    if not order:
        return out
    t0 = order[0]["time"]
    for k in CLASSES:
        seen = [(t["time"], t["p99"][k]) for t in order if k in t["p99"]]
        for i, (at, _) in enumerate(seen):
            if all(p < limit_s for when, p in seen[i:] if when <= at + hold_s):
                out[k] = at - t0
                break
    return out


def capacity(base: Path, duration: float) -> tuple[float, str]:
    """Rows per second the job can take, and what bounds it. Two calibration runs: the first at the
    job's own rate gives a first estimate (its input rate over the executor's busy fraction), which
    is low — at a light load each operator run carries its fixed cost over few rows; the second
    takes twice that estimate and is drained (``job.finish``), so every query served every row:
    the executor's capacity is its rows over all the executor's busy seconds, Spark's intake the
    rows its micro-batches took in per second while the input flowed. The smaller bounds the job."""
    seconds = min(duration, 20.0)
    job(base / "calibrate", seconds, [])
    rows = [r for r in metrics(base / "calibrate") if r["query"] == "*"]
    span = max(1e-9, rows[-1]["time_s"] - rows[0]["time_s"])
    first = sum(r["rowsIn"] for r in rows) / span / max(sum(r["executorBusyS"] for r in rows) / span, 1e-3)
    rate = 2 * first
    job(base / "calibrate-2", seconds, [f"source.rate={rate:.0f}", "job.finish=true"])
    rows = [r for r in metrics(base / "calibrate-2") if r["query"] == "*"]
    fed = [r for r in rows if r["rowsIn"] > 0]
    taken = sum(r["rowsIn"] for r in fed)
    executor = taken / max(1e-9, sum(r["executorBusyS"] for r in rows if r["executorBusyS"] == r["executorBusyS"]))
    intake = taken / max(1e-9, fed[-1]["time_s"] - fed[0]["time_s"]) if len(fed) > 1 else math.inf
    if intake < 0.9 * rate and intake < executor:  # the rows waited in the source: Spark's side is the bound
        return intake, f"Spark's intake {intake:.0f} rows/s at {rate:.0f} in; the executor's {executor:.0f}"
    return executor, f"the executor's {executor:.0f} rows/s (Spark took in {intake:.0f} at {rate:.0f} in)"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=60.0, help="seconds each scenario runs from its first micro-batch")
    ap.add_argument("--down", type=float, default=300.0, help="resume: seconds the job was down")
    ap.add_argument("--shed", default="10s", help="burst: class N's shedding age")
    ap.add_argument("--only", default=",".join(SCENARIOS), help="scenarios to run, comma-separated")
    ap.add_argument("--out", default="output/stress", help="folder of the runs' outputs")
    ap.add_argument("--rate", type=float, default=0.0, help="burst: rows per second (default: twice the calibrated capacity)")
    ap.add_argument("--set", action="append", default=[], dest="sets", help="section.key=value for every run of the job")
    args = ap.parse_args(argv)
    only = [s for s in args.only.split(",") if s]
    unknown = sorted(set(only) - set(SCENARIOS))
    if unknown:
        ap.error(f"unknown scenario(s) {unknown}; choose from {', '.join(SCENARIOS)}")
    COMMON[:] = args.sets
    base = Path(args.out)
    shutil.rmtree(base, ignore_errors=True)
    held, h_p99 = 0, []
    for name in only:
        out = base / name
        if name == "one-core":
            if shutil.which("taskset") is None:
                raise SystemExit("stress: one-core needs taskset (util-linux)")
            s = summary(job(out, args.duration, [], prefix=["taskset", "-c", "0"])[0])
            ok = ordered(s)
            print(f"stress one-core: H/C/N p99 {fmt(s, 'p99')} ms, mean {fmt(s, 'mean')} ms", flush=True)
        elif name == "neighbour":
            hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
            try:
                s = summary(job(out, args.duration, [])[0])
            finally:
                hog.kill()
                hog.wait()
            ok = ordered(s)
            print(f"stress neighbour: H/C/N p99 {fmt(s, 'p99')} ms, mean {fmt(s, 'mean')} ms", flush=True)
        elif name == "resume":
            job(out, 20.0, [f"source.clock_offset_s={-args.down:g}"])  # before the downtime
            resumed = time.time()
            s = summary(job(out, args.duration, [], fresh=False)[0])
            after = caught_up_after([r for r in metrics(out) if r["time_s"] >= resumed])
            ok = after["H"] <= after["C"] <= after["N"] and math.isfinite(after["H"])
            words = ", ".join(
                f"{k} after {after[k]:.0f} s" if math.isfinite(after[k]) else f"{k} not within the run" for k in "CN"
            )
            print(
                f"stress resume: class H under 1 s after {after['H']:.0f} s, {words} ({args.down:g} s down; "
                f"H/C/N p99 {fmt(s, 'p99')} ms)",
                flush=True,
            )
        else:
            if args.rate > 0:
                rate = args.rate
            else:
                cap, bound = capacity(base, args.duration)
                print(f"  (calibration: capacity {cap:.0f} rows/s, bound by {bound})", flush=True)
                rate = 2 * cap
            console, _ = job(
                out,
                args.duration,
                [f"source.rate={rate:.0f}", f"scheduler.shed=N:{args.shed}", "job.finish=true"],
            )
            s = summary(console)
            rows = metrics(out)
            plan = [r for r in rows if r["query"] == "*"]
            arch = [r for r in rows if r["query"] == "archive"]
            rows_in = sum(r["rowsIn"] for r in plan if r["rowsIn"] == r["rowsIn"])
            span = max(1e-9, plan[-1]["time_s"] - plan[0]["time_s"]) if plan else math.nan
            written = sum(r["rowsOut"] for r in arch)
            shed = sum(r["shedRows"] for r in arch if r["shedRows"] == r["shedRows"])
            ok = ordered({k: v for k, v in s.items() if k in ("H", "C")} | {"N": {"mean": math.inf, "p99": math.inf}})
            print(
                f"stress burst: H p99 {s.get('H', {}).get('p99', math.nan):.0f} ms during {args.duration:g} s at 2x capacity "
                f"({rate:.0f} rows/s), shed {shed:.0f} rows (archive missing {rows_in - written:.0f}); "
                f"H/C/N p99 {fmt(s, 'p99')} ms; Spark's micro-batches took in {rows_in / span:.0f} rows/s",
                flush=True,
            )
        held += ok
        if name != "resume":  # its delays count the downtime: its figure is the catch-up time
            h_p99.append(s.get("H", {}).get("p99", math.nan))
    worst = max((p for p in h_p99 if p == p), default=math.nan)
    print(f"stress: class order held in {held} of {len(only)}, H p99 max {worst:.0f} ms")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
