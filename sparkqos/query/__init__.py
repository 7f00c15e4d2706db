"""What users write: continuous queries that compile into a :class:`~sparkqos.executor.CompiledPlan`."""

from sparkqos.executor.expressions import avg, col, count, lit, max_, min_, sum_
from sparkqos.query import joins, keyed, stateful, udf  # noqa: F401  (register their plan nodes and expressions with spark_plan)
from sparkqos.query.builder import QuerySet, Relation

__all__ = ["QuerySet", "Relation", "avg", "col", "count", "lit", "max_", "min_", "sum_"]
