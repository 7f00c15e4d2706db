"""The parts of queries Spark evaluates inside each micro-batch (see :mod:`sparkqos.compile.spark_part`).

At compile time the compiler names, per query, the node of the query's analyzed plan at the top
of the part Spark evaluates and the input's plan under it; a stager here finds that node in Spark's
own plan and keeps it as a *recipe*. Each trigger the recipe is applied to ``batch_df``:

* classic pyspark: the part's analyzed JVM plan with the input's plan replaced by the batch's
  (under a Project giving the batch's columns the input's expression ids), run as a Dataset —
  Spark's own analyzed expressions, UDFs included, so its rows are Spark's by construction;
* Spark Connect: the part's client plan (protobuf) with the input's relation replaced by the
  batch's (keeping the input's plan id, so ``df["x"]`` references still resolve) — plain bytes,
  so the recipe travels with foreachBatch's pickled function to the server's Python worker,
  where pandas UDFs and SQL strings run as Spark runs them.

:func:`evaluate_parts` runs every part of a plan over one batch, the parts of higher classes
first, and returns each part's rows as an Arrow table with the compiled names.
"""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from sparkqos.errors import RunnerError, SparkPartError, UnsupportedTransform
from sparkqos.executor.operators import SparkAggregates

__all__ = [
    "RELATION_FIELD",
    "ClassicAggregates",
    "ClassicStager",
    "ConnectStager",
    "evaluate_parts",
    "reads_input",
    "use_session",
]

#: Field of a Connect plan's JSON node holding its client relation (base64 protobuf).
RELATION_FIELD = "sparkqosRelation"
#: Field of a Connect plan's Aggregate node: its items' client expressions (base64 protobuf,
#: None for keys), for the aggregates Spark computes over a group's rows.
AGGREGATES_FIELD = "sparkqosClientAggregates"
#: Field of a Connect plan's Aggregate node: its input's columns, expression id → [name, Spark
#: type as JSON].
COLUMNS_FIELD = "sparkqosInputColumns"


def _arrow(schema: StructType, large: bool) -> pa.Schema:
    return to_arrow_schema(schema, timezone="UTC", prefers_large_types=large)


def _large(df: DataFrame) -> bool:
    return df.sparkSession.conf.get("spark.sql.execution.arrow.useLargeVarTypes", "false") == "true"


def _paths(nodes: list[dict[str, Any]]) -> list[tuple[int, ...]]:
    """The child-index path from the root of every node of a pre-order JSON plan."""
    paths: list[tuple[int, ...]] = []
    stack: list[list[Any]] = []  # [path, children left, next child index]
    for d in nodes:
        if stack:
            top = stack[-1]
            path = (*top[0], top[2])
            top[1] -= 1
            top[2] += 1
        else:
            path = ()
        paths.append(path)
        while stack and stack[-1][1] == 0:
            stack.pop()
        kids = int(d.get("num-children", 0))
        if kids:
            stack.append([path, kids, 0])
    return paths


class ClassicRecipe:
    """A part's JVM nodes top down to the input's plan, and the input's attributes in that plan.
    Pickles without them (a plan pickled for elsewhere cannot evaluate the part; it says so)."""

    def __init__(self, chain: list[Any], source_output: Any):
        self.chain, self.source_output = chain, source_output

    def __getstate__(self) -> dict[str, Any]:
        return {"chain": None, "source_output": None}

    def dataframe(self, batch_df: DataFrame, cache: dict[str, Any]) -> DataFrame:
        if self.chain is None:
            raise RunnerError("a part Spark evaluates was compiled in another process; compile the queries here")
        jvm = batch_df.sparkSession._jvm
        expressions = jvm.org.apache.spark.sql.catalyst.expressions
        logical = jvm.org.apache.spark.sql.catalyst.plans.logical
        src = self.source_output
        src_ids = tuple(src.apply(i).exprId().id() for i in range(src.size()))
        key = f"leaf{src_ids}"  # queries reading the input twice (a union) see renumbered copies
        if key not in cache:
            batch = cache.setdefault("batch", batch_df._jdf.queryExecution().analyzed())
            out = batch.output()
            if out.size() != src.size():
                raise RunnerError(f"the micro-batch has {out.size()} columns, the input {src.size()}")
            if tuple(out.apply(i).exprId().id() for i in range(out.size())) == src_ids:
                cache[key] = batch  # a micro-batch keeps its source's attributes (and run() reads the input itself)
            else:
                empty = _seq(jvm, [])
                aliases = [
                    expressions.Alias(
                        out.apply(i), src.apply(i).name(), src.apply(i).exprId(), empty, jvm.scala.Option.apply(None), empty
                    )
                    for i in range(src.size())
                ]
                cache[key] = logical.Project(_seq(jvm, aliases), batch)
        plan = cache[key]
        for node in reversed(self.chain):
            plan = node.withNewChildren(_seq(jvm, [plan]))
        session = batch_df.sparkSession
        return DataFrame(jvm.org.apache.spark.sql.classic.Dataset.ofRows(session._jsparkSession, plan), session)


