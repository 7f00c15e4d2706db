"""The papers' synthetic operator inside a PySpark transform (``sparkqos.synthetic``) and the
sensor queries written as transforms (``sparkqos.spark.examples``), against Spark's own engine."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

import sparkqos
from sparkqos.errors import ArgumentError, PlanError
from sparkqos.examples import SENSOR_CLASSES, sensor_trace
from sparkqos.spark.examples import SENSOR_QUERY_CLASSES, sensor_transforms
from sparkqos.spark.transforms import compile_transforms
from tests.test_transforms import canonical
from tests.test_transforms_stateful import assert_same


@pytest.fixture(scope="module")
def readings(spark, tmp_path_factory):
    path = tmp_path_factory.mktemp("sensor") / "trace.parquet"
    sensor_trace(path, 4000, 60.0, seed=3, fire_probability=0.01)
    return spark.read.parquet(str(path))


@pytest.mark.parametrize("strategy", ["fifo", "chain", "cqc"])
def test_synthetic_keeps_the_rows_spark_keeps(readings, strategy):
    queries = {
        "half": lambda d: sparkqos.synthetic(d, 0.5, seed=11, key="sensor_id"),
        "tenth": lambda d: sparkqos.synthetic(d.where(F.col("temperature") > 20), 0.1, seed=3, key="sensor_id"),
        "all": lambda d: sparkqos.synthetic(d, 1.0, cost_s=1e-6, seed=12, key="sensor_id").select("sensor_id", "ts"),
    }
    got = sparkqos.run(readings, queries, strategy=strategy, batch_rows=500)
    for name, transform in queries.items():
        want = transform(readings).toArrow()
        assert got[name].schema == want.schema, name
        assert canonical(got[name]) == canonical(want), name
    assert 0 < got["half"].num_rows < readings.count()


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
    assert kinds.count("synthetic") == 2


def test_sensor_transforms_equal_spark(readings):
    queries = sensor_transforms(work_us=0.0)
    got = sparkqos.run(readings, queries, strategy="adaptive", batch_rows=400)
    for name, transform in queries.items():
        want = transform(readings).toArrow()
        assert_same(got[name], want, name)
        assert want.num_rows > 0, name
    assert isinstance(got["fire"], pa.Table)
