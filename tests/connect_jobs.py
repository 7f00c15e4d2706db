"""Both Spark Connect jobs in one process and one ``remote("local[2]")`` session, so that the
suite starts one local Connect server for them, not two.

Started by the ``connect_jobs`` fixture (tests/conftest.py) in a process of its own, so the
suite's classic SparkSession and this Connect session never share a JVM.
``python tests/connect_jobs.py TRACE RESTART_OUT TRANSFORMS_OUT``: tests/connect_job.py's restart
run over TRACE (outputs under RESTART_OUT), then tests/connect_transforms_job.py (results under
TRANSFORMS_OUT), which switches its session to Spark's non-ANSI semantics and so runs second. The
last line printed is a JSON object with each job's summary, by job.
"""

from __future__ import annotations

import json
import sys


def main(trace: str, restart_out: str, transforms_out: str) -> None:
    from pyspark.sql import SparkSession

    from tests import connect_job, connect_transforms_job

    spark = SparkSession.builder.remote("local[2]").getOrCreate()
    assert type(spark).__module__.startswith("pyspark.sql.connect"), type(spark)
    restart = connect_job.run(spark, trace, restart_out, "restart")
    transforms = connect_transforms_job.run(spark, transforms_out)
    print(json.dumps({"restart": restart, "transforms": transforms}))
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:4])