def _seq(jvm: Any, items: list[Any]) -> Any:
    java = jvm.java.util.ArrayList()
    for x in items:
        java.add(x)
    return jvm.org.apache.spark.api.python.PythonUtils.toSeq(java)


class ClassicStager:
    """Finds each part's node in a query's analyzed JVM plan (classic pyspark)."""

    def __init__(self, df: DataFrame):
        self.large = _large(df)
        self.session = df.sparkSession
        self.plans: dict[str, tuple[Any, list[tuple[int, ...]]]] = {}

    def add(self, query: str, jvm_plan: Any, nodes: list[dict[str, Any]]) -> None:
        self.plans[query] = (jvm_plan, _paths(nodes))

    def __call__(self, query: str, pos: int, source_pos: int) -> tuple[pa.Schema, ClassicRecipe]:
        jvm_plan, paths = self.plans[query]
        top, below = paths[pos], paths[source_pos]
        node = jvm_plan
        for i in top:
            node = node.children().apply(i)
        chain = []
        for i in below[len(top) :]:
            chain.append(node)
            node = node.children().apply(i)
        schema = StructType.fromJson(json.loads(chain[0].schema().json()))
        return _arrow(schema, self.large), ClassicRecipe(chain, node.output())

    def aggregates(self, query: str, pos: int, items: list[int], columns: list[int]) -> tuple[pa.Schema, ClassicAggregates]:
        """The aggregate expressions at ``items`` of the Aggregate node at JSON position ``pos``
        of ``query``'s plan, over the columns they read (``columns``, by expression id): their
        Arrow schema and the evaluator computing them over groups' buffered rows."""
        jvm_plan, paths = self.plans[query]
        node = jvm_plan
        for i in paths[pos]:
            node = node.children().apply(i)
        listed = node.aggregateExpressions()
        chosen = [listed.apply(i) for i in items]
        attrs: dict[int, Any] = {}
        for e in chosen:
            refs = e.references().iterator()
            while refs.hasNext():
                a = refs.next()
                attrs[int(a.exprId().id())] = a
        evaluator = ClassicAggregates(self.session, chosen, [attrs[c] for c in columns], self.large)
        return evaluator.schema(), evaluator


