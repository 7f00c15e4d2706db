"""Which queries can run sharded: every stateful operator keyed by the shard key.

The sharded lane (:mod:`sparkqos.spark.sharded`) splits the stream by a column (``shard_by``)
and runs one executor per shard; a shard sees only its keys' rows. A query gives the same answer
there as on one executor when every operator that keeps state across rows keeps it per a key
that includes the shard key — window aggregates grouped by it, joins on it (both sides), dedup
and lag keyed by it. A user's stateful function (applyInPandasWithState) runs on the driver lane
only: :func:`check_shardable` refuses it (its report still says whether it is keyed by the shard
key; the columns it yields carry none). Stateless operators (selections, projections, UDFs, unions, the synthetic
operator, joins with a static table, which every shard holds whole) are shardable wherever
they stand.

The shard key is followed through the plan by value: a column is the shard key when it carries
the stream's ``shard_by`` column unchanged — kept by a selection, a union of inputs that both
carry it, or a projection that passes it through (renamed or not); a computed column is not,
even under the same name.

>>> import pyarrow as pa
>>> from sparkqos.compile.builder import QuerySet
>>> from sparkqos.executor.expressions import col, count
>>> qs = QuerySet()
>>> s = qs.stream("s", {"k": pa.int64(), "v": pa.float64(), "t": pa.float64()})
>>> s.where(col("v") > 1.0).sink("big")
>>> s.select(col("k").alias("key"), "t").window_agg("key", [count()], time_col="t", size=10).sink("per_k")
>>> s.select((col("k") + 1).alias("k"), "t").window_agg("k", [count()], time_col="t", size=10).sink("total")
>>> {q: r.operator if r else None for q, r in shard_report(qs.build(), "k").items()}
{'big': None, 'per_k': None, 'total': 'total/2:window_agg'}
>>> check_shardable(qs.build(), "k")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
sparkqos.errors.NotShardable: query 'total' cannot run sharded by 'k': operator 'total/2:window_agg' (WindowAggregate) ...
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sparkqos.errors import NotShardable, not_one_of
from sparkqos.executor.expressions import Alias, Col, Expr
from sparkqos.executor.operators import (
    Deduplicate,
    EventWindowAggregate,
    Generate,
    IntervalJoin,
    KeyedLag,
    PandasWithState,
    PhysicalOperator,
    Project,
    Select,
    SparkAggregates,
    StaticJoin,
    Synthetic,
    TransformWithState,
    Union,
    WindowAggregate,
    WindowJoin,
)
from sparkqos.executor.plan import CompiledPlan

__all__ = ["Refusal", "check_shardable", "refuse_spark_parts", "shard_report"]


@dataclass(frozen=True)
class Refusal:
    """Why a query cannot run sharded: its first operator whose state is not per shard key."""

    query: str
    #: the operator and its kind (window aggregate, join, dedup, lag...)
    operator: str
    kind: str
    shard_by: str
    #: the keys its state is grouped by, which do not include ``shard_by``
    keys: tuple[str, ...]

    def message(self) -> str:
        return (
            f"query {self.query!r} cannot run sharded by {self.shard_by!r}: operator {self.operator!r} ({self.kind}) "
            f"keeps state per key {self.keys}, none of which carries the stream's {self.shard_by!r} unchanged; "
            f"group, join, dedup or lag it by {self.shard_by!r}, or run it on the driver lane"
        )


#: Operators whose output rows each come from one input row (or one static-table match): they
#: keep the shard key wherever their output keeps its column.
_STATELESS = (Select, Synthetic, StaticJoin, Union, Generate)
#: Operators keeping state per key: the attribute(s) naming their keys.
_KEYED = (WindowAggregate, EventWindowAggregate, KeyedLag, Deduplicate, PandasWithState, TransformWithState)


def _column(expr: Expr | str) -> str | None:
    """The input column an expression passes through unchanged, or None when it computes."""
    if isinstance(expr, str):
        return expr
    while isinstance(expr, Alias):
        expr = expr.child
    return expr.column if isinstance(expr, Col) else None


def _carried(op: PhysicalOperator, inputs: Sequence[frozenset[str]]) -> frozenset[str]:
    """The output columns of ``op`` that carry the shard key, given those of its inputs."""
    out = frozenset(op.schema.names) if op.schema is not None else frozenset()
    if isinstance(op, Project):
        return frozenset(e.name for e in op.exprs if _column(e) in inputs[0])
    if isinstance(op, PandasWithState | TransformWithState):  # its columns are what the user's function yields
        return frozenset()
    if isinstance(op, Union):
        return frozenset.intersection(*inputs) & out
    return frozenset().union(*inputs) & out


def _refused(op: PhysicalOperator, inputs: Sequence[frozenset[str]]) -> tuple[str, ...] | None:
    """The keys of ``op`` when its state is not per shard key; None when it is shardable."""
    if isinstance(op, (Project, *_STATELESS)):
        return None
    if isinstance(op, _KEYED):
        return None if set(op.keys) & inputs[0] else tuple(op.keys)
    if isinstance(op, WindowJoin):
        return None if any(k in inputs[0] and k in inputs[1] for k in op.on) else tuple(op.on)
    if isinstance(op, IntervalJoin):
        pairs = list(zip(map(_column, op.left_keys), map(_column, op.right_keys), strict=True))
        ok = any(left in inputs[0] and right in inputs[1] for left, right in pairs)
        return None if ok else tuple(f"{left}={right}" for left, right in pairs)
    return ("<no shardability rule for this operator>",)


def shard_report(compiled: CompiledPlan, shard_by: str) -> dict[str, Refusal | None]:
    """Every query → None when it can run sharded by ``shard_by``, else its :class:`Refusal`."""
    plan = compiled.plan
    carried: dict[str, frozenset[str]] = {
        stream: frozenset({shard_by}) if shard_by in schema.names else frozenset() for stream, schema in compiled.sources.items()
    }
    report: dict[str, Refusal | None] = {}
    for qname, query in plan.queries.items():
        report[qname] = None
        for name in query.operators:  # leaf to root: every input is seen before its consumer
            op = compiled.operators[name]
            inputs = [carried.get(i, frozenset()) for i in plan[name].inputs]
            keys = _refused(op, inputs)
            if keys is not None and report[qname] is None:
                report[qname] = Refusal(qname, name, type(op).__name__, shard_by, keys)
            carried[name] = _carried(op, inputs)
    return report


def refuse_spark_parts(compiled: CompiledPlan) -> None:
    """Raise :class:`~sparkqos.errors.NotShardable` when some query has parts Spark evaluates in
    each micro-batch (:mod:`sparkqos.compile.spark_part`, or aggregates Spark computes over a
    group's rows): the shards run native operators only."""
    spark_queries = sorted(
        {p.query for p in compiled.spark_parts.values()}
        | {compiled.plan.query_of(n) for n, op in compiled.operators.items() if isinstance(op, SparkAggregates)}
    )
    if spark_queries:
        raise NotShardable(
            f"queries {spark_queries} have parts Spark evaluates in each micro-batch, which the sharded lane "
            "does not run; give placement='native' (if sparkqos compiles them) or leave out shards=",
            parameter="queries",
            value=spark_queries,
            expected="queries of native operators only (placement='native')",
        )


def check_shardable(compiled: CompiledPlan, shard_by: str) -> None:
    """Raise :class:`~sparkqos.errors.NotShardable` naming the first query (and its operator)
    that cannot run sharded by ``shard_by``; a stream without that column refuses every query,
    and so do parts Spark evaluates in each micro-batch (the shards run only native operators)
    and users' stateful functions (applyInPandasWithState, transformWithStateInPandas: the driver
    lane only)."""
    refuse_spark_parts(compiled)
    stateful = sorted(
        {
            compiled.plan.query_of(n)
            for n, op in compiled.operators.items()
            if isinstance(op, PandasWithState | TransformWithState)
        }
    )
    if stateful:
        raise NotShardable(
            f"queries {stateful} call a user's stateful function (applyInPandasWithState, transformWithStateInPandas), "
            "which runs on the driver "
            "lane only; leave out shards=",
            parameter="queries",
            value=stateful,
            expected="queries without applyInPandasWithState or transformWithStateInPandas",
        )
    for stream, schema in compiled.sources.items():
        if shard_by not in schema.names:
            raise not_one_of(
                NotShardable,
                f"shard_by {shard_by!r} is not a column of stream {stream!r} ({schema.names})",
                "shard_by",
                shard_by,
                schema.names,
            )
    for refusal in shard_report(compiled, shard_by).values():
        if refusal is not None:
            raise NotShardable(
                refusal.message(),
                parameter="shard_by",
                value=shard_by,
                expected=f"query {refusal.query!r} keyed by {shard_by!r} in {refusal.operator!r}",
            )
