"""The adaptive selector (thesis ch. 5) and its experiments in the simulator (thesis ch. 6, §1.3)."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from sparkqos import Operator, Plan, schedulers
from sparkqos.adaptive.controller import Adaptive, AdaptiveController
from sparkqos.adaptive.qos import QosSpec, Window, template
from sparkqos.errors import QosSpecError, SchedulerError, WorkloadError
from sparkqos.schedulers import Scheduler, Unit
from sparkqos.sim import Simulator, chain_plan
from sparkqos.sim.workload import parse_workload

_JOB = Path(__file__).resolve().parent.parent / "jobs" / "adaptive_sim.py"
_spec = importlib.util.spec_from_file_location("adaptive_sim", _JOB)
experiment = sys.modules.setdefault("adaptive_sim", importlib.util.module_from_spec(_spec))
if not hasattr(experiment, "SETTINGS"):
    _spec.loader.exec_module(experiment)

UNTIL = 1200.0
SEEDS = (1, 2, 3)
MEMORY = [("queued", "minimize", 1.0)]
DELAY = [("delay", "minimize", 1.0)]


def window(t0: float, t1: float, queued: float = 1.0, outputs: float = 1.0, delay: float = 1.0) -> Window:
    return Window(t0, t1, picks=3, outputs=outputs, delay_sum=outputs * delay, queued_mean=queued, queued_bytes_mean=queued)


# -- eq 5.1 / 5.2 --------------------------------------------------------------------------------
def controller(**kw) -> AdaptiveController:
    """The thesis's controller unless told otherwise: the queue level as the memory signal and a
    plain fitness-proportionate wheel."""
    kw.setdefault("spec", QosSpec.of(("queued", "minimize", 1.0)))
    kw.setdefault("memory_signal", "level")
    kw.setdefault("delay_signal", "outputs")
    kw.setdefault("sharpness", 1.0)
    kw.setdefault("explore", 0.0)
    return AdaptiveController(kw.pop("candidates", ["a", "b", "c"]), **kw)


def test_eq_5_1_normalisation_by_hand():
    """z = (μ_S − μ_H)/(max_H − min_H)·decay^age + 0.5, with H's spread over the strategies' means."""
    c = controller(decay=0.5, w=0.5)
    c._mean = {"a": {"queued": 10.0}, "b": {"queued": 30.0}, "c": {"queued": 20.0}}
    c._history = {"queued": 15.0}
    assert c.normalized("a") == {"queued": pytest.approx((10 - 15) / 20 + 0.5)}
    assert c.normalized("b") == {"queued": pytest.approx(1.0)}  # (30−15)/20 + 0.5 = 1.25, clipped
    assert c.normalized("b", age=2) == {"queued": pytest.approx(15 / 20 * 0.25 + 0.5)}  # decay² pulls to 0.5
    # minimize: the score is 1 − z
    assert c.score("a") == pytest.approx(1 - 0.25)
    assert c.score("c", age=1) == pytest.approx(1 - ((20 - 15) / 20 * 0.5 + 0.5))


def test_eq_5_1_zero_spread_is_neutral_not_a_division_by_zero():
    c = controller()
    c._mean = {"a": {"queued": 4.0}, "b": {"queued": 4.0}, "c": {}}
    c._history = {"queued": 4.0}
    assert c.normalized("a") == {"queued": 0.5}
    assert c.score("c") is None  # never measured
    c = controller(spread="windows")
    c._mean = {"a": {"queued": 4.0}, "b": {}, "c": {}}
    c._history, c._low, c._high = {"queued": 4.0}, {"queued": 4.0}, {"queued": 4.0}
    assert c.normalized("a") == {"queued": 0.5}


def test_warm_up_is_round_robin_then_the_first_again_and_the_first_window_is_start_up():
    """§5.3: each candidate once, the first once more at the end; its first window is not counted."""
    c = controller(seed=3)
    assert c.begin(0.0) == "a"
    chosen = [c.evaluate(window(t, t + 1), t + 1.0) for t in range(4)]
    assert chosen[:3] == ["b", "c", "a"]
    assert [d["warmup"] for d in c.decisions] == [True, True, True, False]
    assert [d["counted"] for d in c.decisions] == [False, True, True, True]
    assert [d["ran"] for d in c.decisions] == ["a", "b", "c", "a"]


def test_strategies_that_did_not_run_are_rescored_and_the_one_that_ran_keeps_its_decayed_score():
    """§5.2: after a window, every other strategy gets a fresh eq 5.1–5.2 score against the new
    history; the one that ran keeps its last score × decay^age (age in picks here)."""
    c = controller(decay=0.5, age_unit="picks", seed=0)
    c.begin(0.0)
    c.evaluate(window(0, 1, queued=99), 1.0)  # start-up window of a, not counted
    c.evaluate(window(1, 2, queued=10), 2.0)  # b
    c.evaluate(window(2, 3, queued=30), 3.0)  # c
    c.evaluate(window(3, 4, queued=20), 4.0)  # a (end of warm-up)
    before = dict(c.scores)
    ran = c.current
    c.evaluate(window(4, 5, queued=20), 5.0)
    assert c.scores[ran] == pytest.approx(before[ran] * 0.5)
    for other in set(c.candidates) - {ran}:
        age = c._decision - c._ran[other]
        assert c.scores[other] == pytest.approx(c.score(other, age))
    assert c.score("b") > c.score("a") > c.score("c")  # b held the least memory, c the most


def test_roulette_wheel_is_proportional_to_score():
    c = controller(seed=11)
    c.scores = {"a": 0.6, "b": 0.3, "c": 0.1}
    counts = Counter(c.roulette() for _ in range(20000))
    assert {k: v / 20000 for k, v in counts.items()} == pytest.approx({"a": 0.6, "b": 0.3, "c": 0.1}, abs=0.015)
    assert Counter(c.roulette(exclude="a") for _ in range(2000))["a"] == 0
    c.scores = {"a": 0.0, "b": 0.0, "c": 0.0}  # all zero: uniform
    counts = Counter(c.roulette() for _ in range(6000))
    assert min(counts.values()) > 1800


def test_controller_state_round_trips_through_json():
    c = controller(seed=5)
    c.begin(0.0)
    for t in range(6):
        c.evaluate(window(t, t + 1, queued=t % 3 + 1), t + 1.0)
    twin = controller(seed=999)
    twin.load_state_dict(json.loads(json.dumps(c.state_dict())))
    a = [c.evaluate(window(t, t + 1, queued=t % 4), t + 1.0) for t in range(6, 30)]
    b = [twin.evaluate(window(t, t + 1, queued=t % 4), t + 1.0) for t in range(6, 30)]
    assert a == b
    with pytest.raises(SchedulerError, match=r"unknown keys \['extra'\]"):
        twin.load_state_dict({**c.state_dict(), "extra": 1})


def test_little_delay_signal_is_pending_outputs_over_the_smoothed_output_rate():
    """delay_signal="little": a window's delay is L / λ (Little's law) with L the mean of the outputs
    still pending and λ the output rate smoothed by eq 3.1; "outputs" keeps the delivered delay."""
    spec = QosSpec.of(("delay", "minimize", 1.0))
    c = AdaptiveController(["a", "b"], spec, w=0.5, delay_signal="little")
    w1 = Window(0, 2, picks=3, outputs=4.0, delay_sum=40.0, queued_mean=9.0, queued_bytes_mean=9.0, pending_mean=6.0)
    assert c.measure(w1) == {"delay": pytest.approx(6.0 / 2.0)}  # λ = 4/2 on the first window
    w2 = Window(2, 4, picks=3, outputs=8.0, delay_sum=8.0, queued_mean=9.0, queued_bytes_mean=9.0, pending_mean=6.0)
    assert c.measure(w2) == {"delay": pytest.approx(6.0 / (0.5 * 2.0 + 0.5 * 4.0))}
    assert AdaptiveController(["a"], spec, delay_signal="outputs").measure(w2) == {"delay": 1.0}
    with pytest.raises(SchedulerError, match=r"delay_signal must be one of 'outputs', 'little', got 'age'"):
        AdaptiveController(["a"], spec, delay_signal="age")


def test_pending_outputs_weigh_each_queue_by_the_selectivities_to_its_root():
    plan = chain_plan([(0.5, 1.0), (0.2, 1.0)])
    a = Adaptive(["fifo"], qos=QosSpec.of(("delay", "minimize", 1.0)), delay_signal="little")
    sim = Simulator(plan, a, {"S": []})
    sim.state.enqueue("O1", 0, 4.0, 0.0)
    sim.state.enqueue("O2", 0, 3.0, 0.0)
    assert a._pending(sim.state) == pytest.approx(4.0 * 0.5 * 0.2 + 3.0 * 0.2)


def test_release_memory_signal_is_minus_the_tuples_released_per_unit_of_work():
    """memory_signal="release": −(queued at start + inputs − queued at end) / work; undefined
    (None, not folded) when nothing ran; "level" keeps the thesis's mean queue."""
    spec = QosSpec.of(("queued", "minimize", 1.0))
    w = Window(
        0,
        2,
        picks=3,
        outputs=1.0,
        delay_sum=1.0,
        queued_mean=50.0,
        queued_bytes_mean=50.0,
        inputs=10.0,
        work=2.0,
        queued_start=40.0,
        queued_end=30.0,
    )
    assert AdaptiveController(["a"], spec).measure(w) == {"queued": pytest.approx(-(40 + 10 - 30) / 2.0)}
    assert AdaptiveController(["a"], spec, memory_signal="level").measure(w) == {"queued": 50.0}
    idle = Window(
        0,
        2,
        picks=0,
        outputs=0.0,
        delay_sum=0.0,
        queued_mean=5.0,
        queued_bytes_mean=5.0,
        inputs=0.0,
        work=0.0,
        queued_start=5.0,
        queued_end=5.0,
    )
    assert AdaptiveController(["a"], spec).measure(idle) == {"queued": None}
    with pytest.raises(SchedulerError, match=r"memory_signal must be one of 'release', 'level', got 'peak'"):
        AdaptiveController(["a"], spec, memory_signal="peak")


