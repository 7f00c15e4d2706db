"""One contract suite for every registered strategy (river's check_estimator idea).

A strategy added to the registry gets these checks for free: it never picks a unit with no work,
never idles while something can run, conserves tuples, is deterministic, derives its parameters
from ``__init__``, and resumes exactly from its serialised state.
"""

from __future__ import annotations

import json
import math

import pytest

from sparkqos import Operator, Plan, schedulers
from sparkqos.errors import SchedulerError, UnknownStrategy
from sparkqos.sim import Simulator
from sparkqos.sim.arrivals import on_off_pareto

STRATEGIES = schedulers.available()


def three_query_plan() -> Plan:
    ops = [
        Operator("h1", ("S",), 0.1, 0.05, klass="H"),
        Operator("h2", ("h1",), 0.5, 0.5, klass="H"),
        Operator("c1", ("S",), 0.9, 0.1, klass="C"),
        Operator("c2", ("c1",), 0.9, 0.3, klass="C"),
        Operator("c3", ("c2",), 0.1, 0.05, klass="C"),
        Operator("c4", ("c3",), 1.0, 0.5, klass="C"),
        Operator("n1", ("S",), 1.0, 0.05, klass="N"),
        Operator("n2", ("n1",), 0.2, 0.2, klass="N"),
    ]
    return Plan(ops, streams=["S"], classes={"H": 6, "C": 3, "N": 1})


def join_plan() -> Plan:
    ops = [
        Operator("r_sel", ("R",), 0.8, 0.1, klass="H"),
        Operator("join", ("r_sel", "T"), 0.6, 0.3, kind="join", klass="H"),
        Operator("after", ("join",), 0.1, 0.05, klass="H"),
        Operator("u", ("R", "T"), 0.5, 0.1, kind="union", klass="N"),
        Operator("u2", ("u",), 0.5, 0.2, klass="N"),
    ]
    return Plan(ops, streams=["R", "T"], classes={"H": 3, "N": 1})


def bursty(plan: Plan, stream: str, load: float, until: float, seed: int):
    per_tuple = sum(plan.service_time(p) for p in plan.paths if p.stream == stream)
    return on_off_pareto(load / per_tuple, until, flows=16, seed=seed)


def expected_drained_output(plan: Plan, arrivals) -> float:
    total = 0.0
    for path in plan.paths:
        surviving = math.prod(plan[op].selectivity for op in path.operators)
        total += surviving * sum(a for _, a in arrivals.get(path.stream, []))
    return total


def simulate(strategy: str, plan: Plan, arrivals, until=None, **kw):
    sim = Simulator(plan, schedulers.get(strategy), arrivals, starvation_limit=1, **kw)
    return sim, sim.run(until=until)


