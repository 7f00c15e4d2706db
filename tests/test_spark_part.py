"""Parts of queries Spark evaluates inside the micro-batch (classic pyspark).

What sparkqos has no native operator or function for, in the stateless row-wise part of a query
directly over the input (JSON, regular expressions, dates, ``concat_ws``, ``explode``, UDFs sparkqos does
not run, SQL strings), Spark evaluates; the rows enter the queue of the first native operator.

* ``sparkqos.run`` gives Spark's rows for every such construct (fixed rows with nulls, NaN, ±inf,
  empty strings and malformed JSON; hypothesis data; an empty input), a window aggregate above
  a Spark part included, under every registered strategy;
* the same through ``sparkqos.stream`` + ``finish()``, with the part in the progress record;
* ``placement``: "native" refuses what only Spark computes, "spark" hands native parts to Spark
  too (same rows), a bad value is a PlacementError; a Spark-only function above a window is
  refused up front naming query and function; a UDF raising in the part is a SparkPartError
  naming query and UDF, and the stream loses no row (the failed trigger is replayed);
* ``sparkqos.explain`` says where each operator runs.
"""

from __future__ import annotations

import datetime as dt
import math
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, StringType

import sparkqos
from sparkqos import schedulers
from sparkqos.errors import PlacementError, SparkPartError, UnsupportedTransform
from sparkqos.io.sinks import MemorySink
from sparkqos.spark.transforms import compile_transforms, input_tables, run_compiled
from sparkqos.testing import assert_same_rows
from tests.conftest import examples, replay, strategies

JSON = "a int, b string, x double"
SCHEMA = "id int, value string, s string, d double, ts timestamp"
T0 = dt.datetime(2024, 3, 1, 10, 0, tzinfo=dt.UTC)
ROWS = [
    (1, '{"a": 1, "b": "x-12", "x": 2.5}', "ab-12", 1.5, T0),
    (2, '{"a": -3, "b": "", "x": "NaN"}', "", math.nan, T0 + dt.timedelta(seconds=1)),
    (3, "not json", None, math.inf, T0 + dt.timedelta(seconds=2)),
    (4, None, "é-x-7", -math.inf, T0 + dt.timedelta(seconds=3)),
    (None, '{"a": 7}', "q", None, T0 + dt.timedelta(seconds=4)),
    (6, "", "a--b", -0.0, T0 + dt.timedelta(seconds=5)),
]


@F.udf(ArrayType(StringType()))
def pieces(s):
    """A UDF sparkqos does not run (it returns an array): Spark evaluates it."""
    return None if s is None else s.split("-")


@F.udf(ArrayType(StringType()))
def fragile(s):
    if s is not None and Path(s).name == "boom" and Path(s).exists():
        raise ValueError("boom")
    return [s]


def tagged(frames):
    """``mapInPandas``: each partition's rows with ``s`` upper-cased, those without an id dropped."""
    for pdf in frames:
        pdf = pdf[pdf["id"].notna()]
        yield pdf.assign(s=pdf["s"].str.upper())[["id", "s", "ts"]]


def halved(batches):
    """``mapInArrow``: each batch's ``d`` halved, with its id."""
    import pyarrow.compute as pc

    for b in batches:
        yield pa.record_batch({"id": b.column("id"), "half": pc.divide(b.column("d"), 2.0)})


