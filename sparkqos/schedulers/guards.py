"""Starvation guards around any strategy: periodic oldest-path service and dynamic priority.

Jiang & Chakravarthy, "Scheduling Strategies for Processing Continuous Queries over Streams",
UTA TR CSE-2003-30, §4.2 (starvation-free scheduling).
"""

from __future__ import annotations

import math
from typing import Any

from sparkqos.errors import SchedulerError, check_number
from sparkqos.model.state import SchedulerState, Unit
from sparkqos.schedulers import registry
from sparkqos.schedulers.base import LazyHeap, PathScheduler, PriorityScheduler, Scheduler, in_force_of
from sparkqos.schedulers.path import PathCapacity


def _resolve(inner: str | Scheduler, wrapper: str) -> Scheduler:
    """The wrapper's own working copy of ``inner`` (a registry name or an instance)."""
    if isinstance(inner, Scheduler):
        return inner.clone()
    if isinstance(inner, str):
        return registry.get(inner)
    raise SchedulerError(f"{wrapper}: inner must be a strategy name or a Scheduler, got {inner!r}")


def _path_units(state: SchedulerState, inner: Scheduler) -> dict[str, Unit]:
    """The unit serving "the path" of each operator: the inner strategy's own chain units when
    it has them (path / segment strategies), else the rest of the operator's path with carry and
    a quota of one time unit's worth (path capacity's unit)."""
    if isinstance(inner, PathScheduler):
        return inner.units(state)
    return PathCapacity().units(state)


def _checked_count(state: dict[str, Any], keys: set[str], period: int, where: str) -> int:
    """A guard's saved ``count`` (0 <= count < period), its state holding only ``keys``."""
    unknown = set(state) - keys
    if unknown:
        raise SchedulerError(f"{where} state has unknown keys {sorted(unknown)}")
    return check_number(
        "count",
        state.get("count", 0),
        low=0,
        high=period,
        high_open=True,
        integer=True,
        error=SchedulerError,
        where=f"{where} state: ",
    )


