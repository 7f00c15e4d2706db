"""The stream path's conformance suite: every construct of the generated support list
(``python -m sparkqos supported``, docs/transforms.md) run as a stream and compared with Spark.

The input is a Parquet file source of four files, one per micro-batch (available-now, then
``finish()``). All runnable constructs are queries of one ``sparkqos.stream`` call, run three
times — under fifo, chain and cqc — and once more under cqc with a crash after the sink write of
batch 2 and a restart from the checkpoint. Each query's rows must equal Spark's batch answer of
the same transform over the same rows: appended rows whole; a running (update-mode) aggregate's
last row per key; list aggregates compared as sorted lists (Spark leaves their order to the
plan); the nondeterministic functions by the rows they come with and their values' presence.
Constructs the list refuses must be refused by ``stream()`` before any data moves. A test reads
the list and fails when a construct in it is covered by no case here.
"""

from __future__ import annotations

import os
import re
import warnings

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import Window
from pyspark.sql import functions as F
from pyspark.sql.streaming import StatefulProcessor

import sparkqos
from sparkqos.compile.supported import supported_markdown
from sparkqos.errors import UnsupportedTransform
from sparkqos.io.sinks import MemorySink
from sparkqos.testing import assert_same_rows
from tests.conftest import stream_through_a_crash, stream_to_end
from tests.test_transforms_native import last_per_key

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROWS, FILES = 600, 4
BASE_US = 1_700_000_000_000_000
STRATEGIES = ("fifo", "chain", "cqc")


