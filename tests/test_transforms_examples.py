"""The papers' synthetic operator inside a PySpark transform (``sparkqos.synthetic``) and the
sensor queries written as transforms (``sparkqos.workloads.sensor_transforms``), against Spark's own engine."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from pyspark.sql import functions as F

import sparkqos
from sparkqos.errors import ArgumentError, PlanError
from sparkqos.spark.transforms import compile_transforms
from sparkqos.workloads.sensor_transforms import SENSOR_QUERY_CLASSES, sensor_transforms
from sparkqos.workloads.sensors import SENSOR_CLASSES, ReadingModel, sensor_trace
from tests.conftest import closed_by, replay, run_under_each, spark_streams, stream_to_end
from tests.test_transforms import canonical
from tests.test_transforms_stateful import assert_same


@pytest.fixture(scope="module")
def readings(spark, tmp_path_factory):
    path = tmp_path_factory.mktemp("sensor") / "trace.parquet"
    sensor_trace(path, 4000, 60.0, seed=3, fire_probability=0.01)
    return spark.read.parquet(str(path))


def test_synthetic_keeps_the_rows_spark_keeps(readings):
    """Under fifo, chain and cqc, against Spark's rows asked once."""
    queries = {
        "half": lambda d: sparkqos.synthetic(d, 0.5, seed=11, key="sensor_id"),
        "tenth": lambda d: sparkqos.synthetic(d.where(F.col("temperature") > 20), 0.1, seed=3, key="sensor_id"),
        "all": lambda d: sparkqos.synthetic(d, 1.0, cost_s=1e-6, seed=12, key="sensor_id").select("sensor_id", "ts"),
    }
    runs = run_under_each(readings, queries, ("fifo", "chain", "cqc"), batch_rows=500)
    for name, transform in queries.items():
        want = transform(readings).toArrow()
        for strategy, got in runs.items():
            assert got[name].schema == want.schema, f"{name} under {strategy}"
            assert canonical(got[name]) == canonical(want), f"{name} under {strategy}"
    total = readings.count()
    assert all(0 < got["half"].num_rows < total for got in runs.values())


def test_synthetic_is_one_operator_with_the_declared_cost(readings):
    compiled = compile_transforms(readings, {"q": lambda d: sparkqos.synthetic(d, 0.25, cost_s=3e-4, seed=5, key="sensor_id")})
    (name,) = compiled.plan.names
    assert name == "q/1:synthetic"
    op = compiled.operators[name]
    assert (op.selectivity, op.work_s, op.seed, op.key) == (0.25, 3e-4, 5, "sensor_id")


def test_synthetic_checks_its_arguments(readings):
    with pytest.raises(ArgumentError, match="key"):
        sparkqos.synthetic(readings, 0.5, key="nope")
    with pytest.raises(PlanError, match="selectivity"):
        sparkqos.synthetic(readings, 1.5, key="sensor_id")


def test_sensor_transforms_compile_with_their_classes(readings):
    compiled = compile_transforms(readings, sensor_transforms(), SENSOR_QUERY_CLASSES, SENSOR_CLASSES)
    assert {q.name: q.klass for q in compiled.plan.queries.values()} == SENSOR_QUERY_CLASSES
    kinds = [n.split(":")[1] for n in compiled.plan.names]
    assert "synthetic" not in kinds  # the costly steps are real code, not declared work


def test_udfs_declared_thread_safe_stay_so_through_sparks_plan_and_their_runs_may_be_sliced(readings, monkeypatch):
    """The anomaly score and the archive encoder are declared thread-safe: the mark travels with
    the functions through the plan Spark pickles, so their operators' runs may be cut into
    slices; a UDF not declared keeps its operator on one thread."""
    from pyspark.sql.functions import pandas_udf

    from sparkqos import schedulers
    from sparkqos.executor import threadsafe
    from sparkqos.executor.loop import Executor

    def plus(x):
        return x + 1

    queries = {**sensor_transforms(), "plus": lambda d: d.select(pandas_udf(plus, "double")("temperature").alias("t"))}
    ex = Executor(compile_transforms(readings, queries).fresh(), schedulers.get("fifo"), threads=2)
    ops, sliced = ex.dispatcher.ops, ex.dispatcher.sliceable
    unsafe = {n: u for n, op in ops.items() if (u := threadsafe.unsafe_udfs(op))}
    with monkeypatch.context() as m:  # every operator that calls a UDF, declared or not
        m.setattr(threadsafe, "is_thread_safe", lambda fn: False)
        calling = {n: u for n, op in ops.items() if (u := threadsafe.unsafe_udfs(op))}
    assert sorted(q.split("/")[0] for q in calling) == ["anomaly", "archive", "plus"]
    assert list(unsafe.values()) == [["plus"]] and next(iter(unsafe)).startswith("plus/")
    assert {n for n in calling if not n.startswith("plus/")} <= sliced and not set(unsafe) & sliced
    ex.close()


