"""Strategies by name (see docs/ARCHITECTURE.md, "Where each strategy lives").

Every built-in strategy, ``adaptive`` included, is named in one table
(:data:`~sparkqos.schedulers.builtin.BUILT_IN`), which the registry starts from: nothing registers
by being imported, and ``get("adaptive")`` works whatever was imported first.

>>> from sparkqos import schedulers
>>> schedulers.get("chain")
Chain()
>>> "fifo" in schedulers.available()
True
"""

from __future__ import annotations

from sparkqos.model.state import EngineState, SchedulerState, Unit
from sparkqos.schedulers.base import (
    ClusterScheduler,
    HeapScheduler,
    LazyHeap,
    PathScheduler,
    PriorityScheduler,
    Scheduler,
)
from sparkqos.schedulers.basic import Fifo, Greedy, MostTuplesInQueue, RoundRobin
from sparkqos.schedulers.chain import Chain
from sparkqos.schedulers.classes import ClassShares, ClassView
from sparkqos.schedulers.cos import Cos
from sparkqos.schedulers.cqc import ClassTurns, Cqc
from sparkqos.schedulers.guards import DynamicPriority, OldestPathGuard
from sparkqos.schedulers.path import PathCapacity, Segment, SimplifiedSegment, Threshold
from sparkqos.schedulers.rate import HighestNormalizedRate, HighestRate
from sparkqos.schedulers.registry import available, build, get, register, unregister

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
    "PathScheduler",
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