QUERIES = {
    "json": lambda d: (
        d.select("id", F.from_json("value", JSON).alias("j"), "ts")
        .where(F.col("j.a") > 0)
        .select("id", F.col("j.b").alias("b"), F.col("j.x").alias("x"), F.regexp_extract("j.b", r"(\d+)", 1).alias("n"), "ts")
    ),
    "json_object": lambda d: d.select("id", F.get_json_object("value", "$.b").alias("b")).where(F.col("b").isNotNull()),
    "regex": lambda d: d.select("id", F.regexp_replace("s", "[aeiou]", "_").alias("r"), F.col("s").rlike(r"\d").alias("has")),
    "dates": lambda d: d.select(
        "id",
        F.to_date("ts").alias("day"),
        F.hour("ts").alias("h"),
        F.dayofweek("ts").alias("dow"),
        F.date_format("ts", "yyyy-MM-dd HH:mm").alias("f"),
        F.to_timestamp(F.concat_ws(" ", F.lit("2024-01-02"), F.lit("03:04:05"))).alias("t"),
    ),
    "hash": lambda d: d.select(
        "id", F.concat_ws("|", "s", F.col("id").cast("string")).alias("c"), F.sha2(F.col("s"), 256).alias("h")
    ),
    # split on a regular expression ("-+"): Spark's part (on a plain string, split and explode run natively)
    "explode": lambda d: d.select("id", F.explode(F.split(F.coalesce("s", F.lit("")), "-+")).alias("w")).where(F.col("w") != "x"),
    "udf": lambda d: d.select("id", F.explode_outer(pieces("s")).alias("p")),
    "sql": lambda d: d.where("id > 1").selectExpr("id", "initcap(s) AS s2", "d * 2 AS d2"),
    "native_above": lambda d: d.select("id", F.translate("s", "-", "+").alias("h")).where(F.col("id") > 1).select("h"),
    "map_in_pandas": lambda d: d.mapInPandas(tagged, "id int, s string, ts timestamp").where(F.col("s") != "Q"),
    "map_in_arrow": lambda d: d.where(F.col("id") > 1).mapInArrow(halved, "id int, half double"),
}
#: A window aggregate over a part Spark evaluates (JSON parse + regex + filter).
WINDOW = {
    "window": lambda d: (
        d.withWatermark("ts", "1 second")
        .select(F.from_json("value", JSON).alias("j"), F.regexp_extract("s", r"(\d+)", 1).alias("n"), "ts")
        .where(F.col("j").isNotNull())
        .groupBy(F.window("ts", "2 seconds"))
        .agg(F.count("*").alias("rows"), F.max("ts").alias("last"))
    ),
}


def frame(spark, rows=ROWS):
    return spark.createDataFrame(rows, SCHEMA)


def check_all(got, queries, df):
    for name, transform in queries.items():
        assert_same_rows(got[name], transform(df).toArrow(), name)


def test_every_construct_gives_sparks_rows(spark):
    df = frame(spark)
    queries = {**QUERIES, **WINDOW}
    compiled = compile_transforms(df, queries)
    placed = {p.query for p in compiled.spark_parts.values()}
    assert placed == set(queries), placed
    check_all(sparkqos.run(df, queries, batch_rows=2), queries, df)


@pytest.fixture(scope="module")
def prepared(spark):
    """Three queries with Spark parts, compiled, their parts evaluated, and Spark's rows: once."""
    df = frame(spark)
    queries = {"json": QUERIES["json"], "explode": QUERIES["explode"], **WINDOW}
    classes = {"json": "H", "explode": "N", "window": "N"}
    compiled = compile_transforms(df, queries, classes, {"H": 3, "N": 1})
    return compiled, input_tables(compiled, df), {q: t(df).toArrow() for q, t in queries.items()}


@pytest.mark.parametrize("strategy", strategies())
def test_under_every_strategy(prepared, strategy):
    compiled, tables, want = prepared
    got = run_compiled(compiled, tables, schedulers.get(strategy), batch_rows=2)
    for name, table in want.items():
        assert_same_rows(got[name], table, name)


jsons = st.one_of(
    st.none(),
    st.sampled_from(["", "{", "null", '{"a": null}', '{"x": "Infinity"}', '{"x": "-Infinity"}', '{"a": 2147483648}']),
    st.builds(
        lambda a, b, x: '{"a": %s, "b": %s, "x": %s}' % (a, b, x),  # noqa: UP031
        st.integers(-5, 5),
        st.sampled_from(['""', '"k-1"', "null", '"é9"']),
        st.sampled_from(['"NaN"', "1.5", "null", "-0.0"]),
    ),
)
texts = st.one_of(st.none(), st.text(alphabet="ab-1é ", max_size=5))
doubles = st.one_of(st.none(), st.sampled_from([math.nan, math.inf, -math.inf, -0.0]), st.floats(-1e3, 1e3))
data = st.lists(st.tuples(st.one_of(st.none(), st.integers(-3, 9)), jsons, texts, doubles, st.integers(0, 20)), max_size=10)


