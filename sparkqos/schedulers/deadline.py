"""Latency targets over any strategy: earliest deadline first while a target is at risk.

Cameo (Xu et al., NSDI 2021) schedules dataflow operators by the deadlines their outputs must
meet; here the idea is applied to the papers' operators: a row of query q that arrived at time a
has the deadline a + target(q). While no row is at risk the strategy inside (class shares over
the strategy in force, by default) decides alone; once the oldest row waiting at an operator has
used ``risk`` of its query's target, that operator is served first, the one with the earliest
deadline among all at risk — across classes, so a class whose share does not cover its own work
still meets its target while the machine has capacity left for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sparkqos.errors import SchedulerError, check_number
from sparkqos.model.state import SchedulerState, Unit
from sparkqos.schedulers import registry
from sparkqos.schedulers.base import Scheduler


class EarliestDeadline(Scheduler):
    """``inner`` (a component: a Scheduler, used as given, a registry name or a
    ``{"name", "params"}`` table) orders the work until a row is at risk of missing its query's latency target
    (``targets``: query name → seconds); then the operator holding the at-risk row with the
    earliest deadline (arrival + target) is served. A row is at risk once it has waited
    ``risk`` × its target. Queries without a target are served by ``inner`` alone.

    Two one-operator queries with the same cost, fifo inside: query ``h`` has a target of 4 time
    units. Its rows arriving at 0 are at risk from 2 on (risk 0.5), so from then on they go
    before the older rows of ``n``:

    >>> from sparkqos import Operator, Plan
    >>> from sparkqos.sim import Simulator
    >>> plan = Plan([Operator("n", ("A",), 1.0, 1.0, query="n"), Operator("h", ("B",), 1.0, 1.0, query="h")],
    ...             streams=["A", "B"])
    >>> sim = Simulator(plan, EarliestDeadline("fifo", targets={"h": 4.0}), {"A": [(0, 6.0)], "B": [(0, 3.0)]},
    ...                 record_dispatches=True)
    >>> _ = sim.run(until=9.5)
    >>> "".join(d.unit.head for d in sim.dispatches)
    'nnhhhnnnn'
    """

    def __init__(self, inner: registry.Component = "fifo", targets: Mapping[str, float] | None = None, risk: float = 0.5):
        check_number("risk", risk, low=0, high=1, error=SchedulerError, where="deadline: ")
        self.inner = registry.component(inner, where="deadline: inner")
        self.targets = dict(targets or {})
        for query, target in self.targets.items():
            check_number(f"targets[{query!r}]", target, low=0, low_open=True, error=SchedulerError, where="deadline: ")
        self.risk = risk
        # a Scheduler is the one that runs (the progress record reads the strategy in force from it)
        self._inner = self.inner if isinstance(self.inner, Scheduler) else registry.get(self.inner)
        self._target_of: dict[str, float] = {}  # operator -> its query's target

    @property
    def strategy(self) -> Scheduler:
        """The strategy inside, as it runs (attached, with its state)."""
        return self._inner

    def _rebuild(self, state: SchedulerState) -> None:
        queries = state.plan.queries
        unknown = sorted(set(self.targets) - set(queries))
        if unknown:
            raise SchedulerError(f"deadline: targets name queries {unknown} the plan does not have; it has {sorted(queries)}")
        self._target_of = {op: self.targets[q] for q, query in queries.items() if q in self.targets for op in query.operators}

    def _on_enqueue(self, op: str, state: SchedulerState) -> None:
        pass  # the at-risk scan reads the queues' oldest rows at each pick

    def at_risk(self, state: SchedulerState) -> str | None:
        """The operator whose oldest waiting row is at risk and has the earliest deadline (None: none)."""
        now, risk = state.now, self.risk
        best: tuple[float, str] | None = None
        for op, target in self._target_of.items():
            if not state.runnable(op):
                continue
            oldest = state.oldest(op)
            if oldest is None or now - oldest < risk * target:
                continue
            deadline = oldest + target
            if best is None or deadline < best[0]:
                best = (deadline, op)
        return None if best is None else best[1]

    def _choose(self, state: SchedulerState) -> Unit | None:
        op = self.at_risk(state) if self._target_of else None
        if op is not None:
            return Unit("operator", (op,))
        return self._inner.pick(state)

    def in_force(self) -> tuple[str, dict[str, float]]:
        """The strategy inside: it orders the work whenever no row is at risk."""
        return self._inner.in_force()

    def detach(self) -> None:
        super().detach()
        self._inner.detach()

    def reseed(self, seed: int) -> None:
        self._inner.reseed(seed)

    def state_dict(self) -> dict[str, Any]:
        return {"inner": self._inner.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if not isinstance(state, Mapping) or set(state) - {"inner"}:
            raise SchedulerError(f"EarliestDeadline state is a table with the key 'inner', got {state!r}")
        self._inner.load_state_dict(dict(state.get("inner", {})))
