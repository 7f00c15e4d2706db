"""Queries as ordinary PySpark code transforms compiled from Spark's plans.

* Every supported construct gives, through the executor under a registered strategy, exactly the
  rows Spark's own engine gives for the same transform, on hypothesis-generated inputs with nulls,
  NaN, ±inf, -0.0, empty strings, extreme integers and empty inputs.
* Every unsupported operation raises UnsupportedTransform naming it, before any Spark job runs.
* A transform served by ``sparkqos.stream`` over a replayed stream gives the rows of the same
  transform on the static data.

sparkqos follows Spark's non-ANSI results (the module switches ANSI off for its Spark oracle):
with ANSI on, the inputs where the two differ are exactly those on which Spark fails the query.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F
from pyspark.sql.window import Window

import sparkqos
from sparkqos import sources
from sparkqos.errors import UnsupportedTransform
from tests.conftest import examples, replay, run_under_each, stream_to_end

STRATEGIES = ("fifo", "chain", "cqc", "adaptive")

SCHEMA = pa.schema(
    [
        ("i", pa.int32()),
        ("l", pa.int64()),
        ("d", pa.float64()),
        ("s", pa.string()),
        ("f", pa.bool_()),
    ]
)
INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)

ints = st.one_of(st.none(), st.sampled_from([*INT32, 0, 1, -1, 2, 3]), st.integers(-100, 100))
longs = st.one_of(st.none(), st.sampled_from([*INT64, 0, 1, -1]), st.integers(-(10**12), 10**12))
doubles = st.one_of(
    st.none(),
    st.sampled_from([math.nan, math.inf, -math.inf, 0.0, -0.0, 0.5, -0.5, 2.5, -2.5, 1e308, -1e308, 5e-324]),
    st.floats(-1e6, 1e6, allow_nan=False),
)
strings = st.one_of(st.none(), st.text(alphabet="abAB%_ \\é", max_size=4))
bools = st.one_of(st.none(), st.booleans())
rows = st.lists(st.tuples(ints, longs, doubles, strings, bools), max_size=12)

EXAMPLES = settings(max_examples=examples(12), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

ROOT = Path(__file__).resolve().parents[1]


def make_df(spark, data):
    cols = list(zip(*data, strict=True)) if data else [[] for _ in SCHEMA]
    table = pa.table([pa.array(list(c), f.type) for c, f in zip(cols, SCHEMA, strict=True)], schema=SCHEMA)
    return spark.createDataFrame(table)


def _key(v):
    """Sort key for any cell: None first, NaN after every number."""
    if v is None:
        return (0, 0)
    if isinstance(v, float) and math.isnan(v):
        return (2, 0)
    return (1, v)


def canonical(table: pa.Table) -> list[tuple]:
    rows_ = [tuple(r.values()) for r in table.to_pylist()]
    rows_ = [tuple("NaN" if isinstance(v, float) and math.isnan(v) else v for v in r) for r in rows_]
    return sorted(rows_, key=lambda r: tuple(_key(float("nan") if v == "NaN" else v) for v in r))


def assert_same_as_spark(df, queries, *strategies):
    """``sparkqos.run`` under each of ``strategies`` gives Spark's rows (Spark asked once)."""
    if len(strategies) == 1:
        runs = {strategies[0]: sparkqos.run(df, queries, strategy=strategies[0], batch_rows=3, units_between=2)}
    else:
        runs = run_under_each(df, queries, strategies, batch_rows=3, units_between=2)
    for name, transform in queries.items():
        want = transform(df).toArrow()
        for strategy, got in runs.items():
            assert got[name].schema.names == want.schema.names, name
            assert got[name].schema.types == want.schema.types, name
            assert canonical(got[name]) == canonical(want), f"{name} under {strategy}"


# -- the supported constructs, each against Spark ------------------------------------------------


def q_filters(df):
    c = F.col
    return df.where(
        ((c("i") > 1) | (c("d") <= 0.5) | c("s").isNull())
        & ~(c("l") == 3)
        & (c("d") != c("d") + 1)  # NaN != NaN + 1 is false in Spark (NaN = NaN)
    )


