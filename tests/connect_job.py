"""Run the main job's queries under Spark Connect (``remote("local[2]")``) on a replayed trace.

Run for tests/test_connect.py by tests/connect_jobs.py, in a process of its own, so the suite's
classic SparkSession and this Connect session never share a JVM; ``python tests/connect_job.py
TRACE OUT MODE`` runs it alone. MODE ``whole`` runs the trace to its end; ``restart`` stops the
stream after two batches, starts a new handle on the same checkpoint and runs to the end. Either
way ``finish()`` drains the rest and the outputs land in ``OUT/output/outputs``; :func:`run`
returns a summary, which ``main`` prints as JSON on its last line.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def run(spark, trace: str, out: str, mode: str) -> dict:
    """The job on ``spark``, a Connect session: the summary of the runs."""
    import sparkqos
    from sparkqos import sources
    from sparkqos.workloads.sensors import sensor_queries

    sources.register(spark)
    base = Path(out)

    def handle(trigger_s):
        df = (
            spark.readStream.format("sparkqos.replay")
            .option("path", trace)
            .option("speed", "max")
            .option("maxSecondsPerTrigger", "2")
            .load()
        )
        return sparkqos.stream(
            df,
            sensor_queries(work_us=0),
            strategy="chain",
            trigger_s=trigger_s,
            checkpoint=base / "ckpt",
            output=base / "output",
        )

    from sparkqos.runtime.checkpoint import CheckpointStore

    stopped_at = archived_at_stop = seen = None
    if mode == "restart":
        first = handle(0.5)  # 15 triggers of 2 s of trace, one every 0.5 s: stopped well before the end
        first.start()
        metrics = base / "output" / "metrics"
        by = time.time() + 120
        while time.time() < by and len(list(metrics.glob("**/*.parquet"))) < 2:  # two triggers done
            time.sleep(0.2)
        first.stop()
        stopped_at = CheckpointStore(base / "ckpt" / "sparkqos").load_latest().batch_id
        from sparkqos.io.sinks import read_parquet_sink

        archived_at_stop = read_parquet_sink(base / "output" / "outputs")["archive"].num_rows
        # The triggers ran in the server's Python worker: the handle reads them back from the metrics table.
        seen = [p["batchId"] for p in first.recentProgress]
    try:  # configuration errors come at stream(), on the client, as in classic
        sparkqos.stream(
            spark.readStream.format("sparkqos.replay").option("path", trace).load(),
            sensor_queries(),
            trigger_s=0,
            checkpoint=base / "bad",
        )
        config_error = None
    except sparkqos.RunnerError as exc:
        config_error = exc.parameter
    second = handle("available_now")
    second.start().awaitTermination()
    second.finish()
    return {
        "stopped_at_batch": stopped_at,
        "archived_at_stop": archived_at_stop,
        "seen": seen,
        "config_error": config_error,
        "last_batch": second.last_batch,
    }


def main(trace: str, out: str, mode: str) -> None:
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.remote("local[2]").getOrCreate()
    assert type(spark).__module__.startswith("pyspark.sql.connect"), type(spark)
    print(json.dumps(run(spark, trace, out, mode)))
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:4])