@settings(max_examples=examples(5), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=data)
def test_hypothesis_rows_equal_spark(spark, rows):
    df = frame(spark, [(*r[:4], T0 + dt.timedelta(seconds=r[4])) for r in rows])
    queries = {k: QUERIES[k] for k in ("json", "json_object", "regex", "hash", "explode")}
    check_all(sparkqos.run(df, {**queries, **WINDOW}, "chain", batch_rows=3), {**queries, **WINDOW}, df)


def test_placement_spark_gives_the_same_rows_and_native_refuses(spark):
    df = frame(spark)
    native = {"plain": lambda d: d.where(F.col("id") > 1).select("id", (F.col("d") * 2).alias("d2"))}
    compiled = compile_transforms(df, native, placement="spark")
    assert [p.query for p in compiled.spark_parts.values()] == ["plain"]
    assert not compile_transforms(df, native).spark_parts
    check_all(sparkqos.run(df, native, placement="spark"), native, df)
    with pytest.raises(UnsupportedTransform, match=r"query 'json'.*from_json"):
        sparkqos.run(df, {"json": QUERIES["json"]}, placement="native")


def test_a_bad_placement_is_a_placement_error(spark, tmp_path):
    df = frame(spark)
    with pytest.raises(PlacementError, match="placement must be one of 'auto', 'native', 'spark', got 'gpu'"):
        sparkqos.run(df, QUERIES, placement="gpu")
    with pytest.raises(PlacementError, match="got 'Spark'"):
        sparkqos.stream(replay(spark, _trace(tmp_path)), QUERIES, placement="Spark", checkpoint=tmp_path / "c")


def test_a_spark_only_function_above_a_window_is_refused_up_front(spark):
    above = {
        "padded_counts": lambda d: (
            d.withWatermark("ts", "1 second")
            .groupBy(F.window("ts", "2 seconds"))
            .agg(F.count("*").alias("n"))
            .select(F.regexp_replace(F.col("n").cast("string"), "^", "#").alias("h"))
        )
    }
    with pytest.raises(UnsupportedTransform, match=r"query 'padded_counts'.*'regexp_replace'"):
        sparkqos.run(frame(spark), above)


def test_a_raising_udf_names_query_and_udf(spark, tmp_path):
    boom = tmp_path / "boom"
    boom.write_text("")
    df = frame(spark, [(1, None, str(boom), 0.0, T0)])
    with pytest.raises(SparkPartError, match=r"query 'fragile'.*udf 'fragile' raised PythonException: ValueError: boom") as err:
        sparkqos.run(df, {"fragile": lambda d: d.select(F.explode(fragile("s")).alias("p"))})
    assert err.value.query == "fragile" and "udf 'fragile'" in err.value.functions


def _trace(tmp_path: Path, rows=ROWS) -> Path:
    path = tmp_path / "trace.parquet"
    if not path.exists():
        table = pa.Table.from_pylist(
            [dict(zip(("id", "value", "s", "d", "ts"), r, strict=True)) for r in rows],
            schema=pa.schema(
                [("id", pa.int32()), ("value", pa.string()), ("s", pa.string()), ("d", pa.float64())]
                + [("ts", pa.timestamp("us", tz="UTC"))]
            ),
        )
        pq.write_table(table, path)
    return path