def q_arith(df):
    c = F.col
    return df.select(
        (c("i") + c("i")).alias("add"),  # int32 wraps around
        (c("l") - c("i")).alias("sub"),
        (c("l") * 3).alias("mul"),
        (c("i") / c("l")).alias("div"),  # double; null when dividing by 0
        (c("d") / c("i")).alias("div_d"),
        (-c("i")).alias("neg"),
        (c("i") % 3).alias("mod"),  # sign of the dividend; null for a zero divisor
        (c("l") % c("i")).alias("mod_l"),  # MIN % -1 is 0
        (c("d") % 2.5).alias("mod_d"),  # C's fmod
        (c("d") % c("d")).alias("mod_dd"),
        F.expr("l div i").alias("div_int"),  # toward zero; MIN div -1 wraps
        (c("d") * 2.5 + 1).alias("lin"),
        F.abs(c("i")).alias("abs"),
        F.lit(7).alias("lit_int"),
        F.lit(2**40).alias("lit_long"),
        F.lit(None).cast("int").alias("lit_null"),
        F.lit(float("nan")).alias("lit_nan"),
        F.lit("x").alias("lit_s"),
        F.lit(True).alias("lit_b"),
    )


def q_compare(df):
    c = F.col
    return df.select(
        "d",
        (c("d") > 0.5).alias("gt"),
        (c("d") >= c("i")).alias("ge"),  # int widened to double
        (c("d") < 1).alias("lt"),
        (c("d") <= -0.0).alias("le"),
        (c("d") >= 2.5).alias("ge_lit"),  # NaN >= 2.5 is true in Spark
        (c("d") != 0.5).alias("ne_lit"),
        (F.lit(0.5) < c("d")).alias("lit_lt"),  # the literal on the left
        (F.lit(1) >= c("d")).alias("lit_ge"),  # an int literal cast to double by Spark
        (c("d") == c("d")).alias("eq"),  # NaN = NaN
        (c("i") != 0).alias("ne"),
        c("d").eqNullSafe(F.lit(None)).alias("ns"),
        (c("s") < "b").alias("s_lt"),
        (c("f") & (c("i") > 0)).alias("and_"),
        (c("f") | c("s").isNull()).alias("or_"),
        (~c("f")).alias("not_"),
        c("l").isNull().alias("isnull"),
        c("l").isNotNull().alias("isnotnull"),
        c("i").isin(1, 2, 3).alias("isin"),
        c("i").isin(1, None).alias("isin_null"),  # x IN (1, NULL) is null unless x = 1
        c("d").isin(float("nan"), 0.0).alias("isin_nan"),  # NaN matches NaN, -0.0 matches 0.0
        c("i").isin(*range(-700, 800, 3)).alias("isin_long_list"),
        c("s").isin("a", "").alias("isin_s"),
        c("d").between(-1, 1).alias("between"),
        F.isnan("d").alias("isnan"),
    )


def q_functions(df):
    c = F.col
    return df.select(
        F.when(c("i") > 0, "pos").when(c("i") < 0, "neg").otherwise("zero").alias("sign"),
        F.when(c("d") > 1, c("d")).alias("case_null"),
        F.when(c("f"), c("i")).otherwise(c("l")).alias("case_widen"),
        F.coalesce("i", "l").alias("coalesce"),
        F.greatest("i", "d").alias("greatest"),
        F.least("d", F.lit(0.0)).alias("least"),
        F.lower("s").alias("lower"),
        F.upper("s").alias("upper"),
        F.length("s").alias("length"),
        c("s").startswith("a").alias("sw"),
        c("s").endswith("b").alias("ew"),
        c("s").contains("%").alias("contains"),
        c("s").like("a%").alias("like"),
        c("s").like("_\\%").alias("like_escape"),
    )


def q_math(df):
    c = F.col
    return df.select(
        F.sqrt("d").alias("sqrt"),  # NaN for a negative number
        F.floor("d").alias("floor"),  # a long: NaN → 0, saturating
        F.ceil("d").alias("ceil"),
        F.floor("l").alias("floor_l"),
        F.round("d").alias("round"),  # HALF_UP
        F.round("i").alias("round_i"),
        F.abs(c("d")).alias("abs_d"),
    )


def q_casts(df):
    c = F.col
    return df.select(
        c("d").cast("int").alias("d_int"),  # toward zero, NaN → 0, saturating
        c("d").cast("long").alias("d_long"),
        c("d").cast("short").alias("d_short"),  # through int, then wrapping
        c("d").cast("float").alias("d_float"),
        c("l").cast("int").alias("l_int"),  # wraps around
        c("l").cast("double").alias("l_double"),
        c("i").cast("string").alias("i_str"),
        c("f").cast("string").alias("f_str"),
        c("f").cast("int").alias("f_int"),
        c("d").cast("boolean").alias("d_bool"),  # NaN is true
        c("i").cast("byte").alias("i_byte"),
    )


