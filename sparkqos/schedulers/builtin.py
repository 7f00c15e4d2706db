"""The table of built-in strategies: each registry name and where its class lives.

One place names every strategy the library ships, the adaptive selector included, as
``"module:Class"``. Nothing registers by being imported: the registry
(:mod:`sparkqos.schedulers.registry`) starts from this table and imports a class when its name is
first asked for, and each class listed here takes its name from the table when it is defined
(:meth:`~sparkqos.schedulers.base.Scheduler.__init_subclass__`), so ``Fifo().name`` is ``"fifo"``
whichever module was imported first. Giving ``adaptive`` by path keeps this package free of an
import of :mod:`sparkqos.adaptive`, which sits above it.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

__all__ = ["BUILT_IN", "NAME_OF"]

#: Registry name → ``"module:Class"`` of every built-in strategy.
BUILT_IN: Mapping[str, str] = MappingProxyType(
    {
        "adaptive": "sparkqos.adaptive.controller:Adaptive",
        "chain": "sparkqos.schedulers.chain:Chain",
        "class_shares": "sparkqos.schedulers.classes:ClassShares",
        "cos": "sparkqos.schedulers.cos:Cos",
        "cqc": "sparkqos.schedulers.cqc:Cqc",
        "dynamic_priority": "sparkqos.schedulers.guards:DynamicPriority",
        "fifo": "sparkqos.schedulers.basic:Fifo",
        "greedy": "sparkqos.schedulers.basic:Greedy",
        "hnr": "sparkqos.schedulers.rate:HighestNormalizedRate",
        "hr": "sparkqos.schedulers.rate:HighestRate",
        "mtiq": "sparkqos.schedulers.basic:MostTuplesInQueue",
        "oldest_guard": "sparkqos.schedulers.guards:OldestPathGuard",
        "pc": "sparkqos.schedulers.path:PathCapacity",
        "rr": "sparkqos.schedulers.basic:RoundRobin",
        "segment": "sparkqos.schedulers.path:Segment",
        "simplified_segment": "sparkqos.schedulers.path:SimplifiedSegment",
        "threshold": "sparkqos.schedulers.path:Threshold",
    }
)

#: ``"module:Class"`` → registry name (the table read the other way).
NAME_OF: Mapping[str, str] = MappingProxyType({path: name for name, path in BUILT_IN.items()})