def test_both_engines_count_inputs_and_work():
    """The release signal's inputs: the simulator counts each arrival once per reading operator and
    charges every run's length as work; the executor counts rows in and measured operator seconds."""
    plan = Plan([Operator("A", ("S",), 0.5, 1.0), Operator("B", ("S",), 1.0, 0.5)], streams=["S"])
    sim = Simulator(plan, schedulers.get("fifo"), {"S": [(0, 2.0), (1, 1.0)]})
    sim.run()
    assert sim.state.input_total == pytest.approx(6.0)
    assert sim.state.work_total == pytest.approx(3 * 1.0 + 3 * 0.5)
    import pyarrow as pa

    from sparkqos.compile import QuerySet
    from sparkqos.executor.expressions import col
    from sparkqos.executor.loop import Executor

    qs = QuerySet()
    qs.stream("S", pa.schema([("x", pa.int64())])).where(col("x") > 1).sink("q")
    ex = Executor(qs.build(), "fifo")
    ex.ingest("S", pa.table({"x": [1, 2, 3]}))
    assert ex.state.input_total == 3
    ex.run()
    assert ex.state.work_total > 0 and ex.state.total_queued == 0


def test_wheel_is_score_to_the_k_plus_an_even_explore_share():
    """P(c) = (1 − ε)·scoreᵏ/Σ scoreᵏ + ε/n; k = 1, ε = 0 is the thesis's wheel; a zero score
    keeps ε/n, so no candidate is ever eliminated (thesis §1.4)."""
    c = controller(sharpness=3.0, explore=0.05)
    c.scores = {"a": 0.8, "b": 0.4, "c": 0.0}
    total = 0.8**3 + 0.4**3
    wheel = c.wheel()
    assert wheel["a"] == pytest.approx(0.95 * 0.8**3 / total + 0.05 / 3)
    assert wheel["c"] == pytest.approx(0.05 / 3)
    assert sum(wheel.values()) == pytest.approx(1.0)
    plain = controller()
    plain.scores = dict(c.scores)
    assert plain.wheel() == {"a": pytest.approx(2 / 3), "b": pytest.approx(1 / 3), "c": 0.0}
    spins = Counter(c.roulette() for _ in range(20000))
    assert spins["c"] / 20000 == pytest.approx(0.05 / 3, abs=0.005)
    for bad, match in ((0, "sharpness must be"), (float("inf"), "sharpness must be")):
        with pytest.raises(SchedulerError, match=match):
            controller(sharpness=bad)
    with pytest.raises(SchedulerError, match=r"explore must be a finite number >= 0 and <= 1, got 1.5"):
        controller(explore=1.5)