class ClassicAggregates:
    """Aggregates of a query's Aggregate node that Spark computes over groups' buffered rows
    (:class:`~sparkqos.executor.operators.SparkAggregates`' evaluator, classic pyspark): Spark's
    own analyzed aggregate expressions, grouped by the group's number over the buffered rows (a
    DataFrame made from them, its columns given the expression ids the expressions read), on the
    session the queries were compiled on. Pickles without them, as :class:`ClassicRecipe`."""

    def __init__(self, session: Any, aggregates: list[Any], columns: list[Any], large: bool):
        self.session, self.aggregates, self.columns, self.large = session, aggregates, columns, large

    def __getstate__(self) -> dict[str, Any]:
        return {"session": None, "aggregates": None, "columns": None, "large": self.large}

    def use(self, session: Any) -> None:
        """Compute on ``session`` from now on: a stream's micro-batch gives its own (the session
        the stream runs on), so the aggregates are computed where its Spark parts are."""
        if self.aggregates is not None:
            self.session = session

    def _plan(self, rows: pa.Table | None) -> Any:
        """The JVM Aggregate over ``rows`` (grouped by their group), or over no rows and no
        grouping when ``rows`` is None (what the aggregates give for a group without rows)."""
        session = self.session
        jvm = session._jvm
        expressions = jvm.org.apache.spark.sql.catalyst.expressions
        logical = jvm.org.apache.spark.sql.catalyst.plans.logical
        empty = _seq(jvm, [])
        if rows is None:
            child = logical.LocalRelation(_seq(jvm, list(self.columns)), empty, False, jvm.scala.Option.apply(None))
            return logical.Aggregate(empty, _seq(jvm, list(self.aggregates)), child, jvm.scala.Option.apply(None))
        # one partition: each group's rows reach its aggregates in the order they arrived
        source = session.createDataFrame(rows).coalesce(1)._jdf.queryExecution().analyzed()
        out = source.output()
        group = out.apply(out.size() - 1)  # the group's number, last by construction
        items = [group]
        for i, attr in enumerate(self.columns):
            value = out.apply(i)
            if not value.dataType().sameType(attr.dataType()):
                value = expressions.Cast(value, attr.dataType(), jvm.scala.Option.apply("UTC"), expressions.EvalMode.LEGACY())
            items.append(expressions.Alias(value, attr.name(), attr.exprId(), empty, jvm.scala.Option.apply(None), empty))
        child = logical.Project(_seq(jvm, items), source)
        return logical.Aggregate(_seq(jvm, [group]), _seq(jvm, [group, *self.aggregates]), child, jvm.scala.Option.apply(None))

    def _table(self, plan: Any) -> pa.Table:
        jvm = self.session._jvm
        df = DataFrame(jvm.org.apache.spark.sql.classic.Dataset.ofRows(self.session._jsparkSession, plan), self.session)
        return df.toArrow()

    def schema(self) -> pa.Schema:
        """The aggregates' Arrow schema (analysed over no rows: nothing runs)."""
        jvm = self.session._jvm
        plan = self._plan(None)
        analyzed = jvm.org.apache.spark.sql.classic.Dataset.ofRows(self.session._jsparkSession, plan)
        return _arrow(StructType.fromJson(json.loads(analyzed.schema().json())), self.large)

    def evaluate(self, rows: pa.Table, groups: int) -> pa.Table:
        if self.session is None:
            raise RunnerError("aggregates Spark computes were compiled in another process; compile the queries here")
        names = [f"a{i}" for i in range(len(self.aggregates))]
        got = self._table(self._plan(rows)).rename_columns(["__group", *names])
        return _by_group(got, groups, lambda: self._table(self._plan(None)))


class ConnectAggregates:
    """Aggregates of a query's Aggregate node that Spark computes over groups' buffered rows, under
    Spark Connect: the client's aggregate expressions (protobuf, column references by name),
    grouped by the group's number over a DataFrame made from the buffered rows (its columns named
    and typed as the aggregation's input), on the session of the stream's micro-batch. Pickles
    without the session (``foreachBatch`` runs on the server's Python worker, with its own)."""

    def __init__(self, session: Any, aggregates: list[bytes], columns: list[tuple[str, str]], large: bool):
        self.session, self.aggregates, self.columns, self.large = session, aggregates, columns, large

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "session": None}

    def use(self, session: Any) -> None:
        """Compute on ``session`` from now on (a micro-batch's)."""
        self.session = session

    def _frame(self, rows: pa.Table | None) -> Any:
        """The buffered rows as a DataFrame, one partition (each group's rows reach its aggregates
        in the order they arrived), columns named and typed as the input; no rows for None."""
        from pyspark.sql.connect import functions as CF
        from pyspark.sql.types import StructField, _parse_datatype_json_string

        types = [_parse_datatype_json_string(t) for _, t in self.columns]
        if rows is None:
            schema = StructType([StructField(n, t) for (n, _), t in zip(self.columns, types, strict=True)])
            return self.session.createDataFrame([], schema)
        df = self.session.createDataFrame(rows.rename_columns([*(f"c{j}" for j in range(len(self.columns))), "__group"]))
        items = [CF.col(f"c{j}").cast(t).alias(n) for j, ((n, _), t) in enumerate(zip(self.columns, types, strict=True))]
        return df.coalesce(1).select(*items, CF.col("__group"))

    def _columns(self) -> list[Any]:
        from pyspark.sql.connect.column import Column

        return [Column(_client_expression(raw)).alias(f"a{i}") for i, raw in enumerate(self.aggregates)]

    def schema(self) -> pa.Schema:
        """The aggregates' Arrow schema (analysed over no rows: nothing runs)."""
        return _arrow(self._frame(None).agg(*self._columns()).schema, self.large)

    def evaluate(self, rows: pa.Table, groups: int) -> pa.Table:
        if self.session is None:
            raise RunnerError("aggregates Spark computes were compiled in another process without a session")
        names = [f"a{i}" for i in range(len(self.aggregates))]
        got = self._frame(rows).groupBy("__group").agg(*self._columns()).toArrow().rename_columns(["__group", *names])
        return _by_group(got, groups, lambda: self._frame(None).agg(*self._columns()).toArrow())


