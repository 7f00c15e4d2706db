"""Highest input rate sustained: sparkqos against native Spark on the four sensor queries.

    ./spark-submit.sh benchmarks/throughput.py [--rows 1000000] [--files 20] [--files-per-trigger 2] [--rounds 2]
                                               [--queries sensor|spark-parts]

One Parquet trace of sensor readings (``sparkqos.workloads.sensors.sensor_trace``) split into ``--files``
files is read by Spark's own file source (``spark.readStream.parquet``), ``--files-per-trigger``
files per micro-batch, with an available-now trigger: all of the input is there at the start, so
each system runs flat out, and the rows per second it reaches from start to the last output
written is the highest input rate it sustains — at any higher rate its queues would grow without
bound. The queries are the main job's four PySpark transforms (:mod:`sparkqos.workloads.sensor_transforms`)
at their defaults, with ``work_us=0``: no declared work, the operators' own cost only. The two
costly steps are real code with no declared work (a numpy anomaly
model in a pandas UDF, an enrichment join and a JSON encoding), so both systems run that code:

* ``native`` — Spark runs each transform as its own streaming query (four queries, so the trace
  is read four times), each writing Spark's Parquet file sink; the four run at once and the time
  is until the last one has finished;
* ``sparkqos`` — ``sparkqos.stream(df, transforms, classes=..., priorities=...)`` at its
  defaults but for the available-now trigger: the stream is read once, every query is served by
  the executor, ``finish()`` drains what is still queued; the time includes that drain.

Runs alternate (native, sparkqos, native, ...) for ``--rounds`` rounds in one Spark session after
a small warm-up of both; the medians give the ratio. For sparkqos the wall time is then broken
down into Spark's own per-trigger work (planning, offsets, WAL: ``triggerExecution - addBatch``),
``toArrow`` (Spark reads the files and converts the batch), ingest, executor, sink, checkpoint and
the metrics row, from ``TriggerLoop.phase_s``; the executor's time is broken down further by
operator (each operator's busy time from the statistics gatherer: a select's expressions show
what it computes — a pandas UDF, a hash), by operator kind, and the rest of the executor's time
outside the operators' runs (picking, queues, slicing). Then the GIL probe (:func:`gil_probe`,
``--probe-rows``, sensor queries only) serves part of the trace through the same plan outside Spark
on one thread, by kind of work (each pandas UDF by name, the static join, window aggregation, the
hash, Arrow concatenation and slicing, queue bookkeeping), with each kind's share of time the GIL
was free — what several executor threads can gain. The last line is
``throughput ratio sparkqos/native: X.XX``.

``--queries spark-parts`` runs instead four queries over a Kafka-style JSON ``value`` column (the
readings as JSON, beside the columns): JSON parsing, a regular expression and a filter, then, for
two of them, an event-time window aggregate. sparkqos has no native ``from_json`` or
``regexp_extract``: Spark evaluates each query's row-wise part inside the micro-batch (the
``spark`` phase), the windows run natively.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _with_json(table):
    """``table`` with a ``value`` column: each reading as a JSON object, as a Kafka topic carries it."""
    import pyarrow as pa
    import pyarrow.compute as pc

    parts = [
        '{"sensor_id": ',
        pc.cast(table["sensor_id"], pa.string()),
        ', "location": "',
        table["location"],
        '", "temperature": ',
        pc.cast(table["temperature"], pa.string()),
        ', "humidity": ',
        pc.cast(table["humidity"], pa.string()),
        "}",
    ]
    return table.append_column("value", pc.binary_join_element_wise(*parts, ""))


def spark_part_transforms() -> tuple[dict, dict[str, str], dict[str, float]]:
    """Four queries whose row-wise part (JSON parse + regex + filter) Spark evaluates, two with a
    window aggregate above it; their classes and priorities."""
    from pyspark.sql import functions as F

    reading = "sensor_id int, location string, temperature double, humidity double"

    def parsed(df):
        return df.withWatermark("ts", "2 seconds").select(F.from_json("value", reading).alias("r"), "ts").select("r.*", "ts")

    def hot(df):
        zone = F.regexp_extract("location", r"(\d+)$", 1)
        return parsed(df).where(F.col("temperature") > 60).select("sensor_id", zone.alias("zone"), "temperature", "ts")

    def dry(df):
        rh = F.get_json_object("value", "$.humidity").cast("double")
        return df.select("sensor_id", rh.alias("rh"), "ts").where(F.col("rh") < 15)

    def zone_temps(df):
        zone = F.regexp_extract("location", r"(\d+)$", 1)
        return (
            parsed(df)
            .where(F.col("temperature").isNotNull())
            .select(zone.alias("zone"), "temperature", "ts")
            .groupBy(F.window("ts", "10 seconds"), "zone")
            .agg(F.count(F.lit(1)).alias("count"), F.avg("temperature").alias("avg_temperature"))
        )

    def humid_sites(df):
        return (
            parsed(df)
            .where(F.col("location").rlike("[0-9]$") & (F.col("humidity") > 50))
            .groupBy(F.window("ts", "10 seconds"))
            .agg(F.count(F.lit(1)).alias("count"), F.max("humidity").alias("max_humidity"))
        )

    queries = {"hot": hot, "dry": dry, "zone_temps": zone_temps, "humid_sites": humid_sites}
    return queries, {"hot": "H", "dry": "C", "zone_temps": "N", "humid_sites": "N"}, {"H": 6.0, "C": 3.0, "N": 1.0}


def query_set(name: str) -> tuple[dict, dict[str, str], dict[str, float]]:
    """The transforms, classes and priorities of query set ``name``."""
    if name == "spark-parts":
        return spark_part_transforms()
    from sparkqos.workloads.sensor_transforms import SENSOR_QUERY_CLASSES, sensor_transforms
    from sparkqos.workloads.sensors import SENSOR_CLASSES

    return sensor_transforms(), SENSOR_QUERY_CLASSES, SENSOR_CLASSES


def write_trace(folder: Path, rows: int, files: int, seed: int, json_value: bool = False) -> int:
    """The trace as ``files`` Parquet files in time order (the file source reads them by name);
    ``json_value``: with each reading also as a JSON ``value`` string."""
    from sparkqos.workloads.sensors import sensor_trace

    folder.mkdir(parents=True)
    table = sensor_trace(folder.parent / "whole.parquet", rows, seconds=rows / 20_000, seed=seed, fire_probability=0.01)
    if json_value:
        table = _with_json(table)
    step = -(-rows // files)
    for i in range(files):
        pq.write_table(table.slice(i * step, step), folder / f"part-{i:05d}.parquet")
    (folder.parent / "whole.parquet").unlink()
    return table.num_rows


def file_stream(spark, folder: Path, per_trigger: int):
    schema = spark.read.parquet(str(folder)).schema  # the file source needs it given
    return spark.readStream.schema(schema).option("maxFilesPerTrigger", per_trigger).parquet(str(folder))


def run_native(spark, trace: Path, out: Path, per_trigger: int, queries_name: str = "sensor") -> dict:
    """Each transform as its own streaming query with Spark's Parquet sink; seconds until all end."""
    transforms, _, _ = query_set(queries_name)
    started = time.perf_counter()
    queries = []
    for name, transform in transforms.items():
        queries.append(
            transform(file_stream(spark, trace, per_trigger))
            .writeStream.format("parquet")
            .option("path", str(out / name))
            .option("checkpointLocation", str(out / "_checkpoint" / name))
            .outputMode("append")
            .queryName(f"native_{name}")
            .trigger(availableNow=True)
            .start()
        )
    for q in queries:
        q.awaitTermination()
        if q.exception() is not None:
            raise RuntimeError(f"native query {q.name} failed: {q.exception()}")
    seconds = time.perf_counter() - started
    rows_out = {
        q.name.removeprefix("native_"): spark.read.parquet(str(out / q.name.removeprefix("native_"))).count() for q in queries
    }
    return {"seconds": seconds, "rows_out": rows_out}


