"""Constructs that run natively because they sit in stateful or scheduled parts of a query
struct fields, ``round`` / ``bround`` with a scale, decimal literals with
Spark's promotion rules, ``explode`` of arrays (``split``, ``array``).

* On a finite DataFrame ``sparkqos.run`` gives the rows of Spark's own run of the same transform
  (nulls, NaN, ±inf, -0.0, empty strings, empty input, the doubles whose decimal form rounds
  the other way from their binary value) under every registered strategy.
* Streamed through ``sparkqos.stream`` + ``finish()`` over a replayed trace, the same rows.
* What is not supported raises UnsupportedTransform naming it, before any data moves.
"""

from __future__ import annotations

import itertools
import math
from decimal import ROUND_HALF_UP, Decimal, localcontext

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

import sparkqos
from sparkqos import schedulers
from sparkqos.errors import UnsupportedTransform
from sparkqos.executor import Executor
from sparkqos.executor.expressions.numeric import printed, spark_round
from sparkqos.executor.loop import replay as replay_plan
from sparkqos.spark.transforms import compile_transforms
from sparkqos.testing import assert_same_rows, sorted_rows
from tests.conftest import examples, replay, strategies, stream_to_end

STRATEGIES = strategies()
BASE_US = 1_700_000_000_000_000
TS = pa.timestamp("us", tz="UTC")
SCHEMA = pa.schema([("k", pa.string()), ("i", pa.int32()), ("d", pa.float64()), ("s", pa.string()), ("ts", TS)])
EXAMPLES = settings(max_examples=examples(3), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

#: Doubles whose shortest decimal form sits on a half (2.675 is 2.67499999… in binary), ±0, huge and tiny.
HARD = [2.675, 0.125, 1.005, -2.5, 2.5, 0.5, -0.0, 0.285, 1.115, 4.35, -1.005, 1e300, 5e-324, 123456789.125, 1e16 + 2]
#: Integer-valued doubles above 2^53, which JDK 17 prints with more digits than the shortest.
HARD += [41174812871902448.0, 2.0**58 + 448, 2.0**61 + 1536, 1e18 + 64, 2.0**62 * 1.5 + 5120]
keys = st.one_of(st.none(), st.sampled_from(["a", "b", ""]))
ints = st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1), st.integers(-30, 30))
doubles = st.one_of(
    st.none(), st.sampled_from([math.nan, math.inf, -math.inf, *HARD]), st.floats(-1e6, 1e6), st.floats(allow_nan=False)
)
texts = st.one_of(st.none(), st.sampled_from(["", ",", "a,b", "x,,y,", "a"]), st.text(alphabet="ab,", max_size=6))
rows = st.lists(st.tuples(keys, ints, doubles, texts), max_size=12)


def table_of(data) -> pa.Table:
    cols = list(zip(*data, strict=True)) if data else [[], [], [], []]
    ts = [BASE_US + 1_000_000 * n for n in range(len(data))]
    arrays = [pa.array(list(c), f.type) for c, f in zip(cols, list(SCHEMA)[:4], strict=True)]
    return pa.table([*arrays, pa.array(ts, TS)], schema=SCHEMA)


def rounding(df):
    return df.select(
        "k",
        F.round("d", 2).alias("r2"),
        F.bround("d", 2).alias("b2"),
        F.round("d", -2).alias("rm"),
        F.bround("d", 0).alias("b0"),
        F.round("d").alias("r0"),
        F.round("i", -1).alias("ri"),
        F.bround("i", -1).alias("bi"),
        F.round("i", 3).alias("ri3"),
        F.round(F.col("d").cast("float"), 1).alias("rf"),
    )


def decimals(df):
    """What a user writes: decimal literals in SQL strings and with F.lit(Decimal(...))."""
    return (
        df.selectExpr("k", "d * 1.609 AS km", "i * 1.5 AS m", "i + 2.25 AS a", "1.5 AS lit", "round(d * 1.609, 2) AS r")
        .where("km > 1.5 OR km IS NULL")
        .withColumn("y", F.lit(Decimal("2.50")) * F.col("a"))
    )


def structs(df):
    return (
        df.select(F.struct("i", F.col("d").alias("x")).alias("s1"), "k")
        .where(F.col("s1.i").isNotNull() | F.col("k").isNull())
        .select(F.col("s1.x"), F.col("s1").getField("i").alias("ii"), "s1", "k")
    )


def exploded(df):
    return df.select("k", F.explode(F.split("s", ",")).alias("part")).where(F.col("part") != "b")


def exploded_outer(df):
    return df.select("i", F.posexplode_outer(F.split("s", ",", 2)).alias("p", "v"), F.explode_outer(F.array("i", F.lit(3))))


QUERIES = {"rounding": rounding, "decimals": decimals, "structs": structs, "exploded": exploded, "outer": exploded_outer}


def counts(df):
    return df.groupBy("k").count()


