"""Per-trigger wall time of a sparkqos query against a plain foreachBatch doing the same work.

    ./spark-submit.sh benchmarks/trigger_overhead.py [--rows 200000] [--seconds 40] [--rounds 2]

Both read the same replayed trace (``sparkqos.replay``, at most 2 s of stream time per trigger),
apply the same operators (the sensor query set, sparkqos.workloads.sensors) with pyarrow and write the same
outputs with the same Parquet sink. The plain one calls the operators in a loop inside
``foreachBatch``; sparkqos queues the rows, lets the strategy pick every unit, keeps statistics,
checkpoints queues and state and writes its metrics. Its budget is large enough that each trigger
clears its queues, so both do the same work per trigger. Runs alternate (plain, fifo, chain, …)
for ``--rounds`` rounds; the per-trigger time is Spark's ``durationMs.triggerExecution``, median
over all triggers of a kind. Target: sparkqos / plain ≤ 1.3.

``--overload-seconds S`` adds (``--overload-only``: runs only) an overloaded stream: the
trace replayed at its own pace (rows stamped when released) with more declared work than the
machine serves, for S seconds with 1 s triggers, once per trigger (budget ``--overload-budget``)
and once with the continuous worker (``continuous=True``). It prints the executor's busy fraction
of wall time (``executorBusyFraction``, median over triggers after the first two), the rows it
served (``executorRows``) and the fire query's (class H) p99 delay.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa


def plain_foreach(compiled, sink):
    """The same operators applied in a plain pyarrow loop, same sink, no queues or scheduling."""
    from sparkqos.executor.expressions import INTERNAL
    from sparkqos.executor.queues import stamp
    from sparkqos.runtime.trigger import epoch_seconds

    c = compiled.fresh()
    plan = c.plan
    schema = c.sources["sensors"]
    chains = [(p.query, list(p.operators)) for p in plan.paths]
    ops = c.operators
    seq = [0]

    def fn(batch_df, batch_id):
        table = batch_df.toArrow()
        outputs: dict[str, list] = {q: [] for q in plan.queries}
        if table.num_rows:
            cols = [
                pa.array(epoch_seconds(table.column(f.name)), pa.float64()) if f.name == "ts" else table.column(f.name)
                for f in schema
            ]
            batch = pa.table(cols, names=schema.names).combine_chunks().to_batches()[0]
            stamped = stamp(batch, epoch_seconds(table.column("ts")), seq[0])
            seq[0] += batch.num_rows
            for query, chain in chains:
                cur = stamped
                for name in chain:
                    cur = ops[name].process(cur)
                    if cur is None or cur.num_rows == 0:
                        break
                else:
                    outputs[query].append(cur)
        sink.write(batch_id, {q: pa.Table.from_batches(bs).drop_columns(list(INTERNAL)) for q, bs in outputs.items() if bs})

    return fn


def trigger_times(query) -> list[float]:
    return [p["durationMs"]["triggerExecution"] / 1000.0 for p in query.recentProgress if p["numInputRows"] > 0]


def overload(spark, work: Path, args: argparse.Namespace) -> None:
    """The overloaded runs, per trigger then continuous; prints one line each."""
    import sparkqos
    from sparkqos.workloads.sensors import sensor_queries, sensor_trace

    seconds = args.overload_seconds
    trace = work / "overload.parquet"
    sensor_trace(trace, int(args.overload_rate * seconds * 2), seconds * 2, seed=5)  # never runs dry
    compiled = sensor_queries(work_us=args.overload_work_us).build()
    print(
        f"overload: {args.overload_rate:g} rows/s at its own pace, {args.overload_work_us:g} µs declared work, "
        f"{seconds:g}s per run, 1 s triggers",
        flush=True,
    )
    print(f"{'run':<12} {'triggers':>9} {'busy fraction':>14} {'rows served':>15} {'fire p99 ms':>12}")
    for continuous in (False, True):
        kind = "continuous" if continuous else "per-trigger"
        df = (
            spark.readStream.format("sparkqos.replay")
            .option("path", str(trace))
            .option("speed", "1")
            .option("retime", "true")
            .load()
        )
        handle = sparkqos.stream(
            df,
            compiled,
            strategy="chain",
            trigger_s=1.0,
            budget_s=args.overload_budget,
            continuous=continuous,
            checkpoint=work / f"overload-{kind}" / "ckpt",
            output=work / f"overload-{kind}",
            name=f"overload_{kind.replace('-', '_')}",
        )
        handle.start()
        time.sleep(seconds)
        handle.stop()
        progress = handle.recentProgress[2:]
        busy = statistics.median(p["executorBusyFraction"] for p in progress) if progress else float("nan")
        fire = [q["delayP99_s"] for p in progress for q in p["queries"] if q["query"] == "fire" and q["rowsOut"] > 0]
        fire_p99 = statistics.median(fire) * 1000 if fire else float("nan")
        rows = sum(p["executorRows"] for p in handle.recentProgress)
        print(f"{kind:<12} {len(progress):>9} {busy:>14.2f} {rows:>15} {fire_p99:>12.1f}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--seconds", type=float, default=40.0, help="stream time the trace spans")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--work-us", type=float, default=20.0, help="declared work of the costly operators")
    parser.add_argument("--strategies", default="fifo,chain,adaptive")
    parser.add_argument("--overload-seconds", type=float, default=0.0, help="overloaded runs' length (0: none)")
    parser.add_argument("--overload-only", action="store_true", help="run only the overloaded runs")
    parser.add_argument("--overload-rate", type=float, default=4000.0, help="rows per second of the overloaded trace")
    parser.add_argument("--overload-work-us", type=float, default=300.0, help="declared work in the overloaded runs")
    parser.add_argument("--overload-budget", type=float, default=0.75, help="executor seconds per 1 s trigger, per-trigger run")
    args = parser.parse_args(argv)

    from pyspark.sql import SparkSession

    import sparkqos
    from sparkqos import sources
    from sparkqos.io.sinks import ParquetSink
    from sparkqos.workloads.sensors import sensor_queries, sensor_trace

    spark = SparkSession.builder.appName("trigger_overhead").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    sources.register(spark)
    work = Path(tempfile.mkdtemp(prefix="sparkqos-bench-"))
    if args.overload_only:
        try:
            overload(spark, work, args)
        finally:
            shutil.rmtree(work, ignore_errors=True)
            spark.stop()
        return 0
    trace = work / "trace.parquet"
    sensor_trace(trace, args.rows, args.seconds, seed=3)
    compiled = sensor_queries(work_us=args.work_us).build()
    strategies = [s for s in args.strategies.split(",") if s]
    per_kind: dict[str, list[float]] = {"plain": [], **{s: [] for s in strategies}}
    expected_triggers = int(np.ceil(args.seconds / 2.0))
    print(
        f"trace: {args.rows} rows over {args.seconds:g}s of stream time, ~{expected_triggers} triggers per run, "
        f"{args.rounds} rounds × {1 + len(strategies)} runs",
        flush=True,
    )

    def source():
        return (
            spark.readStream.format("sparkqos.replay")
            .option("path", str(trace))
            .option("speed", "max")
            .option("maxSecondsPerTrigger", "2")
            .load()
        )

    try:
        for r in range(args.rounds):
            for kind in per_kind:
                run_dir = work / f"{kind}-{r}"
                started = time.time()
                if kind == "plain":
                    sink = ParquetSink(run_dir / "outputs")
                    query = (
                        source()
                        .writeStream.foreachBatch(plain_foreach(compiled, sink))
                        .option("checkpointLocation", str(run_dir / "ckpt"))
                        .trigger(availableNow=True)
                        .start()
                    )
                    query.awaitTermination()
                else:
                    handle = sparkqos.stream(
                        source(),
                        compiled,
                        strategy=kind,
                        trigger=sparkqos.Trigger(availableNow=True),
                        budget_s=600.0,
                        checkpoint=run_dir / "ckpt",
                        output=run_dir,
                        name=kind,
                    )
                    query = handle.start()
                    query.awaitTermination()
                times = trigger_times(query)
                per_kind[kind].extend(times)
                out_rows = sum(t.num_rows for t in ParquetSink(run_dir / "outputs").read().values())
                print(
                    f"round {r + 1} {kind:<9} {len(times)} triggers, median {statistics.median(times) * 1000:7.1f} ms, "
                    f"{out_rows} output rows, {time.time() - started:5.1f}s",
                    flush=True,
                )
        if args.overload_seconds > 0:
            overload(spark, work, args)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        spark.stop()

    base = statistics.median(per_kind["plain"])
    print()
    print(f"{'run':<10} {'triggers':>9} {'median ms':>10} {'p90 ms':>8} {'ratio':>7}")
    for kind, times in per_kind.items():
        med = statistics.median(times)
        p90 = statistics.quantiles(times, n=10)[-1] if len(times) > 2 else med
        print(f"{kind:<10} {len(times):>9} {med * 1000:>10.1f} {p90 * 1000:>8.1f} {med / base:>7.2f}")
    print(
        "target: sparkqos / plain ≤ 1.30 (window aggregates hold back rows until their window closes in "
        "both; outputs are equal in total once the trace ends)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