def q_strings(df):
    c = F.col
    return df.select(
        F.concat(c("s"), F.lit("|"), c("s")).alias("cat"),  # null when any part is null
        F.concat(c("s"), c("i").cast("string")).alias("cat_num"),
        F.trim(F.concat(F.lit("  "), c("s"), F.lit(" \t "))).alias("trim"),  # spaces only
        F.ltrim(F.concat(F.lit("  "), c("s"))).alias("ltrim"),
        F.rtrim(F.concat(c("s"), F.lit("  "))).alias("rtrim"),
        *(
            F.substring(c("s"), pos, length).alias(f"sub_{i}")
            for i, (pos, length) in enumerate([(1, 2), (0, 1), (2, 100), (-1, 1), (-3, 2), (-9, 3), (3, -1), (-2, 0)])
        ),
    )


def q_projection(df):
    return (
        df.withColumn("twice", F.col("i") * 2)
        .withColumns({"half": F.col("d") / 2, "tag": F.lit("t")})
        .withColumnRenamed("s", "name")
        .drop("f")
        .alias("x")
        .where(F.col("twice") > -10)
        .select("name", "twice", "half", "tag", "l")
    )


def q_union(df):
    hot = df.where(F.col("d") > 0).select("i", "s")
    cold = df.where(F.col("d") <= 0).select(F.col("i").alias("j"), "s")  # by position: named after `hot`
    return hot.union(cold).unionByName(df.select("s", "i"))


def q_self_union(df):
    return df.union(df)


def q_identity(df):
    return df


ALL = {
    "filters": q_filters,
    "arith": q_arith,
    "compare": q_compare,
    "functions": q_functions,
    "math": q_math,
    "casts": q_casts,
    "projection": q_projection,
    "strings": q_strings,
    "union": q_union,
    "self_union": q_self_union,
    "identity": q_identity,
}


@pytest.mark.parametrize(
    "group", [("filters", "arith"), ("compare", "functions"), ("math", "casts"), ("projection", "union"), ("strings",)]
)
@EXAMPLES
@given(data=rows, strategy=st.sampled_from(STRATEGIES))
def test_constructs_equal_spark(spark_sql, group, data, strategy):
    assert_same_as_spark(make_df(spark_sql, data), {q: ALL[q] for q in group}, strategy)


def test_every_query_at_once_under_each_strategy(spark_sql):
    rng = np.random.default_rng(3)
    data = [
        (
            int(rng.integers(-5, 5)) if k % 7 else None,
            int(rng.integers(-(10**6), 10**6)),
            [math.nan, math.inf, -0.0, float(rng.normal())][k % 4] if k % 5 == 0 else float(rng.normal() * 10),
            ["", "ab", "B%", None, "é_"][k % 5],
            [True, False, None][k % 3],
        )
        for k in range(200)
    ]
    assert_same_as_spark(make_df(spark_sql, data), ALL, *STRATEGIES)


@pytest.mark.parametrize("zone", ["UTC", "America/New_York"])
def test_timestamps(spark_sql, zone):
    """Timestamp columns pass through and compare with timestamp literals, whatever the session's
    time zone (Spark prints the literals in it)."""
    from datetime import UTC, datetime

    base = 1_700_000_000_000_000
    table = pa.table(
        {
            "ts": pa.array([base + k * 3_600_000_000 for k in range(-30, 30)] + [None], pa.timestamp("us", tz="UTC")),
            "v": pa.array(range(61), pa.int64()),
        }
    )
    before = spark_sql.conf.get("spark.sql.session.timeZone")
    spark_sql.conf.set("spark.sql.session.timeZone", zone)
    try:
        df = spark_sql.createDataFrame(table)
        noon = datetime(2023, 11, 14, 12, 0, tzinfo=UTC)
        queries = {
            "after": lambda d: d.where(F.col("ts") > F.lit(noon)).select("ts", "v"),
            "window": lambda d: d.where(F.col("ts").between(F.lit(noon), F.lit(datetime(2023, 11, 15, tzinfo=UTC)))),
            "pick": lambda d: d.select(F.coalesce("ts", F.lit(noon)).alias("c"), F.greatest("ts", F.lit(noon)).alias("g")),
        }
        assert_same_as_spark(df, queries, "fifo", "chain")
    finally:
        spark_sql.conf.set("spark.sql.session.timeZone", before)


def test_empty_input(spark_sql):
    out = sparkqos.run(make_df(spark_sql, []), ALL, strategy="chain")
    for name, transform in ALL.items():
        assert out[name].num_rows == 0
        assert out[name].schema.names == transform(make_df(spark_sql, [])).columns


