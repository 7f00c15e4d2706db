"""sparkqos: QoS-aware operator scheduling for continuous queries on Spark Structured Streaming."""

from sparkqos import schedulers
from sparkqos.errors import PlanError, SchedulerError, SparkqosError, UnknownStrategy, WorkloadError
from sparkqos.plan import Operator, OperatorPath, Plan, Query

__version__ = "0.1.0"


def stream(df, queries, **kwargs):
    """Serve ``queries`` over the streaming DataFrame ``df`` with a sparkqos strategy; ``.start()``
    gives the StreamingQuery. See :class:`sparkqos.spark.runner.QosStream` for the options."""
    from sparkqos.spark.runner import stream as _stream  # Spark-side code loads only when used

    return _stream(df, queries, **kwargs)

__all__ = [
    "Operator", "OperatorPath", "Plan", "PlanError", "Query", "SchedulerError", "SparkqosError",
    "UnknownStrategy", "WorkloadError", "schedulers", "stream", "__version__",
]