def test_decision_log_is_bounded():
    """log_limit: a long stream keeps the newest decisions only (between log_limit and 2×)."""
    c = controller(log_limit=10)
    c.begin(0.0)
    for t in range(1, 101):
        c.evaluate(window(t - 1, t, queued=t % 7), float(t))
    assert 10 <= len(c.decisions) < 20 and c.decisions[-1]["time"] == 100.0
    assert len(controller(log_limit=None).decisions) == 0
    with pytest.raises(SchedulerError, match="log_limit must be an integer >= 1 or None"):
        controller(log_limit=0)


# -- the simulator's start-up cost (thesis §4.5) ----------------------------------------------------
def test_overhead_is_charged_to_every_operator_run_and_defaults_to_zero():
    """A run of 1 tuple at c = 1 with a start-up of 0.25 ends (and delivers) at 1.25; a fifo path of
    two operators pays it twice; the processor is busy meanwhile. Default 0 keeps the old timings."""
    plan = chain_plan([(0.5, 1.0)])
    plain = Simulator(plan, schedulers.get("fifo"), {"S": [(0, 1.0)]}).run()
    assert [(o.time, o.delay) for o in plain.outputs] == [(1.0, 1.0)]
    slow = Simulator(plan, schedulers.get("fifo"), {"S": [(0, 1.0)]}, overhead=0.25).run()
    assert [(o.time, o.amount, o.delay) for o in slow.outputs] == [(1.25, 0.5, 1.25)]
    two = chain_plan([(0.5, 1.0), (1.0, 0.5)])
    sim = Simulator(two, schedulers.get("fifo"), {"S": [(0, 1.0), (0.5, 1.0)]}, overhead=0.25, record_dispatches=True)
    result = sim.run()
    # run 1: O1 on the tuple of t=0 (0.25 + 1), run 2: O2 on its 0.5 (0.25 + 0.25), then the next path
    assert [(s.operator, s.start, s.end) for s in sim.steps] == [
        ("O1", 0.0, 1.25),
        ("O2", 1.25, 1.75),
        ("O1", 1.75, 3.0),
        ("O2", 3.0, 3.5),
    ]
    assert [o.time for o in result.outputs] == [1.75, 3.5]
    for bad in (-0.1, float("nan"), "0.1", True):
        with pytest.raises(WorkloadError, match="overhead must be a finite number >= 0, got "):
            Simulator(plan, schedulers.get("fifo"), {"S": []}, overhead=bad)


