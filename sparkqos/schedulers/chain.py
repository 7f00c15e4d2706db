"""Chain scheduling: operator priorities from the lower envelope of each path's progress chart.

Babcock, Babu, Datar, Motwani — "Chain: Operator Scheduling for Memory Minimization in Data
Stream Systems", SIGMOD 2003, §3–5.
"""

from __future__ import annotations

from collections.abc import Callable

from sparkqos.model.plan import OperatorPath, Plan
from sparkqos.model.state import SchedulerState
from sparkqos.schedulers.base import PriorityScheduler


def progress_chart(
    plan: Plan,
    path: OperatorPath,
    selectivity: Callable[[str], float],
    cost: Callable[[str], float],
) -> list[tuple[float, float]]:
    """Operator points (tᵢ, sᵢ) of a path's progress chart (Chain §3).

    A tuple enters with size 1 at t = 0; after the i-th operator it has received tᵢ units of
    processing (the operator spends cost × the tuples that reach it) and its memory is the
    surviving fraction times the operator's output tuple size. The root ejects its output, so the
    last point has size 0. Selectivities above 1 (joins with stored relations) make the chart rise.

    >>> from sparkqos.sim import chain_plan
    >>> plan = chain_plan([(0.2, 1.0), (0.8, 5.0)])
    >>> progress_chart(plan, plan.paths[0], lambda o: plan[o].selectivity, lambda o: plan[o].cost)
    [(0.0, 1.0), (1.0, 0.2), (2.0, 0.0)]
    """
    points = [(0.0, 1.0)]
    t, count = 0.0, 1.0
    last = len(path.operators) - 1
    for k, op in enumerate(path.operators):
        t += count * cost(op)
        count *= selectivity(op)
        points.append((t, 0.0 if k == last else count * plan[op].tuple_size))
    return points


def lower_envelope(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points on the lower envelope: from each point, the next one is its
    steepest-descent operator point, the earliest on ties (Chain §3).

    >>> lower_envelope([(0, 1), (1, 0.9), (2, 0.1), (3, 0.0)])
    [0, 2, 3]
    """
    out = [0]
    i, last = 0, len(points) - 1
    while i < last:
        ti, si = points[i]
        best_j, best = None, None
        for j in range(i + 1, last + 1):
            tj, sj = points[j]
            if tj <= ti:  # nothing left to process: zero-time steps
                continue
            slope = (si - sj) / (tj - ti)
            if best is None or slope > best:
                best_j, best = j, slope
        if best_j is None:  # the tuple is gone; the rest of the path never gets input
            best_j = last
        out.append(best_j)
        i = best_j
    return out


def envelope_slopes(points: list[tuple[float, float]]) -> list[float]:
    """For each operator of the path (between points k and k+1), the slope of the envelope
    segment it lies on: the tuple size it removes per unit of processing time."""
    env = lower_envelope(points)
    slopes = [0.0] * (len(points) - 1)
    for a, b in zip(env, env[1:]):
        (ta, sa), (tb, sb) = points[a], points[b]
        slope = (sa - sb) / (tb - ta) if tb > ta else 0.0
        for k in range(a, b):
            slopes[k] = slope
    return slopes


class Chain(PriorityScheduler):
    """Run the operator whose lower-envelope segment is steepest; ties go to the earliest
    arrival (Chain §4.1). An operator on several paths (a join) takes its steepest segment.
    A blocked sliding-window join is not runnable, so its chain waits (Chain §5).

    In the chart below O1 barely shrinks a tuple but O2 removes most of it: O1 and O2 form one
    chain (0.91 of a tuple removed in 1.9 time units), steeper than O3 alone, so O1 runs as
    eagerly as O2 although alone it removes little, and O3 waits until nothing below it has work.

    >>> from sparkqos.sim import Simulator, chain_plan
    >>> plan = chain_plan([(0.9, 1.0), (0.1, 1.0), (0.5, 10.0)])
    >>> {op: round(p, 4) for op, p in Chain().priorities(Simulator(plan, Chain(), {}).state).items()}
    {'O1': 0.4789, 'O2': 0.4789, 'O3': 0.1}
    >>> sim = Simulator(plan, Chain(), {"S": [(0, 2.0)]}, run="one", record_dispatches=True)
    >>> _ = sim.run(until=6)
    >>> [d.unit.head for d in sim.dispatches]
    ['O1', 'O2', 'O1', 'O2', 'O3']
    """

    def priorities(self, state: SchedulerState) -> dict[str, float]:
        plan = state.plan
        prio: dict[str, float] = {}
        for path in plan.paths:
            chart = progress_chart(plan, path, state.selectivity, state.cost)
            for op, slope in zip(path.operators, envelope_slopes(chart)):
                if slope > prio.get(op, float("-inf")):
                    prio[op] = slope
        return prio
