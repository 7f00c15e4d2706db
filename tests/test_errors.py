"""Error classes and the one argument check (sparkqos/errors.py), as the rest of sparkqos uses them:
every bad argument raises the module's own SparkqosError naming the parameter, the value and what
was expected; a checkpoint whose state no longer fits raises a SparkqosError too, so the job's
``except SparkqosError`` around a restore catches it."""

from __future__ import annotations

import json
import math
import re

import pytest

from sparkqos import Operator, Plan, schedulers
from sparkqos.adaptive.qos import Goal
from sparkqos.config import Key, load_config
from sparkqos.errors import (
    ArgumentError,
    CheckpointError,
    ConfigError,
    PlanError,
    QosSpecError,
    SchedulerError,
    SourceError,
    SparkqosError,
    WorkloadError,
    check_choice,
    check_number,
)
from sparkqos.executor import Executor
from sparkqos.model.stats import StatisticsGatherer
from sparkqos.runtime.checkpoint import CheckpointStore
from sparkqos.sim import Simulator, chain_plan
from sparkqos.sim.arrivals import on_off_pareto
from sparkqos.sources.generators import PoissonGenerator, _Options
from sparkqos.testing import FakeClock, SyntheticQuery, drive, feeds, synthetic_plans

# -- check_number ---------------------------------------------------------------------------------


def test_closed_bounds_accept_the_bound_and_open_ones_do_not():
    assert check_number("x", 0, low=0) == 0
    assert check_number("x", 1.0, high=1) == 1.0
    with pytest.raises(ArgumentError, match=r"^x must be a finite number > 0, got 0$"):
        check_number("x", 0, low=0, low_open=True)
    with pytest.raises(ArgumentError, match=r"^x must be a finite number >= 0 and < 1, got 1$"):
        check_number("x", 1, low=0, high=1, high_open=True)
    with pytest.raises(ArgumentError, match=r"^x must be a finite number >= 0.5, got 0.25$"):
        check_number("x", 0.25, low=0.5)
    assert check_number("x", 0.75, low=0.5, high=1, low_open=True, high_open=True) == 0.75


def test_the_value_comes_back_unchanged():
    assert check_number("n", 3, integer=True) == 3 and type(check_number("n", 3)) is int
    assert check_number("x", 2.5) == 2.5


@pytest.mark.parametrize("bad", [True, False, "1", None, [1], 1j])
def test_bools_strings_and_other_types_are_not_numbers(bad):
    with pytest.raises(ArgumentError, match=re.escape(f"x must be a finite number, got {bad!r}")):
        check_number("x", bad)


def test_bools_are_not_integers_either():
    with pytest.raises(ArgumentError, match=r"^n must be an integer >= 1, got True$"):
        check_number("n", True, low=1, integer=True)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_and_inf_are_rejected_by_default(bad):
    with pytest.raises(ArgumentError, match=rf"^x must be a finite number >= 0, got {bad!r}$"):
        check_number("x", bad, low=0)


def test_finite_false_lets_inf_through_but_never_nan():
    assert check_number("x", math.inf, low=0, finite=False) == math.inf
    with pytest.raises(ArgumentError, match=r"^x must be a number >= 0, got -inf$"):
        check_number("x", -math.inf, low=0, finite=False)
    with pytest.raises(ArgumentError, match="got nan"):
        check_number("x", math.nan, finite=False)


def test_none_ok():
    assert check_number("limit", None, low=1, integer=True, none_ok=True) is None
    with pytest.raises(ArgumentError, match=r"^limit must be an integer >= 1 or None, got 0$"):
        check_number("limit", 0, low=1, integer=True, none_ok=True)
    with pytest.raises(ArgumentError, match=r"^limit must be an integer >= 1, got None$"):
        check_number("limit", None, low=1, integer=True)


def test_integer_rejects_floats_even_whole_ones():
    assert check_number("n", -2, integer=True) == -2
    for bad in (2.0, 2.5, math.inf):
        with pytest.raises(ArgumentError, match=rf"^n must be an integer, got {bad!r}$"):
            check_number("n", bad, integer=True)


def test_errors_carry_parameter_value_expected_and_where():
    with pytest.raises(PlanError) as info:
        check_number("cost", -1.5, low=0, low_open=True, error=PlanError, where="operator 'a': ")
    exc = info.value
    assert isinstance(exc, SparkqosError) and isinstance(exc, ValueError)
    assert (exc.parameter, exc.value, exc.expected) == ("cost", -1.5, "a finite number > 0")
    assert str(exc) == "operator 'a': cost must be a finite number > 0, got -1.5"


def test_plain_errors_have_no_parameter():
    exc = SchedulerError("something broke")
    assert (exc.parameter, exc.value, exc.expected) == (None, None, None)


