"""The expression DSL: evaluation with SQL null semantics, Arrow compute expressions, and type
errors at plan-build time naming the operator and the column."""

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest

from sparkqos.compile import QuerySet
from sparkqos.errors import ExpressionError
from sparkqos.executor.expressions import col, count, lit, sum_

BATCH = pa.record_batch(
    {
        "temp": pa.array([40.0, 55.5, None, 70.0], pa.float64()),
        "n": pa.array([1, 0, 3, None], pa.int64()),
        "room": pa.array(["a", "b", None, "c"]),
        "ok": pa.array([True, None, False, True]),
    }
)

CASES = [
    (col("temp") > 50, [False, True, None, True]),
    ((col("temp") > 50) & col("ok"), [False, None, False, True]),  # null AND false is false
    ((col("temp") > 50) | col("ok"), [True, True, None, True]),
    (~col("ok"), [False, None, True, False]),
    (col("room").isin(["a", "c"]), [True, False, None, True]),
    (col("room").isin(["a", None]), [True, None, None, None]),
    (col("room").is_null(), [False, False, True, False]),
    (col("n") + 1, [2, 1, 4, None]),
    (col("n") * 2 - col("n"), [1, 0, 3, None]),
    (col("temp") / col("n"), [40.0, None, None, None]),  # x / 0 is null, as in Spark
    (col("n") / 2, [0.5, 0.0, 1.5, None]),
    (-col("n"), [-1, 0, -3, None]),
    (col("room") == "b", [False, True, None, False]),
    (2 < col("n"), [False, False, True, None]),
]


@pytest.mark.parametrize("expr, expected", CASES, ids=[repr(c[0]) for c in CASES])
def test_evaluate_and_arrow_expression_agree(expr, expected):
    assert expr.evaluate(BATCH).to_pylist() == expected
    projected = ds.dataset(pa.Table.from_batches([BATCH])).to_table(columns={"x": expr.to_arrow()})
    assert projected.column("x").to_pylist() == expected


def test_expressions_have_no_truth_value():
    with pytest.raises(ExpressionError, match="combine predicates with & | ~"):
        bool(col("a") > 1)
    with pytest.raises(ExpressionError, match="unsupported literal"):
        _ = col("a") > [1]


@pytest.mark.parametrize(
    "expr, message",
    [
        (col("room") > 3, "operator 'q/1:where': cannot compare column 'room' (string) with 3 (int64)"),
        (col("nope") > 3, "operator 'q/1:where': unknown column 'nope'; columns are ['temp', 'n', 'room', 'ok']"),
        (col("room") + 1 > 0, "operator 'q/1:where': arithmetic '+' needs numbers, got column 'room' (string)"),
        (col("temp") & col("ok"), "operator 'q/1:where': 'and' needs booleans, got column 'temp' (double)"),
        (col("n").isin(["x"]), "operator 'q/1:where': column 'n' (int64) cannot be tested against string values ['x']"),
        (col("temp") + 1, "operator 'q/1:where': the predicate (col('temp') + lit(1)) gives double, not a boolean"),
    ],
)
def test_type_errors_are_raised_when_the_plan_is_built(expr, message):
    qs = QuerySet()
    qs.stream("s", BATCH.schema).where(expr).sink("q")
    with pytest.raises(ExpressionError) as err:
        qs.build()
    assert str(err.value) == message


def test_select_checks_names_and_types():
    qs = QuerySet()
    qs.stream("s", BATCH.schema).select("temp", col("temp")).sink("q")
    with pytest.raises(ExpressionError, match="two output columns are named 'temp'"):
        qs.build()
    with pytest.raises(ExpressionError, match="reserved for the executor"):
        col("n").alias("__seq")
    with pytest.raises(ExpressionError, match="isin\\(\\[1, 'a'\\]\\) mixes value types"):
        col("n").isin([1, "a"])
    qs = QuerySet()
    qs.stream("s", BATCH.schema).select(col("n").alias("m"), (lit(1) + col("temp")).alias("t")).sink("q")
    assert qs.build().output_schema("q") == pa.schema([("m", pa.int64()), ("t", pa.float64())])


def test_aggregates_name_and_type_themselves():
    assert count().name == "count" and sum_("n").name == "sum_n" and sum_("n").alias("total").name == "total"
    assert sum_("n").check(BATCH.schema, "w") == pa.int64() and sum_("temp").check(BATCH.schema, "w") == pa.float64()
    with pytest.raises(ExpressionError, match="unknown aggregate 'median'"):
        from sparkqos.executor.expressions import Agg

        Agg("median", "n")


def test_to_arrow_filters_a_dataset():
    table = pa.Table.from_batches([BATCH])
    got = ds.dataset(table).to_table(filter=((col("temp") > 50) & ~col("room").is_null()).to_arrow())
    assert got.column("temp").to_pylist() == [55.5, 70.0]
    assert pc.sum(got.column("temp")).as_py() == 125.5
