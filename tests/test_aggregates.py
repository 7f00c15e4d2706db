"""Spark's aggregate functions beyond count/sum/avg/min/max/first/last, run natively: the variance
family and moments, count_if, bool_and/bool_or, max_by/min_by, min/max of structs and strings,
collect_list/collect_set, in running (keyed), windowed and session-window aggregations.

* On a finite DataFrame ``sparkqos.run`` gives Spark's batch rows (nulls, NaN, ±inf, -0.0, ties);
  a session's collect_list lists values in the order they reach the session, where Spark's batch
  run sorts the rows by time first, so those are compared sorted when rows come out of time order.
  A moment is compared to 1e-9 relative (1e-12 absolute for one whose exact value is 0): Spark
  updates it row by row and merges per partition, so its own low bits depend on the partitioning.
  ``collect_set``'s order is unspecified in Spark: its arrays are compared sorted.
* On a stream (Parquet files read one per micro-batch, available-now, then ``finish()``) the rows
  equal Spark's batch result on the same rows: the last row per key of the running aggregate's
  changelog, every window and session of the windowed ones.
* A query either compiles and runs on a small batch, or is refused when compiled with
  UnsupportedTransform — never fails at run time — for every supported aggregate function over
  every Spark type (a property test).
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.errors import AnalysisException
from pyspark.sql import functions as F

import sparkqos
from sparkqos.compile.spark_plan import DEFAULT_STREAM
from sparkqos.errors import UnsupportedTransform
from sparkqos.runtime.config import StrategyConfig
from sparkqos.spark.transforms import compile_transforms, input_tables, run_compiled
from sparkqos.testing import sorted_rows
from tests.conftest import examples, run_under_each, stream_to_end
from tests.test_transforms_native import last_per_key

BASE_US = 1_700_000_000_000_000
SCHEMA = pa.schema(
    [("k", pa.string()), ("i", pa.int32()), ("d", pa.float64()), ("s", pa.string()), ("ts", pa.timestamp("us", tz="UTC"))]
)
EXAMPLES = settings(max_examples=examples(8), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
#: Output columns holding a moment (compared with a tolerance) and a set (compared sorted).
MOMENT_COLUMNS = ("sd", "sdp", "var", "vp", "skew", "kurt", "isd", "ikurt")
SET_COLUMNS = ("ds", "ss")

keys = st.one_of(st.none(), st.sampled_from(["a", "b", ""]))
ints = st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1), st.integers(-3, 3))
doubles = st.one_of(st.none(), st.sampled_from([math.nan, math.inf, -0.0, 0.0, 2.5, 2.5, 2.5]), st.floats(-1e3, 1e3))
strings = st.one_of(st.none(), st.sampled_from(["", "x", "y", "é", "Z"]))
seconds = st.one_of(st.none(), st.integers(0, 30).map(lambda s: s * 1_000_000))
rows = st.lists(st.tuples(keys, ints, doubles, strings, seconds), max_size=30)


def table_of(data) -> pa.Table:
    cols = list(zip(*data, strict=True)) if data else [[]] * len(SCHEMA)
    ts = [None if o is None else BASE_US + o for o in cols[4]]
    arrays = [pa.array(list(c), f.type) for c, f in zip(cols[:4], list(SCHEMA)[:4], strict=True)]
    return pa.table([*arrays, pa.array(ts, SCHEMA.field("ts").type)], schema=SCHEMA)


def aggregates():
    return [
        F.stddev("d").alias("sd"),
        F.stddev_pop("d").alias("sdp"),
        F.variance("d").alias("var"),
        F.var_pop("d").alias("vp"),
        F.skewness("d").alias("skew"),
        F.kurtosis("d").alias("kurt"),
        F.stddev_samp("i").alias("isd"),
        F.kurtosis("i").alias("ikurt"),
        F.count_if(F.col("i") > 0).alias("pos"),
        F.bool_and(F.col("i") > 0).alias("all_pos"),
        F.bool_or(F.col("d") > 1).alias("any_big"),
        F.every(F.col("s") == "x").alias("every_x"),
        F.max_by("s", "i").alias("s_at_max_i"),
        F.min_by("d", "s").alias("d_at_min_s"),
        F.max(F.struct("i", "s")).alias("max_is"),
        F.min(F.struct("s", "d")).alias("min_sd"),
        F.max("s").alias("max_s"),
        F.min("s").alias("min_s"),
        F.collect_list("d").alias("dl"),
        F.collect_list("s").alias("sl"),
        F.collect_set("d").alias("ds"),
        F.collect_set("s").alias("ss"),
    ]


def running(df):
    return df.groupBy("k").agg(*aggregates())


def windowed(df):
    return df.withWatermark("ts", "3 seconds").groupBy(F.window("ts", "10 seconds", "5 seconds"), "k").agg(*aggregates())


def sessions(df):
    return df.withWatermark("ts", "3 seconds").groupBy(F.session_window("ts", "4 seconds"), "k").agg(*aggregates())


def overall(df):
    return df.agg(*aggregates())


QUERIES = {"running": running, "windowed": windowed, "sessions": sessions, "overall": overall}


def _close(x, y) -> bool:
    if isinstance(x, float) and isinstance(y, float):
        if math.isnan(x) or math.isnan(y) or math.isinf(x) or math.isinf(y):
            return x == y or (math.isnan(x) and math.isnan(y))
        return math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12)
    return x == y or (x != x and y != y)


def _comparable(table: pa.Table, sets: tuple[str, ...]) -> list[dict]:
    """Rows with the ``sets`` sorted and the moments set aside, in a canonical order."""
    out = []
    for row in table.to_pylist():
        for c in sets:
            if row.get(c) is not None:
                row[c] = sorted(row[c], key=lambda v: (v is None, v != v, v))
        out.append(row)
    exact = _exact(table)
    key = {id(r): repr(sorted_rows(pa.Table.from_pylist([{c: r[c] for c in exact.names}], schema=exact))) for r in out}
    return sorted(out, key=lambda r: key[id(r)])


def _exact(table: pa.Table) -> pa.Schema:
    return pa.schema([f for f in table.schema if f.name not in MOMENT_COLUMNS])


def assert_same_aggregates(got: pa.Table, want: pa.Table, name: str, sets: tuple[str, ...] = SET_COLUMNS) -> None:
    """``got`` holds ``want``'s rows in any order; moments to float tolerance, ``sets`` sorted."""
    assert got.schema.names == want.schema.names and got.schema.types == want.schema.types, (
        f"{name}: schema {got.schema} differs from {want.schema}"
    )
    g, w = _comparable(got, sets), _comparable(want, sets)
    assert len(g) == len(w), f"{name}: {len(g)} rows, want {len(w)}"
    for a, b in zip(g, w, strict=True):
        for c in got.column_names:
            x, y = a[c], b[c]
            same = _close(x, y) if c in MOMENT_COLUMNS else (x == y or repr(x) == repr(y))
            assert same, f"{name}: column {c!r} of row {a} differs from {b}"