# -- check_choice ---------------------------------------------------------------------------------


def test_check_choice():
    assert check_choice("run", "one", ("one", "quantum")) == "one"
    with pytest.raises(WorkloadError) as info:
        check_choice("run", "fast", ("one", "quantum"), error=WorkloadError, where="w.toml: ")
    exc = info.value
    assert str(exc) == "w.toml: run must be one of 'one', 'quantum', got 'fast'"
    assert (exc.parameter, exc.value, exc.expected) == ("run", "fast", "one of 'one', 'quantum'")
    with pytest.raises(ArgumentError, match=r"^flag must be one of True, False, got None$"):
        check_choice("flag", None, [True, False])


# -- real constructors raise their module's error, naming the parameter -----------------------------


def _plan_with_selectivity(sel):
    return Plan([Operator("a", ("S",), sel, 1.0)], ["S"])


def _source_option():
    return _Options("sparkqos.poisson", {"rate": "-5"}, {"rate"}).number("rate", 100.0)


def _workload_config():
    return load_config({"job": {"duration_s": Key(float, 60.0, low=0, low_open=True)}}, text="[job]\nduration_s = 0")


@pytest.mark.parametrize(
    "build, error, parameter, value",
    [
        (lambda: schedulers.get("cqc", k=-1), SchedulerError, "k", -1),
        (lambda: schedulers.get("adaptive", explore=2), SchedulerError, "explore", 2),
        (lambda: schedulers.get("adaptive", age_unit="hours"), SchedulerError, "age_unit", "hours"),
        (lambda: schedulers.get("threshold", beta=1.0), SchedulerError, "beta", 1.0),
        (lambda: schedulers.get("cos", T=1.5), SchedulerError, "T", 1.5),
        (lambda: schedulers.get("oldest_guard", period=0), SchedulerError, "period", 0),
        (lambda: _plan_with_selectivity(-1), PlanError, "selectivity", -1),
        (lambda: _plan_with_selectivity(math.nan), PlanError, "selectivity", math.nan),
        (lambda: Plan([Operator("a", ("S",), 0.5, 1.0, klass="H")], ["S"], classes={"H": True}), PlanError, "priority", True),
        (lambda: Goal("delay", "minimize", -0.1), QosSpecError, "weight", -0.1),
        (lambda: Simulator(chain_plan([(0.5, 1.0)]), schedulers.get("fifo"), {}, quantum=0), WorkloadError, "quantum", 0),
        (lambda: on_off_pareto(10.0, 100, flows=0), WorkloadError, "flows", 0),
        (_source_option, SourceError, "rate", -5.0),
        (lambda: PoissonGenerator(spread=1.5), SourceError, "spread", 1.5),
        (lambda: CheckpointStore("/nonexistent-never-created", keep=0), CheckpointError, "keep", 0),
        (_workload_config, ConfigError, "job.duration_s", 0),
        (lambda: StatisticsGatherer(w=1.0), ArgumentError, "w", 1.0),
    ],
)
def test_constructors_raise_their_modules_error_naming_the_parameter(build, error, parameter, value):
    with pytest.raises(error) as info:
        build()
    exc = info.value
    assert isinstance(exc, SparkqosError)
    assert exc.parameter == parameter and exc.expected
    assert exc.value == value or (isinstance(value, float) and math.isnan(value) and math.isnan(exc.value))
    assert type(exc.value) is type(value)
    assert parameter in str(exc) and repr(value) in str(exc)


# -- a checkpoint whose state no longer fits ------------------------------------------------------


def _resume(restore) -> SparkqosError | None:
    """What jobs/sensor_monitor.py does around a restore: a SparkqosError means "cannot resume"."""
    try:
        restore()
    except SparkqosError as exc:
        return exc
    return None


def _two_class_plan(classes):
    return Plan(
        [Operator("a", ("S",), 0.5, 1.0, klass=classes[0]), Operator("b", ("T",), 0.5, 1.0, klass=classes[1])],
        ["S", "T"],
        classes={classes[0]: 2, classes[1]: 1},
    )


def _saved(strategy: str, plan: Plan, **params) -> dict:
    sim = Simulator(plan, schedulers.get(strategy, **params), {s: [(0, 3.0), (1, 2.0)] for s in plan.streams})
    sim.run(until=2.5)
    return json.loads(json.dumps(sim.scheduler.state_dict()))


def _restore_into(strategy: str, plan: Plan, state: dict, **params):
    def restore():
        scheduler = schedulers.get(strategy, **params)
        scheduler.load_state_dict(state)
        Simulator(plan, scheduler, {s: [(0, 1.0)] for s in plan.streams}).run(until=1)  # attaches: state applied

    return restore


