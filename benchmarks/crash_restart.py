"""Crash and restart: the sensor job SIGKILLed at many points, restarted from its checkpoint, loses
nothing and writes nothing twice.

    .venv/bin/python benchmarks/crash_restart.py [--rows 12000] [--seconds 48] [--seed 5] [--sink parquet|delta]
                                                 [--lane driver|sharded]

A replayable trace (Parquet) is fed to ``jobs/sensor_monitor.py`` (replay source, at most 2 s of
stream time per micro-batch, so the trace takes ``seconds / 2`` batches). First one uninterrupted
run; then one run per crash, each restarted from the same output and checkpoint folders:

* eight injected points (the job's ``--fault``; the trigger loop SIGKILLs its own process): five
  of a trigger — at the start of foreachBatch, after the executor's run, between the sink write and
  our checkpoint, after our checkpoint (before Spark commits the batch), at the end of
  foreachBatch — and three of the continuous worker (the job's default mode): on the
  worker's thread after a slice served rows between two triggers (the executor ahead of the
  checkpoint), while a trigger pauses the worker with a slice possibly in flight, and right after
  the worker wrote class H's rows early as a part of the next batch (parts no checkpoint covers;
  that run sets ``job.top_class_s=0`` so class H's rows reach the worker);
* two SIGKILLs of the whole process group (driver and JVM) at seeded random moments;
* finally a torn checkpoint file: the job must refuse to start with a message naming the file.

The child is the job's own ``main()`` with the replay option ``source.retime=false``
(rows keep their recorded timestamps), so two runs started at different times see the same rows.
After the last run, whatever the final checkpoint still holds (queued rows, open windows) is
finished in-process, and the union of the sink is compared as a multiset with the uninterrupted
run's and with a direct replay of the trace through the executor: lost rows and duplicates are
printed per query (both must be 0).

``--sink delta`` runs the job with its Delta sink (``job.sink=delta``: sparkqos.io.delta,
one Delta table per query, one commit per batch with the transaction identifier (app id, batch
id)). It takes no early parts, so ``after_early_write`` cannot fire there; ``after_ingest`` takes
its place (10 faults all the same). The Delta tables are checked too: each table's transaction
version is the newest batch it holds, and no batch id beyond the last checkpointed one.

``--lane sharded`` runs the job's sharded lane (``job.shards=2``, by ``sensor_id``; its per-sensor
queries fire and anomaly, the ones the lane runs: sparkqos.spark.sharded) on ``local[2,4]`` — a
failed task is tried again, as on a cluster, where local mode gives it one attempt. The shards'
state is Spark's state store, so a batch is done when Spark commits it. Faults: a shard's Python
worker SIGKILLed in the middle of its micro-batch (``in_shard``: the task fails, Spark retries it
from the state before it; the job goes on and is stopped once a later batch is committed); the
driver SIGKILLed after the shards' state of a batch is committed and before its outputs are
written (``after_run``), after the sink write (``after_sink``) and after the metrics (``after_progress``),
both before Spark marks the batch done; and the two SIGKILLs of the process group. Each run stops
once the job has taken every row of the trace; the last one drains what the shards still hold
(``job.finish=true``: ShardedStream.finish, a Spark job over the state store's newest committed
version, written to the sink as the next batch). The oracles are the same; there is no torn-file
step (no sparkqos checkpoint file: Spark reads its own state store).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sparkqos.runtime.config import FAULT_POINTS  # noqa: E402

CAP_S = 2.0
#: The anomaly model's size: 16 × the job's default, so the lower classes' work of a batch outlasts
#: what a trigger serves at once (``top_class_s``, a tenth of the trigger) and the continuous worker
#: has rows to serve between triggers — where the ``between_triggers`` and ``in_pause`` faults
#: strike. At the default size a trigger served everything itself and those two never fired.
MODEL_SIZE = 32768
#: Every crash point of the library (sparkqos.runtime.config.FAULT_POINTS) but ``after_ingest``,
#: which lands in the same state as ``after_run`` (nothing written, nothing checkpointed), and
#: ``in_shard``, the sharded lane's (this job runs the driver's trigger loop).
FAULTS = [p for p in FAULT_POINTS if p not in ("after_ingest", "in_shard")]
#: With ``--sink delta`` (no early parts, so ``after_early_write`` cannot fire): ``after_ingest`` instead.
DELTA_FAULTS = [p for p in FAULT_POINTS if p not in ("after_early_write", "in_shard")]
#: ``--lane sharded``: the faults of the sharded lane (sparkqos.spark.sharded), the worker's first.
SHARDED_FAULTS = ["in_shard", "after_run", "after_sink", "after_progress"]
#: ``--lane sharded``: the shards, and the job's queries the lane runs (per sensor; the zone
#: statistics group sensors by location).
SHARDS = 2
SHARDED_QUERIES = ["fire", "anomaly"]
#: ``--lane sharded``: local mode with four attempts per task (local mode's default is one), so a
#: shard whose Python worker is killed is tried again, as a cluster does.
SHARDED_MASTER = "local[2,4]"
#: Extra settings of a fault's run: class H's rows reach the worker (and its early writes) only when
#: the trigger does not serve them itself, as it does at the job's defaults (fire is cheap).
FAULT_SETTINGS = {"after_early_write": ["--set", "job.top_class_s=0"]}


def make_trace(path: Path, rows: int, seconds: float, seed: int) -> pa.Table:
    from sparkqos.workloads.sensors import sensor_trace

    return sensor_trace(path, rows, seconds, seed, fire_probability=0.01, temperature_spread=14.0)


def child(argv: list[str]) -> int:
    """The job's own main()."""
    from jobs import sensor_monitor as job

    return job.main(argv)