def _client_expression(raw: bytes) -> Any:
    """A Spark Connect expression given as its protobuf bytes (the client's classes are imported
    only here: classic pyspark may run without them)."""
    import pyspark.sql.connect.proto as proto
    from pyspark.sql.connect.expressions import Expression

    class ClientExpression(Expression):
        def to_plan(self, session: Any) -> Any:
            return proto.Expression.FromString(raw)

        def __repr__(self) -> str:
            return "an aggregate Spark computes"

    return ClientExpression()


def _by_group(got: pa.Table, groups: int, empty: Callable[[], pa.Table]) -> pa.Table:
    """``got`` (the group's number first, then one column per aggregate) as one row per group in
    group order; a group without rows (a global aggregate of nothing) gets what the aggregates give
    over no rows (``empty()``)."""
    at = {g: i for i, g in enumerate(got.column(0).to_pylist())}
    if len(at) < groups:
        none = empty().rename_columns(got.column_names[1:]).add_column(0, "__group", pa.array([-1], got.schema.field(0).type))
        got = pa.concat_tables([got, none])
    take = pa.array([at.get(g, got.num_rows - 1) for g in range(groups)], pa.int64())
    return got.drop_columns(["__group"]).take(take)


class ConnectRecipe:
    """A part's client relation (protobuf bytes) and the plan id of the input's relation in it."""

    def __init__(self, relation: bytes, source_id: int):
        self.relation, self.source_id = relation, source_id

    def dataframe(self, batch_df: DataFrame, cache: dict[str, Any]) -> DataFrame:
        import pyspark.sql.connect.proto as proto
        from pyspark.sql.connect.dataframe import DataFrame as ConnectDataFrame
        from pyspark.sql.connect.plan import CachedRelation

        session = batch_df.sparkSession
        if "leaf" not in cache:
            cache["leaf"] = batch_df._plan.plan(session.client)
        rel = proto.Relation()
        rel.ParseFromString(self.relation)
        if not _replace(rel, self.source_id, cache["leaf"]):
            raise RunnerError("the input's relation was not found in a part Spark evaluates")
        return ConnectDataFrame(CachedRelation(rel), session)


def _replace(msg: Any, source_id: int, leaf: Any) -> bool:
    """Replace, in the relation ``msg``, every relation with plan id ``source_id`` by ``leaf``
    (keeping that plan id); whether one was found."""
    found = False
    for field, value in msg.ListFields():
        if field.message_type is None or field.message_type.GetOptions().map_entry:
            continue
        repeated = field.is_repeated if hasattr(field, "is_repeated") else field.label == field.LABEL_REPEATED
        values = value if repeated else [value]
        for v in values:
            if field.message_type.name == "Relation" and v.HasField("common") and v.common.plan_id == source_id:
                v.CopyFrom(leaf)
                v.common.plan_id = source_id
                found = True
            else:
                found = _replace(v, source_id, leaf) or found
    return found