def run_sparkqos(
    spark, trace: Path, out: Path, per_trigger: int, queries_name: str = "sensor", threads: int | None = None
) -> dict:
    """The four transforms as one sparkqos stream; seconds until the drained outputs are written."""
    import sparkqos
    from sparkqos.io.sinks import read_parquet_sink

    transforms, classes, priorities = query_set(queries_name)
    started = time.perf_counter()
    handle = sparkqos.stream(
        file_stream(spark, trace, per_trigger),
        transforms,
        classes=classes,
        priorities=priorities,
        trigger=sparkqos.Trigger(availableNow=True),
        checkpoint=out / "_checkpoint",
        output=out,
        name="throughput",
        **({"threads": threads} if threads else {}),
    )
    query = handle.start()
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"the sparkqos stream failed: {query.exception()}")
    loop_s = time.perf_counter() - started
    handle.finish()
    seconds = time.perf_counter() - started
    spark_own = sum(p["durationMs"].get("triggerExecution", 0) - p["durationMs"].get("addBatch", 0) for p in query.recentProgress)
    phases = dict(handle.loop.phase_s)
    phases["spark per-trigger work"] = spark_own / 1000.0
    phases["finish (drain)"] = seconds - loop_s
    rows_out = {q: t.num_rows for q, t in read_parquet_sink(out / "outputs").items()}
    records = handle.recentProgress
    executor_cpu = sum(p.get("executorCpuS") or 0.0 for p in records)
    executor_busy = sum(p.get("executorBusyS") or 0.0 for p in records)
    return {
        "executor_cores": executor_cpu / executor_busy if executor_busy > 0 else float("nan"),
        "seconds": seconds,
        "rows_out": rows_out,
        "phases": phases,
        "triggers": len(query.recentProgress),
        "operators": operator_times(handle.loop),
        "compiled": handle.loop.compiled,
    }


