"""COS on threads, executor only: how many cores do the cluster threads get, and how much sooner
do they finish the same work than one thread?

    ./spark-submit.sh benchmarks/cos_threads.py [--queries 5,40] [--load 1.2] [--threads 2]

The plans are the cos experiment's (jobs/cos_sim.cos_plan: ``--queries`` × 8 operators, compiled
from their PySpark transforms as ``sparkqos.stream`` compiles them; a local Spark session reads
the plans, nothing runs on Spark), its synthetic operators spending their declared CPU in a hash
that releases the GIL (one call per run), costs scaled so the trace's mean rate is ``--load`` ×
one core of work. The same bursty trace is fed to three executors a quarter-second of rows at a time, each
serving for 0.05 s after every feed and then draining: ``chain`` and ``cos`` on one thread, and
``cos`` with ``--threads`` cluster threads. Spark's JVM is idle meanwhile, so this is what the
threads can do when they have the cores; in a streaming run the JVM and the trigger's own work
take part of them (jobs/experiments/cos.py reports both).

Per run: wall seconds, CPU seconds of the serving threads (``RunReport.cpu_s``), cores (their
ratio), units taken from another thread's clusters. The last line of each plan is
``cos threads/serial wall ratio (Nops): X.XX`` (below 1: the threads finish sooner).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "jobs"), str(ROOT / "jobs" / "experiments")]

RATE = 400.0  # rows/s of the trace
FEED_S = 0.25  # stream seconds per feed
SERVE_S = 0.05  # executor seconds after each feed


def measure(compiled, strategy: str, threads: int, table, params: dict) -> dict[str, float]:
    from sparkqos import schedulers
    from sparkqos.executor.loop import Executor

    ex = Executor(compiled.fresh(), schedulers.get(strategy, **params), cluster_threads=threads)
    try:
        chunk = max(1, int(RATE * FEED_S))
        cpu = 0.0
        t0 = time.perf_counter()
        for i in range(0, table.num_rows, chunk):
            ex.ingest("input", table.slice(i, chunk))
            cpu += ex.run(SERVE_S).cpu_s
        cpu += ex.finish().cpu_s
        wall = time.perf_counter() - t0
        return {"wall": wall, "cpu": cpu, "cores": cpu / wall, "stolen": ex.stolen_units, "queued": ex.state.total_queued}
    finally:
        ex.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queries", default="5,40", help="plan sizes: queries of 8 operators each")
    ap.add_argument("--load", type=float, default=1.2, help="work at the mean rate, in cores")
    ap.add_argument("--seconds", type=float, default=12.0, help="trace length")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--T", type=float, default=0.3, help="cos similarity threshold")
    args = ap.parse_args(argv)
    if args.threads < 2 or args.load <= 0 or args.seconds <= 0:
        ap.error("--threads must be >= 2, --load and --seconds > 0")
    sizes = [int(q) for q in args.queries.split(",") if q.strip()]

    import _common as C
    from cos_sim import cos_plan

    from sparkqos.spark.transforms import compile_transforms

    spark = C.session("cos_threads", warm_up=False)
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.parquet"
        C.write_bursty_trace(trace, RATE, args.seconds, seed=7)
        df = C.keyed(spark.read.parquet(str(trace)))
        table = df.toArrow()
    print(f"cos on threads, executor only: {table.num_rows} rows over {args.seconds:g}s (bursty), load {args.load:g}")
    for q in sizes:
        plan = cos_plan(q, 3)
        transforms, classes, priorities = C.synthetic_transforms(plan, C.cost_unit_for(plan, RATE, args.load), classes={})
        t0 = time.perf_counter()
        compiled = compile_transforms(df, transforms, classes, priorities)
        ops = len(compiled.plan.names)
        print(f"\n{q} queries: {ops} operators (compiled in {time.perf_counter() - t0:.1f}s)")
        print(f"  {'run':<14} {'wall s':>7} {'cpu s':>7} {'cores':>6} {'stolen':>7}")
        runs = {}
        for label, strategy, threads in (
            ("chain", "chain", 0),
            ("cos", "cos", 0),
            (f"cos {args.threads} thr", "cos", args.threads),
        ):
            params = {"T": args.T} if strategy == "cos" else {}
            r = runs[label] = measure(compiled, strategy, threads, table, params)
            if r["queued"]:
                raise SystemExit(f"{label}: {r['queued']} rows left queued after finish()")
            print(f"  {label:<14} {r['wall']:7.2f} {r['cpu']:7.2f} {r['cores']:6.2f} {r['stolen']:7d}", flush=True)
        ratio = runs[f"cos {args.threads} thr"]["wall"] / runs["cos"]["wall"]
        print(f"cos threads/serial wall ratio ({ops}ops): {ratio:.2f}")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