def test_overhead_is_an_optional_workload_key():
    doc = {"operator": [{"name": "O1", "input": "S", "selectivity": 0.5, "cost": 1.0}], "arrivals": {"S": [[0, 1.0]]}}
    assert parse_workload(doc).overhead == 0.0
    w = parse_workload({**doc, "overhead": 0.25})
    assert w.simulator(schedulers.get("fifo")).run().outputs[0].time == 1.25
    with pytest.raises(WorkloadError, match="overhead must be a finite number >= 0, got -1"):
        parse_workload({**doc, "overhead": -1})


# -- the strategy --------------------------------------------------------------------------------
def test_parameters_are_validated_with_clear_errors():
    with pytest.raises(SchedulerError, match="candidates are names of non-adaptive"):
        Adaptive(["fifo", "adaptive"])
    with pytest.raises(SchedulerError, match="distinct strategy names"):
        Adaptive(["fifo", "fifo"])
    with pytest.raises(
        schedulers.UnknownStrategy if hasattr(schedulers, "UnknownStrategy") else SchedulerError, match="unknown strategy 'fifoo'"
    ):
        Adaptive(["fifoo"])
    with pytest.raises(SchedulerError, match=r"decay must be a finite number > 0 and <= 1, got 1.5"):
        Adaptive(decay=1.5)
    with pytest.raises(SchedulerError, match=r"age_unit must be one of 'seconds', 'picks', got 'hours'"):
        Adaptive(age_unit="hours")
    with pytest.raises(SchedulerError, match="period and/or period_picks"):
        Adaptive(period=None)
    with pytest.raises(SchedulerError, match="period must be a finite number > 0 or None, got 0"):
        Adaptive(period=0)
    with pytest.raises(SchedulerError, match="period_picks must be an integer >= 1"):
        Adaptive(period_picks=0)
    with pytest.raises(SchedulerError, match="starvation must be an integer >= 1, got 0"):
        Adaptive(starvation=0)
    with pytest.raises(QosSpecError, match="unknown QoS template 'fast'"):
        Adaptive(qos="fast")
    with pytest.raises(ValueError, match=r"smoothing weight w must be a finite number >= 0 and < 1, got 1.0"):
        Adaptive(w=1.0)


