"""Start-up of big plans: compile time per operator count, and the time from ``start()`` to the
first micro-batch.

    ./spark-submit.sh benchmarks/compile_startup.py [--plans 5,10,20,40] [--first-batch] [--profile N]

The plans are the cos experiment's (jobs/experiments/cos.py: COS §5.1's shape, N queries of
eight synthetic operators over one replayed stream, so N = 5, 10, 20, 40 gives 40 → 320
operators). For each it prints the seconds ``sparkqos.stream(...)`` takes to build the stream
(the transforms applied, Spark's analyzed plans read and compiled into the executor's plan) and,
with ``--first-batch``, the seconds from ``start()`` to the first progress record (the first
micro-batch processed: Spark's planning of the source and the batch function included).
``--profile N`` profiles the compile of the N-query plan with cProfile and prints the top
functions by cumulative time. Target (issue 28): the first micro-batch of 320 operators within
5 s of ``start()``.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "jobs" / "experiments"))
sys.path.insert(0, str(ROOT / "jobs"))

import _common as C  # noqa: E402
from cos_sim import cos_plan  # noqa: E402


def build(spark, trace: Path, queries: int, work: Path, on_progress=None):
    """The cos experiment's stream of ``queries`` × 8 operators; returns (handle, seconds)."""
    import sparkqos

    plan = cos_plan(queries, 3)
    transforms, classes, priorities = C.synthetic_transforms(plan, C.cost_unit_for(plan, 400.0, 0.85), classes={})
    start = time.time() + 3600  # the replay releases nothing: only start-up is measured
    df = C.keyed(C.replay_df(spark, trace, start=start), origin_s=start)
    shutil.rmtree(work, ignore_errors=True)
    t0 = time.perf_counter()
    handle = sparkqos.stream(
        df,
        transforms,
        classes=classes,
        priorities=priorities,
        strategy="cos",
        checkpoint=work / "ckpt",
        output=work / "out",
        name=f"startup{queries}",
        on_progress=on_progress,
    )
    return handle, time.perf_counter() - t0, len(plan)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--plans", default="5,10,20,40", help="queries per plan (8 operators each)")
    ap.add_argument("--first-batch", action="store_true", help="also start each stream and time its first micro-batch")
    ap.add_argument("--profile", type=int, default=0, help="profile the compile of this many queries")
    args = ap.parse_args(argv)
    spark = C.session("compile_startup")
    tmp = Path(tempfile.mkdtemp(prefix="sparkqos-startup-"))
    trace = tmp / "trace.parquet"
    C.write_bursty_trace(trace, 50.0, 2.0)
    build(spark, trace, 1, tmp / "warm")[0]  # the first compile of a session loads classes
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        build(spark, trace, args.profile, tmp / "prof")
        prof.disable()
        pstats.Stats(prof).sort_stats("cumulative").print_stats(35)
    print(f"{'operators':>9}  {'compile s':>9}  {'first batch s':>13}")
    for n in (int(x) for x in args.plans.split(",")):
        first = []
        seen = first.append
        handle, compile_s, ops = build(spark, trace, n, tmp / f"p{n}", on_progress=lambda p, seen=seen: seen(time.time()))
        batch = "-"
        if args.first_batch:
            t0 = time.time()
            query = handle.start()
            while not first and query.isActive and time.time() - t0 < 120:
                query.awaitTermination(0.05)
            batch = f"{first[0] - t0:.2f}" if first else "none in 120 s"
            handle.stop()
        print(f"{ops:>9}  {compile_s:>9.2f}  {batch:>13}", flush=True)
    spark.stop()
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
