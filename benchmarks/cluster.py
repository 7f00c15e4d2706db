"""The sharded lane on a real standalone cluster that loses a worker mid-run.

    python benchmarks/cluster.py [--rows 60000] [--files 12] [--kill-at 4] [--out DIR]

Starts a standalone master and two workers on this machine (``spark-class
org.apache.spark.deploy.master.Master`` / ``...worker.Worker`` from the installed pyspark, one
core and 1 GiB each, separate JVMs with their own executor JVMs), then a driver process against
``spark://127.0.0.1:PORT`` that serves the main job's per-sensor queries (fire: class H,
anomaly: class C, every reading: class N) on the sharded lane (``shards=2,
shard_by="sensor_id"``) over a sensor trace split into ``--files`` Parquet files, one per
micro-batch. When the driver has finished micro-batch ``--kill-at``, this process SIGKILLs the
first worker's JVM and the executor JVM it launched (a machine lost): Spark reschedules that
executor's shard tasks on the other one, whose state store loads the shards' state from the
checkpoint. At the end of the input the driver drains the shards (``stop()``, ``finish()``) and
compares every query's rows with Spark's batch answer of the same transforms over the whole
trace: rows lost and duplicated (the readings query writes one row per input row) and the
queries equal. Recovery: the seconds from the kill to the end of the first micro-batch after it,
against the median micro-batch before. Lines:

    cluster: 2 workers + master up in X s; driver on spark://...
    cluster: worker 1 (pid P) and its executor (pid E) killed after micro-batch K
    cluster: N rows, M micro-batches; lost 0, duplicated 0; queries equal to Spark's: 3 of 3
    cluster: the shards ran in 2 Python worker daemons before the kill, 1 after it
    cluster: recovery X s (first micro-batch ending after the kill; median micro-batch Y s before it)

How to run the sharded lane on a cluster of your own is in docs/guide.md ("The sharded lane on
a cluster").
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

QUERIES = {"fire": "H", "anomaly": "C", "readings": "N"}
LAUNCHER = ROOT / "sparkqos" / "spark" / "spark-python"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def environment() -> dict[str, str]:
    """What the master, the workers and the executors they launch need: Spark's home, Java, and
    sparkqos's Python (the launcher runs this interpreter, which has sparkqos installed)."""
    env = dict(os.environ)
    env.update(
        SPARK_HOME=str(spark_home()),
        SPARKQOS_PYTHON=sys.executable,
        PYSPARK_PYTHON=str(LAUNCHER),
        PYTHONPATH=f"{ROOT}{os.pathsep}{env['PYTHONPATH']}" if env.get("PYTHONPATH") else str(ROOT),
        SPARK_LOG_DIR=env.get("SPARK_LOG_DIR", tempfile.gettempdir()),
        SPARK_NO_DAEMONIZE="1",
    )
    return env


def wait_for_port(port: int, timeout_s: float, what: str, proc: subprocess.Popen) -> None:
    ends = time.monotonic() + timeout_s
    while time.monotonic() < ends:
        if proc.poll() is not None:
            raise SystemExit(f"cluster: the {what} exited with {proc.returncode} before listening")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise SystemExit(f"cluster: the {what} did not listen on port {port} within {timeout_s:g} s")


