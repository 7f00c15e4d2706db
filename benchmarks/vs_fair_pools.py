"""sparkqos against what a Spark user does today: one streaming query per query class in FAIR pools.

    .venv/bin/python benchmarks/vs_fair_pools.py [--seconds 60] [--rate 4000] [--work-us 150] [--trigger 0.5] [--budget 0.4]

One bursty trace (recorded once, replayed at its own pace with ``sparkqos.replay``) feeds, in
turn, on the same machine:

* ``fair`` — the four sensor queries (sparkqos.examples) as four separate Spark streaming
  queries in FAIR scheduler pools H/C/N with weights 6/3/1 (conf/fairscheduler.xml;
  ``setLocalProperty("spark.scheduler.pool", …)`` before each ``start()``). fire, anomaly and
  archive run the very same pyarrow operators as sparkqos (so the same CPU work) inside Spark
  tasks with ``mapInArrow``; zone_stats is Spark's own event-time window aggregation;
* ``cqc`` and ``adaptive`` — the same queries as one sparkqos query set.

Each variant runs in its own ``spark-submit`` (its own JVM), so peak memory is the resident
memory of that process tree, sampled every 0.2 s. Delay is measured the same way for all: the
wall time a row left its query's last operator minus its event time ``ts`` (for a window
aggregate: the newest ``ts`` in the window); for fair, results.json also keeps "delivered" (the
wall time the row reached the foreachBatch code minus ``ts``). Every query replays the trace from
the same instant, ``--lead`` seconds after start-up, with Python workers already warm, and the
trace opens with ``--warmup`` seconds of a quiet trickle (no class-H or class-C rows) so the slow
first micro-batches of every query are over before the bursts. Rows still queued when the input
ends are drained (sparkqos ``finish()``), so every row is counted. Goal (issue 7): class-H p99
delay ≥ 2× lower than fair, no lost output.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "jobs" / "experiments"))

import _common as C  # noqa: E402

POOLS = {"H": "H", "C": "C", "N": "N"}
VARIANTS = ("fair", "cqc", "adaptive")


# -- plain Spark: one streaming query per sensor query, FAIR pools ------------------------------------
def _chain_fn(operators, emit_col: str = "emit"):
    """A mapInArrow function running ``operators`` (bound pyarrow operators, in order) on each
    batch and stamping each output row with the wall time it left the last one."""

    def fn(batches):
        import pyarrow as pa

        from sparkqos.executor.queues import stamp
        from sparkqos.spark.trigger import epoch_seconds

        for b in batches:
            if b.num_rows == 0:
                continue
            ts = epoch_seconds(b.column(b.schema.get_field_index("ts")))
            cols = [pa.array(ts) if name == "ts" else b.column(i) for i, name in enumerate(b.schema.names)]
            plain = pa.RecordBatch.from_arrays(cols, names=b.schema.names)
            # a per-row key for the synthetic operators' keep/drop hash (sparkqos uses its own
            # sequence numbers; the kept fraction is the same in expectation)
            key = (ts * 1e6).astype(np.int64) * 64 + np.asarray(b.column(b.schema.get_field_index("sensor_id"))) % 64
            cur = stamp(plain, ts, 0)
            cur = pa.RecordBatch.from_arrays(list(cur.columns[:-1]) + [pa.array(key)], names=cur.schema.names)
            for op in operators:
                cur = op.process(cur)
                if cur is None or cur.num_rows == 0:
                    break
            else:
                now = time.time()
                keep = [n for n in cur.schema.names if not n.startswith("__")]
                out = cur.select(keep)
                yield pa.RecordBatch.from_arrays(
                    list(out.columns) + [pa.array(np.full(out.num_rows, now))], names=keep + [emit_col]
                )

    return fn


def run_fair(args, out: Path) -> dict:
    import pyarrow.parquet as pq
    from pyspark.sql import functions as F

    from sparkqos.examples import sensor_queries

    spark = C.session("vs_fair_pools-fair")
    sc = spark.sparkContext
    if sc.getConf().get("spark.scheduler.mode", "FIFO") != "FAIR":
        raise SystemExit("fair variant needs --conf spark.scheduler.mode=FAIR (the parent passes it)")
    compiled = sensor_queries(work_us=args.work_us).build().fresh()
    plan = compiled.plan
    lock = threading.Lock()
    delays: dict[str, list] = {q: [] for q in plan.queries}
    delivered: dict[str, list] = {q: [] for q in plan.queries}
    started = time.time()

    def sink(query: str, emit_of):
        folder = out / "outputs" / query
        folder.mkdir(parents=True, exist_ok=True)

        def write(batch_df, batch_id):
            t = batch_df.toArrow()
            now = time.time()
            if t.num_rows:
                ts_col = "last_ts" if query == "zone_stats" else "ts"
                ts = C_seconds(t.column(ts_col))
                emit = emit_of(t, now)
                with lock:
                    delays[query].append(emit - ts)
                    delivered[query].append(now - ts)
                pq.write_table(t, folder / f"batch-{batch_id}.parquet")
            el = now - started
            if not args.quiet:
                print(
                    f"  [fair {el:5.1f}/{args.lead + args.seconds + 2 * args.trigger:.0f}s] {query:<10} batch {batch_id:>3} "
                    f"out {t.num_rows:>6}",
                    flush=True,
                )

        return write

    queries = {}
    replay_start = time.time() + args.lead  # every query replays the trace from the same instant
    for path in plan.paths:
        q = path.query
        klass = plan.queries[q].klass
        sc.setLocalProperty("spark.scheduler.pool", POOLS[klass])
        df = C.replay_df(spark, args.trace, start=replay_start)
        if q == "zone_stats":
            op = compiled.operators[path.operators[0]]
            agg = (
                df.withWatermark("ts", "0 seconds")
                .groupBy(F.window("ts", f"{int(op.size)} seconds"), "location")
                .agg(
                    F.count(F.lit(1)).alias("count"),
                    F.avg("temperature").alias("avg_temperature"),
                    F.max("humidity").alias("max_humidity"),
                    F.max("ts").alias("last_ts"),
                )
            )
            stream_df = agg.select(
                F.col("window.start").cast("double").alias("window_start"),
                F.col("window.end").cast("double").alias("window_end"),
                "location",
                "count",
                "avg_temperature",
                "max_humidity",
                F.col("last_ts").cast("double").alias("last_ts"),
            )
            emit_of = lambda t, now: np.full(t.num_rows, now)  # noqa: E731  (emitted when the batch ends)
        else:
            ops = [compiled.operators[n] for n in path.operators]
            schema = ops[-1].schema
            ddl = ", ".join(f"{f.name} {_ddl(f.type)}" for f in schema if not f.name.startswith("__")) + ", emit double"
            stream_df = df.mapInArrow(_chain_fn(ops), ddl)
            emit_of = lambda t, now: t.column("emit").to_numpy()  # noqa: E731
        queries[q] = (
            stream_df.writeStream.foreachBatch(sink(q, emit_of))
            .queryName(f"fair_{q}")
            .outputMode("append")
            .option("checkpointLocation", str(out / "_checkpoint" / q))
            .trigger(processingTime=f"{args.trigger} seconds")
            .start()
        )
    sc.setLocalProperty("spark.scheduler.pool", None)
    seen: dict[str, dict[int, int]] = {q: {} for q in queries}
    deadline = time.time() + 4 * args.seconds + 60
    try:
        while time.time() < deadline:
            for q, sq in queries.items():
                if sq.exception() is not None:
                    raise RuntimeError(f"fair query {q} failed: {sq.exception()}")
                for p in sq.recentProgress:
                    seen[q][p["batchId"]] = p["numInputRows"]
            if all(sum(s.values()) >= args.rows for s in seen.values()):
                time.sleep(2 * args.trigger)  # let the window query emit on a no-data batch
                break
            time.sleep(0.5)
    finally:
        for sq in queries.values():
            sq.stop()
    rows_in = {q: sum(s.values()) for q, s in seen.items()}
    klass_of = {q.name: q.klass for q in plan.queries.values()}
    result = _result(
        "fair",
        klass_of,
        {q: _cat(v) for q, v in delays.items()},
        {q: _cat(v) for q, v in delivered.items()},
        rows_in=min(rows_in.values()),
        peak_queued_mb=math.nan,
        elapsed=time.time() - started,
    )
    spark.stop()
    return result


def C_seconds(column) -> np.ndarray:
    from sparkqos.spark.trigger import epoch_seconds

    return epoch_seconds(column)


def _ddl(t) -> str:
    import pyarrow as pa

    if pa.types.is_int32(t):
        return "int"
    if pa.types.is_int64(t):
        return "bigint"
    if pa.types.is_floating(t):
        return "double"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    raise TypeError(f"no DDL type for {t}")


def _cat(parts: list) -> np.ndarray:
    return np.concatenate(parts) if parts else np.empty(0)


def _result(variant, klass_of, delays, delivered, rows_in, peak_queued_mb, elapsed) -> dict:
    def by_class(d, k):
        parts = [d[q] for q, kk in klass_of.items() if kk == k and q in d]
        return _cat(parts)

    h, n = by_class(delays, "H"), by_class(delays, "N")
    hd = by_class(delivered, "H")
    return {
        "variant": variant,
        "rows_in": int(rows_in),
        "H_mean_ms": C.mean_ms(h),
        "H_p99_ms": C.p99_ms(h),
        "H_max_ms": float(h.max() * 1000) if h.size else math.nan,
        "H_delivered_p99_ms": C.p99_ms(hd),
        "C_mean_ms": C.mean_ms(by_class(delays, "C")),
        "N_mean_ms": C.mean_ms(n),
        "rows_out": {q: int(delays[q].size) for q in klass_of},
        "total_out": int(sum(delays[q].size for q in klass_of)),
        "peak_queued_mb": peak_queued_mb,
        "elapsed_s": elapsed,
    }


# -- sparkqos ---------------------------------------------------------------------------------------
def register_spark_cqc(k: float, quantum: float) -> str:
    """CQC with its round ``k`` and unit ``quantum`` sized for wall-clock seconds inside a 1 s
    trigger. The library defaults (k = 20, quantum = 1: the paper's time units) would hand a
    class several whole triggers in a row, and adaptive builds its members with defaults, so
    the benchmark registers this variant as a user would."""
    from sparkqos import schedulers
    from sparkqos.schedulers.cqc import Cqc

    class CqcSpark(Cqc):
        def __init__(self, k: float = k, quantum: float = quantum):
            super().__init__(k=k, quantum=quantum)

    schedulers.register("cqc_spark", replace=True)(CqcSpark)
    return "cqc_spark"


def run_sparkqos_variant(args, out: Path, strategy: str) -> dict:
    from sparkqos.examples import sensor_queries

    spark = C.session(f"vs_fair_pools-{strategy}")
    compiled = sensor_queries(work_us=args.work_us).build()
    cqc = register_spark_cqc(args.cqc_k, args.cqc_quantum)
    params = {"candidates": ["fifo", "chain", "pc", cqc], "seed": 0} if strategy == "adaptive" else {}
    if strategy == "cqc":
        strategy = cqc
    qos = args.qos if strategy == "adaptive" else None
    stats = C.run_sparkqos(
        spark,
        args.trace,
        compiled,
        strategy,
        out=out,
        name=strategy,
        input_rows=args.rows,
        trace_s=args.seconds,
        trigger_s=args.trigger,
        budget_s=args.budget or None,
        strategy_params=params,
        qos=qos,
        quiet=args.quiet,
        lead_s=args.lead,
    )
    delays = {q: stats.query_delays(q) for q in stats.klass_of}
    result = _result(
        "cqc" if strategy == cqc else strategy,
        stats.klass_of,
        delays,
        {},
        rows_in=stats.rows_in,
        peak_queued_mb=stats.peak_bytes / 1e6,
        elapsed=stats.elapsed,
    )
    result["strategy_mix"] = stats.strategies
    spark.stop()
    return result


# -- the parent: record the trace, run each variant in its own spark-submit, compare ---------------
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=60.0, help="length of the bursty trace")
    ap.add_argument("--rate", type=float, default=4000.0, help="mean rows/s of the trace")
    ap.add_argument("--off-scale", type=float, default=8.0, help="bursty minimum OFF period (s)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--work-us", type=float, default=150.0, help="declared CPU µs per row of the costly steps")
    ap.add_argument("--trigger", type=float, default=0.5, help="trigger interval of every query (s)")
    ap.add_argument("--budget", type=float, default=0.4, help="sparkqos executor budget per trigger; 0 = trigger")
    ap.add_argument("--qos", default="balanced", help="adaptive's QoS template")
    ap.add_argument("--cqc-k", type=float, default=0.5, help="cqc round length, seconds (class H gets 6/10 of it)")
    ap.add_argument("--cqc-quantum", type=float, default=0.05, help="cqc's longest unit of work, seconds")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--out", default=str(ROOT / "output" / "vs_fair_pools"))
    ap.add_argument(
        "--warmup",
        type=float,
        default=20.0,
        help="seconds of a 4 rows/s trickle (no fire, no anomaly) before the bursty trace, so "
        "every query's slow first micro-batches are behind it",
    )
    ap.add_argument("--lead", type=float, default=8.0, help="seconds between starting the queries and the first row")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--variant", help=argparse.SUPPRESS)
    ap.add_argument("--trace", help=argparse.SUPPRESS)
    ap.add_argument("--rows", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    out = Path(args.out)

    if args.variant:  # child
        vout = out / args.variant
        shutil.rmtree(vout / "_checkpoint", ignore_errors=True)
        shutil.rmtree(vout / "outputs", ignore_errors=True)
        result = run_fair(args, vout) if args.variant == "fair" else run_sparkqos_variant(args, vout, args.variant)
        (vout / "result.json").write_text(json.dumps(result, indent=1))
        return 0

    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    bad = [v for v in variants if v not in VARIANTS]
    if bad:
        ap.error(f"unknown variant(s) {bad}; choose from {VARIANTS}")
    out.mkdir(parents=True, exist_ok=True)
    trace = out / "trace.parquet"
    rows = C.write_bursty_trace(trace, args.rate, args.seconds, seed=args.seed, off_scale=args.off_scale, warmup_s=args.warmup)
    args.seconds += args.warmup
    per_run = args.seconds + args.lead + 25
    print(
        f"vs_fair_pools: trace {rows} rows over {args.seconds:g}s ({args.warmup:g}s trickle, then bursty, "
        f"mean {args.rate:g}/s, seed {args.seed}); "
        f"work {args.work_us:g} µs/row; variants {', '.join(variants)}; expect about "
        f"{len(variants) * per_run / 60:.0f}-{len(variants) * 2 * per_run / 60:.0f} min",
        flush=True,
    )
    results = []
    for v in variants:
        vout = out / v
        vout.mkdir(parents=True, exist_ok=True)
        (vout / "result.json").unlink(missing_ok=True)
        cmd = [str(ROOT / "spark-submit.sh"), "--master", "local[2]"]
        if v == "fair":
            cmd += [
                "--conf",
                "spark.scheduler.mode=FAIR",
                "--conf",
                f"spark.scheduler.allocation.file={ROOT / 'conf' / 'fairscheduler.xml'}",
            ]
        cmd += [
            str(Path(__file__).resolve()),
            "--variant",
            v,
            "--trace",
            str(trace),
            "--rows",
            str(rows),
            "--seconds",
            str(args.seconds),
            "--work-us",
            str(args.work_us),
            "--trigger",
            str(args.trigger),
            "--budget",
            str(args.budget),
            "--lead",
            str(args.lead),
            "--cqc-k",
            str(args.cqc_k),
            "--cqc-quantum",
            str(args.cqc_quantum),
            "--qos",
            args.qos,
            "--out",
            str(out),
        ] + (["--quiet"] if args.quiet else [])
        print(f"-- {v}: {' '.join(cmd[:1] + cmd[3:7] if v == 'fair' else cmd[:1])} ...", flush=True)
        proc = subprocess.Popen(cmd)
        peak = 0
        while proc.poll() is None:
            peak = max(peak, C.rss_tree_bytes(proc.pid))
            time.sleep(0.2)
        if proc.returncode != 0 or not (vout / "result.json").exists():
            print(f"vs_fair_pools: variant {v} failed (exit {proc.returncode})", file=sys.stderr)
            return 1
        r = json.loads((vout / "result.json").read_text())
        r["peak_rss_mb"] = peak / 1e6
        results.append(r)

    header = [
        "variant",
        "H mean ms",
        "H p99 ms",
        "H max ms",
        "C mean ms",
        "N mean ms",
        "rows out",
        "fire",
        "archive",
        "peak RSS MB",
        "peak queued MB",
    ]
    rows_t = [
        [
            r["variant"],
            r["H_mean_ms"],
            r["H_p99_ms"],
            r["H_max_ms"],
            r["C_mean_ms"],
            r["N_mean_ms"],
            r["total_out"],
            r["rows_out"]["fire"],
            r["rows_out"]["archive"],
            r["peak_rss_mb"],
            r["peak_queued_mb"],
        ]
        for r in results
    ]
    print()
    text = C.print_table(
        f"vs_fair_pools: {rows} rows, {args.warmup:g}s trickle + {args.seconds - args.warmup:g}s bursty trace, "
        f"{args.rate:g} rows/s mean, "
        f"work {args.work_us:g} µs, trigger {args.trigger:g}s, local[2]",
        header,
        rows_t,
    )
    base = next((r for r in results if r["variant"] == "fair"), None)
    verdicts = []
    for r in results:
        if base is None or r is base:
            continue
        ratio = base["H_p99_ms"] / r["H_p99_ms"] if r["H_p99_ms"] > 0 else math.inf
        lost = {q: base["rows_out"][q] - r["rows_out"][q] for q in ("fire", "archive")}
        ok = ratio >= 2 and all(v == 0 for v in lost.values())
        verdicts.append(
            f"{r['variant']}: class-H p99 {ratio:.2f}x lower than FAIR pools; fire/archive rows vs fair "
            f"{r['rows_out']['fire']}/{r['rows_out']['archive']} vs {base['rows_out']['fire']}/"
            f"{base['rows_out']['archive']} (input {rows}) -> goal {'MET' if ok else 'NOT met'}"
            + (f"; strategy mix {r.get('strategy_mix')}" if r.get("strategy_mix") else "")
        )
    for v in verdicts:
        print(v)
    (out / "summary.txt").write_text(text + "\n" + "\n".join(verdicts) + "\n")
    (out / "results.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