def operator_times(loop) -> list[dict]:
    """Per operator of the executor's plan: its kind, what it computes, the seconds its runs took
    (the statistics gatherer's busy time), its runs and the rows it consumed."""
    from sparkqos.executor.expressions import Col

    compiled, stats = loop.compiled, loop.executor.state.stats.operators()
    out = []
    for op in compiled.plan:
        s = stats.get(op.name)
        physical = compiled.operators[op.name]
        # a select: the expressions it computes (a UDF, a hash), not the columns it passes on
        what = ", ".join(repr(e) for e in getattr(physical, "exprs", ()) if not isinstance(e, Col))
        out.append(
            {
                "name": op.name,
                "kind": op.kind,
                "what": what if len(what) <= 60 else what[:57] + "...",
                "seconds": s.busy_time if s else 0.0,
                "runs": s.runs if s else 0,
                "rows": s.consumed if s else 0.0,
            }
        )
    return out


def print_operator_times(operators: list[dict], executor_s: float) -> None:
    """Where the executor's time went: per operator, per kind, and outside the operators' runs."""
    busy = sum(o["seconds"] for o in operators)
    print(f"where the executor's {executor_s:.2f} s went, by operator (the busy time of its runs):")
    for o in sorted(operators, key=lambda o: -o["seconds"]):
        per_row = 1e6 * o["seconds"] / o["rows"] if o["rows"] else float("nan")
        print(
            f"  {o['name']:<28} {o['kind']:<9} {o['seconds']:7.2f} s  {100 * o['seconds'] / executor_s:5.1f}%"
            f"  {o['runs']:>6} runs  {o['rows']:>10,.0f} rows  {per_row:6.2f} us/row  {o['what']}"
        )
    kinds: dict[str, float] = {}
    for o in operators:
        kinds[o["kind"]] = kinds.get(o["kind"], 0.0) + o["seconds"]
    by_kind = ", ".join(f"{k} {v:.2f} s" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1]))
    print(f"  by kind: {by_kind}; outside the operators' runs (picking, queues, slicing) {executor_s - busy:.2f} s")


def _udfs(expr, found: list[str]) -> list[str]:
    """The names of the UDFs an expression calls (a walk of its nodes' attributes)."""
    from sparkqos.executor.expressions import Expr
    from sparkqos.executor.udf import PythonUdf

    if isinstance(expr, PythonUdf):
        found.append(expr.udf)
    for value in vars(expr).values() if hasattr(expr, "__dict__") else ():
        for v in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(v, Expr):
                _udfs(v, found)
    return found


def work_kind(physical) -> str:
    """What an operator's kernel is, in the words of the breakdown: a pandas UDF (by its name),
    the static join, window aggregation, a hash, or the operator's class."""
    udfs = [u for e in getattr(physical, "exprs", ()) for u in _udfs(e, [])]
    if hasattr(physical, "predicate"):
        udfs += _udfs(physical.predicate, [])
    if udfs:
        return "pandas UDF " + "+".join(dict.fromkeys(udfs))
    name = type(physical).__name__
    if name == "StaticJoin":
        return "static join"
    if name in ("WindowAgg", "EventWindowAgg") or "window" in physical.name:
        return "window aggregation"
    if any(h in repr(e) for e in getattr(physical, "exprs", ()) for h in ("sha2", "md5", "crc32", "xxhash64")):
        return "hash"
    return name.lower()