def start_cluster(work: Path) -> tuple[str, list[subprocess.Popen]]:
    """A master and two workers (one core, 1 GiB each); the master's URL and the processes."""
    env = environment()
    spark_class = str(spark_home() / "bin" / "spark-class")
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    port = free_port()
    master = subprocess.Popen(
        [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port)]
        + ["--webui-port", str(free_port())],
        env=env,
        stdout=open(logs / "master.log", "w"),  # noqa: SIM115 - the process owns it until it ends
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    wait_for_port(port, 120, "master", master)
    url = f"spark://127.0.0.1:{port}"
    workers = []
    for i in (1, 2):
        worker_port = free_port()
        workers.append(
            subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--port", str(worker_port)]
                + ["--webui-port", str(free_port()), "--cores", "1", "--memory", "1g"]
                + ["--work-dir", str(work / f"worker{i}"), url],
                env=env,
                stdout=open(logs / f"worker{i}.log", "w"),  # noqa: SIM115
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
        wait_for_port(worker_port, 120, f"worker {i}", workers[-1])
    return url, [master, *workers]


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (Linux /proc)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                out.append(int(entry.name))
    return out


def stop_all(processes: list[subprocess.Popen]) -> None:
    for p in processes:
        if p.poll() is None:
            with _quiet():
                os.killpg(p.pid, signal.SIGTERM)
    for p in processes:
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            with _quiet():
                os.killpg(p.pid, signal.SIGKILL)


class _quiet:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return exc[0] is not None and issubclass(exc[0], ProcessLookupError)


# -- the driver (a process of its own: one SparkContext per process) --------------------------------
def write_trace(folder: Path, rows: int, files: int) -> None:
    from sparkqos.workloads.sensors import sensor_trace_files

    sensor_trace_files(folder, rows, files, rows_per_s=2_000, seed=11)


def transforms():
    from sparkqos.workloads.sensor_transforms import sensor_transforms

    every = sensor_transforms(model_size=256)
    every["readings"] = lambda d: d.select("sensor_id", "temperature", "humidity", "ts")
    return {q: every[q] for q in QUERIES}


def drive(url: str, work: Path, args) -> dict:
    """Serve the trace on the sharded lane against ``url``; the summary the parent prints."""
    from collections import Counter

    from pyspark.sql import SparkSession

    import sparkqos
    from sparkqos.io.sinks import MemorySink
    from sparkqos.testing import assert_same_rows
    from sparkqos.workloads.sensors import SENSOR_CLASSES

    spark = (
        SparkSession.builder.master(url)
        .appName("sparkqos-cluster")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.executor.memory", "700m")
        .config("spark.pyspark.python", str(LAUNCHER))
        .config("spark.executorEnv.SPARKQOS_PYTHON", sys.executable)
        .config("spark.executorEnv.PYTHONPATH", str(ROOT))
        .config("spark.task.maxFailures", "8")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    trace = work / "trace"
    schema = spark.read.parquet(str(trace)).schema
    df = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(trace))
    queries = transforms()
    sink = MemorySink()
    handle = sparkqos.stream(
        df,
        queries,
        classes=QUERIES,
        priorities=SENSOR_CLASSES,
        placement="native",
        strategy="cqc",
        trigger_s=args.trigger,
        checkpoint=work / "ckpt",
        sink=sink,
        shards=2,
        shard_by="sensor_id",
    )
    rows = spark.read.parquet(str(trace)).count()
    query = handle.start()
    ends = time.monotonic() + args.timeout
    try:
        while time.monotonic() < ends:
            if query.exception() is not None:
                raise query.exception()
            recent = list(handle.recentProgress)
            if recent:
                (work / "last_batch").write_text(str(recent[-1]["batchId"]))
            if recent and sum(p["numInputRows"] for p in recent) >= rows and recent[-1]["queuedRows"] == 0:
                break
            time.sleep(0.1)
        else:
            raise SystemExit(f"cluster: the sharded stream did not take {rows} rows within {args.timeout:g} s")
    finally:
        handle.stop()
    handle.finish()
    recent = list(handle.recentProgress)
    static = spark.read.parquet(str(trace))
    equal, mismatches = 0, []
    for name, transform in queries.items():
        try:
            assert_same_rows(sink.table(name), transform(static).toArrow(), name, rel=1e-12)
            equal += 1
        except AssertionError as exc:
            mismatches.append(str(exc)[:300])
    key = ["sensor_id", "ts", "temperature", "humidity"]
    written = Counter(zip(*(sink.table("readings").column(c).to_pylist() for c in key), strict=True))
    expected = Counter(zip(*(static.select(*key).toArrow().column(c).to_pylist() for c in key), strict=True))
    spark.stop()
    return {
        "rows": rows,
        "batches": [
            {
                "batchId": p["batchId"],
                "timestamp": p["timestamp"],
                "rows": p["numInputRows"],
                "executors": sorted({s["ppid"] for s in p.get("shards", [])}),
            }
            for p in recent
        ],
        "lost": sum((expected - written).values()),
        "duplicated": sum((written - expected).values()),
        "equal": equal,
        "mismatches": mismatches,
    }


# -- the whole run ----------------------------------------------------------------------------------
def run(args) -> dict:
    """Cluster up, driver started, a worker killed after micro-batch ``args.kill_at``: the
    figures the lines report."""
    work = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="sparkqos-cluster-"))
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    write_trace(work / "trace", args.rows, args.files)
    t0 = time.monotonic()
    url, processes = start_cluster(work)
    up_s = time.monotonic() - t0
    print(f"cluster: 2 workers + master up in {up_s:.1f} s; driver on {url}", flush=True)
    cmd = [sys.executable, __file__, "--driver", url, "--out", str(work)]
    cmd += ["--trigger", str(args.trigger), "--timeout", str(args.timeout)]
    driver = subprocess.Popen(cmd, env=environment(), stdout=subprocess.PIPE, stderr=open(work / "logs" / "driver.log", "w"))  # noqa: SIM115
    killed: dict = {}
    try:
        while driver.poll() is None and not killed:
            batch = (work / "last_batch").read_text() if (work / "last_batch").exists() else ""
            if batch.strip().isdigit() and int(batch) >= args.kill_at:
                worker = processes[1]
                executors = children(worker.pid)
                os.kill(worker.pid, signal.SIGKILL)
                for pid in executors:
                    with _quiet():
                        os.kill(pid, signal.SIGKILL)
                killed = {"at": time.time(), "after_batch": int(batch), "worker": worker.pid, "executors": executors}
                print(
                    f"cluster: worker 1 (pid {worker.pid}) and its executor (pid {', '.join(map(str, executors)) or 'none'}) "
                    f"killed after micro-batch {int(batch)}",
                    flush=True,
                )
            time.sleep(0.05)
        out, _ = driver.communicate(timeout=args.timeout + 120)
    finally:
        if driver.poll() is None:
            driver.kill()
        stop_all(processes)
    if driver.returncode != 0:
        tail = (work / "logs" / "driver.log").read_text()[-3000:]
        raise SystemExit(f"cluster: the driver failed ({driver.returncode}):\n{tail}")
    summary = json.loads(out.decode().strip().splitlines()[-1])
    summary["killed"] = killed
    summary["up_s"] = up_s
    summary["work"] = str(work)
    return summary


