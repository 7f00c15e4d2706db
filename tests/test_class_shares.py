"""Class shares above any strategy (schedulers/classes.py).

* Over a long backlog each class gets its CQC quota of the work whatever the strategy inside
  (fifo, chain, pc, adaptive): priorities {6, 3, 1} and k = 20 give quotas {12, 6, 2}, CQC's
  worked example (§4.2), reproduced here as shares 0.6 / 0.3 / 0.1 of the busy time.
* Inside a class the inner strategy's order is kept: the class's dispatches are exactly those
  the strategy makes alone on the class's queries.
* The state (turns, credits, each class's inner state) survives state_dict / load_state_dict.
* ``RunConfig(class_shares=True)`` wraps the runner's strategy (adaptive: each candidate), not
  on a single-class plan; off by default.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path

import pyarrow as pa
import pytest

from sparkqos import Operator, Plan, schedulers, testing
from sparkqos.adaptive.controller import Adaptive
from sparkqos.errors import RunnerError, SchedulerError
from sparkqos.runtime.config import RunConfig
from sparkqos.runtime.trigger import TriggerLoop
from sparkqos.schedulers import ClassShares, ClassView, Cqc, PathCapacity
from sparkqos.sim import Simulator
from sparkqos.testing import SyntheticQuery, checks, synthetic_plans
from sparkqos.workloads.sensors import sensor_queries

#: The class mix of the published strategy checks (its logical plan; the tests here simulate it).
CLASSES, MIX = checks.CLASSES, checks.MIX
BACKLOG = {"S": [(0, 10_000.0)]}  # every query's copy lasts well past the horizon
HORIZON = 400.0


def wrapped(inner: str) -> schedulers.Scheduler:
    """``inner`` under class shares with CQC's worked example's k = 20."""
    if inner == "adaptive":
        return Adaptive(["fifo", "chain", "pc"], seed=3, period=5.0, class_shares=ClassShares(k=20.0))
    return ClassShares(inner, k=20.0)


def work_by_class(sim: Simulator) -> dict[str, float]:
    plan = sim.plan
    out: dict[str, float] = defaultdict(float)
    for step in sim.steps:
        out[plan.class_of(step.operator)] += step.end - step.start
    return dict(out)


def test_quotas_reproduce_the_cqc_worked_example():
    """CQC §4.2: priorities {6, 3, 1} and k = 20 give quotas {12, 6, 2}, as for Cqc."""
    sim = Simulator(MIX.plan, ClassShares("fifo", k=20), {})
    sim.scheduler.attach(sim.state)
    assert sim.scheduler.quotas == {"H": 12.0, "C": 6.0, "N": 2.0}
    assert sim.scheduler.credits == {"H": 12.0, "C": 6.0, "N": 2.0}


@pytest.mark.parametrize("inner", ["fifo", "chain", "pc", "hr", "rr", "adaptive"])
def test_each_class_gets_its_quota_of_the_work(inner):
    """Long backlog in every class: busy time splits 12 : 6 : 2 (±0.02 of the total) whatever
    orders the work inside; without class shares it does not (fifo alone: oldest first)."""
    sim = Simulator(MIX.plan, wrapped(inner), BACKLOG, record_dispatches=True)
    sim.run(until=HORIZON)
    work = work_by_class(sim)
    total = math.fsum(work.values())
    assert total == pytest.approx(HORIZON, abs=2.0)  # never idle
    shares = {c: work.get(c, 0.0) / total for c in CLASSES}
    assert shares == pytest.approx({"H": 0.6, "C": 0.3, "N": 0.1}, abs=0.02), shares
    plain = Simulator(MIX.plan, schedulers.get("fifo"), BACKLOG, record_dispatches=True)
    plain.run(until=HORIZON)
    plain_work = work_by_class(plain)
    assert abs(plain_work.get("H", 0.0) / math.fsum(plain_work.values()) - 0.6) > 0.1  # fifo alone: all H


def test_adaptive_runs_every_candidate_under_class_shares():
    adaptive = wrapped("adaptive")
    assert all(isinstance(m, ClassShares) for m in adaptive._members.values())
    assert {m.inner for m in adaptive._members.values()} == {"fifo", "chain", "pc"}
    sim = Simulator(MIX.plan, adaptive, BACKLOG)
    sim.run(until=60)
    assert len({d["chosen"] for d in adaptive.decisions}) > 1  # it did switch candidates
    # cqc shares time between classes itself: it stays as it is among wrapped candidates
    mixed = Adaptive(["fifo", "cqc"], class_shares="class_shares")
    assert type(mixed._members["cqc"]) is Cqc and isinstance(mixed._members["fifo"], ClassShares)


@pytest.mark.parametrize("inner", ["fifo", "chain", "pc", "hr", "segment"])
def test_inner_order_is_kept_within_each_class(inner):
    """No arrivals after t = 0, so a class's queues change only by its own work: the units served
    to class X are exactly those ``inner`` serves alone on X's queries (same rule, same quantum)."""
    sim = Simulator(MIX.plan, wrapped(inner), BACKLOG, record_dispatches=True)
    sim.run(until=HORIZON)
    for klass in CLASSES:
        got = [d.unit.operators for d in sim.dispatches if MIX.plan.class_of(d.unit.head) == klass]
        view = ClassView(sim.state, klass)
        alone = Simulator(view.plan, schedulers.get(inner), BACKLOG, record_dispatches=True)
        alone.run(until=HORIZON)
        want = [d.unit.operators for d in alone.dispatches]
        assert len(got) > 5
        assert got == want[: len(got)], klass


