"""PySpark transforms under Spark Connect: compiled from a Connect DataFrame.

A Connect DataFrame has no JVM plan; sparkqos reads the client's plan, typed by the server
(sparkqos/spark/connect_plan.py). One subprocess (tests/connect_transforms_job.py, run by the
``connect_jobs`` fixture in the ``remote("local[2]")`` session of tests/connect_jobs.py) compiles
a representative set of transforms, runs them with ``sparkqos.run`` and ``sparkqos.stream`` and
writes Spark's own (Connect) results beside them:

* every transform gives exactly Spark's rows, names and types (nulls, NaN, ±inf, -0.0, zero
  divisors, integer extremes);
* the compiled plan is the one classic pyspark compiles from the analyzed plan — the same
  operators over the same inputs with the same expressions — for aggregations with and without
  a time window (struct fields of the window), explode/split (above an aggregate too) and UDFs,
  a pandas UDF among them, all native under Connect as under classic;
* what sparkqos cannot run raises UnsupportedTransform naming the query and the operation;
* a stream of the same rows (``sparkqos.replay``, available_now + finish) gives the static rows
  (for an aggregation without a time window, Spark's update mode: the last row per key).
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from sparkqos.io.sinks import read_parquet_sink
from sparkqos.spark.transforms import compile_transforms
from tests.connect_transforms_job import SPARK_PARTS, UPDATE_KEYS, describe, stateful, table, transforms
from tests.test_transforms import canonical
from tests.test_transforms_native import last_per_key

pytestmark = pytest.mark.spark  # a Spark Connect server in a process of its own
# The tests that read the job's results are slow (-m slow): the job is a process of its own.


@pytest.fixture(scope="module")
def job(connect_jobs) -> tuple[Path, dict]:
    """The job's output folder and summary."""
    return connect_jobs["transforms"]


@pytest.mark.slow
@pytest.mark.parametrize("name", list(transforms()))
def test_connect_run_gives_sparks_rows(job, name):
    out, _ = job
    got, want = pq.read_table(out / f"run_{name}.parquet"), pq.read_table(out / f"spark_{name}.parquet")
    assert got.schema.names == want.schema.names, name
    assert got.schema.types == want.schema.types, name
    assert want.num_rows > 0, name
    assert canonical(got) == canonical(want), name


@pytest.mark.slow
def test_connect_compiles_the_plan_classic_compiles(job, spark):
    """Read from the client's plan or from the analyzed plan: one mapping, one compiled plan."""
    out, _ = job
    before = spark.conf.get("spark.sql.ansi.enabled")
    spark.conf.set("spark.sql.ansi.enabled", "false")
    try:
        classic = describe(compile_transforms(spark.createDataFrame(table()), transforms()))
    finally:
        spark.conf.set("spark.sql.ansi.enabled", before)
    assert json.loads((out / "compiled.json").read_text()) == classic


def test_compiled_aggregates_and_udfs_pickle(spark):
    """Under Connect the compiled plan travels pickled to the server's Python worker
    (foreachBatch): aggregates with first/last options and UDFs' functions included."""
    compiled = compile_transforms(spark.createDataFrame(table()), stateful())
    assert describe(pickle.loads(pickle.dumps(compiled))) == describe(compiled)


@pytest.mark.slow
def test_connect_unsupported_transforms_are_named(job):
    _, summary = job
    errors = summary["errors"]
    assert "query 'count'" in errors["count"] and "a distinct aggregate" in errors["count"], errors
    assert "query 'mixed'" in errors["mixed"] and "implicit casts between string and integer" in errors["mixed"], errors
    assert "query 'log'" in errors["log"] and "Spark function 'ln'" in errors["log"], errors
    assert "query 'sql_string'" in errors["sql_string"] and "SQL expression string" in errors["sql_string"], errors
    assert "query 'total'" in errors["total"] and "approximate aggregate function 'percentile_approx'" in errors["total"], errors
    assert "query 'sql_above'" in errors["sql_above"] and "SQL expression string" in errors["sql_above"], errors
    # an aggregate in a SQL string sparkqos does not read: Spark must not evaluate it per micro-batch
    unread = errors["sql_agg_unread"]
    assert "query 'sql_agg_unread'" in unread and "SQL expression string under Spark Connect that sparkqos cannot read" in unread
    assert "query 'window'" in errors["window"] and "window function 'row_number'" in errors["window"], errors
    assert "transformWithStateInPandas under Spark Connect" in errors["processor"], errors


@pytest.mark.slow
@pytest.mark.parametrize("name", SPARK_PARTS)
def test_connect_spark_evaluated_parts_give_sparks_rows(job, name):
    """SQL strings, a pandas UDF, a Python UDF, JSON and regex functions under Connect: Spark
    evaluates the row-wise part in the micro-batch, on the server."""
    out, summary = job
    assert f"spark:{name}" in summary["spark_streams"], summary["spark_streams"]
    got, want = pq.read_table(out / f"run_{name}.parquet"), pq.read_table(out / f"spark_{name}.parquet")
    assert got.schema.names == want.schema.names and got.schema.types == want.schema.types, name
    assert canonical(got) == canonical(want), name


@pytest.mark.slow
def test_connect_stream_gives_the_static_rows(job):
    out, _ = job
    streamed = read_parquet_sink(out / "out" / "outputs")
    for name in [*transforms(), *SPARK_PARTS]:
        want = pq.read_table(out / f"spark_{name}.parquet")
        got = streamed[name].select(want.schema.names)
        if name in UPDATE_KEYS:  # Spark's update mode: a changelog whose last row per key is the table
            assert got.num_rows >= want.num_rows, name
            got = last_per_key(got, UPDATE_KEYS[name]) if UPDATE_KEYS[name] else got.slice(got.num_rows - 1)
        assert canonical(got) == canonical(want), name