def _table() -> pa.Table:
    rng = np.random.default_rng(3)
    i = np.arange(ROWS)
    x = rng.normal(20.0, 5.0, ROWS)
    words = np.array(["Foo bar", " baz,qux ", "hello world", "a,b,c", "Zoo"])
    s = words[rng.integers(0, len(words), ROWS)]
    g = np.array(["a", "b", "c"])[rng.integers(0, 3, ROWS)]
    y = rng.integers(-50, 50, ROWS).astype(np.int32)
    k = rng.integers(0, 200, ROWS)
    arr = [[w for w in str(t).split(",") if w][: int(n)] for t, n in zip(s, i % 3 + 1, strict=True)]
    return pa.table(
        {
            "k": pa.array(k, pa.int64()),
            "g": pa.array(g),
            "gg": pa.array(np.char.upper(g.astype(str))),  # a function of g: first/last/any_value agree
            "x": pa.array(x, mask=rng.random(ROWS) < 0.05),
            "y": pa.array(y),
            "s": pa.array(s.astype(str)),
            # unique, increasing event times with a 5 s gap every 50 rows (sessions end there)
            "ts": pa.array(BASE_US + i * 100_000 + (i // 50) * 5_000_000, pa.timestamp("us", tz="UTC")),
            "arr": pa.array(arr, pa.list_(pa.string())),
            "st": pa.StructArray.from_arrays([pa.array(y), pa.array(g)], ["a", "b"]),
            "flag": pa.array(y % 2 == 0),
            "js": pa.array([f'{{"id": {a}, "v": {b:.3f}}}' for a, b in zip(k, x, strict=True)]),
        }
    )


@pytest.fixture(scope="module")
def files(spark, tmp_path_factory):
    folder = tmp_path_factory.mktemp("conformance") / "input"
    folder.mkdir()
    table = _table()
    # each row carries Spark's HLL sketch of its key (the input hll_union_agg merges)
    sketch = spark.createDataFrame(table.select(["k"])).groupBy("k").agg(F.hll_sketch_agg("k").alias("sk")).toArrow()
    by_key = dict(zip(sketch.column("k").to_pylist(), sketch.column("sk").to_pylist(), strict=True))
    table = table.append_column("sk", pa.array([by_key[k] for k in table.column("k").to_pylist()], pa.binary()))
    step = ROWS // FILES
    for f in range(FILES):
        path = folder / f"part-{f:05d}.parquet"
        pq.write_table(table.slice(f * step, step), path)
        # Spark's file source takes files oldest first by modification time in milliseconds, and
        # files written within one millisecond tie in any order: a later file first makes the
        # earlier one's rows late. One second apart, the stream reads them in the table's order.
        os.utime(path, (1_700_000_000 + f, 1_700_000_000 + f))
    return folder


def _stream(spark, folder):
    schema = spark.read.parquet(str(folder)).schema
    return spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(folder))


# -- the cases ----------------------------------------------------------------------------------------
def native_functions(d):
    times3 = F.udf(lambda v: None if v is None else v * 3, "long")

    @F.pandas_udf("double")
    def doubled(v):
        return v * 2

    y, x, s = F.col("y"), F.col("x"), F.col("s")
    return d.where(F.col("k") % 2 == 0).select(
        "k",
        (y % 7).alias("mod"),
        ((F.col("flag") & (y > 3)) | ~F.col("flag")).alias("logic"),
        (x * 2 + y - 1).alias("arith"),
        (x / (y + 100)).alias("divided"),
        (-y).alias("negated"),
        (y < 3).alias("lt"),
        (y <= 3).alias("le"),
        (y == 3).alias("eq"),
        (y > 3).alias("gt"),
        (y >= 3).alias("ge"),
        x.eqNullSafe(F.lit(None).cast("double")).alias("nullsafe"),
        F.col("st.a").alias("field"),
        F.abs(y).alias("abs"),
        F.array(y, y + 1).alias("array"),
        y.between(-5, 5).alias("between"),
        F.bround(x, 1).alias("bround"),
        x.cast("int").alias("cast"),
        F.ceil(x).alias("ceil"),
        F.coalesce(x, F.lit(0.0)).alias("coalesce"),
        F.concat(s, F.col("g")).alias("concat"),
        s.contains("bar").alias("contains"),
        F.crc32(s).alias("crc32"),
        F.expr("y div 3").alias("div"),
        F.e().alias("e"),
        s.endswith("o").alias("endswith"),
        F.exp(x / 10).alias("exp"),
        F.floor(x).alias("floor"),
        F.greatest(x, y.cast("double")).alias("greatest"),
        F.hash("k", "g").alias("hash"),
        F.col("g").isin("a", "b").alias("isin"),
        F.isnan(x).alias("isnan"),
        x.isNotNull().alias("notnull"),
        x.isNull().alias("null"),
        F.least(x, y.cast("double")).alias("least"),
        F.length(s).alias("length"),
        s.like("%o%").alias("like"),
        F.ln(F.abs(x) + 1).alias("ln"),
        F.log(F.abs(x) + 1).alias("log"),
        F.lower(s).alias("lower"),
        F.ltrim(s).alias("ltrim"),
        F.md5(s).alias("md5"),
        F.pow(x, 2).alias("pow"),
        times3("k").alias("udf"),
        doubled(x).alias("pandas_udf"),
        F.round(x, 2).alias("round"),
        F.rtrim(s).alias("rtrim"),
        F.sha1(s).alias("sha1"),
        F.sha2(s, 256).alias("sha2"),
        F.split(s, ",").alias("split"),
        F.sqrt(F.abs(x)).alias("sqrt"),
        s.startswith("F").alias("startswith"),
        F.struct(y, F.col("g")).alias("struct"),
        F.substring(s, 2, 3).alias("substring"),
        F.trim(s).alias("trim"),
        F.upper(s).alias("upper"),
        F.when(y > 0, "pos").when(y < 0, "neg").otherwise("zero").alias("when"),
        F.xxhash64("k", "s").alias("xxhash64"),
    )


def spark_functions(d):
    return d.select(
        "k",
        F.col("arr")[0].alias("element"),
        F.concat_ws("-", "s", "g").alias("concat_ws"),
        F.date_format("ts", "yyyy-MM-dd HH:mm").alias("date_format"),
        F.dayofmonth("ts").alias("dayofmonth"),
        F.dayofweek("ts").alias("dayofweek"),
        F.from_json("js", "id long, v double").alias("from_json"),
        F.get_json_object("js", "$.id").alias("get_json_object"),
        F.json_tuple("js", "id", "v"),
        F.hour("ts").alias("hour"),
        F.minute("ts").alias("minute"),
        F.month("ts").alias("month"),
        F.year("ts").alias("year"),
        F.pmod("y", F.lit(7)).alias("pmod"),
        F.regexp_extract("s", r"(\w+)", 1).alias("regexp_extract"),
        F.regexp_extract_all("s", F.lit(r"(\w+)"), 1).alias("regexp_extract_all"),
        F.regexp_replace("s", "o", "0").alias("regexp_replace"),
        F.col("s").rlike("^F").alias("rlike"),
        F.to_date("ts").alias("to_date"),
        F.to_json(F.struct("k", "g")).alias("to_json"),
        F.to_timestamp(F.date_format("ts", "yyyy-MM-dd HH:mm:ss")).alias("to_timestamp"),
    )


def nondeterministic(d):
    return d.select(
        "k",
        F.current_timestamp().alias("now"),
        F.monotonically_increasing_id().alias("id"),
        F.rand(1).alias("rand"),
        F.randn(1).alias("randn"),
    )


def aggregates() -> list:
    """Every native aggregate function, each once (both spellings where PySpark has two)."""
    return [
        F.any_value("gg").alias("any_value"),
        F.avg("x").alias("avg"),
        F.mean("y").alias("mean"),
        F.bool_and("flag").alias("bool_and"),
        F.every("flag").alias("every"),
        F.bool_or("flag").alias("bool_or"),
        F.some("flag").alias("some"),
        F.collect_list("y").alias("collect_list"),
        F.array_agg("k").alias("array_agg"),
        F.collect_set("y").alias("collect_set"),
        F.count("x").alias("count"),
        F.count_if(F.col("y") > 0).alias("count_if"),
        F.first("gg").alias("first"),
        F.last("gg").alias("last"),
        F.kurtosis("x").alias("kurtosis"),
        F.max("x").alias("max"),
        F.max_by("k", "ts").alias("max_by"),
        F.min("s").alias("min"),
        F.min_by("k", "ts").alias("min_by"),
        F.skewness("x").alias("skewness"),
        F.stddev("x").alias("stddev"),
        F.std("y").alias("std"),
        F.stddev_pop("x").alias("stddev_pop"),
        F.sum("y").alias("sum"),
        F.var_pop("x").alias("var_pop"),
        F.variance("x").alias("variance"),
    ]


def windowed(d):
    return d.withWatermark("ts", "1 second").groupBy(F.window("ts", "10 seconds"), "g").agg(*aggregates())


def sessions(d):
    return (
        d.withWatermark("ts", "1 second")
        .groupBy(F.session_window("ts", "2 seconds"), "g")
        .agg(F.count("*").alias("n"), F.sum("y").alias("sy"), F.max("x").alias("mx"))
    )


def spark_aggregates(d):
    """Aggregates sparkqos has no native version of (Spark computes them over each group's
    buffered rows), beside a native one, in a window."""

    return (
        d.withWatermark("ts", "1 second")
        .groupBy(F.window("ts", "10 seconds"), "g")
        .agg(
            F.count("*").alias("n"),
            F.approx_count_distinct("k").alias("approx_count_distinct"),
            F.percentile_approx("y", 0.5).alias("percentile_approx"),
            F.count_min_sketch("k", F.lit(0.1), F.lit(0.9), F.lit(1)).alias("count_min_sketch"),
            F.histogram_numeric("y", F.lit(3)).alias("histogram_numeric"),
            F.hll_sketch_agg("k").alias("hll_sketch_agg"),
            F.expr("sum(y) FILTER (WHERE y > 0)").alias("filtered"),
            F.hll_union_agg("sk").alias("hll_union_agg"),
        )
    )


def pandas_udaf(d):
    """An aggregate pandas UDF (Series -> scalar), Spark's in a query of its own: Spark runs no
    other aggregate beside one."""

    @F.pandas_udf("double")
    def spread(v: pd.Series) -> float:
        return float(v.max() - v.min()) if len(v) else float("nan")

    return d.withWatermark("ts", "1 second").groupBy(F.window("ts", "10 seconds"), "g").agg(spread("y").alias("spread"))


def running(d):
    return d.groupBy("g").agg(
        F.count("*").alias("n"), F.sum("y").alias("sy"), F.min("x").alias("lo"), F.collect_set("gg").alias("set")
    )


def dedup(d):
    return d.withWatermark("ts", "1 hour").dropDuplicates(["k"]).select("k")


def distinct(d):
    return d.select("g").distinct()


def dedup_within(d):
    return d.withWatermark("ts", "1 hour").dropDuplicatesWithinWatermark(["k"]).select("k")


def exploded(d):
    return d.select("k", F.explode("arr").alias("e"))


def posexploded(d):
    return d.select("k", F.posexplode("arr"))


def joined(d):
    sites = d.sparkSession.createDataFrame([("a", "north"), ("b", "south"), ("d", "east")], "g string, site string")
    return d.join(sites, "g").select("k", "g", "site")


def lagged(d):
    return d.select("k", "g", F.lag("x").over(Window.partitionBy("g").orderBy("ts")).alias("previous"))


def unioned(d):
    return d.select("k", "y").union(d.where(F.col("y") > 0).select("k", (F.col("y") * 2).alias("y")))


def partitions(d):
    def pandas_step(frames):
        for frame in frames:
            yield frame.assign(y=frame["y"] + 1)

    def arrow_step(batches):
        yield from batches

    schema = d.select("k", "y", "ts").schema
    return (
        d.alias("r")
        .select("k", "y", "ts")
        .repartition(2)
        .mapInPandas(pandas_step, schema)
        .mapInArrow(arrow_step, schema)
        .withWatermark("ts", "1 hour")
        .where(F.col("y") > 0)
    )


def with_state(d):
    def running_count(key, frames, state):
        n = (state.get[0] if state.exists else 0) + sum(len(frame) for frame in frames)
        state.update((n,))
        yield pd.DataFrame({"g": [key[0]], "n": [n]})

    return d.groupBy("g").applyInPandasWithState(running_count, "g string, n long", "n long", "update", "NoTimeout")


class RunningCount(StatefulProcessor):
    def init(self, handle):
        self.n = handle.getValueState("n", "n long")

    def handleInputRows(self, key, rows, timerValues):  # noqa: N802,N803 - PySpark's names
        n = (self.n.get() or (0,))[0] + sum(len(frame) for frame in rows)
        self.n.update((n,))
        yield pd.DataFrame({"g": [key[0]], "n": [n]})

    def close(self):
        pass


def with_processor(d):
    return d.groupBy("g").transformWithStateInPandas(RunningCount(), "g string, n long", "update", "None")


#: query → (transform, how its rows compare: "append", "update" (last row per key), "presence")
CASES = {
    "native_functions": (native_functions, "append"),
    "spark_functions": (spark_functions, "append"),
    "nondeterministic": (nondeterministic, "presence"),
    "windowed": (windowed, "append"),
    "sessions": (sessions, "append"),
    "spark_aggregates": (spark_aggregates, "append"),
    "pandas_udaf": (pandas_udaf, "append"),
    "running": (running, "update"),
    "dedup": (dedup, "append"),
    "distinct": (distinct, "append"),
    "dedup_within": (dedup_within, "append"),
    "exploded": (exploded, "append"),
    "posexploded": (posexploded, "append"),
    "joined": (joined, "append"),
    "lagged": (lagged, "append"),
    "unioned": (unioned, "append"),
    "partitions": (partitions, "append"),
    "with_state": (with_state, "update"),
    "with_processor": (with_processor, "update"),
}

#: What each case runs of the support list (the names as the list spells them).
COVERS = {
    "native_functions": [
        "%",
        "&",
        "|",
        "~",
        "*",
        "+",
        "-",
        "/",
        "<",
        "<=",
        "==",
        ">",
        ">=",
        "<=> (eqNullSafe)",
        "unary -",
        "a struct field",
        "abs",
        "array",
        "between",
        "bround",
        "cast",
        "ceil",
        "coalesce",
        "concat",
        "contains",
        "crc32",
        "div",
        "e()",
        "endswith",
        "exp",
        "floor",
        "greatest",
        "hash",
        "isin",
        "isnan",
        "isNotNull",
        "isNull",
        "least",
        "length",
        "like",
        "ln",
        "log",
        "lower",
        "ltrim",
        "md5",
        "pow",
        "Python and scalar pandas UDFs",
        "round",
        "rtrim",
        "sha1",
        "sha2",
        "split",
        "sqrt",
        "startswith",
        "struct",
        "substring",
        "trim",
        "upper",
        "when/otherwise",
        "xxhash64",
        "where/filter",
        "select/withColumn",
    ],  # fmt: skip
    "spark_functions": [
        "an array element",
        "concat_ws",
        "date_format",
        "dayofmonth",
        "dayofweek",
        "from_json",
        "get_json_object",
        "json_tuple",
        "hour",
        "minute",
        "month",
        "year",
        "pmod",
        "regexp_extract",
        "regexp_extract_all",
        "regexp_replace",
        "rlike",
        "to_date",
        "to_json",
        "to_timestamp",
    ],  # fmt: skip
    "nondeterministic": ["current_timestamp", "monotonically_increasing_id", "rand", "randn"],
    "windowed": [
        "groupBy/agg",
        "window",
        "any_value",
        "avg/mean",
        "bool_and/every",
        "bool_or/some/any",
        "collect_list/array_agg",
        "collect_set",
        "count",
        "count_if",
        "first",
        "last",
        "kurtosis",
        "max",
        "max_by",
        "min",
        "min_by",
        "skewness",
        "stddev/std/stddev_samp",
        "stddev_pop",
        "sum",
        "var_pop",
        "variance/var_samp",
        "withWatermark",
    ],  # fmt: skip
    "sessions": ["session_window"],
    "spark_aggregates": [
        "approx_count_distinct",
        "percentile_approx",
        "count_min_sketch",
        "histogram_numeric",
        "hll_sketch_agg",
        "hll_union_agg",
        "FILTER",
    ],  # fmt: skip
    "pandas_udaf": [],  # the list names pandas UDAFs in its prose
    "running": [],
    "dedup": ["dropDuplicates/distinct()"],
    "distinct": [],
    "dedup_within": ["dropDuplicatesWithinWatermark"],
    "exploded": ["explode"],
    "posexploded": ["posexplode"],
    "joined": ["join"],
    "lagged": ["lag(...).over(window)"],
    "unioned": ["union"],
    "partitions": ["alias", "mapInArrow", "mapInPandas", "repartition"],
    "with_state": ["groupBy().applyInPandasWithState"],
    "with_processor": ["groupBy().transformWithStateInPandas"],
}


def _refused_cases(spark):
    from pyspark.sql.functions import udtf

    @udtf(returnType="w: string")
    class Words:
        def eval(self, text: str):
            for w in (text or "").split():
                yield (w,)

    class Passing(StatefulProcessor):
        def init(self, handle):
            pass

        def handleInputRows(self, key, rows, timerValues):  # noqa: N802,N803 - PySpark's names
            yield from rows

        def close(self):
            pass

    return {
        "cube/rollup": lambda d: d.cube("g").count(),
        "groupBy().applyInPandas": lambda d: d.groupBy("g").applyInPandas(lambda f: f, "g string"),
        "intersect": lambda d: d.select("g").intersect(d.select("g")),
        "lateralJoin, e.g. with a Python UDTF": lambda d: d.lateralJoin(Words(F.col("s").outer())),
        "limit": lambda d: d.limit(5),
        "offset": lambda d: d.offset(5),
        "orderBy/sort": lambda d: d.orderBy("k"),
        "sample": lambda d: d.sample(0.5, seed=1),
        "SELECT DISTINCT or UNION in SQL": lambda d: spark.sql("SELECT DISTINCT g FROM {d}", d=d),
        "subtract/exceptAll": lambda d: d.select("g").subtract(d.select("g")),
        "transformWithStateInPandas with eventTimeColumnName": lambda d: (
            d.withWatermark("ts", "1 hour")
            .groupBy("g")
            .transformWithStateInPandas(Passing(), d.schema, "append", "EventTime", eventTimeColumnName="ts")
        ),
    }


#: Constructs of the list no PySpark code can write, and why (the compiler's refusal of the plan
#: node is tested on the JVM side only).
NOT_WRITABLE = {
    "a Scala UDF": "a UDF compiled into a jar; PySpark can only call one a jar registers",
    "mapGroupsWithState": "the Scala API's FlatMapGroupsWithState; PySpark's is applyInPandasWithState, a case above",
    "transformWithState": "the Scala API's TransformWithState; PySpark's transformWithStateInPandas is its own node",
}


# -- comparing ---------------------------------------------------------------------------------------
def _order(item) -> tuple:
    """A total order over list items of any type: None last, numbers by value, others by text."""
    if item is None:
        return (2, 0, "")
    if isinstance(item, (int, float)) and not isinstance(item, bool):
        return (0, item, "")
    return (1, 0, repr(item))


def _sorted_lists(table: pa.Table) -> pa.Table:
    """List columns with their items sorted (Spark leaves a collected list's order to the plan)."""
    for i, field in enumerate(table.schema):
        if pa.types.is_list(field.type) or pa.types.is_large_list(field.type):
            values = [None if v is None else sorted(v, key=_order) for v in table.column(i).to_pylist()]
            table = table.set_column(i, field, pa.array(values, field.type))
    return table


def _nullable(t: pa.DataType) -> pa.DataType:
    """``t`` with every nested field nullable and without metadata (Spark's batch answer marks
    what it knows is never null; a stream's rows carry the plain types)."""
    if pa.types.is_list(t):
        return pa.list_(_nullable(t.value_type))
    if pa.types.is_large_list(t):
        return pa.large_list(_nullable(t.value_type))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _nullable(f.type)) for f in t])
    if pa.types.is_map(t):
        return pa.map_(_nullable(t.key_type), _nullable(t.item_type))
    return t