@given(data=rows)
@EXAMPLES
def test_aggregate_functions_equal_spark(spark_sql, data):
    """Under fifo and chain (the partials built from batches served in other orders), Spark's
    rows asked once per example."""
    df = spark_sql.createDataFrame(table_of(data)).coalesce(1)  # one partition: collect_list is Spark's row order
    runs = run_under_each(df, QUERIES, ("fifo", "chain"), batch_rows=7, units_between=2)
    for name, transform in QUERIES.items():
        # A session's list follows the order its rows reach it; Spark's batch run sorts them by time first.
        sets = SET_COLUMNS + (("dl", "sl") if name == "sessions" else ())
        want = transform(df).toArrow()
        for strategy, got in runs.items():
            assert_same_aggregates(got[name], want, f"{name} under {strategy}", sets)


def test_min_and_max_of_a_struct_run_natively(spark_sql):
    """The reported crash: max of a struct compiled, started and failed on its first batch."""
    df = spark_sql.createDataFrame(table_of([("a", 1, 2.0, "x", 0), ("a", 1, None, "y", 0), ("b", None, 1.0, None, 0)]))

    def q(d):
        return d.groupBy("k").agg(F.max(F.struct("i", "s")).alias("m"), F.min(F.struct("d", "s")).alias("n"))

    got = sparkqos.run(df, {"q": q})["q"]
    assert_same_aggregates(got, q(df).toArrow(), "q")