#: ``--sink``: the job's sink, and ``--lane``, set by main().
SINK = ["parquet"]
LANE = ["driver"]


def job_args(trace: Path, out: Path) -> list[str]:
    return [
        "--set",
        f"job.sink={SINK[0]}",
        "--output",
        str(out),
        "--checkpoint",
        str(out / "_checkpoint"),
        "--duration",
        "0",
        "--quiet",
        "--set",
        "source.format=replay",
        "--set",
        "source.retime=false",
        "--set",
        f"source.path={trace}",
        "--set",
        "source.speed=max",
        "--set",
        f"source.max_seconds_per_trigger={CAP_S}",
        "--set",
        "job.trigger_s=0.5",
        "--set",
        "job.report=false",
        "--set",
        "scheduler.strategy=adaptive",
        "--set",
        f"queries.model_size={MODEL_SIZE}",
    ] + (sharded_args() if LANE[0] == "sharded" else [])


def sharded_args() -> list[str]:
    return ["--set", f"job.shards={SHARDS}", "--set", f"queries.run={json.dumps(SHARDED_QUERIES)}"]


def checkpointed(out: Path) -> list[int]:
    """The batches done: our checkpoint files (driver lane), Spark's commit log (sharded lane)."""
    if LANE[0] == "sharded":
        folder = out / "_checkpoint" / "spark" / "commits"
        return sorted(int(p.name) for p in folder.glob("[0-9]*")) if folder.is_dir() else []
    folder = out / "_checkpoint" / "sparkqos"
    return sorted(int(p.name[:20]) for p in folder.glob("*.ckpt")) if folder.is_dir() else []


def rows_taken(out: Path) -> int:
    """Input rows of the batches the job reported (the metrics table holds one file per batch id,
    a replayed batch's replacing its first attempt's), over every process that ran."""
    import pyarrow.compute as pc

    from sparkqos.report import metrics

    try:
        table = metrics.read(out, run="sensor_monitor")
    except FileNotFoundError:
        return 0
    plan = table.filter(pc.equal(table.column("query"), metrics.PLAN_ROW))
    return int(sum(dict(zip(plan.column("batchId").to_pylist(), plan.column("rowsIn").to_pylist(), strict=True)).values()))