def test_registered_and_configured_by_name():
    a = schedulers.get("adaptive", candidates=["fifo", "chain"], qos="low_memory", seed=4)
    assert a.controller.spec is template("low_memory")
    assert a.clone().params() == a.params()
    assert repr(a).startswith("Adaptive(candidates=['fifo', 'chain'], qos='low_memory', seed=4")


def test_window_statistics_come_from_the_state():
    """Output rate from output_total deltas, delay from output_delay_total deltas, memory as the
    time-weighted mean of total_queued at picks; every decision logs them with the scores."""
    plan = chain_plan([(0.5, 0.25), (1.0, 0.25)])
    a = Adaptive(["fifo", "rr"], qos="balanced", period=4, seed=1)
    sim = Simulator(plan, a, {"S": [(t, 2.0) for t in range(0, 40, 2)]})
    result = sim.run(until=40)
    d = a.decisions[3]
    w = d["window"]
    outs = [o for o in result.outputs if w["start"] < o.time <= w["end"]]
    rate = sum(o.amount for o in outs) / (w["end"] - w["start"])
    delay = sum(o.amount * o.delay for o in outs) / sum(o.amount for o in outs)
    assert w["output_rate"] == pytest.approx(rate)
    assert w["delay"] == pytest.approx(delay)
    assert 0 < w["queued"] <= max(result.snapshots.values())
    assert set(d) >= {"time", "ran", "chosen", "scores", "window", "reason"}
    assert all(rec["reason"] == "period" for rec in a.decisions)


def test_switching_detaches_the_old_candidate():
    plan = chain_plan([(0.5, 0.25), (1.0, 0.25)])
    a = Adaptive(["fifo", "rr"], period=3, seed=2)
    Simulator(plan, a, {"S": [(t, 2.0) for t in range(30)]}).run(until=30)
    parked = [name for name in a.controller.candidates if name != a.current]
    assert all(a._members[n]._state is None for n in parked)
    assert a._members[a.current]._state is not None


class _Stuck(Scheduler):
    """Always offers the root operator, whether or not it has input."""

    def _rebuild(self, state):
        self._root = state.plan.names[-1]

    def _on_enqueue(self, op, state):
        pass

    def _choose(self, state):
        return Unit("operator", (self._root,))


class _Idle(_Stuck):
    """Returns nothing even when work waits."""

    def _choose(self, state):
        return None


@pytest.mark.parametrize("broken", [_Stuck, _Idle])
def test_starvation_threshold_forces_a_switch(broken):
    """A candidate that keeps picking units with no work (or nothing while work waits) is
    switched away from; the engine never sees an empty unit (starvation_limit=1)."""
    schedulers.register("broken_demo")(broken)
    try:
        plan = chain_plan([(0.5, 0.25), (0.5, 0.25), (1.0, 0.25)])
        a = Adaptive(["broken_demo", "fifo"], period=5, starvation=2, seed=0)
        arrivals = {"S": [(t, 1.0) for t in range(60)]}
        result = Simulator(plan, a, arrivals, starvation_limit=1).run()
        assert result.starved_picks == 0
        assert result.total_output == pytest.approx(60 * 0.25)
        forced = [d for d in a.decisions if d["reason"] == "starvation"]
        assert forced and all(d["ran"] == "broken_demo" and d["chosen"] == "fifo" for d in forced)
    finally:
        schedulers.unregister("broken_demo")