def _plain(table: pa.Table) -> pa.Table:
    schema = pa.schema([pa.field(f.name, _nullable(f.type)) for f in table.schema])
    return table.cast(schema)


def _check(name: str, got: pa.Table, want: pa.Table) -> None:
    kind = CASES[name][1]
    if kind == "update":
        got = last_per_key(got, ["g"])
    if kind == "presence":
        assert got.num_rows == want.num_rows, f"{name}: {got.num_rows} rows, want {want.num_rows}"
        assert_same_rows(got.select(["k"]), want.select(["k"]), name)
        for column in ("now", "id", "rand", "randn"):
            assert got.column(column).null_count == 0, f"{name}: {column} has nulls"
        return
    assert_same_rows(_sorted_lists(_plain(got)), _sorted_lists(_plain(want)), name, rel=1e-9)


#: Spark's batch answer where the streaming transform has no batch form: dropDuplicatesWithinWatermark
#: with a delay longer than the input's event-time span drops what dropDuplicates drops.
#: applyInPandasWithState and transformWithStateInPandas run here on streams only: a running count's
#: last row per key is the batch count.
BATCH_FORM = {
    "dedup_within": lambda d: d.dropDuplicates(["k"]).select("k"),
    "with_state": lambda d: d.groupBy("g").agg(F.count("*").alias("n")),
    "with_processor": lambda d: d.groupBy("g").agg(F.count("*").alias("n")),
}


