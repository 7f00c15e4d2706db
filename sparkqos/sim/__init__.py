"""The deterministic simulator: virtual time, fractional tuples, declared σ and c."""

from sparkqos.sim.engine import (
    EPS,
    RUN_RULES,
    Dispatch,
    Output,
    SimResult,
    SimState,
    Simulator,
    Step,
    chain_plan,
)
from sparkqos.sim.workload import Workload, load_workload, parse_workload

__all__ = [
    "EPS",
    "RUN_RULES",
    "Dispatch",
    "Output",
    "SimResult",
    "SimState",
    "Simulator",
    "Step",
    "Workload",
    "chain_plan",
    "load_workload",
    "parse_workload",
]