def recovery(summary: dict) -> tuple[float, float]:
    """Seconds from the kill to the end of the first micro-batch after it; the median micro-batch
    interval before it."""
    at = summary["killed"]["at"]
    ends = [b["timestamp"] for b in summary["batches"]]
    after = [t for t in ends if t > at]
    before = [b - a for a, b in zip(ends, ends[1:], strict=False) if b <= at]
    return (after[0] - at if after else float("nan")), (statistics.median(before) if before else float("nan"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=60_000)
    parser.add_argument("--files", type=int, default=12)
    parser.add_argument("--kill-at", type=int, default=4, help="kill a worker once this micro-batch has ended")
    parser.add_argument("--trigger", type=float, default=1.0)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--out", default="")
    parser.add_argument("--driver", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.driver:
        print(json.dumps(drive(args.driver, Path(args.out), args)))
        return
    summary = run(args)
    if not summary["killed"]:
        raise SystemExit(f"cluster: the input ended before micro-batch {args.kill_at}; no worker was killed")
    print(
        f"cluster: {summary['rows']} rows, {len(summary['batches'])} micro-batches; lost {summary['lost']}, "
        f"duplicated {summary['duplicated']}; queries equal to Spark's: {summary['equal']} of {len(QUERIES)}"
    )
    for m in summary["mismatches"]:
        print(f"  {m}")
    at = summary["killed"]["at"]
    before = {e for b in summary["batches"] if b["timestamp"] <= at for e in b["executors"]}
    after = {e for b in summary["batches"] if b["timestamp"] > at for e in b["executors"]}
    print(f"cluster: the shards ran in {len(before)} Python worker daemons before the kill, {len(after)} after it")
    took, usual = recovery(summary)
    print(f"cluster: recovery {took:.1f} s (first micro-batch ending after the kill; median micro-batch {usual:.1f} s before it)")


if __name__ == "__main__":
    main()
