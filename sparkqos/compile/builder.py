"""A query-building API that reads like Spark DataFrame code, compiled into a scheduling plan.

A :class:`QuerySet` holds named input streams and the continuous queries over them. Relations
are immutable builder nodes (each method returns a new one); ``sink(name, klass=...)`` turns one
into a query. :meth:`QuerySet.build` type-checks every expression against the stream schemas and
compiles the whole set into a :class:`CompiledPlan`: a :class:`~sparkqos.model.plan.Plan` (topology,
query, class and initial σ/c estimates) for the strategies, plus the physical operators for the
executor. Following the Chain paper (§2), a relation used by several queries is copied into
each of them, so every operator feeds exactly one consumer.

>>> import pyarrow as pa
>>> from sparkqos.executor.expressions import col, count
>>> qs = QuerySet(classes={"H": 3, "L": 1})
>>> sensors = qs.stream("sensors", {"id": pa.string(), "temp": pa.float64(), "ts": pa.float64()})
>>> hot = sensors.where(col("temp") > 50)
>>> hot.select("id", "temp").sink("alerts", klass="H")
>>> hot.window_agg("id", [count()], time_col="ts", size=60).sink("hot_counts", klass="L")
>>> compiled = qs.build()
>>> [str(p) for p in compiled.plan.paths]
['sensors→alerts/1:where→alerts/2:select', 'sensors→hot_counts/1:where→hot_counts/2:window_agg']
>>> compiled.output_schema("alerts").names
['id', 'temp']
>>> sensors.where(col("id") > 3).sink("bad")
>>> qs.build()
Traceback (most recent call last):
...
sparkqos.errors.ExpressionError: operator 'bad/1:where': cannot compare column 'id' (string) with 3 (int64)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from sparkqos.errors import PlanError
from sparkqos.executor.expressions import Agg, Expr
from sparkqos.executor.operators import PhysicalOperator, Project, Select, Synthetic, Union, WindowAggregate, WindowJoin
from sparkqos.executor.plan import CompiledPlan
from sparkqos.executor.queues import with_internal
from sparkqos.model.plan import Operator, Plan


def _as_schema(schema: pa.Schema | Mapping[str, pa.DataType] | Sequence[tuple[str, pa.DataType]]) -> pa.Schema:
    if isinstance(schema, pa.Schema):
        return schema
    try:
        return pa.schema(list(schema.items()) if isinstance(schema, Mapping) else list(schema))
    except (TypeError, ValueError, KeyError) as exc:
        raise PlanError(
            f"a stream schema is a pyarrow.Schema or a mapping of column name to type, got {schema!r} ({exc})"
        ) from None


class Relation:
    """A node of the builder: a stream, or an operator over other relations."""

    def __init__(
        self,
        queries: QuerySet,
        label: str,
        op: PhysicalOperator | None = None,
        inputs: tuple[Relation, ...] = (),
        stream: str | None = None,
    ):
        self._queries = queries
        self._label = label
        self._op = op
        self._inputs = inputs
        self._stream = stream

    def __repr__(self) -> str:
        if self._stream is not None:
            return f"stream({self._stream!r})"
        return f"{self._inputs[0]!r}.{self._label}(...)"

    def _then(self, label: str, op: PhysicalOperator, *others: Relation) -> Relation:
        for o in others:
            if not isinstance(o, Relation) or o._queries is not self._queries:
                raise PlanError(f"{label}() needs a relation of the same QuerySet, got {o!r}")
        return Relation(self._queries, label, op, (self, *others))

    # -- operators -------------------------------------------------------------------------------
    def where(self, predicate: Expr) -> Relation:
        """Rows satisfying ``predicate`` (Spark ``where``/``filter``)."""
        return self._then("where", Select(predicate))

    filter = where

    def select(self, *columns: str | Expr) -> Relation:
        """Columns and computed expressions (use ``.alias()`` to name them)."""
        return self._then("select", Project(columns))

    def union(self, *others: Relation) -> Relation:
        """All rows of this relation and ``others`` (same columns; Spark ``unionByName``)."""
        return self._then("union", Union(1 + len(others)), *others)

    def join(
        self,
        other: Relation,
        on: str | Sequence[str],
        *,
        rows: int | None = None,
        seconds: float | None = None,
        time_col: str | tuple[str, str] | None = None,
    ) -> Relation:
        """Sliding-window symmetric hash join with ``other`` on equal ``on`` keys; the window is
        the last ``rows`` rows or ``seconds`` of ``time_col`` (default: arrival time; a
        ``(left, right)`` pair when the two sides name their time columns differently)."""
        return self._then("join", WindowJoin(on, rows=rows, seconds=seconds, time_col=time_col), other)

    def window_agg(self, by: str | Sequence[str], aggs: Sequence[Agg], **window: Any) -> Relation:
        """Aggregates per key over tumbling or sliding event-time windows; ``window`` is
        :class:`WindowAggregate`'s: ``time_col``, ``size``, ``slide`` (None: tumbling), ``lateness``."""
        return self._then("window_agg", WindowAggregate(by, aggs, **window))

    def synthetic(self, selectivity: float, cost_s: float = 1e-6, seed: int = 0) -> Relation:
        """The papers' generic operator with declared selectivity and per-row cost."""
        return self._then("synthetic", Synthetic(selectivity, cost_s, seed))

    def sink(self, name: str, klass: str | None = None) -> None:
        """Make this relation the continuous query ``name`` of class ``klass``."""
        self._queries._add_query(name, self, klass)