def run_job(
    trace: Path,
    out: Path,
    last: int,
    fault: str | None = None,
    kill_after: float | None = None,
    timeout: float | None = None,
    extra: list[str] | None = None,
    rows: int = 0,
) -> dict:
    """One run of the job; returns how it ended. It is stopped (SIGTERM) once batch ``last`` is
    checkpointed (sharded lane: once the job took all ``rows`` of the trace), killed by its own
    fault, or SIGKILLed (group) ``kill_after`` s after its first batch. A shard's worker killed by
    its fault (``in_shard``) leaves the job running: it is stopped once a later batch is done.
    ``timeout``: 300 s, 600 s for the sharded lane (Spark's state store commit in every batch)."""
    timeout = timeout if timeout is not None else 600 if LANE[0] == "sharded" else 300
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable, PYTHONPATH=str(ROOT))
    env.pop("SPARKQOS_FAULT", None)  # the job's default for --fault: only the fault asked for here may fire
    if LANE[0] == "sharded":
        env["PYSPARK_SUBMIT_ARGS"] = f"--master {SHARDED_MASTER} pyspark-shell"
    argv = job_args(trace, out) + (["--fault", fault] if fault else []) + list(extra or [])
    # ShardedStream leaves this file when its fault kills a shard's worker (once per step)
    marker = out / "_checkpoint" / "faults" / fault.replace(":", "-") if fault and fault.startswith("in_shard") else None
    before = checkpointed(out)
    log_path = out.parent / f"{out.name}.log"
    log = open(log_path, "ab")
    log_start = log.tell()
    proc = subprocess.Popen(
        [sys.executable, __file__, "--child", "--", *argv], cwd=ROOT, env=env, stdout=log, stderr=log, start_new_session=True
    )
    t0, first = time.time(), None
    how = None
    seen, taken, complete, fired_after, said = None, False, False, None, None
    try:
        while True:
            rc = proc.poll()
            done = checkpointed(out)
            if first is None and done != before:
                first = time.time()
            if rc is not None:
                how = "killed by its fault" if rc == -signal.SIGKILL else f"exited {rc}"
                break
            if kill_after is not None and first is not None and time.time() - first >= kill_after:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                how = f"SIGKILLed (process group) {kill_after:.2f}s after its first batch"
                break
            if marker is not None and fired_after is None and marker.exists():
                fired_after = done[-1] if done else -1
            if fired_after is not None and done and done[-1] > fired_after:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=300)
                how = f"killed by its fault (a shard's Python worker; Spark tried the task again), stopped after batch {done[-1]}"
                break
            if LANE[0] == "sharded" and kill_after is None and not complete:
                # every row taken, and this run has a query running: it committed a batch, or
                # (nothing left to replay or drain) it started its query a while ago
                if done != seen:
                    seen, taken = done, rows_taken(out) >= rows
                if said is None and taken and _query_started(log_path, log_start):
                    said = time.time()
                complete = taken and (done != before or (said is not None and time.time() - said > 10))
            if complete if LANE[0] == "sharded" else (done and done[-1] >= last):
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=300)
                how = "stopped after the last batch" if LANE[0] == "driver" else "stopped once every row was taken"
                break
            if time.time() - t0 > timeout:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                how = "timed out"
                break
            time.sleep(0.05)
    finally:
        try:  # the JVM of a killed driver exits when its stdin closes; make sure, it is ours
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        log.close()
    after = checkpointed(out)
    return {
        "how": how,
        "seconds": time.time() - t0,
        "checkpoint_before": before[-1] if before else -1,
        "checkpoint_after": after[-1] if after else -1,
    }


def _query_started(log: Path, start: int) -> bool:
    """Whether the job, in the part of its log from ``start``, said it starts its streaming query
    (jobs/_jobkit.py says so once a SIGTERM stops the query between triggers)."""
    with open(log, "rb") as f:
        f.seek(start)
        return b"starting Spark's streaming query" in f.read()


