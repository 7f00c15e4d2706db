"""The sharded lane on two executor JVMs (``local-cluster[2,1,1024]``), with a shard's Python
worker killed mid-batch.

Started by tests/test_sharded.py in a process of its own (one SparkContext per process; the
suite's is local[2]). ``python tests/sharded_cluster_job.py OUT``: the vessel job's per-vessel
queries over the hand-made reports, two shards by ``mmsi``; the worker serving a shard is
SIGKILLed once, in that shard's second micro-batch (``fault="in_shard:1"``), Spark retries the
task; after the replay ends, ``finish()`` drains. The last line printed is a JSON summary: the
distinct executor daemons the shards ran under, whether the kill happened, and the queries whose
rows differ from Spark's batch run of the same transforms (none, when nothing was lost or
duplicated).

``python tests/sharded_cluster_job.py OUT driver FAULT`` runs the same on local[2] with the
outputs in Parquet under OUT, killing the driver at FAULT (``after_run:2``: the shards' state of
batch 2 committed by Spark, its outputs not written; ``after_sink:4``: written, not committed);
the test starts it once per fault, then once with ``-`` (no fault), which drains, compares and
prints the summary.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(out: str, mode: str = "cluster", fault: str = "-") -> None:
    import pyarrow.parquet as pq
    from pyspark.sql import SparkSession

    import sparkqos
    from sparkqos.io.sinks import MemorySink, read_parquet_sink
    from sparkqos.runtime.progress import read_progress
    from sparkqos.testing import assert_same_rows
    from sparkqos.workloads.vessels import VESSEL_PRIORITIES, VESSEL_QUERY_CLASSES
    from tests.conftest import replay
    from tests.test_sharded import handmade, serve_to_end, vessel_queries

    spark = (
        SparkSession.builder.master("local-cluster[2,1,1024]" if mode == "cluster" else "local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.ansi.enabled", "false")
        .config("spark.executor.memory", "700m")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    base = Path(out)
    path = base / "vessels.parquet"
    if not path.exists():
        pq.write_table(handmade(), path)
    queries = vessel_queries(spark)
    sink = MemorySink() if mode == "cluster" else None
    handle = sparkqos.stream(
        replay(spark, path, seconds_per_trigger=600),
        queries,
        classes={q: VESSEL_QUERY_CLASSES[q] for q in queries},
        priorities=VESSEL_PRIORITIES,
        shards=2,
        shard_by="mmsi",
        strategy="fifo",
        trigger_s=0.25,
        checkpoint=base / "ckpt",
        sink=sink,
        output=base / "out",
        fault="in_shard:1" if mode == "cluster" else (None if fault == "-" else fault),
    )
    table = None if mode == "cluster" else (lambda: read_progress(base / "out", "sparkqos"))
    recent = serve_to_end(handle, handmade().num_rows, timeout_s=400, progress=table)
    handle.finish()
    written = {q: sink.table(q) for q in queries} if sink is not None else read_parquet_sink(base / "out" / "outputs")
    static = spark.read.parquet(str(path))
    mismatches = []
    for name, transform in queries.items():
        try:
            assert_same_rows(written[name], transform(static).toArrow(), name, rel=1e-12)
        except AssertionError as exc:
            mismatches.append(str(exc))
    daemons = {s["ppid"] for p in recent for s in p.get("shards", [])}
    summary = {
        "executor_pids": len(daemons),
        "killed": (base / "ckpt" / "faults" / "in_shard-1").exists(),
        "mismatches": mismatches,
        "batches": len(recent),
    }
    spark.stop()
    print(json.dumps(summary))


if __name__ == "__main__":
    main(*sys.argv[1:])