def running(df):
    """A dashboard's running aggregates per key, and a select and filter above them."""
    return (
        df.groupBy("k")
        .agg(
            F.sum("i").alias("si"),
            F.avg("d").alias("ad"),
            F.min("d").alias("lo"),
            F.max("i").alias("hi"),
            F.first("s").alias("fs"),
            F.last("d", ignorenulls=True).alias("ld"),
            F.count("d").alias("nd"),
        )
        .where(F.col("nd") >= 0)
        .withColumn("r", F.round("ad", 1))
    )


def overall(df):
    return df.agg(F.count("*").alias("n"), F.sum("d").alias("s"), F.max("s").alias("m"))


#: Aggregations without a time window; float sums and means compared to 1e-12 relative (Spark's
#: own result depends on the order it adds in).
AGGREGATES = {"counts": counts, "running": running, "overall": overall}


def frame(spark, table: pa.Table):
    return spark.createDataFrame(table).coalesce(1)


def under_every_strategy(df, queries, batch_rows: int = 3) -> dict[str, dict[str, pa.Table]]:
    """strategy → query → rows: ``sparkqos.run`` under the first strategy; the plan it compiles
    replayed the way run() feeds it under every other one (compiling once keeps this cheap). Every
    part runs natively (placement "native"; under "auto" nothing is left to Spark either)."""
    first = sparkqos.run(df, queries, strategy=STRATEGIES[0], batch_rows=batch_rows, units_between=2, placement="native")
    out = {STRATEGIES[0]: first}
    compiled = compile_transforms(df, queries)
    assert not compiled.spark_parts, f"run natively, not by Spark: {sorted(compiled.spark_parts)}"
    table = df.toArrow().cast(compiled.sources["input"])
    feeds = [(float(i), "input", b) for i, b in enumerate(table.to_batches(max_chunksize=batch_rows)) if b.num_rows]
    for strategy in STRATEGIES[1:]:
        ex = replay_plan(compiled, schedulers.get(strategy), feeds, units_between=itertools.repeat(2))
        out[strategy] = {q: ex.result(q) for q in compiled.roots}
    return out


@given(data=rows)
@EXAMPLES
def test_native_constructs_equal_spark_under_every_strategy(spark_sql, data):
    df = frame(spark_sql, table_of(data))
    want = {name: transform(df).toArrow() for name, transform in QUERIES.items()}
    for strategy, got in under_every_strategy(df, QUERIES).items():
        for name in QUERIES:
            assert_same_rows(got[name], want[name], f"{name} under {strategy}")


@given(data=rows)
@EXAMPLES
def test_aggregation_without_a_window_equals_spark_under_every_strategy(spark_sql, data):
    df = frame(spark_sql, table_of(data))
    want = {name: transform(df).toArrow() for name, transform in AGGREGATES.items()}
    for strategy, got in under_every_strategy(df, AGGREGATES).items():
        for name in AGGREGATES:
            assert_same_rows(got[name], want[name], f"{name} under {strategy}", rel=1e-12)


def last_per_key(table: pa.Table, keys: list[str]) -> pa.Table:
    """The last row of each key of an update-mode changelog: the table it leaves."""
    rows = {}
    for row in table.to_pylist():
        rows[repr([sorted_rows(pa.table({k: [row[k]]}))[0] for k in keys])] = row
    return pa.Table.from_pylist(list(rows.values()), schema=table.schema)


def spark_update_mode(transform, stream, checkpoint) -> pa.Table:
    """Spark's own streaming run of ``transform`` in update mode: every row each micro-batch wrote."""
    got: list[pa.Table] = []
    query = (
        transform(stream)
        .writeStream.outputMode("update")
        .foreachBatch(lambda batch_df, _id: got.append(batch_df.toArrow()))
        .trigger(availableNow=True)
        .option("checkpointLocation", str(checkpoint))
        .start()
    )
    assert query.awaitTermination(120), "Spark's update-mode run did not end"
    return pa.concat_tables(got)


def test_aggregation_without_a_window_streams_in_update_mode(spark_sql, tmp_path):
    """Through sparkqos.stream + finish(): a changelog whose last row per key is the table of
    Spark's own update-mode run (and of its static run), with a checkpoint and restore half way
    through the executor's part."""
    data = [
        (["a", "b", None, ""][n % 4], n - 10, [2.675, math.nan, None, -0.5][n % 3], ["a,b", "", None][n % 3]) for n in range(30)
    ]
    table = table_of(data)
    path = tmp_path / "trace.parquet"
    pq.write_table(table, path)
    queries = {"counts": counts, "running": running}
    sink = stream_to_end(
        replay(spark_sql, path, 8), queries, tmp_path / "ckpt", timeout_s=120, strategy="fifo", placement="native"
    )
    static = frame(spark_sql, table)
    for name, transform in queries.items():
        want = transform(static).toArrow()
        ours = sink.table(name).select(want.schema.names).cast(want.schema)
        assert ours.num_rows > want.num_rows, f"{name}: an update per changed key per trigger, not one row per key"
        assert_same_rows(last_per_key(ours, ["k"]), want, name, rel=1e-12)
        spark_rows = spark_update_mode(transform, replay(spark_sql, path, 8), tmp_path / f"spark_{name}")
        assert_same_rows(last_per_key(spark_rows, ["k"]), want, f"{name}: Spark's update mode", rel=1e-12)
    compiled = compile_transforms(replay(spark_sql, path, 8), queries)
    batches = table.to_batches(max_chunksize=7)
    ex = Executor(compiled.fresh(), schedulers.get("chain"))
    delivered = {q: [] for q in queries}
    for i, batch in enumerate(batches):
        if i == len(batches) // 2:
            state = ex.to_state()
            for q in queries:
                delivered[q].append(ex.result(q))
            ex = Executor(compiled.fresh(), schedulers.get("chain"))
            ex.load_state(state)
        ex.ingest("input", batch, arrival=float(i))
        ex.run(max_units=4)
    ex.finish()
    for name, transform in queries.items():
        want = transform(static).toArrow()
        changelog = pa.concat_tables([*delivered[name], ex.result(name)]).select(want.schema.names)
        assert_same_rows(last_per_key(changelog, ["k"]), want, f"{name} restored", rel=1e-12)