@dataclass(frozen=True)
class _Query:
    name: str
    relation: Relation
    klass: str | None


class QuerySet:
    """Streams and continuous queries; ``classes`` maps query class → priority (CQC §2)."""

    def __init__(self, classes: Mapping[str, float] | None = None):
        self._streams: dict[str, pa.Schema] = {}
        self._queries: dict[str, _Query] = {}
        self._classes: dict[str, float] = dict(classes or {})

    def stream(self, name: str, schema: pa.Schema | Mapping[str, pa.DataType]) -> Relation:
        """Declare input stream ``name`` with the columns every batch must have."""
        if not isinstance(name, str) or not name or "/" in name:
            raise PlanError(f"stream names are non-empty strings without '/', got {name!r}")
        schema = _as_schema(schema)
        for field in schema:
            if field.name.startswith("__"):
                raise PlanError(f"stream {name!r}: column {field.name!r} starts with '__', which is reserved for the executor")
        if name in self._streams and not self._streams[name].equals(schema):
            raise PlanError(f"stream {name!r} was declared with another schema: {self._streams[name]} vs {schema}")
        self._streams[name] = schema
        return Relation(self, "stream", stream=name)

    def priority(self, klass: str, value: float) -> QuerySet:
        """Set the priority of query class ``klass``."""
        self._classes[klass] = value
        return self

    def _add_query(self, name: str, relation: Relation, klass: str | None) -> None:
        if not isinstance(name, str) or not name or "/" in name:
            raise PlanError(f"query names are non-empty strings without '/', got {name!r}")
        if name in self._queries:
            raise PlanError(f"a query named {name!r} is already defined")
        if name in self._streams:
            raise PlanError(f"query {name!r} has the same name as a stream")
        if relation._op is None:
            raise PlanError(f"query {name!r} reads stream {relation._stream!r} without any operator; add a where() or select()")
        self._queries[name] = _Query(name, relation, klass)

    def build(self) -> CompiledPlan:
        """Type-check and compile every query (each gets its own copy of shared relations)."""
        if not self._queries:
            raise PlanError("the query set has no queries; end a relation with .sink(name)")
        ops: dict[str, PhysicalOperator] = {}
        plan_ops: list[Operator] = []
        roots: dict[str, str] = {}
        for q in self._queries.values():
            roots[q.name] = self._compile(q, q.relation, [0], ops, plan_ops)[0]
        plan = Plan(plan_ops, streams=list(self._streams), classes=self._classes)
        return CompiledPlan(plan, ops, dict(self._streams), roots)

    def _compile(
        self, q: _Query, rel: Relation, counter: list[int], ops: dict[str, PhysicalOperator], plan_ops: list[Operator]
    ) -> tuple[str, pa.Schema]:
        """Compile ``rel`` for query ``q`` bottom-up; operators are numbered in ``counter`` order."""
        if rel._stream is not None:
            return rel._stream, with_internal(self._streams[rel._stream])
        inputs = [self._compile(q, i, counter, ops, plan_ops) for i in rel._inputs]
        counter[0] += 1
        name = f"{q.name}/{counter[0]}:{rel._label}"
        op = rel._op.copy()
        schema = op.bind(name, [s for _, s in inputs])
        ops[name] = op
        plan_ops.append(Operator(name, tuple(n for n, _ in inputs), op.selectivity, op.cost_s, q.name, q.klass, op.kind))
        return name, schema