@pytest.fixture(scope="module")
def mix():
    plan = three_query_plan()
    return plan, {"S": bursty(plan, "S", 0.9, 300, seed=11)}


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("run_rule", ["quantum", "one"])
def test_conserves_tuples_and_never_starves(strategy, run_rule, mix):
    """Drained, every strategy delivers Σ arrivals × Πσ per path; it never picks an empty unit
    (starvation_limit=1 makes the simulator raise) and never idles while an operator can run."""
    plan, arrivals = mix
    _, result = simulate(strategy, plan, arrivals, run=run_rule)
    assert result.starved_picks == 0
    assert result.total_output == pytest.approx(expected_drained_output(plan, arrivals), rel=1e-9)
    assert list(result.snapshots.values())[-1] == pytest.approx(0.0, abs=1e-9)
    assert all(o.delay >= 0 for o in result.outputs)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_joins_and_unions(strategy):
    """A blocking join and a union over two streams: no starvation, no crash, and output never
    exceeds what the plan can produce."""
    plan = join_plan()
    arrivals = {"R": bursty(plan, "R", 0.4, 150, seed=3), "T": bursty(plan, "T", 0.4, 150, seed=4)}
    _, result = simulate(strategy, plan, arrivals)
    assert result.starved_picks == 0
    assert 0 < result.total_output <= expected_drained_output(plan, arrivals) + 1e-9


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_deterministic(strategy, mix):
    plan, arrivals = mix
    a = simulate(strategy, plan, arrivals, until=200)[1]
    b = simulate(strategy, plan, arrivals, until=200)[1]
    assert a.snapshots == b.snapshots
    assert a.outputs == b.outputs


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_resumes_exactly_from_serialised_state(strategy, mix):
    """Stop half-way, serialise the strategy's state through JSON into a fresh instance, carry
    on: the run is identical to an uninterrupted one."""
    plan, arrivals = mix
    _, whole = simulate(strategy, plan, arrivals, until=250)

    sim, _ = simulate(strategy, plan, arrivals, until=120)
    saved = json.loads(json.dumps(sim.scheduler.state_dict()))
    fresh = sim.scheduler.clone()
    fresh.load_state_dict(saved)
    sim.scheduler.detach()
    sim.scheduler = fresh
    resumed = sim.run(until=250)
    assert resumed.snapshots == pytest.approx(whole.snapshots)
    assert len(resumed.outputs) == len(whole.outputs)
    for got, want in zip(resumed.outputs, whole.outputs):
        assert (got.query, got.arrival) == (want.query, want.arrival)
        assert got.time == pytest.approx(want.time) and got.amount == pytest.approx(want.amount)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_parameters_come_from_init(strategy):
    s = schedulers.get(strategy)
    assert s.name == strategy
    clone = s.clone()
    assert type(clone) is type(s) and clone is not s
    assert clone.params() == s.params()
    assert repr(s).startswith(type(s).__name__ + "(")


def test_unknown_strategy_lists_the_registered_ones():
    with pytest.raises(UnknownStrategy, match="unknown strategy 'chian'.*chain.*fifo"):
        schedulers.get("chian")


def test_bad_parameters_name_the_allowed_ones():
    with pytest.raises(SchedulerError, match=r"strategy 'rr' takes parameters \['quantum'\]"):
        schedulers.get("rr", quantom=2)


def test_user_strategy_registration():
    """A user strategy registers by name and runs like a built-in (here: LIFO by arrival)."""
    from sparkqos.schedulers import LazyHeap, Scheduler, Unit

    @schedulers.register("newest_first")
    class NewestFirst(Scheduler):
        def _rebuild(self, state):
            oldest = state.oldest
            self._heap = LazyHeap(lambda op: (-oldest(op), op), state.runnable)
            for op in state.runnable_operators():
                self._heap.push(op)

        def _on_enqueue(self, op, state):
            self._heap.push(op)

        def _choose(self, state):
            op = self._heap.top()
            return None if op is None else Unit("operator", (op,))

    try:
        assert "newest_first" in schedulers.available()
        plan, arrivals = three_query_plan(), {"S": [(0, 1.0), (1, 1.0)]}
        _, result = simulate("newest_first", plan, arrivals)
        assert result.total_output == pytest.approx(expected_drained_output(plan, arrivals))
        with pytest.raises(SchedulerError, match="already registered"):
            schedulers.register("newest_first")(schedulers.Fifo)
    finally:
        schedulers.unregister("newest_first")


def test_a_strategy_that_picks_empty_units_is_caught():
    from sparkqos.schedulers import Scheduler, Unit

    class Broken(Scheduler):
        def _rebuild(self, state):
            pass

        def _on_enqueue(self, op, state):
            pass

        def _choose(self, state):
            return Unit("operator", ("h2",))  # h2 has no input at first

    sim = Simulator(three_query_plan(), Broken(), {"S": [(0, 1.0)]}, starvation_limit=3)
    with pytest.raises(SchedulerError, match="no work 3 times in a row"):
        sim.run()


def test_a_strategy_that_idles_with_work_is_caught():
    from sparkqos.schedulers import Scheduler

    class Lazy(Scheduler):
        def _rebuild(self, state):
            pass

        def _on_enqueue(self, op, state):
            pass

        def _choose(self, state):
            return None

    with pytest.raises(SchedulerError, match="returned no unit while"):
        Simulator(three_query_plan(), Lazy(), {"S": [(0, 1.0)]}).run()