def test_view_exposes_only_its_class():
    sim = Simulator(MIX.plan, schedulers.get("fifo"), BACKLOG)
    sim.run(until=1)
    view = ClassView(sim.state, "N")
    assert set(view.plan.names) == set(MIX.plan.queries["n"].operators)
    assert set(view.runnable_operators()) <= set(view.plan.names)
    assert not any(view.runnable(op) for op in MIX.plan.queries["h"].operators)
    assert view.total_queued == pytest.approx(sum(sim.state.queued(op) for op in view.plan.names))
    assert view.now == sim.state.now and view.output_total == sim.state.output_total


@pytest.mark.parametrize("inner", ["fifo", "chain", "pc", "rr"])
def test_state_survives_a_restart(inner):
    """Stop mid-turn, carry the state through JSON into a fresh instance: the run is the
    uninterrupted one (turns, credits and each class's inner state are restored)."""
    whole = Simulator(MIX.plan, wrapped(inner), BACKLOG, record_dispatches=True)
    whole.run(until=150)
    sim = Simulator(MIX.plan, wrapped(inner), BACKLOG, record_dispatches=True)
    sim.run(until=67)
    saved = json.loads(json.dumps(sim.scheduler.state_dict()))
    assert set(saved) == {"turns", "inner"} and set(saved["inner"]) == set(CLASSES)
    assert saved["turns"]["current"] in CLASSES
    fresh = sim.scheduler.clone()
    fresh.load_state_dict(saved)
    assert fresh.state_dict() == saved  # unattached: what it holds is what it was given
    sim.scheduler.detach()
    sim.scheduler = fresh
    sim.run(until=150)
    assert [(d.time, d.unit) for d in sim.dispatches] == [(d.time, d.unit) for d in whole.dispatches]


def test_bad_state_and_parameters_are_reported():
    with pytest.raises(SchedulerError, match="unknown keys"):
        ClassShares().load_state_dict({"turns": {"credits": {}}, "inner": {}})
    with pytest.raises(SchedulerError, match="keys 'turns' and 'inner'"):
        ClassShares().load_state_dict({"credit": {}})
    with pytest.raises(SchedulerError, match="adaptive takes class_shares"):
        ClassShares("adaptive")
    with pytest.raises(SchedulerError, match="adaptive takes class_shares"):
        ClassShares("cqc")
    with pytest.raises(SchedulerError, match="k must be"):
        ClassShares(k=0)
    with pytest.raises(SchedulerError, match="class_shares is None or the k and quantum"):
        Adaptive(class_shares={"inner": "fifo"})


