"""What users write -> a :class:`~sparkqos.executor.CompiledPlan`: the ``QuerySet`` builder
(builder.py) and Spark's analyzed plans of PySpark transforms (spark_plan.py, with the handler
tables of tables.py over the node types of nodes.py). Nothing here imports pyspark."""

from sparkqos.compile.builder import QuerySet, Relation
from sparkqos.executor.expressions import avg, col, count, lit, max_, min_, sum_

__all__ = ["QuerySet", "Relation", "avg", "col", "count", "lit", "max_", "min_", "sum_"]
