"""UDFs in PySpark transforms: scalar ``pandas_udf`` and Python ``udf`` calls in
``select`` / ``withColumn`` / ``where``, run by the executor on Arrow batches.

* ``sparkqos.run`` gives the rows Spark's own engine gives for the same transform (hypothesis
  data with nulls, NaN, ±inf, empty strings, extreme values, empty input) under fifo, chain, cqc
  and adaptive: pandas UDFs of one and two columns (double and string results), Python UDFs
  (string and int results, None sometimes; Arrow-optimised, Spark's default here, and pickled),
  a UDF in a ``where``, a UDF whose output feeds another expression, a UDF of a UDF.
* A stream replayed through ``sparkqos.stream`` gives, after ``finish()``, the static result.
* A UDF that raises gives a UdfError naming the query and the UDF, and the executor still holds
  every row it was given; the compiled plan, lambdas included, survives pickling.
* Every refused kind raises UnsupportedTransform naming it, before any data moves.
"""

from __future__ import annotations

import math
import pickle
import time
from collections.abc import Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import Window
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, DoubleType, IntegerType, LongType, StringType, StructField, StructType

import sparkqos
from sparkqos import schedulers
from sparkqos.errors import UdfError, UnsupportedTransform
from sparkqos.executor.loop import Executor
from sparkqos.io.sinks import MemorySink
from sparkqos.spark.transforms import compile_transforms
from tests.conftest import examples, replay, run_under_each, stream_to_end

