"""sparkqos against what a Spark user does today: one streaming query per query, in FAIR pools.

    .venv/bin/python benchmarks/vs_fair_pools.py [--seconds 60] [--rate 4000] [--model-size 2048]
        [--fair-triggers fast,0.25,0.5,1,2] [--set key=value ...]

One bursty trace (recorded once, replayed at its own pace with ``sparkqos.replay``) feeds, in
turn, the four sensor queries — the same PySpark transforms (:mod:`sparkqos.workloads.sensor_transforms`) in
every variant:

* ``fair@T`` — each transform as its own Spark streaming query in the FAIR pool of its class
  (H/C/N, weights 6/3/1: conf/fairscheduler.xml), trigger T seconds (``fast``: as fast as
  possible). Spark runs the transforms itself; the costly steps (the anomaly model and the
  archive's encoding, pandas UDFs) run in Spark's Python workers, the same code sparkqos's
  executor runs;
* ``sparkqos`` — the same transforms as one sparkqos stream at sparkqos's defaults
  (``sparkqos.stream(df, queries, classes=..., priorities=...)`` and nothing else; ``--set`` to
  try other settings).

Each variant runs in its own ``spark-submit`` (its own JVM), so peak memory is the resident
memory of that process tree, sampled every 0.2 s. Both write each micro-batch's outputs as
Parquet files ``outputs/query=NAME/batch=ID.parquet`` and delay is computed afterwards from those
files, by one function for every variant: a row's delay is the modification time of the file that
holds it (the moment it was written to its sink) minus its event time (``ts``; for a window of
zone_stats, the window's end, the earliest instant it could be complete). Every query replays
the trace from the same instant, ``--lead`` seconds after start-up, and the trace opens with
``--warmup`` seconds of a quiet trickle, so slow first micro-batches are over before the bursts.
Rows still queued when the input ends are drained (sparkqos ``finish()``; FAIR: the queries run
until every row is read and their last batch is written), so every row is counted.

FAIR's best setting is taken per class (the lowest class-H p99 and the lowest class C and N mean
over its triggers) and compared with sparkqos; fire and archive outputs must be identical across
variants. Goal: class-H p99 ≤ 0.5× FAIR's best, class C and N means no worse, peak RSS
no higher. The last line is ``class-H p99 ratio FAIR-best/sparkqos: X.XX``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "jobs" / "experiments"))

import _common as C  # noqa: E402

FAIR_TRIGGERS = ("fast", "0.25", "0.5", "1", "2")


def _queries(args):
    from sparkqos.workloads.sensor_transforms import sensor_transforms

    return sensor_transforms(model_size=args.model_size, window_s=args.window, watermark_s=args.watermark)


def _write_batch(folder: Path, query: str, batch_id: int, table) -> None:
    """One micro-batch's rows of ``query``, in the ParquetSink's layout (temp file + rename)."""
    import pyarrow.parquet as pq

    d = folder / f"query={query}"
    d.mkdir(parents=True, exist_ok=True)
    tmp = d / f".batch={batch_id}.parquet.tmp"
    pq.write_table(table, tmp)
    os.replace(tmp, d / f"batch={batch_id}.parquet")


# -- plain Spark: one streaming query per transform, FAIR pools -----------------------------------------
def run_fair(args, out: Path, trigger: str) -> dict:
    from sparkqos.workloads.sensor_transforms import SENSOR_QUERY_CLASSES

    spark = C.session(f"vs_fair_pools-fair@{trigger}")
    sc = spark.sparkContext
    if sc.getConf().get("spark.scheduler.mode", "FIFO") != "FAIR":
        raise SystemExit("the fair variants need --conf spark.scheduler.mode=FAIR (the parent passes it)")
    folder = out / "outputs"
    started = time.time()
    replay_start = started + args.lead  # every query replays the trace from the same instant
    queries = {}
    for name, transform in _queries(args).items():

        def write(batch_df, batch_id, name=name):
            table = batch_df.toArrow()
            if table.num_rows:
                _write_batch(folder, name, batch_id, table)

        sc.setLocalProperty("spark.scheduler.pool", SENSOR_QUERY_CLASSES[name])
        writer = (
            transform(C.replay_df(spark, args.trace, start=replay_start))
            .writeStream.foreachBatch(write)
            .queryName(f"fair_{name}")
            .outputMode("append")
            .option("checkpointLocation", str(out / "_checkpoint" / name))
        )
        writer = writer.trigger(processingTime="0 seconds" if trigger == "fast" else f"{float(trigger)} seconds")
        queries[name] = writer.start()
    sc.setLocalProperty("spark.scheduler.pool", None)
    deadline = started + args.lead + 4 * args.seconds + 60
    seen: dict[str, dict[int, int]] = {name: {} for name in queries}  # batch id -> rows read
    last_print = 0.0
    try:
        while time.time() < deadline:
            for name, sq in queries.items():
                if sq.exception() is not None:
                    raise RuntimeError(f"fair query {name} failed: {sq.exception()}")
                for p in sq.recentProgress:  # the newest 100: polled often enough to miss none
                    seen[name][p["batchId"]] = p["numInputRows"]
            done = min(sum(s.values()) for s in seen.values())
            if done >= args.rows:
                # one more trigger of each, so the window query closes what the last rows closed
                time.sleep(max(1.0, 2 * (0 if trigger == "fast" else float(trigger))))
                break
            if not args.quiet and time.time() - last_print > 5:
                last_print = time.time()
                print(f"  [fair@{trigger} {time.time() - started:5.0f}s] rows read by the slowest query: {done}", flush=True)
            time.sleep(0.25)
    finally:
        for sq in queries.values():
            # between triggers: stopping one that is reading the Python data source makes Spark's
            # stream thread die of a StackOverflowError in its error handling (see QosStream.stop)
            by = time.time() + 5
            while sq.isActive and sq.status.get("isTriggerActive") and time.time() < by:
                time.sleep(0.05)
            sq.stop()
    result = {"variant": f"fair@{trigger}", "rows_in": min(sum(s.values()) for s in seen.values()), "replay_start": replay_start}
    spark.stop()
    return result


# -- sparkqos -----------------------------------------------------------------------------------------
def run_sparkqos(args, out: Path) -> dict:
    import sparkqos
    from sparkqos.io.sinks import ParquetSink
    from sparkqos.workloads.sensor_transforms import SENSOR_QUERY_CLASSES
    from sparkqos.workloads.sensors import SENSOR_CLASSES

    spark = C.session("vs_fair_pools-sparkqos")
    options = {k: _value(v) for k, v in (s.split("=", 1) for s in args.set)}
    seen = {"rows": 0, "peak_queued_mb": 0.0, "strategies": {}}

    def on_progress(p: dict) -> None:
        seen["rows"] += p["numInputRows"]
        seen["peak_queued_mb"] = max(seen["peak_queued_mb"], p["queuedBytes"] / 1e6)
        seen["strategies"][p["strategy"]] = seen["strategies"].get(p["strategy"], 0) + 1

    started = time.time()
    replay_start = started + args.lead
    handle = sparkqos.stream(
        C.replay_df(spark, args.trace, start=replay_start),
        _queries(args),
        classes=SENSOR_QUERY_CLASSES,
        priorities=SENSOR_CLASSES,
        checkpoint=out / "_checkpoint" / "sparkqos",
        output=out,
        sink=ParquetSink(out / "outputs", compact_every=None),  # delays are read from each batch file's write time
        name="sparkqos",
        on_progress=on_progress,
        # no JIT warm-up before the start (unless --set warm_up_s=...): the FAIR pools' queries
        # start on a cold JVM too, and the replay begins --lead seconds after start-up for both
        **{"warm_up_s": 0, **options},
    )
    query = handle.start()
    deadline = started + args.lead + 4 * args.seconds + 60
    last_print = 0.0
    try:
        while query.isActive and time.time() < deadline and seen["rows"] < args.rows:
            query.awaitTermination(0.25)
            if not args.quiet and time.time() - last_print > 5:
                last_print = time.time()
                print(f"  [sparkqos {time.time() - started:5.0f}s] rows read: {seen['rows']}", flush=True)
    finally:
        handle.stop()
    if query.exception() is not None:
        raise RuntimeError(f"the sparkqos stream failed: {query.exception()}")
    handle.finish()  # drain what is still queued, written as one more batch
    result = {
        "variant": "sparkqos",
        "rows_in": seen["rows"],
        "replay_start": replay_start,
        "peak_queued_mb": seen["peak_queued_mb"],
        "strategy_mix": seen["strategies"],
        "options": {k: str(v) for k, v in options.items()},
    }
    spark.stop()
    return result


def _value(raw: str):
    """A --set value: JSON when it parses (numbers, true/false, lists), else the string."""
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


# -- the same delay measurement for every variant ------------------------------------------------------
def delays_of(folder: Path) -> tuple[dict[str, np.ndarray], dict[str, list]]:
    """Per query: every row's delay (its file's modification time minus its event time), and the
    rows themselves (to compare outputs across variants)."""
    import pyarrow.parquet as pq

    from sparkqos.runtime.trigger import epoch_seconds

    delays: dict[str, list[np.ndarray]] = {}
    rows: dict[str, list] = {}
    for d in sorted(folder.glob("query=*")):
        q = d.name.split("=", 1)[1]
        for f in sorted(d.glob("batch=*.parquet")):
            t = pq.read_table(f)
            if not t.num_rows:
                continue
            written = f.stat().st_mtime
            if "window" in t.column_names:
                event = epoch_seconds(t.column("window").combine_chunks().field("end"))
            else:
                event = epoch_seconds(t.column("ts"))
            delays.setdefault(q, []).append(written - event)
            rows.setdefault(q, []).extend(t.to_pylist())
    return {q: np.concatenate(v) for q, v in delays.items()}, rows


def summarise(variant: dict, folder: Path) -> dict:
    from sparkqos.workloads.sensor_transforms import SENSOR_QUERY_CLASSES

    delays, rows = delays_of(folder)
    per_class: dict[str, list[np.ndarray]] = {}
    for q, d in delays.items():
        per_class.setdefault(SENSOR_QUERY_CLASSES[q], []).append(d)
    r = dict(variant)
    for k in ("H", "C", "N"):
        d = np.concatenate(per_class[k]) if k in per_class else np.empty(0)
        r[f"{k}_mean_ms"] = C.mean_ms(d)
        r[f"{k}_p99_ms"] = C.p99_ms(d)
        r[f"{k}_max_ms"] = float(d.max() * 1000) if d.size else math.nan
    r["rows_out"] = {q: len(v) for q, v in rows.items()}
    # the archive holds every row: its earliest event time is the variant's first replayed row
    origin = min((_micros(x["ts"]) for x in rows.get("archive", []) if x.get("ts") is not None), default=0)
    r["digest"] = {q: _digest(v, origin) for q, v in rows.items() if q in ("fire", "archive")}
    return r


def _digest(rows: list, origin_us: int) -> str:
    """A digest of ``rows`` in any order, event times taken in µs from ``origin_us`` (the variant's
    first replayed row: each variant replays the trace from its own instant)."""
    import hashlib

    h = hashlib.sha256()
    lines = []
    for r in rows:
        r = dict(r)
        if r.get("ts") is not None:
            r["ts"] = _micros(r["ts"]) - origin_us
        if r.get("record") is not None:  # the archive's JSON record carries the event time too, in s
            record = json.loads(r["record"])
            record["t"] = round(record["t"] * 1e6) - origin_us
            r["record"] = record
        lines.append(json.dumps(r, sort_keys=True, default=str))
    for line in sorted(lines):
        h.update(line.encode())
    return h.hexdigest()[:16]


def _micros(t) -> int:
    import datetime as dt

    return (t - dt.datetime.fromtimestamp(0, dt.UTC)) // dt.timedelta(microseconds=1)


# -- the parent: record the trace, run each variant in its own spark-submit, compare -------------------
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=60.0, help="length of the bursty trace")
    ap.add_argument("--rate", type=float, default=4000.0, help="mean rows/s of the trace")
    ap.add_argument("--off-scale", type=float, default=8.0, help="bursty minimum OFF period (s)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--model-size", type=int, default=2048, help="anomaly model reference readings")
    ap.add_argument("--window", type=float, default=10.0, help="zone_stats window, seconds")
    ap.add_argument("--watermark", type=float, default=2.0, help="zone_stats watermark delay, seconds")
    ap.add_argument("--fair-triggers", default=",".join(FAIR_TRIGGERS), help="FAIR variants' triggers ('fast' = 0)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a sparkqos.stream option")
    ap.add_argument("--skip-sparkqos", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "output" / "vs_fair_pools"))
    ap.add_argument("--warmup", type=float, default=20.0, help="seconds of a 4 rows/s trickle before the bursty trace")
    ap.add_argument("--lead", type=float, default=8.0, help="seconds between starting the queries and the first row")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--variant", help=argparse.SUPPRESS)
    ap.add_argument("--trace", help=argparse.SUPPRESS)
    ap.add_argument("--rows", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    out = Path(args.out)

    if args.variant:  # child
        vout = out / args.variant
        shutil.rmtree(vout, ignore_errors=True)
        vout.mkdir(parents=True)
        if args.variant == "sparkqos":
            result = run_sparkqos(args, vout)
        else:
            result = run_fair(args, vout, args.variant.split("@", 1)[1])
        (vout / "result.json").write_text(json.dumps(result, indent=1))
        return 0

    triggers = [t.strip() for t in args.fair_triggers.split(",") if t.strip()]
    for t in triggers:
        if t != "fast":
            try:
                if not float(t) > 0:
                    raise ValueError
            except ValueError:
                ap.error(f"--fair-triggers: {t!r} is neither 'fast' nor a number of seconds > 0")
    for s in args.set:
        if "=" not in s:
            ap.error(f"--set wants KEY=VALUE, got {s!r}")
    variants = [f"fair@{t}" for t in triggers] + ([] if args.skip_sparkqos else ["sparkqos"])
    out.mkdir(parents=True, exist_ok=True)
    trace = out / "trace.parquet"
    rows = C.write_bursty_trace(trace, args.rate, args.seconds, seed=args.seed, off_scale=args.off_scale, warmup_s=args.warmup)
    seconds = args.seconds + args.warmup
    per_run = seconds + args.lead + 25
    print(
        f"vs_fair_pools: trace {rows} rows over {seconds:g}s ({args.warmup:g}s trickle, then bursty, mean "
        f"{args.rate:g}/s, seed {args.seed}); anomaly model of {args.model_size} readings; variants {', '.join(variants)}; "
        f"expect about {len(variants) * per_run / 60:.0f}-{len(variants) * 2 * per_run / 60:.0f} min",
        flush=True,
    )
    results = []
    for v in variants:
        vout = out / v
        cmd = [str(ROOT / "spark-submit.sh"), "--master", "local[2]"]
        if v.startswith("fair"):
            cmd += ["--conf", "spark.scheduler.mode=FAIR"]
            cmd += ["--conf", f"spark.scheduler.allocation.file={ROOT / 'conf' / 'fairscheduler.xml'}"]
        cmd += [str(Path(__file__).resolve()), "--variant", v, "--trace", str(trace), "--rows", str(rows)]
        cmd += ["--seconds", str(seconds), "--model-size", str(args.model_size), "--lead", str(args.lead), "--out", str(out)]
        cmd += ["--window", str(args.window), "--watermark", str(args.watermark)]
        cmd += [a for s in args.set for a in ("--set", s)] + (["--quiet"] if args.quiet else [])
        print(f"-- {v}", flush=True)
        proc = subprocess.Popen(cmd)
        peak = 0
        while proc.poll() is None:
            peak = max(peak, C.rss_tree_bytes(proc.pid))
            time.sleep(0.2)
        if proc.returncode != 0 or not (vout / "result.json").exists():
            print(f"vs_fair_pools: variant {v} failed (exit {proc.returncode})", file=sys.stderr)
            return 1
        r = summarise(json.loads((vout / "result.json").read_text()), vout / "outputs")
        r["peak_rss_mb"] = peak / 1e6
        results.append(r)

    header = ["variant", "H mean ms", "H p99 ms", "H max ms", "C mean ms", "C p99 ms", "N mean ms", "N p99 ms"]
    header += ["rows in", "fire", "archive", "peak RSS MB"]
    table = [
        [r["variant"], r["H_mean_ms"], r["H_p99_ms"], r["H_max_ms"], r["C_mean_ms"], r["C_p99_ms"], r["N_mean_ms"]]
        + [r["N_p99_ms"], r["rows_in"], r["rows_out"].get("fire", 0), r["rows_out"].get("archive", 0), r["peak_rss_mb"]]
        for r in results
    ]
    print()
    text = C.print_table(
        f"vs_fair_pools: {rows} rows, {args.warmup:g}s trickle + {args.seconds:g}s bursty trace, {args.rate:g} rows/s "
        f"mean, model {args.model_size}, local[2]; delay = sink file written − event time",
        header,
        table,
    )
    lines = []
    fair = [r for r in results if r["variant"].startswith("fair")]
    ours = next((r for r in results if r["variant"] == "sparkqos"), None)
    digests = {json.dumps(r["digest"], sort_keys=True) for r in results}
    lines.append(
        "fire and archive outputs identical across variants: "
        + ("yes" if len(digests) == 1 else f"NO ({[(r['variant'], r['digest']) for r in results]})")
    )
    if fair and ours:
        best = {
            "H_p99_ms": min(fair, key=lambda r: r["H_p99_ms"]),
            "C_mean_ms": min(fair, key=lambda r: r["C_mean_ms"]),
            "N_mean_ms": min(fair, key=lambda r: r["N_mean_ms"]),
        }
        rss_fair = min(r["peak_rss_mb"] for r in fair)
        ratios = {k: best[k][k] / ours[k] if ours[k] > 0 else math.inf for k in best}
        goals = {
            "H_p99_ms": ratios["H_p99_ms"] >= 2.0,
            "C_mean_ms": ratios["C_mean_ms"] >= 1.0,
            "N_mean_ms": ratios["N_mean_ms"] >= 1.0,
        }
        lines.append(
            f"peak RSS: sparkqos {ours['peak_rss_mb']:.0f} MB, FAIR lowest {rss_fair:.0f} MB -> "
            f"{'no higher' if ours['peak_rss_mb'] <= rss_fair else 'HIGHER'}"
        )
        lines.append(
            f"strategy mix {ours.get('strategy_mix')}; sparkqos options {ours.get('options') or 'defaults'}; FAIR best: "
            + ", ".join(f"{k.split('_')[0]} {k.split('_')[1]} at {best[k]['variant']}" for k in best)
        )
        lines.append(
            f"goal: class-H p99 <= 0.5x FAIR's best ({'met' if goals['H_p99_ms'] else 'NOT met'}), class C and N mean "
            f"no worse ({'met' if goals['C_mean_ms'] and goals['N_mean_ms'] else 'NOT met'})"
        )
        lines.append(f"class-C mean ratio FAIR-best/sparkqos: {ratios['C_mean_ms']:.2f}")
        lines.append(f"class-N mean ratio FAIR-best/sparkqos: {ratios['N_mean_ms']:.2f}")
        lines.append(f"class-H mean ratio FAIR-best/sparkqos: {min(r['H_mean_ms'] for r in fair) / ours['H_mean_ms']:.2f}")
        lines.append(f"class-H p99 ratio FAIR-best/sparkqos: {ratios['H_p99_ms']:.2f}")
    for line in lines:
        print(line)
    (out / "summary.txt").write_text(text + "\n" + "\n".join(lines) + "\n")
    (out / "results.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