class _Spinner:
    """A thread that runs Python bytecode only (it needs the GIL for every step) and counts its
    steps: while another thread holds the GIL it cannot step."""

    def __init__(self):
        import threading

        self.count = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._spin, name="gil-probe", daemon=True)

    def _spin(self) -> None:
        stop = self._stop
        n = 0
        while not stop.is_set():
            for _ in range(1000):
                n += 1
            self.count = n

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def rate(self, seconds: float = 0.3) -> float:
        """Steps per second while this thread sleeps (holds no GIL)."""
        c0, t0 = self.count, time.perf_counter()
        time.sleep(seconds)
        return (self.count - c0) / (time.perf_counter() - t0)


def gil_probe(compiled, table, rows: int, batch_rows: int = 100_000) -> dict:
    """Where the executor's time goes by kind of work, and how much of each holds the GIL.

    A fresh copy of ``compiled`` serves the first ``rows`` rows of ``table`` (fifo, one thread,
    ``batch_rows`` rows per ingest and run), outside Spark. Each operator run is timed whole and its
    kernel (``process``) alone; the run less the kernel is taking the rows off the queue and
    joining the slices taken (Arrow concatenation and slicing); the executor's time outside the
    runs is picking, queue bookkeeping, statistics and delivering outputs. A second thread spins
    Python bytecode all along (:class:`_Spinner`): the steps it makes while a kernel runs, over the
    steps it makes in as long while this thread sleeps, are the share of that time the GIL was free
    (the rest, the kernel held it, and a second executor thread could not have run Python)."""
    from sparkqos.executor.loop import Executor

    fresh = compiled.fresh()
    kinds: dict[str, list[float]] = {}  # kind -> [kernel s, kernel cpu s, spinner steps in kernels]
    around = {"runs": 0.0, "kernels": 0.0}

    def timed(kind, process, spinner):
        def inner(batch, port=0):
            c0, w0, t0 = spinner.count, time.perf_counter(), time.thread_time()
            try:
                return process(batch, port)
            finally:
                w, t, c = time.perf_counter() - w0, time.thread_time() - t0, spinner.count - c0
                e = kinds.setdefault(kind, [0.0, 0.0, 0.0])
                e[0] += w
                e[1] += t
                e[2] += c
                around["kernels"] += w

        return inner

    def whole(run):
        def inner(*args, **kw):
            w0 = time.perf_counter()
            try:
                return run(*args, **kw)
            finally:
                around["runs"] += time.perf_counter() - w0

        return inner

    with _Spinner() as spinner:
        for op in fresh.operators.values():
            op.process = timed(work_kind(op), op.process, spinner)
            op.run = whole(op.run)
        ex = Executor(fresh, "fifo", threads=1)
        rate0 = spinner.rate()
        t0 = time.perf_counter()
        for i in range(0, min(rows, table.num_rows), batch_rows):
            ex.ingest("input", table.slice(i, min(batch_rows, rows - i)))
            ex.run()
        ex.finish()
        total = time.perf_counter() - t0
        rate0 = (rate0 + spinner.rate()) / 2
    return {"total": total, "kinds": kinds, "rate0": rate0, **around}