def test_the_anomaly_model_scores_each_reading_on_its_own():
    """The model's score of a reading does not depend on the rows scored with it (Spark's Python
    workers and sparkqos's executor hand the pandas UDF different batches); a missing value has
    no score; fires are the readings it flags; bad sizes are refused by name."""
    model = ReadingModel(reference=256)
    rng = np.random.default_rng(3)
    t, h = rng.uniform(-40, 120, 1000), rng.uniform(0, 100, 1000)
    t[::97], h[::89] = np.nan, np.nan
    whole = model.score(t, h)
    pieces = np.concatenate([model.score(t[i : i + 37], h[i : i + 37]) for i in range(0, 1000, 37)])
    assert np.array_equal(whole, pieces, equal_nan=True)
    assert np.isnan(whole[::97]).all() and np.isnan(whole[::89]).all()
    assert model.score(np.array([75.0]), np.array([12.0]))[0] > model.threshold  # a fire
    assert model.score(np.array([22.0]), np.array([55.0]))[0] < model.threshold  # a usual reading
    with pytest.raises(ArgumentError, match="reference"):
        ReadingModel(reference=3)
    with pytest.raises(ArgumentError, match="quantile"):
        ReadingModel(quantile=1.0)


def test_the_anomaly_models_scores_are_the_kernel_density_written_out():
    """Scoring in chunks with reused work arrays computes, bit for bit, minus the log of the
    Gaussian kernel density over all reference points written out in one numpy expression: the
    same operations on every (reading, reference point) pair, in the same order."""
    model = ReadingModel(reference=512)
    rng = np.random.default_rng(5)
    n = 3 * model.CHUNK_ROWS + 5  # the last chunk is short
    t, h = rng.uniform(-40, 120, n), rng.uniform(0, 100, n)
    t[7], h[11] = np.nan, np.nan
    ct, ch = model.centers
    dt = t[:, None] / model.scale[0] - ct
    dh = h[:, None] / model.scale[1] - ch
    density = np.exp((dt * dt + dh * dh) * (-0.5 / model.bandwidth**2)).sum(axis=1) / ct.shape[0]
    with np.errstate(divide="ignore"):
        assert np.array_equal(model.score(t, h), -np.log(density), equal_nan=True)
    assert model.score(t[:0], h[:0]).shape == (0,)


def test_sensor_transforms_equal_spark(readings):
    queries = sensor_transforms(model_size=256)
    got = sparkqos.run(readings, queries, strategy="adaptive", batch_rows=400)
    for name, transform in queries.items():
        want = transform(readings).toArrow()
        assert_same(got[name], want, name)
        assert want.num_rows > 0, name
    assert isinstance(got["fire"], pa.Table)


@pytest.mark.slow  # the main job's four queries streamed by sparkqos and by Spark: the longest stream test
def test_main_job_queries_stream_like_spark_streams_them(spark, tmp_path):
    """The main job's four transforms served by sparkqos.stream over a replayed trace
    give, after finish(), the rows Spark's own streaming run of the same transforms gives. Spark's
    append mode never closes the windows still open when the input ends (its watermark stops
    there); sparkqos's finish() emits them: those, and only those, are the extra rows, and with
    them zone_stats equals Spark's result on the static data."""
    path = tmp_path / "trace.parquet"
    sensor_trace(path, 3000, 40.0, seed=5, fire_probability=0.01)
    queries = sensor_transforms(model_size=256)

    def stream():
        return replay(spark, path, seconds_per_trigger=10)  # 4 micro-batches, each closing a 10 s window

    sink = stream_to_end(
        stream(), queries, tmp_path / "sparkqos", classes=SENSOR_QUERY_CLASSES, priorities=SENSOR_CLASSES, strategy="cqc"
    )
    spark_run = spark_streams(queries, stream, tmp_path / "spark")
    static = spark.read.parquet(str(path))
    for name, transform in queries.items():
        got = sink.table(name)
        streamed = spark_run[name].rows.cast(got.schema)
        if name != "zone_stats":
            assert_same(got, streamed, name)
            continue
        # Windows Spark closed are sparkqos's too; the rest end after Spark's last watermark.
        closed = closed_by(got, spark_run[name].watermark)
        assert_same(closed, streamed, name)
        assert got.num_rows > closed.num_rows
        assert_same(got, transform(static).toArrow(), name)
