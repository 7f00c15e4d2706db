"""sparkqos: QoS-aware operator scheduling for continuous queries on Spark Structured Streaming."""

from sparkqos import schedulers
from sparkqos.errors import PlanError, SchedulerError, SparkqosError, UnknownStrategy, WorkloadError
from sparkqos.plan import Operator, OperatorPath, Plan, Query

__version__ = "0.1.0"

__all__ = [
    "Operator", "OperatorPath", "Plan", "PlanError", "Query", "SchedulerError", "SparkqosError",
    "UnknownStrategy", "WorkloadError", "schedulers", "__version__",
]