@given(x=st.one_of(st.floats(), st.sampled_from(HARD)), scale=st.integers(-20, 20))
@settings(max_examples=200, deadline=None)
def test_round_agrees_with_decimal_rounding_of_the_printed_double(x, scale):
    """The fast path (no decimals) gives what the definition gives: the printed double rounded."""
    for legacy in (False, True):
        got = spark_round(pa.array([x, -x]), scale, legacy=legacy).to_pylist()
        for value, out in zip((x, -x), got, strict=True):
            if math.isfinite(value):
                with localcontext(prec=1000, Emax=999_999, Emin=-999_999):
                    digits = printed(value, legacy)
                    exact = float(digits.quantize(Decimal(1).scaleb(-scale), rounding=ROUND_HALF_UP)) + 0.0
                assert out == exact and math.copysign(1, out) == math.copysign(1, exact), (value, scale, legacy)


def test_hard_rounding_cases_equal_spark(spark_sql):
    table = pa.table({"d": pa.array([*HARD, *(-h for h in HARD), math.nan, math.inf, -math.inf, None], pa.float64())})
    df = frame(spark_sql, table)
    scales = (-3, -1, 0, 1, 2, 3, 15)

    def q(d):
        return d.select(
            *(F.round("d", s).alias(f"r{i}") for i, s in enumerate(scales)),
            *(F.bround("d", s).alias(f"b{i}") for i, s in enumerate(scales)),
        )

    assert_same_rows(sparkqos.run(df, {"q": q})["q"], q(df).toArrow(), "hard")


def window_fields(df):
    """What users write after a windowed aggregation: the window's start and end as columns."""
    return (
        df.withWatermark("ts", "2 seconds")
        .groupBy(F.window("ts", "4 seconds"), "k")
        .agg(F.count("*").alias("n"), F.max("d").alias("hi"))
        .select(F.col("window.start").alias("start"), F.col("window").getField("end").alias("end"), "k", "n", "hi")
    )


def test_window_fields_and_explode_stream_like_spark(spark_sql, tmp_path):
    """Streamed through sparkqos.stream + finish() over a replayed trace: Spark's static rows."""
    data = [
        (["a", "b", None, ""][n % 4], n - 10, [2.675, math.nan, None, -0.5][n % 4], ["a,b", "", None, "x,,y"][n % 3])
        for n in range(24)
    ]
    table = table_of(data)
    path = tmp_path / "trace.parquet"
    pq.write_table(table, path)
    queries = {"window_fields": window_fields, **QUERIES}
    sink = stream_to_end(
        replay(spark_sql, path, 12), queries, tmp_path / "ckpt", timeout_s=120, strategy="chain", placement="native"
    )
    static = frame(spark_sql, table)
    for name, transform in queries.items():
        want = transform(static).toArrow()
        assert want.num_rows > 0, name
        assert_same_rows(sink.table(name).select(want.schema.names).cast(want.schema), want, name)


@pytest.mark.parametrize(
    ("transform", "named"),
    [
        (lambda d: d.select(F.split("s", "[,;]")), "split' with pattern '\\[,;\\]'"),
        (lambda d: d.select(F.split("s", "")), "split' with pattern ''"),
        (lambda d: d.select(F.explode(F.create_map("k", "i"))), "CreateMap"),
        (lambda d: d.selectExpr("i / 1.5 AS x"), "decimal arithmetic '/'"),
        (lambda d: d.selectExpr("round(1.25 * i, 1) AS x"), "'round' of a decimal"),
        (lambda d: d.selectExpr("cast(d AS decimal(10, 2)) AS x"), "'cast' from double to decimal"),
    ],
)
def test_unsupported_native_constructs_name_what(spark, transform, named):
    """Refused natively (placement "native"; under "auto" Spark evaluates them over the input)."""
    df = frame(spark, table_of([("a", 1, 1.0, "a,b")]))
    with pytest.raises(UnsupportedTransform, match=named):
        sparkqos.run(df, {"q": transform}, placement="native")