@pytest.mark.parametrize(
    "strategy, state, plan, params, words",
    [
        # Cqc credits for classes the plan no longer has
        (
            "cqc",
            lambda: _saved("cqc", _two_class_plan("HL")),
            _two_class_plan("AB"),
            {},
            r"Cqc state names classes \['H', 'L'\]; the plan has \['A', 'B'\]",
        ),
        # adaptive state naming a strategy that is no longer a candidate
        (
            "adaptive",
            lambda: _saved("adaptive", chain_plan([(0.5, 1.0)]), candidates=["fifo", "chain"]),
            chain_plan([(0.5, 1.0)]),
            {"candidates": ["fifo", "rr"]},
            r"\['chain'\] that are not candidates",
        ),
        # a stateless strategy given another strategy's state
        (
            "fifo",
            lambda: _saved("rr", chain_plan([(0.5, 1.0)])),
            chain_plan([(0.5, 1.0)]),
            {},
            r"Fifo holds no state, got \['ring'\]",
        ),
        ("rr", lambda: {"ring": "O1"}, chain_plan([(0.5, 1.0)]), {}, r"ring must be a list of operator names, got 'O1'"),
        ("cos", lambda: {"cursor": -1}, chain_plan([(0.5, 1.0)]), {}, r"Cos state: cursor must be an integer >= 0, got -1"),
        ("cqc", lambda: {"credits": {}}, _two_class_plan("HL"), {}, r"Cqc state has unknown keys \['credits'\]"),
        (
            "oldest_guard",
            lambda: {"count": 10},
            chain_plan([(0.5, 1.0)]),
            {"period": 2},
            r"OldestPathGuard state: count must be an integer >= 0 and < 2, got 10",
        ),
        (
            "threshold",
            lambda: {"mode": "saving", "queued_area": -1.0},
            chain_plan([(0.5, 1.0)]),
            {},
            r"Threshold state: queued_area must be a finite number >= 0, got -1.0",
        ),
    ],
)
def test_a_scheduler_state_that_does_not_fit_is_caught_as_a_sparkqos_error(strategy, state, plan, params, words):
    exc = _resume(_restore_into(strategy, plan, state(), **params))
    assert isinstance(exc, SchedulerError), exc
    assert re.search(words, str(exc)), str(exc)


@pytest.mark.parametrize(
    "mangle, words",
    [
        (lambda d: d.pop("version"), r"statistics state must have keys"),
        (lambda d: d["operators"].__setitem__("x", {"runs": 1, "speed": 2}), r"does not fit.*speed"),
        (lambda d: d.__setitem__("w", 2.0), r"statistics state: w must be a finite number >= 0 and < 1, got 2.0"),
        (lambda d: d.__setitem__("window", [0.0]), r"statistics state: does not fit"),
    ],
)
def test_statistics_that_do_not_fit_raise_checkpoint_error(mangle, words):
    g = StatisticsGatherer()
    g.record_run("O1", consumed=10, produced=2, seconds=0.5)
    d = json.loads(json.dumps(g.to_dict()))
    assert StatisticsGatherer.from_dict(json.loads(json.dumps(d))).to_dict() == d
    mangle(d)
    with pytest.raises(CheckpointError, match=words):
        StatisticsGatherer.from_dict(d)


def test_executor_restore_of_a_checkpoint_from_another_plan_is_a_sparkqos_error():
    """The executor path of jobs/sensor_monitor.py: the state of a Cqc run over classes H and L,
    restored into the same queries now in classes A and B, fails with a SparkqosError naming the
    classes (before: a bare ValueError that escaped the job's ``except SparkqosError``), and fails
    inside load_state itself, where the job catches restore errors — not at the first pick after it."""
    old = synthetic_plans(
        {"h": SyntheticQuery([(0.5, 1.0)], klass="H"), "l": SyntheticQuery([(0.5, 1.0)], klass="L")}, classes={"H": 2, "L": 1}
    )
    new = synthetic_plans(
        {"h": SyntheticQuery([(0.5, 1.0)], klass="A"), "l": SyntheticQuery([(0.5, 1.0)], klass="B")}, classes={"A": 2, "B": 1}
    )
    a = Executor(old.compiled.fresh(), schedulers.get("cqc"), clock=FakeClock())
    drive(a, feeds({"S": [(0, 4.0), (1, 4.0)]}), units_between=1)
    saved = json.loads(json.dumps(a.to_state(queues=False)))

    def restore():
        b = Executor(new.compiled.fresh(), schedulers.get("cqc"), clock=FakeClock())
        b.load_state(saved)

    exc = _resume(restore)
    assert isinstance(exc, SchedulerError), exc
    assert "Cqc state names classes ['H', 'L']; the plan has ['A', 'B']" in str(exc)