def test_one_class_runs_the_inner_strategy_alone():
    ops = [Operator("a", ("S",), 0.5, 1.0, klass="X"), Operator("b", ("a",), 0.5, 0.5, klass="X")]
    plan = Plan(ops, streams=["S"], classes={"X": 1})
    shared = Simulator(plan, ClassShares("chain"), {"S": [(0, 20.0)]}, record_dispatches=True)
    shared.run()
    alone = Simulator(plan, schedulers.get("chain"), {"S": [(0, 20.0)]}, record_dispatches=True)
    alone.run()
    assert shared.dispatches == alone.dispatches


# -- every strategy inside: the contract suite's checks ------------------------------------------------
PLAIN = [s for s in schedulers.available() if s not in ("adaptive", "cqc", "class_shares")]
#: The inners the default set checks: chain, a plain strategy (the contract suite checks the default
#: inner, hr), and adaptive with class shares under its candidates, the jobs' default. The wrapper's
#: code is the same whatever plain strategy is inside; the slow set checks every other one.
INNER_DEFAULT = ("chain", "adaptive")


@pytest.mark.parametrize(
    "inner", [pytest.param(s, marks=() if s in INNER_DEFAULT else pytest.mark.slow) for s in [*PLAIN, "adaptive"]]
)
def test_every_strategy_inside_passes_the_contract_checks(inner):
    """The contract suite registers ``class_shares`` with its default inner (hr); here every
    other plain strategy inside it (and adaptive with class shares under its candidates) passes
    the same checks on both engines: conserves tuples, never starves or idles, deterministic,
    resumes exactly from its serialised state."""
    if inner == "adaptive":

        class Under(Adaptive):
            def __init__(self, seed: int = 0):
                super().__init__(["fifo", "chain", "pc", "rr"], seed=seed, class_shares=ClassShares(k=20.0))

    else:

        class Under(ClassShares):
            def __init__(self, k: float = 20.0, quantum: float = 1.0):
                super().__init__(inner, k, quantum)

    schedulers.register("class_shares_under_test")(Under)
    try:
        make = checks.factory("class_shares_under_test")
        for engine in checks.ENGINES:
            for rule in checks.SIM_RULES if engine == "sim" else tuple(checks.EXECUTOR_RULES):
                checks.check_conserves(engine, make, rule)
            checks.check_deterministic(engine, make)
            for how in ("exact",) if engine == "sim" else tuple(checks.RESUME_RULES):
                checks.check_resumes(engine, make, how)
    finally:
        schedulers.unregister("class_shares_under_test")


# -- the construction path -------------------------------------------------------------------------
def test_build_wraps_by_the_strategys_own_rule():
    assert repr(schedulers.build("pc", 2.0, class_shares=True)) == repr(
        ClassShares(PathCapacity(quantum=0.2), k=2.0, quantum=0.2)
    )
    assert repr(schedulers.build("cqc", 2.0, class_shares=True)) == repr(Cqc(k=2.0, quantum=0.2))
    adaptive = schedulers.build("adaptive", 2.0, 4.0, class_shares=True, candidates=["fifo", "pc"])
    assert (adaptive.class_shares.k, adaptive.class_shares.quantum) == (2.0, 0.2)
    assert repr(adaptive._members["pc"]) == repr(ClassShares(PathCapacity(quantum=0.2), k=2.0, quantum=0.2))
    # the configuration-file spelling of the same tree: a component is {"name", "params"}
    table = ClassShares({"name": "pc", "params": {"quantum": 0.2}}, k=2.0, quantum=0.2)
    assert repr(table) == repr(schedulers.build("pc", 2.0, class_shares=True))
    assert repr(schedulers.build("chain", 2.0)) == repr(schedulers.get("chain"))  # off: as before