def final_outputs(out: Path, compiled_factory) -> dict[str, pa.Table]:
    """The sink's union plus what the final checkpoint still holds, finished in-process (the
    sharded lane's last run drained its shards into the sink itself)."""
    from sparkqos import schedulers
    from sparkqos.executor.expressions import INTERNAL
    from sparkqos.executor.loop import EMIT, Executor
    from sparkqos.io.sinks import read_parquet_sink
    from sparkqos.runtime.checkpoint import CheckpointStore
    from sparkqos.runtime.trigger import decode_state

    if SINK[0] == "delta":
        from sparkqos.io.delta import read_delta_sink

        sink = read_delta_sink(out / "delta")
    else:
        sink = read_parquet_sink(out / "outputs")
    if LANE[0] == "sharded":
        return sink
    ckpt = CheckpointStore(out / "_checkpoint" / "sparkqos").load_latest()
    compiled = compiled_factory()
    state = decode_state(ckpt.state["executor"])
    state["scheduler"] = {}
    ex = Executor(compiled.fresh(), schedulers.get("fifo"))
    ex.load_state(state)
    ex.load_queue_tables(ckpt.queues)
    ex.finish()
    rest = ex.take_outputs()
    merged = {}
    for q, t in rest.items():
        t = t.drop_columns([c for c in t.column_names if c in INTERNAL or c == EMIT])
        parts = [x for x in (sink.get(q), t) if x is not None and x.num_rows]
        merged[q] = pa.concat_tables([p.cast(parts[0].schema) for p in parts]) if parts else t
    return merged


def oracle(trace: pa.Table, trace_path: Path, compiled_factory) -> dict[str, pa.Table]:
    """Every query's rows of the whole trace in one batch through the executor: the trace's rows
    for the natively read input, and Spark's rows for each part Spark evaluates (if a query has
    one), as a micro-batch of the job would give them."""
    from pyspark.sql import SparkSession

    from sparkqos import schedulers
    from sparkqos.executor.loop import replay
    from sparkqos.spark.transforms import input_tables

    compiled = compiled_factory()
    tables = input_tables(compiled, SparkSession.builder.getOrCreate().read.parquet(str(trace_path)))
    start = float(trace.column("ts").cast(pa.int64()).to_numpy().min() / 1e6)
    feeds = [(start, stream, table.combine_chunks().to_batches()[0]) for stream, table in tables.items() if table.num_rows]
    ex = replay(compiled, schedulers.get("fifo"), feeds)
    return {q: ex.result(q) for q in ex.compiled.roots}


def rows_of(table: pa.Table) -> dict[tuple, list[tuple]]:
    """Rows grouped by their exact cells (every column but the floating-point ones), each group a
    list of its rows' float cells: a window's mean may differ in its last bits with how its rows
    were split into runs across a crash (summation order), so floats are compared with a
    tolerance (:func:`compare`), never rounded (rounding flips at a boundary: 25.1831875 against
    25.183187500000003 rounds to 25.183187 and 25.183188)."""
    cols = sorted(table.column_names)
    groups: dict[tuple, list[tuple]] = {}
    for r in table.select(cols).to_pylist():
        exact, floats = [], []
        for c in cols:
            v = r[c]
            if isinstance(v, dict):  # a window struct
                v = tuple(v.values())
            (floats if isinstance(v, float) else exact).append(v)
        groups.setdefault(tuple(exact), []).append(tuple(floats))
    return groups


def _unmatched(rows: list[tuple], others: list[tuple]) -> int:
    """How many of ``rows`` find no distinct partner in ``others`` with every float close."""
    free = list(others)
    missing = 0
    for row in rows:
        for i, other in enumerate(free):
            if all(math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) or (a != a and b != b) for a, b in zip(row, other)):
                del free[i]
                break
        else:
            missing += 1
    return missing


def compare(got: dict[str, pa.Table], want: dict[str, pa.Table]) -> dict[str, dict[str, int]]:
    out = {}
    for q in sorted(set(got) | set(want)):
        g = rows_of(got[q]) if q in got else {}
        w = rows_of(want[q]) if q in want else {}
        out[q] = {
            "rows": sum(len(v) for v in w.values()),
            "lost": sum(_unmatched(rows, g.get(k, [])) for k, rows in w.items()),
            "extra": sum(_unmatched(rows, w.get(k, [])) for k, rows in g.items()),
        }
    return out


