"""The rows of the static DataFrames a transform joins the stream with, read once at compile time.

A ``Join`` node of a transform's analyzed plan has the input stream on one side and, for a join
with a stored relation (``stream_df.join(static_df, "k")``), any finite DataFrame on the other.
Its rows are not in the plan JSON, so this context reader (registered in
sparkqos.spark.transforms.CONTEXT_READERS) gives :mod:`sparkqos.compile.joins` a :class:`JoinSide`
for each side of each join, keyed by the join condition's JSON
(:func:`sparkqos.compile.joins.condition_key`). A side's rows are read (through Spark, as Arrow)
only when the compiler asks for them, and at most ``spark.sparkqos.join.maxStaticRows`` of them
(default :data:`~sparkqos.executor.operators.static_join.MAX_STATIC_ROWS`): a larger table is
refused rather than pulled onto the driver.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.pandas.types import to_arrow_schema

from sparkqos.compile.joins import condition_key
from sparkqos.errors import ConfigError
from sparkqos.executor.operators.static_join import MAX_STATIC_ROWS

__all__ = ["MAX_ROWS_CONF", "JoinSide", "join_sides"]

#: Spark configuration key of the largest static table a join reads (rows).
MAX_ROWS_CONF = "spark.sparkqos.join.maxStaticRows"


class JoinSide:
    """One side of a join in a transform's JVM plan: whether it streams, its output attributes'
    expression ids and names, and :meth:`read` for its rows."""

    def __init__(self, plan: Any, result: DataFrame, max_rows: int):
        self._plan, self._result = plan, result
        self.max_rows = max_rows
        #: Where users raise :attr:`max_rows`.
        self.limit_setting = MAX_ROWS_CONF
        self.streaming = bool(plan.isStreaming())
        output = plan.output()
        attrs = [output.apply(i) for i in range(output.size())]
        self.ids = [int(a.exprId().id()) for a in attrs]
        self.names = [str(a.name()) for a in attrs]

    def read(self) -> pa.Table | None:
        """The side's rows as Arrow, columns ``c0, c1, …`` in the side's order with the types
        ``toArrow()`` gives; None when it has more than :attr:`max_rows` rows."""
        session = self._result.sparkSession
        jvm = session._jvm
        try:
            jdf = jvm.org.apache.spark.sql.classic.Dataset.ofRows(session._jsparkSession, self._plan)
        except Exception:  # Spark 3.x keeps Dataset in org.apache.spark.sql
            jdf = jvm.org.apache.spark.sql.Dataset.ofRows(session._jsparkSession, self._plan)
        df = DataFrame(jdf, session)
        large = session.conf.get("spark.sql.execution.arrow.useLargeVarTypes", "false") == "true"
        schema = to_arrow_schema(df.schema, timezone="UTC", prefers_large_types=large)  # as toArrow() gives
        table = df.limit(self.max_rows + 1).toArrow()
        if table.num_rows > self.max_rows:
            return None
        names = [f"c{i}" for i in range(len(schema))]
        table = table.rename_columns(names)
        schema = pa.schema([f.with_name(n) for f, n in zip(schema, names, strict=True)])
        return table if table.schema.equals(schema) else table.cast(schema)


def _max_rows(result: DataFrame) -> int:
    raw = result.sparkSession.conf.get(MAX_ROWS_CONF, str(MAX_STATIC_ROWS))
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise ConfigError(
            f"{MAX_ROWS_CONF} must be a number of rows >= 0, got {raw!r}",
            parameter=MAX_ROWS_CONF,
            value=raw,
            expected="an integer >= 0",
        )
    return value


def join_sides(query: str, result: DataFrame, jvm_plan: Any, plan_json: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Context entry ``join_sides``: condition key → (left side, right side) of every join with
    a condition in the plan (classic pyspark only: under Spark Connect there is no JVM plan).
    The JVM plan is walked (round trips per node) only when its JSON, ``plan_json`` if given,
    has a Join."""
    if jvm_plan is None:
        return {}
    if plan_json is not None and not any(str(e.get("class", "")).endswith(".Join") for e in plan_json):
        return {}
    sides: dict[str, tuple[JoinSide, JoinSide]] = {}
    max_rows = None
    nodes = [jvm_plan]
    while nodes:
        node = nodes.pop()
        if node.getClass().getSimpleName() == "Join" and node.condition().isDefined():
            if max_rows is None:
                max_rows = _max_rows(result)
            key = condition_key(json.loads(node.condition().get().toJSON()))
            sides[key] = (JoinSide(node.left(), result, max_rows), JoinSide(node.right(), result, max_rows))
        children = node.children()
        nodes.extend(children.apply(i) for i in range(children.size()))
    return {"join_sides": sides} if sides else {}