# -- streams ---------------------------------------------------------------------------------------
def trace() -> pa.Table:
    data = []
    for n in range(48):
        k = ["u1", "u2", None, ""][n % 4]
        i = None if n % 7 == 3 else (n * 37) % 11 - 5
        d = [0.5 * (n % 9), math.nan, None, -0.0, 2.5, 1e3 / (n + 1)][n % 6]
        s = [None, "x", "y", "z", "x"][n % 5]
        data.append((k, i, d, s, n * 700_000))  # 0.7 s apart: windows and sessions close on the way
    return table_of(data)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """The trace as 6 Parquet files of 8 rows, read one per micro-batch."""
    path = tmp_path_factory.mktemp("aggregates") / "trace"
    path.mkdir()
    table = trace()
    for b, start in enumerate(range(0, table.num_rows, 8)):
        pq.write_table(table.slice(start, 8), path / f"part-{b:03d}.parquet")
        os.utime(path / f"part-{b:03d}.parquet", (1_700_000_000 + b, 1_700_000_000 + b))  # oldest first
    return path


# chain serves the stream in the default set; adaptive, which switches strategy between triggers,
# in the slow set (the batch tests check these aggregates under fifo and chain)
@pytest.mark.parametrize("strategy", ["chain", pytest.param("adaptive", marks=pytest.mark.slow)])
def test_streamed_aggregates_equal_sparks_result_on_the_same_rows(spark_sql, folder, tmp_path, strategy):
    schema = spark_sql.read.parquet(str(folder)).schema
    stream = spark_sql.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(folder))
    queries = {"running": running, "windowed": windowed, "sessions": sessions, "by_upper": by_upper}
    sink = stream_to_end(stream, queries, tmp_path / "ckpt", timeout_s=240, strategy=strategy)
    static = spark_sql.createDataFrame(trace()).coalesce(1)
    running_keys = {"running": ["k"], "by_upper": ["upper(s)"]}
    for name, transform in queries.items():
        want = transform(static).toArrow()
        got = sink.table(name).select(want.schema.names).cast(want.schema)
        if name in running_keys:  # update mode: a changelog, whose last row per key is the table
            got = last_per_key(got, running_keys[name])
        assert_same_aggregates(got, want, f"{name} under {strategy}")


# -- every type --------------------------------------------------------------------------------------
#: One column of each Spark type, two rows and a null, with its Spark type spelled as DDL.
TYPED = {
    "boolean": [True, False, None],
    "tinyint": [1, -2, None],
    "smallint": [300, -2, None],
    "int": [7, -2, None],
    "bigint": [2**40, -2, None],
    "float": [1.5, math.nan, None],
    "double": [-0.0, 2.5, None],
    "decimal(10,2)": [decimal.Decimal("1.25"), decimal.Decimal("-3.00"), None],
    "string": ["b", "a", None],
    "binary": [b"\x01", b"\x00", None],
    "date": [dt.date(2024, 1, 2), dt.date(1970, 1, 1), None],
    "timestamp": [dt.datetime(2024, 1, 2, tzinfo=dt.UTC), dt.datetime(1970, 1, 1, tzinfo=dt.UTC), None],
    "timestamp_ntz": [dt.datetime(2024, 1, 2), dt.datetime(1970, 1, 1), None],
    "interval day to second": [dt.timedelta(seconds=3), dt.timedelta(days=-1), None],
    "array<int>": [[1, None], [], None],
    "map<string,int>": [{"a": 1}, {}, None],
    "struct<a:int,b:string>": [(1, "x"), (None, None), None],
    "array<struct<a:double>>": [[(1.0,)], [(math.nan,), None], None],
}
#: The aggregate functions sparkqos runs, each over the typed column ``v`` (and ``o``, an int).
FUNCTIONS = {
    "count": lambda v: F.count(v),
    "sum": lambda v: F.sum(v),
    "avg": lambda v: F.avg(v),
    "min": lambda v: F.min(v),
    "max": lambda v: F.max(v),
    "first": lambda v: F.first(v),
    "last_ignorenulls": lambda v: F.last(v, ignorenulls=True),
    "any_value": lambda v: F.any_value(v),
    "stddev": lambda v: F.stddev(v),
    "var_pop": lambda v: F.var_pop(v),
    "skewness": lambda v: F.skewness(v),
    "kurtosis": lambda v: F.kurtosis(v),
    "count_if": lambda v: F.count_if(v),
    "bool_and": lambda v: F.bool_and(v),
    "bool_or": lambda v: F.bool_or(v),
    "max_by": lambda v: F.max_by(v, F.col("o")),
    "min_by_value": lambda v: F.min_by(F.col("o"), v),
    "collect_list": lambda v: F.collect_list(v),
    "collect_set": lambda v: F.collect_set(v),
}
SHAPES = {
    "running": lambda d, agg: d.groupBy("k").agg(agg.alias("a")),
    "keyed_by_it": lambda d, agg: d.groupBy("v").agg(F.count("o").alias("a")),
    "windowed": lambda d, agg: d.withWatermark("ts", "1 second").groupBy(F.window("ts", "5 seconds")).agg(agg.alias("a")),
    "session": lambda d, agg: d.groupBy(F.session_window("ts", "5 seconds"), "k").agg(agg.alias("a")),
}