def _spark_answers(spark, files) -> dict[str, pa.Table]:
    static = spark.read.parquet(str(files))
    return {name: BATCH_FORM.get(name, transform)(static).toArrow() for name, (transform, _) in CASES.items()}


@pytest.fixture(scope="module")
def answers(spark, files):
    return _spark_answers(spark, files)


def _serve(spark, files, checkpoint, strategy):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # distinct() without a watermark warns of its growing state
        return stream_to_end(
            _stream(spark, files), {n: t for n, (t, _) in CASES.items()}, checkpoint, strategy=strategy, timeout_s=300
        )


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_construct_streams_as_spark_computes_it(spark, files, answers, tmp_path, strategy):
    sink = _serve(spark, files, tmp_path / "ckpt", strategy)
    for name in CASES:
        _check(name, sink.table(name), answers[name])


def test_a_crash_and_restart_in_the_middle_changes_no_row(spark, files, answers, tmp_path, monkeypatch):
    """The trigger of batch 2 dies after its sink write, before its checkpoint; a new stream on
    the same checkpoint replays it. Every query's rows are Spark's, each once."""
    queries = {n: t for n, (t, _) in CASES.items()}
    sink = MemorySink()

    def attempt(**fault):
        return sparkqos.stream(
            _stream(spark, files),
            queries,
            strategy="cqc",
            trigger=sparkqos.Trigger(availableNow=True),
            checkpoint=tmp_path / "ckpt",
            sink=sink,
            **fault,
        )

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, restored = stream_through_a_crash(monkeypatch, attempt, "after_sink:2")
    assert restored == 1
    for name in CASES:
        _check(name, sink.table(name), answers[name])


def test_what_the_list_refuses_is_refused_before_data_moves(spark, files, tmp_path):
    for construct, transform in _refused_cases(spark).items():
        with pytest.raises(UnsupportedTransform):
            sparkqos.stream(_stream(spark, files), {"q": transform}, checkpoint=tmp_path / "ckpt")
            pytest.fail(f"{construct} was not refused")
    assert not (tmp_path / "ckpt" / "spark").exists()


def test_every_construct_of_the_support_list_has_a_case():
    """The generated list, read item by item: each is run by a case above, refused by one, or
    named in NOT_WRITABLE with the reason."""
    text = supported_markdown()
    prose = {"python -m sparkqos supported", "groupBy", "groupBy(...).agg(...)", "UnsupportedTransform", "auto", "spark"}
    listed = set(re.findall(r"`([^`]+)`", text)) - prose - {'placement="spark"', 'placement="native"'}
    covered = {c for names in COVERS.values() for c in names}
    refused = set(_refused_cases(None))
    missing = sorted(listed - covered - refused - set(NOT_WRITABLE))
    assert not missing, f"constructs of the support list without a conformance case: {missing}"
