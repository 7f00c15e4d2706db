"""sparkqos: QoS-aware operator scheduling for continuous queries on Spark Structured Streaming.

One import gives the common path: ``sparkqos.stream`` (a streaming DataFrame served by a
strategy), the query API (``QuerySet``, ``col``, ...), ``QosSpec`` and the errors. The parts and
how they depend on each other: docs/ARCHITECTURE.md.
"""

from sparkqos import adaptive, schedulers  # importing adaptive registers the "adaptive" strategy
from sparkqos.adaptive import QosSpec
from sparkqos.errors import (
    CheckpointError,
    ConfigError,
    ExpressionError,
    PlanError,
    QosSpecError,
    RunnerError,
    SchedulerError,
    SchemaMismatch,
    SinkError,
    SourceError,
    SparkqosError,
    UnknownStrategy,
    WorkloadError,
)
from sparkqos.model import Operator, OperatorPath, Plan, Query
from sparkqos.query import QuerySet, avg, col, count, lit, max_, min_, sum_

__version__ = "0.1.0"


def stream(df, queries, **kwargs):
    """Serve ``queries`` over the streaming DataFrame ``df`` with a sparkqos strategy; ``.start()``
    gives the StreamingQuery. The options are :class:`sparkqos.spark.config.RunConfig`'s fields."""
    from sparkqos.spark.runner import stream as _stream  # Spark-side code loads only when used

    return _stream(df, queries, **kwargs)


__all__ = [
    "CheckpointError",
    "ConfigError",
    "ExpressionError",
    "Operator",
    "OperatorPath",
    "Plan",
    "PlanError",
    "QosSpec",
    "QosSpecError",
    "Query",
    "QuerySet",
    "RunnerError",
    "SchedulerError",
    "SchemaMismatch",
    "SinkError",
    "SourceError",
    "SparkqosError",
    "UnknownStrategy",
    "WorkloadError",
    "__version__",
    "adaptive",
    "avg",
    "col",
    "count",
    "lit",
    "max_",
    "min_",
    "schedulers",
    "stream",
    "sum_",
]