def test_operators_are_spark_operators(spark_sql):
    """One executor operator per Spark operator, named after the query and step, in the classes asked for."""
    from sparkqos.spark.transforms import compile_transforms

    compiled = compile_transforms(
        make_df(spark_sql, []),
        {"fire": lambda d: d.where(F.col("d") > 60).select("i", "d"), "both": q_self_union},
        classes={"fire": "H"},
        priorities={"H": 6, "N": 1},
    )
    assert [op.name for op in compiled.plan] == ["fire/1:where", "fire/2:select", "both/1:select", "both/2:union"]
    assert [op.kind for op in compiled.plan] == ["filter", "map", "map", "union"]
    assert compiled.plan.class_of("fire/2:select") == "H" and compiled.plan.classes["H"] == 6.0
    assert [str(p) for p in compiled.plan.paths][-2:] == ["input→both/1:select→both/2:union", "input→both/2:union"]


def test_wrong_arguments_fail_before_any_work(spark_sql, tmp_path):
    from sparkqos.errors import ArgumentError, RunnerError
    from sparkqos.workloads.sensors import sensor_queries

    df = make_df(spark_sql, [])
    with pytest.raises(ArgumentError, match="query 'q' must be a function"):
        sparkqos.run(df, {"q": "select *"})
    with pytest.raises(ArgumentError, match="returned int, not a DataFrame"):
        sparkqos.run(df, {"q": lambda d: 3})
    with pytest.raises(ArgumentError, match="non-empty mapping"):
        sparkqos.run(df, {})
    with pytest.raises(sparkqos.PlanError, match="unknown queries"):
        sparkqos.run(df, {"q": q_identity}, classes={"other": "H"})
    with pytest.raises(RunnerError, match="streaming DataFrame"):
        sparkqos.stream(df, {"q": q_identity}, checkpoint=tmp_path)
    with pytest.raises(RunnerError, match="classes= and priorities="):
        sparkqos.stream(df, sensor_queries(), priorities={"H": 2}, checkpoint=tmp_path)


# -- what is not supported yet -----------------------------------------------------------------------


def _iterator_udf():
    def same(xs: Iterator[pd.Series]) -> Iterator[pd.Series]:
        yield from xs

    return F.pandas_udf(same, "int")


UNSUPPORTED = {
    "approx_count_distinct": lambda d: d.groupBy("s").agg(F.approx_count_distinct("i")),  # Spark's sketch: not exact
    "stream–stream join": lambda d: d.join(d.select("i"), "i"),  # no event-time range
    "dropDuplicatesWithinWatermark": lambda d: d.dropDuplicatesWithinWatermark(["s"]),  # Spark: streams only
    "Sort": lambda d: d.orderBy("i"),
    "Window": lambda d: d.withColumn("r", F.row_number().over(Window.orderBy("i"))),
    "limit": lambda d: d.limit(3),
    "iterator pandas UDF": lambda d: d.select(_iterator_udf()("i")),
    "MapInPandas": lambda d: d.mapInPandas(lambda it: it, d.schema),
    "MapInArrow": lambda d: d.mapInArrow(lambda it: it, d.schema),
    "regexp_extract": lambda d: d.select(F.regexp_extract("s", "a", 0).alias("r")),
    "substring": lambda d: d.select(F.substring("s", F.col("i"), 2).alias("r")),  # a position from a column
    "cast": lambda d: d.select(F.col("d").cast("string").alias("r")),
    "round": lambda d: d.select(F.round(F.lit(Decimal("1.25")), 1).alias("r")),  # of a decimal (of a double: runs)
    "pmod": lambda d: d.select(F.pmod("i", F.lit(2)).alias("r")),
    "try_cast": lambda d: d.select(F.col("d").try_cast("int").alias("r")),  # null, not saturated, on overflow
    "sin": lambda d: d.select(F.sin("d").alias("r")),  # StrictMath: last bits differ from libm
    "hypot": lambda d: d.where(F.hypot("d", F.lit(2.0)) > 1),
    "another DataFrame": lambda d: d.union(d.sparkSession.createDataFrame([(9, 9, 9.0, "z", False)], d.schema)),
}


@pytest.mark.parametrize("operation", list(UNSUPPORTED))
def test_unsupported_raises_before_any_data_moves(spark_sql, operation):
    df = make_df(spark_sql, [(1, 2, 3.0, "a", True)])
    sc = spark_sql.sparkContext
    group = f"sparkqos-unsupported-{operation}"
    sc.setJobGroup(group, "must stay empty")
    try:
        with pytest.raises(UnsupportedTransform) as info:  # native: what sparkqos's own operators refuse
            sparkqos.run(df, {"q": UNSUPPORTED[operation]}, placement="native")
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    message = str(info.value)
    assert operation in message and "query 'q'" in message and "(what runs where: docs/transforms.md)" in message
    assert (ROOT / "docs" / "transforms.md").is_file()
    assert isinstance(info.value, sparkqos.SparkqosError) and info.value.query == "q"
    assert sc.statusTracker().getJobIdsForGroup(group) == []