def print_gil_probe(probe: dict, rows: int) -> None:
    total = probe["total"]
    print(
        f"where the executor's time goes by kind of work, and the GIL ({rows:,} rows of the trace through the plan "
        f"outside Spark, one thread, a second thread spinning Python: its steps during a kernel over its steps while idle "
        f"= the share of the kernel's time the GIL was free):"
    )
    lines = [(k, w, t, c) for k, (w, t, c) in probe["kinds"].items()]
    lines.append(("Arrow concat/slicing (taking rows)", probe["runs"] - probe["kernels"], float("nan"), float("nan")))
    lines.append(("queue bookkeeping, picking, delivery", total - probe["runs"], float("nan"), float("nan")))
    for kind, w, t, c in sorted(lines, key=lambda r: -r[1]):
        free = 100 * c / (w * probe["rate0"]) if w > 0 and c == c else float("nan")
        gil = f"GIL free {min(free, 100.0):5.1f}%" if free == free else ""
        cpu = f"cpu {t:6.2f} s" if t == t else " " * 12
        print(f"  {kind:<40} {w:7.2f} s  {100 * w / total:5.1f}%  {cpu}  {gil}")
    print(f"  (total {total:.2f} s, {rows / total:,.0f} rows/s on one thread)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000, help="rows in the trace")
    ap.add_argument("--files", type=int, default=20, help="Parquet files the trace is split into")
    ap.add_argument("--files-per-trigger", type=int, default=2, help="maxFilesPerTrigger of the file source")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--keep", help="keep the work folder here")
    ap.add_argument(
        "--probe-rows",
        type=int,
        default=100_000,
        help="rows of the trace the GIL probe serves outside Spark after the rounds (0: no probe; sensor queries only)",
    )
    ap.add_argument(
        "--queries",
        choices=["sensor", "spark-parts"],
        default="sensor",
        help="sensor: the main job's four transforms; spark-parts: JSON + regex + filter (evaluated by Spark) then windows",
    )
    ap.add_argument("--threads", type=int, default=0, help="sparkqos's threads= (0: its default)")
    args = ap.parse_args(argv)
    for name in ("rows", "files", "files_per_trigger", "rounds"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1")

    from pyspark.sql import SparkSession

    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="sparkqos-throughput-"))
    shutil.rmtree(work, ignore_errors=True)
    json_value = args.queries == "spark-parts"
    rows = write_trace(work / "trace", args.rows, args.files, args.seed, json_value)
    write_trace(work / "warm", 20_000, 2, args.seed + 1, json_value)
    spark = (
        SparkSession.builder.appName("throughput")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.streaming.numRecentProgressUpdates", "10000")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    print(
        f"throughput: {rows} rows in {args.files} files, {args.files_per_trigger} per trigger, available-now; "
        f"query set {args.queries!r}; {args.rounds} round(s)",
        flush=True,
    )
    run_native(spark, work / "warm", work / "warm-native", 1, args.queries)
    run_sparkqos(spark, work / "warm", work / "warm-sparkqos", 1, args.queries, args.threads)
    results: dict[str, list[dict]] = {"native": [], "sparkqos": []}
    for r in range(args.rounds):
        for kind, fn in (("native", run_native), ("sparkqos", run_sparkqos)):
            more = (args.threads,) if kind == "sparkqos" else ()
            res = fn(spark, work / "trace", work / f"{kind}-{r}", args.files_per_trigger, args.queries, *more)
            results[kind].append(res)
            line = f"  round {r + 1} {kind:<9} {res['seconds']:7.2f} s  {rows / res['seconds']:>10,.0f} rows/s"
            print(f"{line}  out {res['rows_out']}", flush=True)
    spark.stop()

    rate = {k: statistics.median(rows / r["seconds"] for r in v) for k, v in results.items()}
    best = min(results["sparkqos"], key=lambda r: abs(rows / r["seconds"] - rate["sparkqos"]))
    print()
    print(f"native   (4 streaming queries, 4 reads): {rate['native']:>10,.0f} rows/s (median of {args.rounds})")
    print(f"sparkqos (1 stream, executor)          : {rate['sparkqos']:>10,.0f} rows/s (median of {args.rounds})")
    print(f"where sparkqos's {best['seconds']:.2f} s went ({best['triggers']} triggers):")
    total = best["seconds"]
    for name, s in sorted(best["phases"].items(), key=lambda kv: -kv[1]):
        print(f"  {name:<24} {s:7.2f} s  {100 * s / total:5.1f}%")
    print("  (the executor works on its own thread between triggers, so parts overlap and need not add up to the wall time)")
    print(
        f"  the executor's threads used {best['executor_cores']:.2f} cores while it served "
        "(executorCpuS over executorBusyS of the triggers' progress records)"
    )
    print_operator_times(best["operators"], best["phases"].get("executor", 0.0))
    if args.probe_rows > 0 and args.queries == "sensor":
        trace = pq.read_table(work / "trace")
        print_gil_probe(gil_probe(best["compiled"], trace, args.probe_rows), min(args.probe_rows, trace.num_rows))
    print(f"throughput ratio sparkqos/native: {rate['sparkqos'] / rate['native']:.2f}")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