@pytest.fixture(scope="module")
def typed_frames(spark_sql):
    """Per type: the DataFrame, and its rows as Arrow (read once)."""
    frames = {}
    for ddl, values in TYPED.items():
        rows = [("a" if n < 2 else "b", v, n, dt.datetime(2024, 1, 1, 0, 0, n, tzinfo=dt.UTC)) for n, v in enumerate(values)]
        df = spark_sql.createDataFrame(rows, f"k string, v {ddl}, o int, ts timestamp").coalesce(1)
        frames[ddl] = (df, df.toArrow())
    return frames


@given(
    ddl=st.sampled_from(sorted(TYPED)),
    function=st.sampled_from(sorted(FUNCTIONS)),
    shape=st.sampled_from(sorted(SHAPES)),
)
@settings(max_examples=examples(250), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_a_query_runs_or_is_refused_when_compiled_never_fails_on_its_data(spark_sql, typed_frames, ddl, function, shape):
    df, rows = typed_frames[ddl]

    def q(d):
        return SHAPES[shape](d, FUNCTIONS[function](F.col("v")))

    try:
        columns = q(df).columns
    except AnalysisException:  # Spark refuses this function on this type: nothing to run
        return
    try:
        compiled = compile_transforms(df, {"q": q})
    except UnsupportedTransform:
        return
    tables = input_tables(compiled, df) if compiled.spark_parts else {DEFAULT_STREAM: rows.cast(compiled.sources[DEFAULT_STREAM])}
    got = run_compiled(compiled, tables, StrategyConfig("fifo").make(compiled.plan, 1.0), batch_rows=2)["q"]
    assert got.column_names == columns and got.num_rows > 0, f"{function} of {ddl} in {shape}: {got}"


# -- keys that are expressions or of nested types ---------------------------------------------------------------------
def by_struct_field(df):
    return df.groupBy(F.col("j.id").alias("id")).agg(F.count("*").alias("n"), F.max("j.v").alias("top"))


def by_upper(df):
    return df.groupBy(F.upper("s")).agg(F.sum("i").alias("si"), F.collect_list("i").alias("il"))


def by_window_and_parity(df):
    return (
        df.withWatermark("ts", "3 seconds")
        .groupBy(F.window("ts", "10 seconds"), (F.col("i") % 2).alias("parity"), "k")
        .agg(F.count("*").alias("n"), F.min("d").alias("lo"))
        .select("parity", "window", "n", "k", "lo")
    )


def by_session_and_length(df):
    return df.groupBy(F.session_window("ts", "4 seconds"), F.length("s").alias("len")).agg(F.max("i").alias("hi"))


def by_struct(df):
    """A key pyarrow cannot hash: grouped by Spark's ordering of it (-0.0 = 0.0, NaN = NaN)."""
    return df.groupBy("j").agg(F.count("*").alias("n"), F.stddev("i").alias("isd"))


def by_array(df):
    return df.groupBy(F.array("d").alias("ad"), "k").agg(F.collect_list("s").alias("sl"))


KEYED_BY_EXPRESSIONS = {
    "by_struct": by_struct,
    "by_array": by_array,
    "by_struct_field": by_struct_field,
    "by_upper": by_upper,
    "by_window_and_parity": by_window_and_parity,
    "by_session_and_length": by_session_and_length,
}


@given(data=rows)
@EXAMPLES
def test_keys_that_are_expressions_are_computed_below_the_aggregate(spark_sql, data):
    table = table_of(data)
    j = pa.StructArray.from_arrays([table.column("k").combine_chunks(), table.column("d").combine_chunks()], names=["id", "v"])
    df = spark_sql.createDataFrame(table.append_column("j", j)).coalesce(1)
    got = sparkqos.run(df, KEYED_BY_EXPRESSIONS, strategy="chain", batch_rows=5)
    for name, transform in KEYED_BY_EXPRESSIONS.items():
        assert_same_aggregates(got[name], transform(df).toArrow(), name)


# -- partials across batches and checkpoints (no Spark) ----------------------------------------------
def _operators():
    from sparkqos.executor.operators import EventWindowAggregate, KeyedAggregate, SessionWindowAggregate, WindowAgg

    aggs = [
        WindowAgg("stddev_samp", "d", "sd"),
        WindowAgg("kurtosis", "d", "kurt"),
        WindowAgg("max_by", "s", "s_at_max_i", by="i"),
        WindowAgg("min", "is", "min_is"),
        WindowAgg("first", "is", "first_is", ignore_nulls=True),
        WindowAgg("collect_list", "d", "dl", ignore_nulls=True),
        WindowAgg("collect_set", "s", "ss", ignore_nulls=True),
    ]
    return {
        "keyed": lambda: KeyedAggregate(["k"], aggs, update=False),
        "windowed": lambda: EventWindowAggregate(["k"], aggs, "ts", 10_000_000, 5_000_000),
        "sessions": lambda: SessionWindowAggregate(["k"], aggs, "ts", 4_000_000),
    }


@given(data=rows, cut=st.integers(1, 6))
@settings(max_examples=25, deadline=None)
def test_partials_combine_the_same_whatever_the_batches_and_a_checkpoint_between(data, cut):
    """All rows in one batch, or in batches of ``cut`` rows with the operator checkpointed and
    restored half way: the same groups, the same values (moments to float tolerance)."""
    from sparkqos.executor.queues import stamp, with_internal

    table = table_of(data)
    table = table.append_column(
        "is",
        pa.StructArray.from_arrays([table.column("i").combine_chunks(), table.column("s").combine_chunks()], names=["i", "s"]),
    )
    schema = with_internal(table.schema)
    for name, make in _operators().items():
        whole = make()
        whole.bind("q/agg", [schema])
        whole.process(stamp(table.combine_chunks().to_batches()[0], 0.0, 0)) if table.num_rows else None
        want = pa.Table.from_batches(whole.flush(), schema=whole.schema)
        op = make()
        op.bind("q/agg", [schema])
        batches = table.to_batches(max_chunksize=cut)
        outs = []
        for b, batch in enumerate(batches):
            if b == len(batches) // 2:
                again = make()
                again.bind("q/agg", [schema])
                again.from_state(op.to_state())
                op = again
            out = op.process(stamp(batch, float(b), b * cut))
            outs += [] if out is None else [out]
        got = pa.Table.from_batches(outs + op.flush(), schema=op.schema)
        got, want = (t.drop_columns(["__arrival", "__seq"]) for t in (got, want))
        # A session's list follows its pieces' starts, which batching moves
        assert_same_aggregates(got, want, name, SET_COLUMNS + (("dl",) if name == "sessions" else ()))


def test_a_running_aggregate_by_a_struct_key_writes_each_changed_key_once_per_trigger():
    from sparkqos.executor.operators import KeyedAggregate, WindowAgg
    from sparkqos.executor.queues import stamp, with_internal

    j = pa.array([{"a": 1.0, "b": "x"}, None, {"a": -0.0, "b": "y"}, {"a": 1.0, "b": "x"}, {"a": 0.0, "b": "y"}])
    batch = pa.record_batch({"j": j, "v": [1, 2, 3, 4, 5]})
    op = KeyedAggregate(["j"], [WindowAgg("sum", "v", "s"), WindowAgg("collect_list", "v", "vl", ignore_nulls=True)])
    op.bind("q/agg", [with_internal(batch.schema)])
    op.process(stamp(batch.slice(0, 3), 0.0, 0))
    op.process(stamp(batch.slice(3), 1.0, 3))
    first = [(r["j"], r["s"], r["vl"]) for r in op.end_trigger()[0].to_pylist()]
    assert sorted(first, key=repr) == sorted(
        [({"a": 1.0, "b": "x"}, 5, [1, 4]), (None, 2, [2]), ({"a": 0.0, "b": "y"}, 8, [3, 5])], key=repr
    )
    op.process(stamp(batch.slice(1, 1), 2.0, 5))
    assert [(r["j"], r["s"]) for r in op.end_trigger()[0].to_pylist()] == [(None, 4)]