def delta_versions_match(out: Path, last: int) -> bool:
    """Each Delta table's transaction version for the job is the newest batch it holds, and it holds no
    batch beyond ``last``: one commit per batch, the replays' included, none lost or extra."""
    from sparkqos.io.delta import DeltaSink, read_delta_sink

    sink = DeltaSink(out / "delta", app_id="sparkqos")
    ok = True
    for query, table in read_delta_sink(out / "delta", with_batch_id=True).items():
        batches = sorted(set(table.column("batch_id").to_pylist()))
        committed = sink.committed(query)
        good = bool(batches) and committed == batches[-1] and batches[-1] <= last + 1
        ok &= good
        print(
            f"delta {query:<11} batches {batches[0] if batches else '-'}..{batches[-1] if batches else '-'} "
            f"({len(batches)} with rows), transaction version {committed}: {'ok' if good else 'MISMATCH'}"
        )
    return ok


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        return child(sys.argv[3:] if sys.argv[2:3] == ["--"] else sys.argv[2:])
    # The oracle compiles the job's transforms from a streaming DataFrame in this process: the
    # replay source's Python workers must run this interpreter (the one with pyarrow), not
    # whatever "python3" is on the PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=12000)
    parser.add_argument("--seconds", type=float, default=48.0)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--keep", help="keep the run folders here instead of a temporary folder")
    parser.add_argument("--sink", choices=("parquet", "delta"), default="parquet", help="the job's sink (default parquet)")
    parser.add_argument(
        "--lane", choices=("driver", "sharded"), default="driver", help="the job's driver lane (default) or its sharded lane"
    )
    args = parser.parse_args()
    if args.lane == "sharded" and args.sink != "parquet":
        parser.error("--lane sharded runs with the Parquet sink")
    SINK[0] = args.sink
    LANE[0] = args.lane
    sharded = args.lane == "sharded"
    faults = SHARDED_FAULTS if sharded else FAULTS if args.sink == "parquet" else DELTA_FAULTS
    # the sharded lane's runs stop once every row is taken; the last one drains what the shards hold
    drain = ["--set", "job.finish=true"] if sharded else []

    def factory():
        """The job's plan: its PySpark transforms (conf defaults) compiled over the replay source."""
        from pyspark.sql import SparkSession

        from sparkqos import sources
        from sparkqos.spark.transforms import compile_transforms
        from sparkqos.workloads.sensor_transforms import SENSOR_QUERY_CLASSES, sensor_transforms
        from sparkqos.workloads.sensors import SENSOR_CLASSES

        spark = (
            SparkSession.builder.master("local[1]")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.session.timeZone", "UTC")
            .getOrCreate()
        )
        sources.register(spark)
        df = spark.readStream.format("sparkqos.replay").option("path", str(trace_path)).option("speed", "max").load()
        queries = sensor_transforms(model_size=MODEL_SIZE, window_s=10.0, watermark_s=2.0)
        if sharded:
            queries = {q: queries[q] for q in SHARDED_QUERIES}
        return compile_transforms(df, queries, {q: SENSOR_QUERY_CLASSES[q] for q in queries}, SENSOR_CLASSES)

    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="sparkqos-crash-"))
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    trace_path = work / "trace.parquet"
    trace = make_trace(trace_path, args.rows, args.seconds, args.seed)
    last = int(np.ceil(args.seconds / CAP_S)) - 1
    rng = random.Random(args.seed)
    print(f"trace: {args.rows} rows over {args.seconds:g}s, {CAP_S:g}s of stream time per batch -> batches 0..{last}", flush=True)
    if sharded:
        print(f"sharded lane: {SHARDS} shards by sensor_id on {SHARDED_MASTER}, queries {', '.join(SHARDED_QUERIES)}", flush=True)

    baseline = run_job(trace_path, work / "baseline", last, extra=drain, rows=trace.num_rows)
    print(
        f"uninterrupted run: {baseline['how']} at batch {baseline['checkpoint_after']} ({baseline['seconds']:.0f}s)", flush=True
    )

    crashed = work / "crashed"
    # Each injected fault aims at the second batch after the last checkpoint, so it always fires.
    plan = []
    for i, point in enumerate(faults):
        plan.append(("fault", point))
        if i in (1, 3):
            plan.append(("kill", round(rng.uniform(0.3, 1.2), 2)))
    attempts = []
    for kind, arg in plan:
        done = checkpointed(crashed)
        target = min((done[-1] if done else -1) + 2, last)
        fault = f"{arg}:{target}" if kind == "fault" else None
        extra = FAULT_SETTINGS.get(arg, []) if kind == "fault" else []
        r = run_job(
            trace_path, crashed, last, fault=fault, kill_after=arg if kind == "kill" else None, extra=extra, rows=trace.num_rows
        )
        tried = f"--fault {fault}" if kind == "fault" else f"SIGKILL process group at +{arg}s"
        attempts.append((tried, r))
        print(
            f"  {tried:<38} -> {r['how']}; our checkpoint batch {r['checkpoint_before']} -> {r['checkpoint_after']}", flush=True
        )
    final = run_job(trace_path, crashed, last, extra=drain, rows=trace.num_rows)
    attempts.append(("restart, run to the end", final))
    print(
        f"  {'restart, run to the end':<38} -> {final['how']}; "
        f"checkpoint batch {final['checkpoint_before']} -> {final['checkpoint_after']}"
    )

    want = oracle(trace, trace_path, factory)
    base = final_outputs(work / "baseline", factory)
    got = final_outputs(crashed, factory)
    print()
    print(f"{'query':<11} {'rows':>6} {'lost vs uninterrupted':>22} {'extra':>6} {'lost vs direct replay':>22} {'extra':>6}")
    ok = True
    vs_base, vs_oracle, base_ok = compare(got, base), compare(got, want), compare(base, want)
    for q in sorted(want):
        a, b = vs_base[q], vs_oracle[q]
        ok &= a["lost"] == a["extra"] == b["lost"] == b["extra"] == 0 and base_ok[q]["lost"] == base_ok[q]["extra"] == 0
        print(f"{q:<11} {b['rows']:>6} {a['lost']:>22} {a['extra']:>6} {b['lost']:>22} {b['extra']:>6}")
    fired = sum(1 for _, r in attempts[:-1] if r["how"].startswith(("killed by its fault", "SIGKILLed")))
    print(f"crashes that happened: {fired} of {len(plan)}")
    if sharded:  # no sparkqos checkpoint file to tear: the shards' state is Spark's state store
        ok &= fired == len(plan)
        summary = {"attempts": [{"tried": t, **r} for t, r in attempts], "vs_uninterrupted": vs_base, "vs_replay": vs_oracle}
        (work / "summary.json").write_text(json.dumps(summary, indent=1))
        print(f"{'PASS' if ok else 'FAIL'}: folders in {work}")
        return 0 if ok else 1

    # A torn checkpoint: the newest file loses its tail; the job must refuse to start.
    newest = sorted((crashed / "_checkpoint" / "sparkqos").glob("*.ckpt"))[-1]
    data = newest.read_bytes()
    newest.write_bytes(data[: len(data) // 2])
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYTHONPATH=str(ROOT))
    env.pop("SPARKQOS_FAULT", None)
    torn = subprocess.run(
        [sys.executable, __file__, "--child", "--", *job_args(trace_path, crashed)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    message = next((l for l in torn.stderr.splitlines() if "corrupt" in l), torn.stderr.strip().splitlines()[-1:])
    refused = torn.returncode != 0 and "is corrupt" in torn.stderr
    print(f"torn checkpoint {newest.name} (cut to {len(data) // 2} of {len(data)} bytes): exit {torn.returncode}; {message}")
    ok &= refused and fired == len(plan)
    if args.sink == "delta":
        ok &= delta_versions_match(crashed, last)
    summary = {
        "attempts": [{"tried": t, **r} for t, r in attempts],
        "vs_uninterrupted": vs_base,
        "vs_replay": vs_oracle,
        "torn_checkpoint_refused": refused,
    }
    (work / "summary.json").write_text(json.dumps(summary, indent=1))
    print(f"{'PASS' if ok else 'FAIL'}: folders in {work}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
