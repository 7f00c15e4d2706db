"""Round Robin, FIFO, Greedy and Most Tuples In Queue.

Thesis (raindrop, Sutherland 2004) §4.2–4.5; Chain paper (Babcock et al. 2003) §4.2.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from sparkqos.errors import SchedulerError
from sparkqos.model.plan import Plan
from sparkqos.model.state import SchedulerState, Unit
from sparkqos.schedulers.base import HeapScheduler, PriorityScheduler, Scheduler


class RoundRobin(Scheduler):
    """Cycle over the operators that have work, one run each (thesis §4.2).

    Runnable operators sit in a circular queue in the order they received work; an operator
    that runs goes to the back, behind any operator that became runnable while it ran. ``quantum``
    caps each run's time (None: the engine's run rule).

    >>> from sparkqos.sim import Simulator, chain_plan
    >>> sim = Simulator(chain_plan([(0.5, 1.0), (0.5, 1.0), (0.5, 1.0)]), RoundRobin(),
    ...                 {"S": [(0, 2.0)]}, run="one", record_dispatches=True)
    >>> _ = sim.run(until=4)
    >>> [d.unit.head for d in sim.dispatches]
    ['O1', 'O2', 'O1', 'O3', 'O2', 'O3']
    """

    def __init__(self, quantum: float | None = None):
        self.quantum = quantum
        self._ring: deque[str] = deque()
        self._in_ring: set[str] = set()
        self._units: dict[str, Unit] = {}
        self._restored: list[str] = []
        self._last: str | None = None

    def _rebuild(self, state: SchedulerState) -> None:
        self._units = {op: Unit("operator", (op,), quota_time=self.quantum) for op in state.plan.names}
        runnable = set(state.runnable_operators())
        order = [op for op in self._restored if op in runnable]
        order += [op for op in state.plan.names if op in runnable and op not in order]
        self._restored = []
        self._ring = deque(order)
        self._in_ring = set(order)
        self._last = None

    def _on_enqueue(self, op: str, state: SchedulerState) -> None:
        if op not in self._in_ring:
            self._in_ring.add(op)
            self._ring.append(op)

    def _choose(self, state: SchedulerState) -> Unit | None:
        ring = self._ring
        runnable = state.runnable
        if self._last is not None:  # back of the queue, after operators that woke up meanwhile
            ring.append(self._last)
            self._last = None
        while ring:
            op = ring.popleft()
            if runnable(op):
                self._last = op
                return self._units[op]
            self._in_ring.discard(op)
        return None

    def state_dict(self) -> dict[str, Any]:
        if self._state is None:
            return {"ring": list(self._restored)}
        return {"ring": list(self._ring) + ([self._last] if self._last is not None else [])}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        unknown = set(state) - {"ring"}
        if unknown:
            raise SchedulerError(f"RoundRobin state has unknown keys {sorted(unknown)}; expected ['ring']")
        ring = state.get("ring", [])
        if not isinstance(ring, list) or not all(isinstance(op, str) for op in ring):
            raise SchedulerError(f"RoundRobin state: ring must be a list of operator names, got {ring!r}")
        self._restored = list(ring)
        if self._state is not None:
            self._rebuild(self._state)


class Fifo(HeapScheduler):
    """Push the oldest waiting tuple through its whole operator path (thesis §4.3, Chain §4.2).

    The unit is the path from the operator holding the oldest tuple up to its root, with
    ``carry``: each operator above processes exactly what the one below produced.

    >>> from sparkqos.sim import Simulator, chain_plan
    >>> sim = Simulator(chain_plan([(0.5, 1.0), (0.5, 1.0), (0.5, 1.0)]), Fifo(),
    ...                 {"S": [(0, 1.0), (1, 1.0)]}, run="one", record_dispatches=True)
    >>> _ = sim.run(until=5)
    >>> [d.unit.head for d in sim.dispatches]
    ['O1', 'O1']
    >>> [d.operator for d in sim.steps]
    ['O1', 'O2', 'O3', 'O1', 'O2', 'O3']
    """

    def _unit(self, plan: Plan, op: str) -> Unit:
        return Unit("path", plan.upstream_path(op), carry=True)

    def _key(self, state: SchedulerState) -> Callable[[str], tuple]:
        # REINSERT: a join's second input can bring an older tuple than the one it already holds.
        index = state.plan.index
        oldest = state.oldest
        return lambda op: (oldest(op), index[op])


class Greedy(PriorityScheduler):
    """Static priority (1 − σ) / c: the fraction of a tuple an operator removes per time unit
    (thesis eq 4.1, Chain §4.2). Operators with empty queues are skipped.

    >>> from sparkqos.sim import Simulator, chain_plan
    >>> sim = Simulator(chain_plan([(0.9, 1.0), (0.1, 1.0), (1.0, 0.5)]), Greedy(),
    ...                 {"S": [(0, 2.0)]}, run="one", record_dispatches=True)
    >>> _ = sim.run(until=3)
    >>> [d.unit.head for d in sim.dispatches]
    ['O1', 'O2', 'O1', 'O2']
    """

    def priorities(self, state: SchedulerState) -> dict[str, float]:
        return {op: (1.0 - state.selectivity(op)) / state.cost(op) for op in state.plan.names}


class MostTuplesInQueue(HeapScheduler):
    """Run the operator with the most tuples in its input queues (thesis §4.5); ties go to the
    oldest tuple.

    >>> from sparkqos.sim import Simulator, chain_plan
    >>> sim = Simulator(chain_plan([(0.9, 1.0), (0.1, 0.25), (1.0, 0.5)]), MostTuplesInQueue(),
    ...                 {"S": [(t, 1.0) for t in range(4)]}, run="one", record_dispatches=True)
    >>> _ = sim.run(until=3)
    >>> [d.unit.head for d in sim.dispatches]
    ['O1', 'O1', 'O2', 'O1']
    """

    def _key(self, state: SchedulerState) -> Callable[[str], tuple]:
        # REINSERT: unlike a static priority, a growing queue raises the key on every arrival.
        index = state.plan.index
        queued = state.queued
        oldest = state.oldest
        return lambda op: (-queued(op), oldest(op), index[op])
