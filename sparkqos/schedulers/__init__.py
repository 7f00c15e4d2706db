"""Strategies by name (see docs/ARCHITECTURE.md, "Where each strategy lives").

Importing this package registers the built-in strategies; ``sparkqos.adaptive`` registers
``"adaptive"`` when it is imported (``import sparkqos`` does).

>>> from sparkqos import schedulers
>>> schedulers.get("chain")
Chain()
>>> "fifo" in schedulers.available()
True
"""

from __future__ import annotations

from sparkqos.model.state import EngineState, SchedulerState, Unit
from sparkqos.schedulers.base import ClusterScheduler, HeapScheduler, LazyHeap, PriorityScheduler, Scheduler
from sparkqos.schedulers.basic import Fifo, Greedy, MostTuplesInQueue, RoundRobin
from sparkqos.schedulers.chain import Chain
from sparkqos.schedulers.classes import ClassShares, ClassView
from sparkqos.schedulers.cos import Cos
from sparkqos.schedulers.cqc import ClassTurns, Cqc
from sparkqos.schedulers.guards import DynamicPriority, OldestPathGuard
from sparkqos.schedulers.path import PathCapacity, Segment, SimplifiedSegment, Threshold
from sparkqos.schedulers.rate import HighestNormalizedRate, HighestRate
from sparkqos.schedulers.registry import available, build, get, register, unregister

register("rr")(RoundRobin)
register("fifo")(Fifo)
register("greedy")(Greedy)
register("mtiq")(MostTuplesInQueue)
register("chain")(Chain)
register("pc")(PathCapacity)
register("segment")(Segment)
register("simplified_segment")(SimplifiedSegment)
register("threshold")(Threshold)
register("oldest_guard")(OldestPathGuard)
register("dynamic_priority")(DynamicPriority)
register("hr")(HighestRate)
register("hnr")(HighestNormalizedRate)
register("cqc")(Cqc)
register("cos")(Cos)
register("class_shares")(ClassShares)

__all__ = [
    "Chain",
    "ClassShares",
    "ClassTurns",
    "ClassView",
    "ClusterScheduler",
    "Cos",
    "Cqc",
    "DynamicPriority",
    "EngineState",
    "Fifo",
    "Greedy",
    "HeapScheduler",
    "HighestNormalizedRate",
    "HighestRate",
    "LazyHeap",
    "MostTuplesInQueue",
    "OldestPathGuard",
    "PathCapacity",
    "PriorityScheduler",
    "RoundRobin",
    "Scheduler",
    "SchedulerState",
    "Segment",
    "SimplifiedSegment",
    "Threshold",
    "Unit",
    "available",
    "build",
    "get",
    "register",
    "unregister",
]