def test_same_seed_same_decision_log_and_another_seed_differs():
    plan = experiment.filters_plan()
    arrivals = experiment.arrivals(plan, 0.9, 600, seed=4)

    def log(seed):
        a = Adaptive(qos="balanced", seed=seed, period=5)
        Simulator(plan, a, arrivals).run(until=600)
        return a.decisions

    first = log(7)
    assert len(first) > 100
    assert json.dumps(first) == json.dumps(log(7))
    assert [d["chosen"] for d in first] != [d["chosen"] for d in log(8)]


def test_resuming_from_serialised_state_continues_the_same_decision_log():
    plan = experiment.join_plan()
    arrivals = experiment.arrivals(plan, 0.9, 400, seed=2)
    whole = Adaptive(period=5, seed=3)
    Simulator(plan, whole, arrivals).run(until=400)

    first = Adaptive(period=5, seed=3)
    sim = Simulator(plan, first, arrivals)
    sim.run(until=170)
    fresh = first.clone()
    fresh.load_state_dict(json.loads(json.dumps(first.state_dict())))
    first.detach()
    sim.scheduler = fresh
    sim.run(until=400)
    assert len(first.decisions) > 20
    assert first.decisions + fresh.decisions == whole.decisions


# -- thesis ch. 6 and §1.3 in the simulator ---------------------------------------------------------
@pytest.mark.parametrize("plan_name", ["filters", "join"])
def test_thesis_6_2_no_single_strategy_is_best_on_memory_and_delay(plan_name):
    """Thesis §6.2 / fig 6.2: on bursty Poisson arrivals (mean redrawn every 5 time units, 2×
    bursts) Chain holds the least memory and FIFO has the lowest delay — by clear margins."""
    t = experiment.table_6_2(plan_name, UNTIL, SEEDS, 0.9)
    best_memory = min(t, key=lambda n: t[n].memory)
    best_delay = min(t, key=lambda n: t[n].delay)
    assert best_memory == "chain" and best_delay == "fifo"
    assert t["chain"].memory < 0.8 * t["fifo"].memory
    assert t["fifo"].delay < 0.8 * t["chain"].delay


@pytest.mark.parametrize("plan_name", ["filters", "join"])
def test_thesis_6_2_with_start_up_cost_batching_trades_delay_for_memory(plan_name):
    """Thesis §4.5 / §6.2 with a start-up cost per operator run (jobs/adaptive_sim.OVERHEAD): FIFO
    keeps the lowest delay, a batch scheduler (Chain or MTIQ) holds the least memory — under 60%
    of FIFO's — and MTIQ and Chain have the worst delays."""
    t = experiment.table_6_2(plan_name, UNTIL, SEEDS, 0.9, experiment.OVERHEAD)
    best_memory = min(t, key=lambda n: t[n].memory)
    assert min(t, key=lambda n: t[n].delay) == "fifo"
    assert best_memory in ("chain", "mtiq") and t[best_memory].memory < 0.6 * t["fifo"].memory
    assert t["fifo"].delay < 0.8 * min(t["chain"].delay, t["mtiq"].delay)


#: The §6.3–6.5 and §1.3 experiments average over ten arrival traces: on three the join plan's
#: result depends on which three (4/6 settings won on seeds 1–3 or 7–9, 3/6 on 4–6).
WIDE_SEEDS = tuple(range(1, 11))


@pytest.fixture(scope="module")
def six_settings():
    """Thesis §6.1 setup: evaluation every 2 time units, w = 0.875, a start-up cost per operator
    run; the adaptive strategy with its defaults (Little's-law delay, release memory signal,
    sharpness 3, explore 0.05 — see sparkqos.adaptive)."""
    return {
        name: experiment.table_6_3(name, UNTIL, WIDE_SEEDS, 0.9, period=experiment.PERIOD, overhead=experiment.OVERHEAD)
        for name in ("filters", "join")
    }