T0 = 1_700_000_000.0


def sensor_table(n: int, start: float) -> pa.Table:
    return testing.sensor_table(n, int(start) % 97, start)


def make_loop(root: Path, **kw) -> TriggerLoop:
    config = RunConfig(checkpoint=root / "ckpt", output=root / "out", budget_s=30.0, **kw)
    return TriggerLoop(sensor_queries(work_us=0.0, window_s=5.0), config)


@pytest.mark.parametrize("strategy", ["chain", "adaptive"])
def test_runner_wraps_the_strategy_with_class_shares(tmp_path, strategy):
    """Spark-free: the trigger loop on Arrow tables. The sensor queries have classes H, C, N."""
    off = make_loop(tmp_path / "off", strategy=strategy, class_shares=False).scheduler
    assert not isinstance(off, ClassShares) and not getattr(off, "class_shares", None)  # the papers' strategy as is
    default = make_loop(tmp_path / "default", strategy=strategy).scheduler  # on by default for a named strategy
    assert type(default) is type(make_loop(tmp_path / "explicit", strategy=strategy, class_shares=True).scheduler)
    # per-trigger mode: the state checkpointed is the state when process() returns (a continuous
    # worker would go on changing it while the test reads it)
    loop = make_loop(tmp_path / "on", strategy=strategy, class_shares=True, continuous=False)
    scheduler = loop.scheduler
    if strategy == "adaptive":
        assert type(scheduler) is Adaptive and (scheduler.class_shares.k, scheduler.class_shares.quantum) == (30.0, 3.0)
        assert all(isinstance(m, ClassShares) for m in scheduler._members.values())
    else:
        assert isinstance(scheduler, ClassShares) and scheduler.inner == "chain"
        assert (scheduler.k, scheduler.quantum) == (30.0, 3.0)
    for b in range(3):
        assert loop.process(sensor_table(120, T0 + 4 * b), b) is not None
    saved = loop.scheduler.state_dict()
    resumed = make_loop(tmp_path / "on", strategy=strategy, class_shares=True, continuous=False)
    assert resumed.restore() == 2
    assert json.dumps(resumed.scheduler.state_dict(), sort_keys=True) == json.dumps(saved, sort_keys=True)
    assert resumed.process(sensor_table(120, T0 + 12), 3) is not None


def test_run_config_class_shares_option(tmp_path):
    one_class = synthetic_plans({"a": SyntheticQuery([(0.5, 0.1)], klass="X")}).plan
    config = RunConfig(checkpoint=tmp_path, strategy="chain", class_shares=True, trigger_s=1.0)
    assert isinstance(config.make_scheduler(), ClassShares)
    assert isinstance(config.make_scheduler(MIX.plan), ClassShares)
    assert repr(config.make_scheduler(one_class)) == repr(schedulers.get("chain"))  # one class: as it is
    with pytest.raises(RunnerError, match="class_shares"):
        RunConfig(checkpoint=tmp_path, class_shares="yes")
    with pytest.raises(RunnerError, match="not a Scheduler instance"):
        RunConfig(checkpoint=tmp_path, strategy=schedulers.get("fifo"), class_shares=True)


def test_restart_with_an_idle_adaptive_candidate_under_class_shares(tmp_path):
    """A checkpoint taken before one candidate ever ran restores (its class shares hold no turns yet)."""
    kw = dict(strategy="adaptive", strategy_params={"candidates": ["fifo", "chain"], "period": 1e9}, class_shares=True)
    first = make_loop(tmp_path, **kw)
    first.process(sensor_table(100, T0), 0)
    assert first.scheduler.state_dict()["members"]["chain"] == {"turns": {}, "inner": {}}
    second = make_loop(tmp_path, **kw)
    assert second.restore() == 0
    assert second.process(sensor_table(100, T0 + 4), 1)["processedRows"] == 100