class OldestPathGuard(Scheduler):
    """Every ``period``-th dispatch serves the path holding the oldest tuple; the others are the
    inner strategy's (Jiang §4.2, "periodically schedule the path with the oldest tuple").

    A pick of the inner strategy lasts at most one quantum when its units carry a quota (path
    capacity, segments), so a waiting tuple that is the oldest in the system is served within
    ``period`` quanta, whatever the priorities.

    Below, path B (capacity 1.43) has three tuples, A (capacity 0.5) one: path capacity serves
    B's three quanta first, the guard lets A in every second pick.

    >>> from sparkqos import Operator, Plan
    >>> from sparkqos.schedulers import get
    >>> from sparkqos.sim import Simulator
    >>> plan = Plan([Operator("A1", ("S",), 1.0, 2.0), Operator("B1", ("T",), 0.2, 0.5),
    ...              Operator("B2", ("B1",), 1.0, 1.0)], streams=["S", "T"])
    >>> sim = Simulator(plan, OldestPathGuard("pc", period=2), {"S": [(0, 1.0)], "T": [(0, 3.0)]},
    ...                 record_dispatches=True)
    >>> _ = sim.run()
    >>> [d.unit.head for d in sim.dispatches]
    ['B1', 'A1', 'B1', 'A1', 'B1']
    >>> sim = Simulator(plan, get("pc"), {"S": [(0, 1.0)], "T": [(0, 3.0)]}, record_dispatches=True)
    >>> _ = sim.run()
    >>> [d.unit.head for d in sim.dispatches]
    ['B1', 'B1', 'B1', 'A1', 'A1']
    """

    def __init__(self, inner: str | Scheduler = "pc", period: int = 10):
        self.inner = inner
        self.period = check_number("period", period, low=1, integer=True, error=SchedulerError, where="oldest_guard: ")
        self._inner = _resolve(inner, "oldest_guard")
        self._count = 0
        self._heap: LazyHeap | None = None
        self._units: dict[str, Unit] = {}

    def _rebuild(self, state: SchedulerState) -> None:
        self._units = _path_units(state, self._inner)
        index, oldest = state.plan.index, state.oldest
        self._heap = LazyHeap(lambda op: (oldest(op), index[op]), state.runnable)
        for op in state.runnable_operators():
            self._heap.push(op)

    def _on_enqueue(self, op: str, state: SchedulerState) -> None:
        self._heap.push(op)  # a join's other input can bring an older tuple

    def _choose(self, state: SchedulerState) -> Unit | None:
        op = self._heap.top()
        if op is None:  # idle: not a dispatch, so it does not count towards the period
            return None
        self._count += 1
        if self._count >= self.period:
            self._count = 0
            return self._units[op]
        return self._inner.pick(state)

    def detach(self) -> None:
        super().detach()
        self._inner.detach()

    def in_force(self) -> tuple[str, dict[str, float]]:
        """The inner strategy, whose units the guard serves between its own."""
        return in_force_of(self.inner)

    def state_dict(self) -> dict[str, Any]:
        return {"count": self._count, "inner": self._inner.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._count = _checked_count(state, {"count", "inner"}, self.period, "OldestPathGuard")
        self._inner.load_state_dict(state.get("inner", {}))


class DynamicPriority(Scheduler):
    """The inner strategy's static priority C scaled by f = τ·Q (Jiang §4.2): τ the waiting time
    of the oldest tuple of the unit's queue and Q its queue size, each normalised by its largest
    value over the units that have work, so Ĉ = C·τ·Q grows with age and backlog and a long
    waiting path eventually outranks any capacity.

    The priorities are recomputed every ``period`` dispatches (the paper changes them "periodically";
    recomputing is a scan). Between refreshes a unit that got work since the last one ranks
    behind every ranked unit (its τ is unknown, taken as 0), ties to the oldest tuple. When every
    waiting tuple is brand new (all τ = 0) the static priority C·Q ranks. The inner strategy must
    rank units statically (``priorities(state)``: pc, segment, chain, greedy, hr…).

    Path B (capacity 1.43) gets five tuples over three instants, A (capacity 0.5) one. At t = 3
    A's tuple has waited 3 time units, B's oldest 1, and B holds 0.71 tuples: Ĉ_A = 0.5·1·1 beats
    Ĉ_B = 1.43·(1/3)·0.71, so A runs before B's last quantum (path capacity alone runs B first).

    >>> from sparkqos import Operator, Plan
    >>> from sparkqos.sim import Simulator
    >>> plan = Plan([Operator("A1", ("S",), 1.0, 2.0), Operator("B1", ("T",), 0.2, 0.5),
    ...              Operator("B2", ("B1",), 1.0, 1.0)], streams=["S", "T"])
    >>> sim = Simulator(plan, DynamicPriority("pc", period=1),
    ...                 {"S": [(0, 1.0)], "T": [(0, 3.0), (1, 1.0), (2, 1.0)]}, record_dispatches=True)
    >>> _ = sim.run()
    >>> [d.unit.head for d in sim.dispatches]
    ['B1', 'B1', 'B1', 'A1', 'B1', 'A1']
    """

    def __init__(self, inner: str | Scheduler = "pc", period: int = 10):
        self.inner = inner
        self.period = check_number("period", period, low=1, integer=True, error=SchedulerError, where="dynamic_priority: ")
        self._inner = _resolve(inner, "dynamic_priority")
        if not isinstance(self._inner, PriorityScheduler):
            raise SchedulerError(
                f"dynamic_priority needs an inner strategy with static priorities (pc, segment, chain…), got {self._inner!r}"
            )
        self._count = 0
        self._static: dict[str, float] = {}
        self._dynamic: dict[str, float] = {}
        self._units: dict[str, Unit] = {}
        self._heap: LazyHeap | None = None
        self._restored: tuple[int, dict[str, float]] | None = None

    def in_force(self) -> tuple[str, dict[str, float]]:
        """The inner strategy, whose static priorities the ages raise."""
        return in_force_of(self.inner)

    def _rebuild(self, state: SchedulerState) -> None:
        prio = self._inner.priorities(state)
        inner = self._inner
        if isinstance(inner, PathScheduler):
            self._units = inner.units(state)
        else:
            self._units = {op: Unit("operator", (op,)) for op in state.plan.names}
        # Ĉ multiplies C by a non-negative factor: a priority ≤ 0 (a segment that grows memory)
        # is lifted just above 0 so age can still raise it, keeping the static order below it.
        floor = min((p for p in prio.values() if p > 0), default=1.0) * 1e-6
        self._static = {op: p if p > 0 else floor / (2.0 - p) for op, p in prio.items()}
        if self._restored is not None:  # resume with the priorities frozen at the last refresh
            self._count, dynamic = self._restored
            self._restored = None
            self._install(state, dynamic)
        else:
            self._count = 0
            self._refresh(state)

    def _refresh(self, state: SchedulerState) -> None:
        now, queued, oldest = state.now, state.queued, state.oldest
        heads = [op for op in state.runnable_operators() if op in self._units]
        ages = {op: max(now - oldest(op), 0.0) for op in heads}
        sizes = {op: queued(op) for op in heads}
        max_age = max(ages.values(), default=0.0)
        max_size = max(sizes.values(), default=0.0)
        dynamic = {}
        for op in heads:
            tau = ages[op] / max_age if max_age > 0 else 1.0
            q = sizes[op] / max_size if max_size > 0 else 1.0
            dynamic[op] = self._static[op] * tau * q
        self._install(state, dynamic)

    def _install(self, state: SchedulerState, dynamic: dict[str, float]) -> None:
        self._dynamic = dyn = dynamic
        index, oldest = state.plan.index, state.oldest
        self._heap = LazyHeap(lambda op: (-dyn.get(op, 0.0), oldest(op), index[op]), state.runnable)
        for op in state.runnable_operators():
            if op in self._units:
                self._heap.push(op)

    def _on_enqueue(self, op: str, state: SchedulerState) -> None:
        if op in self._units:
            self._heap.ensure(op)

    def _choose(self, state: SchedulerState) -> Unit | None:
        if self._heap.top() is None:  # idle: not a dispatch, so it does not count
            return None
        self._count += 1
        if self._count >= self.period:
            self._count = 0
            self._refresh(state)
        return self._units[self._heap.top()]

    def state_dict(self) -> dict[str, Any]:
        if self._restored is not None:
            count, dynamic = self._restored
        else:
            count, dynamic = self._count, self._dynamic
        return {"count": count, "dynamic": dict(dynamic)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        count = _checked_count(state, {"count", "dynamic"}, self.period, "DynamicPriority")
        dynamic = state.get("dynamic", {})
        if not isinstance(dynamic, dict) or not all(
            isinstance(k, str) and isinstance(v, (int, float)) and math.isfinite(v) for k, v in dynamic.items()
        ):
            raise SchedulerError(f"DynamicPriority dynamic must map operator names to finite numbers, got {dynamic!r}")
        self._restored = (count, {k: float(v) for k, v in dynamic.items()})
        if self._state is not None:
            self._rebuild(self._state)
