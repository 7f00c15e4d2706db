"""Highest Rate (HR) and Highest Normalized Rate (HNR): operator priorities from the query fragment
downstream of each operator (Sharaf et al., VLDB 2006, as used by the CQC paper §3–4).

For operator x, the downstream fragment is x and every operator above it up to its query's root.
With σₖ, cₖ the selectivities and costs along the fragment (x first):

* global selectivity  S = Πₖ σₖ — output tuples the fragment emits per tuple x reads;
* global average cost C = Σₖ (Πⱼ<ₖ σⱼ)·cₖ — time the fragment spends on one tuple x reads;
* ideal processing time T = Σₖ cₖ — the time a tuple that no operator filters out would need,
  its response time on an otherwise idle system.

HR serves the highest output rate S / C first (it minimises mean response time); HNR serves the
highest S / (C·T) first, so short queries are not slowed down relative to their ideal time
(it minimises mean slowdown).
"""

from __future__ import annotations

from collections.abc import Callable

from sparkqos.model.plan import Plan
from sparkqos.model.state import SchedulerState
from sparkqos.schedulers.base import PriorityScheduler


def fragment_statistics(
    plan: Plan,
    op: str,
    selectivity: Callable[[str], float],
    cost: Callable[[str], float],
) -> tuple[float, float, float]:
    """``(S, C, T)`` of the fragment from ``op`` up to its root (module docstring).

    >>> from sparkqos.sim import chain_plan
    >>> plan = chain_plan([(0.5, 1.0), (0.2, 2.0), (1.0, 4.0)])
    >>> fragment_statistics(plan, "O1", lambda o: plan[o].selectivity, lambda o: plan[o].cost)
    (0.1, 2.4, 7.0)
    """
    s, c, t = 1.0, 0.0, 0.0
    for name in plan.upstream_path(op):
        c += s * cost(name)
        t += cost(name)
        s *= selectivity(name)
    return s, c, t


def highest_rate_priorities(state: SchedulerState, normalized: bool = False) -> dict[str, float]:
    """HR priority S / C of every operator, or HNR's S / (C·T) with ``normalized``."""
    plan = state.plan
    out: dict[str, float] = {}
    for op in plan.names:
        s, c, t = fragment_statistics(plan, op, state.selectivity, state.cost)
        out[op] = s / (c * t) if normalized else s / c
    return out


class HighestRate(PriorityScheduler):
    """Serve the operator whose downstream fragment has the highest output rate S / C; ties go to
    the oldest tuple. Priorities are static between statistics updates.

    Below, the top operator O3 emits half a tuple per 2 time units (rate 0.25) while a tuple
    entering O1 yields 0.05 output in 1.2 time units (rate 0.042), so HR pushes work towards the
    query's output first:

    >>> from sparkqos.sim import Simulator, chain_plan
    >>> plan = chain_plan([(0.5, 0.5), (0.2, 1.0), (0.5, 2.0)])
    >>> {op: round(p, 4) for op, p in HighestRate().priorities(Simulator(plan, HighestRate(), {}).state).items()}
    {'O1': 0.0417, 'O2': 0.0714, 'O3': 0.25}
    >>> sim = Simulator(plan, HighestRate(), {"S": [(0, 2.0)]}, run="one", record_dispatches=True)
    >>> _ = sim.run()
    >>> [d.unit.head for d in sim.dispatches]
    ['O1', 'O2', 'O3', 'O1', 'O2', 'O3']
    """

    def priorities(self, state: SchedulerState) -> dict[str, float]:
        return highest_rate_priorities(state)


class HighestNormalizedRate(PriorityScheduler):
    """Serve the operator with the highest S / (C·T): HR divided by the fragment's ideal
    processing time, so queries that are quick when idle are served first (mean slowdown).

    Two one-operator queries with the same rate σ/c = 0.5: HR cannot tell them apart and serves
    the older tuple (Q_long's), HNR serves the short query first because its ideal time is 4×
    smaller.

    >>> from sparkqos import Operator, Plan
    >>> from sparkqos.sim import Simulator
    >>> plan = Plan([Operator("Q_long", ("A",), 1.0, 2.0), Operator("Q_short", ("B",), 0.25, 0.5)],
    ...             streams=["A", "B"])
    >>> arrivals = {"A": [(0, 1.0)], "B": [(0, 1.0)]}
    >>> def order(s):
    ...     sim = Simulator(plan, s, arrivals, run="one", record_dispatches=True)
    ...     _ = sim.run()
    ...     return [d.unit.head for d in sim.dispatches]
    >>> order(HighestRate()), order(HighestNormalizedRate())
    (['Q_long', 'Q_short'], ['Q_short', 'Q_long'])
    """

    def priorities(self, state: SchedulerState) -> dict[str, float]:
        return highest_rate_priorities(state, normalized=True)
