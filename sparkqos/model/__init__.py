"""What every strategy reads: the operator plan, the scheduler contract's state and units, statistics.

Imports nothing of sparkqos but ``sparkqos.errors`` (docs/ARCHITECTURE.md, "Dependency rules").
"""

from sparkqos.model.plan import DEFAULT_CLASS, OPERATOR_KINDS, Operator, OperatorPath, Plan, Query
from sparkqos.model.state import UNIT_KINDS, EngineState, SchedulerState, Unit
from sparkqos.model.stats import DEFAULT_WEIGHT, OperatorStats, PlanStats, StatisticsGatherer, smooth

__all__ = [
    "DEFAULT_CLASS",
    "DEFAULT_WEIGHT",
    "OPERATOR_KINDS",
    "UNIT_KINDS",
    "EngineState",
    "Operator",
    "OperatorPath",
    "OperatorStats",
    "Plan",
    "PlanStats",
    "Query",
    "SchedulerState",
    "StatisticsGatherer",
    "Unit",
    "smooth",
]
