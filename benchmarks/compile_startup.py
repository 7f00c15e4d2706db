"""Start-up of big plans: compile time per operator count, and the time from ``start()`` to the
first micro-batch.

    ./spark-submit.sh benchmarks/compile_startup.py [--plans 5,10,20,40] [--first-batch] [--profile N]

The plans are the cos experiment's (jobs/experiments/cos.py: COS §5.1's shape, N queries of
eight synthetic operators over one replayed stream, so N = 5, 10, 20, 40 gives 40 → 320
operators). For each it prints the seconds ``sparkqos.stream(...)`` takes to build the stream
(the transforms applied, Spark's analyzed plans read and compiled into the executor's plan) and,
with ``--first-batch``, the seconds from ``start()`` to the first progress record (the first
micro-batch processed: Spark's planning of the source and the batch function included), then
Spark's ``durationMs`` of that first trigger (``addBatch`` is the batch function, sparkqos's
executor included).
The compile seconds split into those inside the transforms (``transforms s``: the user's code
building its DataFrames, Spark analysing each ``where``/``select`` as it would for any query) and
the rest (``sparkqos s``: reading the analyzed plans and compiling them); ``to batch s`` is the
compile plus the first batch, the time from calling ``stream()`` to the first micro-batch.
``--profile N`` profiles the compile of the N-query plan with cProfile and prints the top
functions by cumulative time. Target: the first micro-batch of 320 operators within
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
    """The cos experiment's stream of ``queries`` × 8 operators; returns (handle, seconds of
    ``stream()``, seconds of those inside the transforms, operators)."""
    import sparkqos

    plan = cos_plan(queries, 3)
    transforms, classes, priorities = C.synthetic_transforms(plan, C.cost_unit_for(plan, 400.0, 0.85), classes={})
    user = [0.0]  # seconds inside the transforms: the DataFrames they build, Spark analysing each

    def timed(transform):
        def run(df):
            t0 = time.perf_counter()
            try:
                return transform(df)
            finally:
                user[0] += time.perf_counter() - t0

        return run

    transforms = {q: timed(f) for q, f in transforms.items()}
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
    return handle, time.perf_counter() - t0, user[0], len(plan)


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
    heads = ("operators", "compile s", "transforms s", "sparkqos s", "first batch s", "to batch s")
    print("  ".join(f"{h:>{w}}" for h, w in zip(heads, (9, 9, 12, 10, 13, 10), strict=True)))
    durations = []
    for n in (int(x) for x in args.plans.split(",")):
        first = []
        seen = first.append
        handle, compile_s, user_s, ops = build(spark, trace, n, tmp / f"p{n}", on_progress=lambda p, seen=seen: seen(time.time()))
        batch = total = "-"
        if args.first_batch:
            t0 = time.time()
            query = handle.start()
            while not first and query.isActive and time.time() - t0 < 120:
                query.awaitTermination(0.05)
            batch = f"{first[0] - t0:.2f}" if first else "none in 120 s"
            total = f"{first[0] - t0 + compile_s:.2f}" if first else "-"
            while first and query.lastProgress is None and time.time() - t0 < 130:
                query.awaitTermination(0.05)
            durations.append((ops, (query.lastProgress or {}).get("durationMs")))
            handle.stop()
        cols = f"{ops:>9}  {compile_s:>9.2f}  {user_s:>12.2f}  {compile_s - user_s:>10.2f}  {batch:>13}  {total:>10}"
        print(cols, flush=True)
    for ops, ms in durations:  # where the first trigger's time went, by Spark's own account
        print(f"first trigger of {ops} operators, Spark's durationMs: {ms}")
    spark.stop()
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