def test_streamed_parts_equal_spark_and_show_in_progress(spark, tmp_path):
    plain = {"plain": lambda d: d.where("id > 1").select("id", "s")}  # native only
    # a window aggregate, run natively, over the rows of a mapInPandas Spark runs in the micro-batch
    mapped = {
        "mapped": lambda d: (
            d.mapInPandas(tagged, "id int, s string, ts timestamp")
            .withWatermark("ts", "1 second")
            .groupBy(F.window("ts", "2 seconds"))
            .agg(F.count("*").alias("rows"), F.max("s").alias("top"))
        )
    }
    queries = {"json": QUERIES["json"], "explode": QUERIES["explode"], **plain, **WINDOW, **mapped}
    sink = MemorySink()
    handle = sparkqos.stream(
        replay(spark, _trace(tmp_path), seconds_per_trigger=2),
        queries,
        classes={"json": "H", "explode": "N", "plain": "N", "window": "N", "mapped": "N"},
        priorities={"H": 3, "N": 1},
        strategy="chain",
        trigger_s="available_now",
        checkpoint=tmp_path / "ckpt",
        sink=sink,
    )
    assert "spark   spark:json" in handle.explain(print_=False)
    handle.start().awaitTermination(120)
    records = list(handle.recentProgress)
    handle.finish()
    static = frame(spark)
    for name, transform in queries.items():
        assert_same_rows(sink.table(name), transform(static).toArrow(), name)
    assert sum(r["sparkRows"] for r in records) >= sink.table("json").num_rows
    assert all(r["sparkS"] > 0 for r in records)
    assert handle.loop.phase_s["spark"] > 0
    per_query = {q["query"]: q for q in records[0]["queries"]}
    assert per_query["json"]["sparkRows"] >= 0 and math.isnan(per_query["plain"]["sparkRows"])


def test_a_udf_raising_in_a_trigger_loses_no_row(spark, tmp_path):
    boom = tmp_path / "boom"
    rows = [(k, None, str(boom) if k == 3 else f"r{k}", 0.0, T0 + dt.timedelta(seconds=k)) for k in range(6)]
    queries = {"fragile": lambda d: d.select("id", F.explode(fragile("s")).alias("p"), "ts")}
    sink = MemorySink()
    handle = sparkqos.stream(
        replay(spark, _trace(tmp_path, rows), seconds_per_trigger=2),
        queries,
        strategy="fifo",
        trigger_s="available_now",
        checkpoint=tmp_path / "ckpt",
        sink=sink,
    )
    boom.write_text("")
    query = handle.start()
    with pytest.raises(Exception, match=r"(?s)SparkPartError: query 'fragile'.*udf 'fragile' raised"):
        query.awaitTermination(120)
    boom.unlink()  # the fault is gone: the failed trigger runs again from the checkpoint
    handle.start().awaitTermination(120)
    handle.finish()
    assert_same_rows(sink.table("fragile"), queries["fragile"](frame(spark, rows)).toArrow(), "fragile")


def test_explain_says_where_each_operator_runs(spark, capsys):
    df = frame(spark)
    above = {"replaced": lambda d: d.groupBy("s").count().select(F.regexp_replace("s", "-", "+"))}
    text = sparkqos.explain(df, {"json": QUERIES["json"], "plain": lambda d: d.where(F.col("id") > 1), **above})
    assert text == capsys.readouterr().out.rstrip("\n")
    lines = text.splitlines()
    assert lines[0] == "== sparkqos plan (placement='auto') =="
    assert (
        "+- spark   spark:json: input → select → where → select, evaluated by Spark in the micro-batch, "
        "computing from_json, regexp_extract (sparkqos has no native version of from_json)"
    ) in text
    assert "+- native  plain/1:where (filter)" in text
    refused = lines[lines.index("query 'replaced':") + 1]
    assert refused.startswith("+- refused  sparkqos has no native version of regexp_replace; Spark evaluates such functions only")
    # a Spark user's words, not the names of Spark's plan nodes or of its function classes
    assert (
        not {"Project", "Filter", "Generate", "Aggregate", "RegExpReplace", "JsonToStructs", "Spark function"}
        & set(text.replace("'", " ").replace(",", " ").split())
        and "Spark function" not in text
    )


def test_explain_says_when_a_window_is_emitted(spark, tmp_path):
    """On a stream, when the watermark passes the window's end; on a finite DataFrame (no
    watermark there, as in Spark), when the input ends."""
    streamed = sparkqos.explain(replay(spark, _trace(tmp_path), seconds_per_trigger=2), WINDOW, print_=False)
    assert "(aggregate): computes count(*), max(ts) natively; a window is emitted when the watermark passes its end" in streamed
    assert "; the watermark is the newest event time" in streamed
    assert "so far minus 1 s, and a row below it is dropped as late" in streamed
    assert "every window is emitted when the input ends (no watermark)" in sparkqos.explain(frame(spark), WINDOW, print_=False)