@pytest.mark.slow  # the six settings over ten seeds: the suite's longest simulation
@pytest.mark.parametrize("plan_name", ["filters", "join"])
def test_thesis_6_3_to_6_5_adaptive_matches_the_best_single_strategy(six_settings, plan_name):
    """Thesis §6.3–6.5: weights delay/rate 100-0, 70-30, 50-50, 30-70, 0-100 and equal thirds on
    delay/rate/memory; the adaptive score is ≥ the best single strategy's in ≥ 4 of the 6 settings
    and never below 90% of it (seeds 1–10: filters 6/6, lowest 1.055; join 4/6, lowest 0.945)."""
    scores, _ = six_settings[plan_name]
    best = {label: max(sc[n] for n in experiment.CANDIDATES) for label, sc in scores.items()}
    wins = sum(scores[label]["adaptive"] >= best[label] - 1e-12 for label in scores)
    assert wins >= 4
    assert all(scores[label]["adaptive"] >= 0.9 * best[label] for label in scores)


@pytest.mark.slow
@pytest.mark.parametrize("plan_name", ["filters", "join"])
def test_thesis_6_3_to_6_5_scores_are_one_formula_for_all_contenders(six_settings, plan_name):
    """The table the report quotes: six settings × (four strategies + adaptive), every score in
    [0, 1], and the single-goal settings give the best contender of each seed exactly 1."""
    scores, stats = six_settings[plan_name]
    assert list(scores) == [label for label, _ in experiment.SETTINGS]
    for sc in scores.values():
        assert set(sc) == {*experiment.CANDIDATES, "adaptive"}
        assert all(0.0 <= v <= 1.0 + 1e-12 for v in sc.values())
    delay_only = scores["delay 100 / rate 0"]
    assert max(delay_only[n] for n in experiment.CANDIDATES) == delay_only["fifo"]  # §6.2: fifo's delay


def test_thesis_7_1_the_qos_spec_steers_the_selector():
    """Thesis §7.1: the selector optimised for one metric beats the one optimised for another on
    that metric — delay goal → lower delay, memory goal → lower memory (means over seeds and plans)."""
    delay_goal, memory_goal = [], []
    for plan_name in ("filters", "join"):
        plan = experiment.PLANS[plan_name]()
        for seed in SEEDS:
            arr = experiment.arrivals(plan, 0.9, UNTIL, seed)
            delay_goal.append(experiment.run(plan, experiment.adaptive(DELAY, seed, 5.0), arr, UNTIL))
            memory_goal.append(experiment.run(plan, experiment.adaptive(MEMORY, seed, 5.0), arr, UNTIL))
    assert np.mean([r.delay for r in delay_goal]) < np.mean([r.delay for r in memory_goal])
    assert np.mean([r.memory for r in memory_goal]) < np.mean([r.memory for r in delay_goal])


def _chain_share(candidates, seeds=WIDE_SEEDS, **kw):
    plan = experiment.chain_dominated_plan()
    counts = Counter()
    for seed in seeds:
        a = experiment.adaptive(MEMORY, seed, experiment.PERIOD, candidates=candidates, **kw)
        experiment.run(plan, a, experiment.arrivals(plan, 0.9, UNTIL, seed), UNTIL)
        counts.update(d["chosen"] for d in a.decisions if not d["warmup"])
    return {k: v / sum(counts.values()) for k, v in counts.items()}


def test_thesis_1_3_chain_dominated_plan_single_memory_goal():
    """Thesis §1.3: when one strategy is clearly best for the spec — a single `minimize queued` goal
    on a plan where chain holds ~60% of the others' memory — the selector picks it in ≥ 60% of the
    post-warm-up decisions, with the thesis's four candidates (76% over seeds 1–10) and with two."""
    four = _chain_share(experiment.CANDIDATES)
    assert four["chain"] >= 0.6
    assert _chain_share(("fifo", "chain"))["chain"] >= 0.6


def test_thesis_1_3_is_not_met_by_the_thesis_controller_as_written():
    """Why the defaults differ from the thesis (recorded, so a change that loses it shows): with the
    queue level as the memory signal and a plain proportional wheel, chain gets under half of the
    decisions (48% over seeds 1–10; the level mostly measures bursts and inherited queues)."""
    share = _chain_share(experiment.CANDIDATES, memory_signal="level", sharpness=1.0, explore=0.0)
    assert share["chain"] < 0.55