class ConnectStager:
    """Reads each part's client relation from the plan JSON :mod:`sparkqos.spark.connect_plan`
    wrote (Spark Connect)."""

    def aggregates(self, query: str, pos: int, items: list[int], columns: list[int]) -> tuple[pa.Schema, Any]:
        """The client's aggregate expressions at ``items`` of the Aggregate node at JSON position
        ``pos`` of ``query``'s plan, over the input columns they read (``columns``, by expression
        id): their Arrow schema and the evaluator computing them over groups' buffered rows."""
        node = self.plans[query][pos]
        inputs = node.get(COLUMNS_FIELD) or {}
        if any(str(c) not in inputs for c in columns):
            raise UnsupportedTransform(query, "an aggregate Spark computes over a column sparkqos cannot name")
        cols = [tuple(inputs[str(c)]) for c in columns]
        names = [n for n, _ in cols]
        if len(set(names)) != len(names):
            raise UnsupportedTransform(
                query, "aggregates Spark computes over two input columns of one name", f"{names}; rename one"
            )
        chosen = [base64.b64decode(node[AGGREGATES_FIELD][i]) for i in items]
        evaluator = ConnectAggregates(self.df.sparkSession, chosen, cols, self.large)
        return evaluator.schema(), evaluator

    def __init__(self, df: DataFrame):
        self.df = df
        self.large = _large(df)
        self.source_id = int(df._plan._plan_id)
        self.plans: dict[str, list[dict[str, Any]]] = {}

    def __call__(self, query: str, pos: int, source_pos: int) -> tuple[pa.Schema, ConnectRecipe]:
        import pyspark.sql.connect.proto as proto
        from pyspark.sql.connect.dataframe import DataFrame as ConnectDataFrame
        from pyspark.sql.connect.plan import CachedRelation

        raw = base64.b64decode(self.plans[query][pos][RELATION_FIELD])
        rel = proto.Relation()
        rel.ParseFromString(raw)
        schema = ConnectDataFrame(CachedRelation(rel), self.df.sparkSession).schema
        return _arrow(schema, self.large), ConnectRecipe(raw, self.source_id)


def _problem(exc: Exception, functions: tuple[str, ...]) -> str:
    """What went wrong, briefly: the UDF that raised (from the Python worker's traceback) and its
    exception, else the first line of Spark's error."""
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    raised = [ln for ln in lines if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b.*:", ln)]
    where = [ln for ln in lines if ln.startswith("File ") and ", in " in ln]
    udfs = [f for f in functions if f.startswith("udf ")]
    named = [u for u in udfs for w in where if w.endswith(f", in {u[5:-1]}")]
    head = f"{named[-1]} raised " if named else ""
    detail = raised[-1] if raised else (lines[0] if lines else "")
    return f"{head}{type(exc).__name__}: {detail[:500]}"


def use_session(compiled: Any, session: Any) -> None:
    """Have every aggregate of ``compiled`` that Spark computes over a group's rows computed on
    ``session`` (a micro-batch's, in ``foreachBatch``)."""
    for op in compiled.operators.values():
        if isinstance(op, SparkAggregates) and isinstance(op.evaluator, ClassicAggregates | ConnectAggregates):
            op.evaluator.use(session)


def reads_input(compiled: Any) -> bool:
    """Whether a native operator of ``compiled`` reads an input stream itself (else only parts
    Spark evaluates do, and the micro-batch need not be read whole)."""
    return any(s in compiled.sources and s not in compiled.spark_parts for op in compiled.plan for s in op.inputs)


def _order(parts: Mapping[str, Any], priorities: Mapping[str, float]) -> list[str]:
    """Streams of ``parts``, the parts of higher classes first (stable otherwise)."""
    return sorted(parts, key=lambda s: -priorities.get(parts[s].klass, 0.0) if parts[s].klass is not None else 0.0)


def evaluate_parts(
    parts: Mapping[str, Any], priorities: Mapping[str, float], batch_df: DataFrame
) -> tuple[dict[str, pa.Table], dict[str, float]]:
    """Every part of ``parts`` (stream → SparkPart) over ``batch_df``, higher classes first: each
    part's rows (named and typed as compiled) and the seconds Spark took for it. A failure becomes
    :class:`~sparkqos.errors.SparkPartError` naming the query and what the part computes."""
    tables: dict[str, pa.Table] = {}
    seconds: dict[str, float] = {}
    cache: dict[str, Any] = {}
    for stream in _order(parts, priorities):
        part = parts[stream]
        t0 = time.perf_counter()
        try:
            table = part.recipe.dataframe(batch_df, cache).toArrow()
        except Exception as exc:  # noqa: BLE001 - Spark's errors (a UDF's Python exception) named below
            raise SparkPartError(part.query, part.functions, _problem(exc, part.functions)) from exc
        table = table.rename_columns(part.schema.names)
        if not table.schema.equals(part.schema):
            table = table.cast(part.schema)
        tables[stream] = table
        seconds[stream] = time.perf_counter() - t0
    return tables, seconds