def test_try_cast_is_found_in_a_wide_plan_and_a_plain_cast_is_not_taken_for_one(spark_sql):
    """The try_cast check reads the plan's whole tree string (Spark cuts field lists at 25 in its
    default string): a try_cast behind 40 columns, or in a filter, is still refused; a plain cast
    under a column named like one is not."""
    df = make_df(spark_sql, [(1, 2, 3.0, "a", True)])

    def wide(d):
        cols = [F.col("i").cast("string").alias(f"c{k}") for k in range(40)]
        return d.select(*cols, F.col("d").try_cast("int").alias("r"))

    with pytest.raises(UnsupportedTransform, match="try_cast"):
        sparkqos.run(df, {"q": wide})
    with pytest.raises(UnsupportedTransform, match="try_cast"):
        sparkqos.run(df, {"q": lambda d: d.where(F.col("s").try_cast("int") > 0)})
    out = sparkqos.run(df, {"q": lambda d: d.select(F.col("i").cast("long").alias("try_cast(i)"))})
    assert out["q"].column("try_cast(i)").to_pylist() == [1]


# -- streaming -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sensor_trace(tmp_path_factory):
    n = 600
    rng = np.random.default_rng(11)
    ts = 1_700_000_000_000_000 + np.sort(rng.integers(0, 10_000_000, n))
    temperature = np.round(rng.normal(45, 20, n), 1)
    temperature[::37] = np.nan
    table = pa.table(
        {
            "sensor_id": pa.array(rng.integers(0, 16, n), pa.int32()),
            "zone": pa.array([["north", "south", "", None][i % 4] for i in range(n)]),
            "temperature": pa.array(temperature),
            "ts": pa.array(ts.astype("int64"), pa.timestamp("us", tz="UTC")),
        }
    )
    path = tmp_path_factory.mktemp("transforms") / "sensors.parquet"
    pq.write_table(table, path)
    return path


def fire(df):
    return df.where((F.col("temperature") > 60) & F.col("zone").isNotNull()).select("sensor_id", "temperature", "ts")


def zone_stats(df):
    return df.withColumn("hot", F.when(F.col("temperature") > 50, "hot").otherwise("ok")).drop("ts")


def everything(df):
    return df.where(F.col("zone") == "north").union(df.where(F.col("zone") == "south"))


def test_stream_equals_spark_on_the_static_data(spark_sql, sensor_trace, tmp_path):
    queries = {"fire": fire, "zone_stats": zone_stats, "everything": everything}
    sink = stream_to_end(
        replay(spark_sql, sensor_trace, seconds_per_trigger=3),
        queries,
        tmp_path / "ckpt",
        timeout_s=120,
        classes={"fire": "H", "zone_stats": "N", "everything": "C"},
        priorities={"H": 6, "C": 3, "N": 1},
        strategy="cqc",
        budget_s=0.001,
        whole_batches=False,
    )
    static = spark_sql.read.parquet(str(sensor_trace))
    for name, transform in queries.items():
        want = transform(static).toArrow()
        got = sink.table(name)
        assert got.num_rows > 0 and got.num_rows == want.num_rows, name
        assert canonical(got.cast(want.schema)) == canonical(want), name


def test_stream_checks_transforms_before_starting(spark_sql, sensor_trace, tmp_path):
    sources.register(spark_sql)
    streaming = spark_sql.readStream.format("sparkqos.replay").option("path", str(sensor_trace)).load()
    with pytest.raises(UnsupportedTransform, match="distinct aggregate"):  # groupBy("zone").count() runs (update mode)
        sparkqos.stream(streaming, {"distinct": lambda d: d.groupBy("zone").agg(F.countDistinct("ts"))}, checkpoint=tmp_path)
    with pytest.raises(UnsupportedTransform, match="Sort.*orderBy"):
        sparkqos.stream(streaming, {"sorted": lambda d: d.where("sensor_id > 1").orderBy("ts")}, checkpoint=tmp_path)
    assert not spark_sql.streams.active
    # A stream read twice is renumbered by a Project of aliases, not deduplicated: nothing to run.
    from sparkqos.spark.transforms import compile_transforms

    compiled = compile_transforms(streaming, {"twice": lambda d: d.union(d), "hot": everything})
    assert compiled.plan.names == ("twice/1:select", "twice/2:union", "hot/1:where", "hot/2:where", "hot/3:union")