STRATEGIES = ("fifo", "chain", "cqc", "adaptive")
EXAMPLES = settings(max_examples=examples(6), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

SCHEMA = pa.schema([("i", pa.int32()), ("l", pa.int64()), ("d", pa.float64()), ("s", pa.string())])
ints = st.one_of(st.none(), st.sampled_from([-(2**31), 2**31 - 1, 0, 1, -1, 3]), st.integers(-100, 100))
longs = st.one_of(st.none(), st.sampled_from([-(2**63), 2**63 - 1, 0, -7]), st.integers(-(10**12), 10**12))
doubles = st.one_of(
    st.none(),
    st.sampled_from([math.nan, math.inf, -math.inf, 0.0, -0.0, 2.5, 1e308, -1e308, 5e-324]),
    st.floats(-1e6, 1e6, allow_nan=False),
)
strings = st.one_of(st.none(), st.text(alphabet="abé _", max_size=4))
rows = st.lists(st.tuples(ints, longs, doubles, strings), max_size=12)


# -- the UDFs ----------------------------------------------------------------------------------------


@F.pandas_udf(DoubleType())
def half(x: pd.Series) -> pd.Series:
    return x / 2


@F.pandas_udf(DoubleType())
def weighted(x: pd.Series, y: pd.Series) -> pd.Series:
    # In float64 whatever the batch: an int column is int32 in a batch without nulls and float64
    # in one with, so x * 2 on int32 would wrap or not depending on the batching (Spark's too).
    return x.astype("float64") * 2 + y


@F.pandas_udf(StringType())
def label(s: pd.Series, x: pd.Series) -> pd.Series:
    return s.fillna("?") + ":" + x.astype(str)


@F.udf(StringType())
def tagged(s, i):
    return None if s is None or s == "" else f"{s}#{i}"


thirds = F.udf(lambda i: None if i is None or i % 3 == 0 else i // 2, IntegerType())
small = F.udf(lambda d: d is not None and abs(d) < 10, BooleanType())
last_digits = F.udf(lambda v: None if v is None else v % 1000, LongType(), useArrow=False)
shout = F.udf(lambda s: None if s is None else s.upper() + "!", StringType(), useArrow=False)


def pandas_one(df):
    return df.select(half("d").alias("hd"), half("i").alias("hi"))


def pandas_two(df):
    return df.withColumn("w", weighted("i", "d")).withColumn("tag", label("s", "d")).drop("l")


def python_udfs(df):
    return df.select(
        tagged("s", "i").alias("t"), thirds("i").alias("third"), last_digits("l").alias("ld"), shout("s").alias("sh")
    )


def udf_in_where(df):
    return df.where(small("d") & (thirds("i").isNotNull() | F.col("s").isNull())).select("i", "d")


def udf_feeds_expression(df):
    return df.select(
        (half("d") + F.col("i")).alias("x"),
        F.length(tagged("s", "i")).alias("n"),
        F.coalesce(thirds("i"), F.lit(-1)).alias("c"),
        half(half("d")).alias("quarter"),
    ).where(F.col("x") > 0)


QUERIES = {
    "pandas_one": pandas_one,
    "pandas_two": pandas_two,
    "python_udfs": python_udfs,
    "udf_in_where": udf_in_where,
    "udf_feeds_expression": udf_feeds_expression,
}


# -- helpers -----------------------------------------------------------------------------------------


def make_df(spark, data):
    cols = list(zip(*data, strict=True)) if data else [[] for _ in SCHEMA]
    table = pa.table([pa.array(list(c), f.type) for c, f in zip(cols, SCHEMA, strict=True)], schema=SCHEMA)
    return spark.createDataFrame(table)


def canonical(table: pa.Table) -> list[tuple]:
    """Rows in a fixed order, NaN spelled so that it equals itself."""
    out = [tuple("NaN" if isinstance(v, float) and math.isnan(v) else v for v in r.values()) for r in table.to_pylist()]
    return sorted(out, key=repr)


def assert_same(got: pa.Table, want: pa.Table, name: str) -> None:
    assert got.schema.names == want.schema.names, name
    assert got.schema.types == want.schema.types, name
    assert canonical(got) == canonical(want), name


# -- equal to Spark ----------------------------------------------------------------------------------


@given(data=rows)
@EXAMPLES
def test_udfs_equal_spark_under_every_strategy(spark_sql, data):
    df = make_df(spark_sql, data)
    want = {name: transform(df).toArrow() for name, transform in QUERIES.items()}
    for strategy, got in run_under_each(df, QUERIES, STRATEGIES, batch_rows=3, units_between=2).items():
        for name in QUERIES:
            assert_same(got[name], want[name], f"{name} under {strategy}")


def test_a_udf_is_one_expression_in_the_operator_of_its_clause(spark_sql):
    compiled = compile_transforms(make_df(spark_sql, [(1, 2, 3.0, "a")]), {"q": udf_in_where, "p": pandas_one})
    assert compiled.plan.names == ("q/1:where", "q/2:select", "p/1:select")
    udf = compiled.operators["p/1:select"].exprs[0].child
    assert (udf.udf, udf.kind, str(udf.return_type)) == ("half", "pandas", "double")


def test_the_compiled_plan_pickles_with_its_functions(spark_sql):
    df = make_df(spark_sql, [(1, 2, 3.0, "a"), (None, None, None, None), (6, -7, math.nan, "")])
    compiled = compile_transforms(df, QUERIES)
    copy = pickle.loads(pickle.dumps(compiled))
    table = df.toArrow()
    ex = Executor(copy.fresh(), schedulers.get("fifo"))
    ex.ingest("input", table, arrival=0.0)
    ex.finish()
    for name, transform in QUERIES.items():
        assert_same(ex.result(name), transform(df).toArrow(), name)


def test_a_udf_of_a_udf_of_the_same_kind_is_one_chained_call_as_in_spark(spark_sql):
    df = make_df(spark_sql, [(1, 2, 3.0, "a"), (None, None, None, None)])
    for arrow in (True, False):
        raw = F.udf(lambda i: i, StringType(), useArrow=arrow)  # gives an int for a string
        kind = F.udf(lambda v: type(v).__name__, StringType(), useArrow=arrow)
        query = {"q": lambda d, raw=raw, kind=kind: d.select(kind(raw("i")).alias("k"))}
        got = sparkqos.run(df, query)["q"]
        assert_same(got, query["q"](df).toArrow(), f"useArrow={arrow}")
        assert sorted(got.column("k").to_pylist()) == ["NoneType", "int"]  # raw's ints reach kind as ints


# -- errors inside a UDF ------------------------------------------------------------------------------

exploding = F.udf(lambda i: 10 // (i - 3) if i is not None else None, IntegerType())


@F.pandas_udf(DoubleType())
def exploding_pandas(x: pd.Series) -> pd.Series:
    if (x == 3).any():
        raise ValueError("three is not allowed")
    return x


@pytest.mark.parametrize(
    ("query", "udf", "raised"),
    [(exploding, "<lambda>", "ZeroDivisionError"), (exploding_pandas, "exploding_pandas", "ValueError")],
)
def test_a_failing_udf_names_itself_and_loses_no_queued_row(spark_sql, query, udf, raised):
    data = [(i, i, float(i), "x") for i in range(8)]
    df = make_df(spark_sql, data)
    with pytest.raises(UdfError, match=f"query 'boom': UDF '{udf}' raised {raised}"):
        sparkqos.run(df, {"boom": lambda d: d.select(query("i").alias("v"))})

    compiled = compile_transforms(df, {"boom": lambda d: d.where(F.col("i") >= 0).select(query("i").alias("v"))})
    ex = Executor(compiled.fresh(), schedulers.get("fifo"))
    ex.ingest("input", df.toArrow(), arrival=0.0)
    with pytest.raises(UdfError) as info:
        ex.finish()
    assert (info.value.query, info.value.udf) == ("boom", udf)
    queued = ex.queue_tables()
    select = next(k for k in queued if "select" in k)
    # Every row passed the where and waits, whole and in order, in front of the failing select.
    assert queued[select].column("i").to_pylist() == list(range(8))
    assert ex.state.queued("boom/2:select") == 8


@F.pandas_udf(DoubleType())
def needs_rows(x: pd.Series) -> pd.Series:
    if x.empty:
        raise AssertionError("Spark never calls a UDF on no rows")
    return x * 1.0


def test_a_udf_is_never_called_on_no_rows(spark_sql):
    df = make_df(spark_sql, [(1, 1, 1.5, "a")])
    query = {"q": lambda d: d.select(needs_rows("d").alias("v"))}
    assert_same(sparkqos.run(df, query)["q"], query["q"](df).toArrow(), "q")


def test_a_queue_takes_back_what_a_failed_run_took():
    from sparkqos.executor.queues import BatchQueue, stamp, with_internal

    q = BatchQueue(with_internal(pa.schema([("v", pa.int64())])))
    q.push(stamp(pa.record_batch({"v": [1, 2, 3]}), 2.0, 0))
    q.push(stamp(pa.record_batch({"v": [4, 5, 6, 7]}), 1.0, 3))
    before = (q.rows, q.nbytes, q.oldest, [b.column("v").to_pylist() for b in q.batches()])
    nbytes = q.nbytes
    taken = q.take(5)
    q.put_back(taken, nbytes - q.nbytes)
    assert (q.rows, q.nbytes, q.oldest) == before[:3]
    assert sum((b.column("v").to_pylist() for b in q.batches()), []) == [1, 2, 3, 4, 5, 6, 7]


def test_a_failing_udf_in_a_trigger_surfaces_and_checkpoints_nothing(spark_sql, tmp_path):
    from sparkqos.runtime.config import RunConfig
    from sparkqos.runtime.trigger import TriggerLoop

    df = make_df(spark_sql, [(i, i, float(i), "x") for i in range(6)])
    compiled = compile_transforms(df, {"boom": lambda d: d.select(exploding("i").alias("v"))})
    config = RunConfig(checkpoint=tmp_path / "ckpt", sink=MemorySink(), budget_s=5.0, continuous=False)
    loop = TriggerLoop(compiled, config)
    with pytest.raises(UdfError, match="query 'boom': UDF '<lambda>'"):
        loop.process(df.toArrow(), 0)
    assert loop.store.load_latest() is None  # a restart replays the batch from the source
    assert sum(t.num_rows for t in loop.executor.queue_tables().values()) == 6


def test_a_failing_udf_on_the_continuous_worker_surfaces_at_the_next_trigger(spark_sql, tmp_path):
    """The worker runs the UDF between triggers: its error stops the worker and the next trigger
    raises it; that trigger is not checkpointed, and checkpoint 0 still holds batch 0's rows."""

    from sparkqos.runtime.config import RunConfig
    from sparkqos.runtime.trigger import TriggerLoop

    df = make_df(spark_sql, [(i, i, float(i), "x") for i in range(6)])
    compiled = compile_transforms(df, {"boom": lambda d: d.select(exploding("i").alias("v"))})
    # top_class_s=0: the trigger serves nothing itself (one class: it would serve with the
    # strategy, and meet the UDF inside the trigger, below)
    config = RunConfig(checkpoint=tmp_path / "ckpt", sink=MemorySink(), continuous=True, top_class_s=0.0)
    loop = TriggerLoop(compiled, config)
    loop.process(df.toArrow(), 0)  # ingested and checkpointed; the worker then meets the UDF
    deadline = time.time() + 10
    while loop.worker.alive and time.time() < deadline:
        time.sleep(0.01)
    with pytest.raises(UdfError, match="query 'boom': UDF '<lambda>'"):
        loop.process(df.toArrow(), 1)
    assert not loop.worker.alive
    ckpt = loop.store.load_latest()
    assert ckpt.batch_id == 0 and sum(t.num_rows for t in ckpt.queues.values()) == 6
    loop.close()
    # Served inside the trigger, the error fails that trigger before its checkpoint: Spark runs
    # the batch again, and no row of it was taken for done.
    inside = TriggerLoop(compiled, RunConfig(checkpoint=tmp_path / "inside", sink=MemorySink(), continuous=True))
    with pytest.raises(UdfError, match="query 'boom': UDF '<lambda>'"):
        inside.process(df.toArrow(), 0)
    inside.close()
    assert inside.store.load_latest() is None


def test_a_udf_result_spark_would_convert_its_own_way_raises(spark_sql):
    df = make_df(spark_sql, [(1, 1, 1.0, "a")])
    pickled = F.udf(lambda i: i, "string", useArrow=False)  # the JVM prints the int; not reproduced
    with pytest.raises(UdfError, match="returned 1 \\(int\\) for a string result"):
        sparkqos.run(df, {"q": lambda d: d.select(pickled("i"))})
    arrow = F.udf(lambda i: i, "string", useArrow=True)  # str() in the worker: reproduced
    assert sparkqos.run(df, {"q": lambda d: d.select(arrow("i").alias("v"))})["q"].column("v").to_pylist() == ["1"]


# -- refused ------------------------------------------------------------------------------------------


@F.pandas_udf(DoubleType())
def mean_of(x: pd.Series) -> float:
    return x.mean()


@F.pandas_udf(LongType())
def plus_one_batches(xs: Iterator[pd.Series]) -> Iterator[pd.Series]:
    for x in xs:
        yield x + 1


@F.udtf(returnType=StructType([StructField("x", IntegerType())]))
class Twice:
    def eval(self, v: int):
        yield (v,)
        yield (v,)


@F.arrow_udf(LongType())
def arrow_plus_one(x):
    import pyarrow.compute as pc

    return pc.add(x, 1)


REFUSED = {
    "grouped aggregate pandas UDF 'mean_of'": lambda d: d.groupBy(F.window("ts", "10 seconds")).agg(mean_of("d")),
    "window function": lambda d: d.withColumn("m", mean_of("d").over(Window.partitionBy("s"))),
    "iterator pandas UDF": lambda d: d.select(plus_one_batches("i")),
    "mapInPandas": lambda d: d.mapInPandas(lambda it: it, d.schema),
    "applyInPandas": lambda d: d.groupBy("s").applyInPandas(lambda p: p, d.schema),
    "UDTF": lambda d: d.lateralJoin(Twice(F.col("i").outer())),
    "Arrow UDF \\(arrow_udf\\) 'arrow_plus_one'": lambda d: d.select(arrow_plus_one("i")),
    "returning timestamp": lambda d: d.select(F.udf(lambda x: None, "timestamp")("i")),
    "returning array": lambda d: d.select(F.udf(lambda x: [x], "array<int>")("i")),
    "over a timestamp argument": lambda d: d.select(F.udf(lambda x: 1, "int")("ts")),
    "keyword arguments": lambda d: d.select(F.udf(lambda x: 1, "int")(x=F.col("i"))),
}


@pytest.mark.parametrize("named", list(REFUSED))
def test_refused_kinds_name_themselves(spark_sql, named):
    df = spark_sql.createDataFrame([(1, 2.0, "a", None)], "i int, d double, s string, ts timestamp")
    with pytest.raises(UnsupportedTransform, match=named) as info:  # native: what the executor refuses to run
        sparkqos.run(df, {"q": REFUSED[named]}, placement="native")
    assert info.value.query == "q"


def test_worker_settings_sparkqos_does_not_reproduce_are_refused(spark_sql):
    df = make_df(spark_sql, [(1, 2, 3.0, "a")])
    key = "spark.sql.execution.pandas.convertToArrowArraySafely"
    spark_sql.conf.set(key, "true")
    try:
        with pytest.raises(UnsupportedTransform, match=f"UDFs with {key}=true"):
            sparkqos.run(df, {"q": pandas_one})
    finally:
        spark_sql.conf.unset(key)
    assert sparkqos.run(df, {"q": pandas_one})["q"].num_rows == 1


def test_a_udf_under_spark_connect_is_refused_by_name(spark_sql):
    """Connect's plan rewrite (sparkqos.spark.connect_plan) writes a UDF call as a bare PythonUDF
    node (its name, no function): the compiler refuses it by name. Checked on the classic plan
    with that node put in, as no Connect server runs here."""
    import json

    from pyspark.sql.connect.proto import expressions_pb2

    from sparkqos.compile.spark_plan import compile_plans
    from sparkqos.spark.connect_plan import _Translator
    from sparkqos.spark.transforms import _arrow_schema

    call = expressions_pb2.Expression()
    call.common_inline_user_defined_function.function_name = "half"
    connect_node, _ = _Translator("q", None, 0, 4, "UTC").expr(call, iter(["double"]), [])

    df = make_df(spark_sql, [(1, 2, 3.0, "a")])
    plan = json.loads(pandas_one(df)._jdf.queryExecution().analyzed().toJSON())
    (select,) = [node for node in plan if "projectList" in node]
    # Each select item is [Alias, PythonUDF, its argument]: the UDF goes in as Connect writes it.
    select["projectList"] = [[item[0], *connect_node] for item in select["projectList"]]
    source = df._jdf.queryExecution().analyzed()
    ids = [int(source.output().apply(k).exprId().id()) for k in range(source.output().size())]
    with pytest.raises(UnsupportedTransform, match="udf under Spark Connect \\('half'\\)"):
        compile_plans({"q": plan}, json.loads(source.toJSON()), ids, _arrow_schema(df))


# -- streaming ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sensor_trace(tmp_path_factory):
    n = 300
    rng = np.random.default_rng(5)
    ts = 1_700_000_000_000_000 + np.sort(rng.integers(0, 6_000_000, n))
    temperature = np.round(rng.normal(45, 20, n), 1)
    temperature[::29] = np.nan
    temperature[::41] = np.inf
    table = pa.table(
        {
            "sensor_id": pa.array(rng.integers(0, 16, n), pa.int32()),
            "zone": pa.array([["north", "south", "", None][k % 4] for k in range(n)]),
            "temperature": pa.array(temperature),
            "ts": pa.array(ts.astype("int64"), pa.timestamp("us", tz="UTC")),
        }
    )
    path = tmp_path_factory.mktemp("udfs") / "sensors.parquet"
    pq.write_table(table, path)
    return path


def hot_zones(df):
    return df.where(small(F.col("temperature") / 10)).select("sensor_id", tagged("zone", "sensor_id").alias("t"))


def scaled(df):
    return df.select(weighted("sensor_id", "temperature").alias("w"), label("zone", "temperature").alias("l"), "ts")


def test_a_replayed_stream_equals_the_static_result(spark_sql, sensor_trace, tmp_path):
    queries = {"hot_zones": hot_zones, "scaled": scaled}
    sink = stream_to_end(
        replay(spark_sql, sensor_trace, seconds_per_trigger=2),
        queries,
        tmp_path / "ckpt",
        timeout_s=120,
        strategy="chain",
        budget_s=0.001,
        whole_batches=False,
    )
    static = spark_sql.read.parquet(str(sensor_trace))
    for name, transform in queries.items():
        want = transform(static).toArrow()
        got = sink.table(name)
        assert got.num_rows > 0, name
        assert canonical(got.cast(want.schema)) == canonical(want), name
