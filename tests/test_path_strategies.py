"""Path Capacity, Segment, Simplified Segment, Threshold and the starvation guards against the
Jiang & Chakravarthy paper (TR CSE-2003-30): Theorem 1, Theorem 3, §3.3 construction, §3.4
threshold behaviour, §4.2 starvation guards."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from sparkqos import Operator, Plan, schedulers
from sparkqos.errors import SchedulerError
from sparkqos.schedulers.path import (
    SegmentList,
    Threshold,
    memory_release_capacity,
    operator_release_capacity,
    partition_path,
    processing_capacity,
    thresholds,
)
from sparkqos.sim import Simulator, chain_plan, load_workload
from sparkqos.testing.papers import (
    jiang_theorem_1_counterexample,
    jiang_theorem_3_counterexample,
    memory_over_time,
    random_independent_paths,
    segments_follow_lower_envelope,
)

WORKLOADS = Path(__file__).resolve().parent.parent / "conf" / "workloads"


def declared(plan: Plan):
    return (lambda op: plan[op].selectivity), (lambda op: plan[op].cost)


# -- Theorem 1 -----------------------------------------------------------------------------------
@pytest.mark.parametrize("run_rule", ["quantum", "one"])
def test_jiang_theorem_1_pc_minimises_total_tuple_latency(run_rule):
    """Jiang Theorem 1: with tuples waiting on every path and no new arrivals, serving paths by
    decreasing capacity gives a total tuple latency no larger than any other order of serving
    the paths (all permutations checked, up to 5 paths, 40 random workloads)."""
    rng = random.Random(20031)
    for _ in range(40):
        counterexample = jiang_theorem_1_counterexample(*random_independent_paths(rng), run_rule)
        assert counterexample is None, counterexample


def test_pc_serves_paths_by_capacity_and_bottom_up():
    """Jiang §3.1: highest capacity first (eq 2.2), each unit pushed through its whole path."""
    plan = Plan(
        [
            Operator("a1", ("S",), 0.5, 1.0),
            Operator("a2", ("a1",), 1.0, 1.0),  # C = 1/1.5
            Operator("b1", ("T",), 1.0, 0.5),
        ],
        streams=["S", "T"],
    )  # C = 2
    sim = Simulator(plan, schedulers.get("pc"), {"S": [(0, 0.5)], "T": [(0, 3.0)]}, record_dispatches=True)
    sim.run()
    assert [s.operator for s in sim.steps] == ["b1", "b1", "a1", "a2"]
    assert sim.dispatches[0].unit.quota_tuples == pytest.approx(2.0)  # C_P tuples per quantum
    assert processing_capacity(["a1", "a2"], *declared(plan)) == pytest.approx(1 / 1.5)


def test_pc_serves_tuples_another_strategy_left_half_way():
    """After an adaptive switch from chain, tuples waiting mid-path are still served (the rest
    of their path is a unit) and everything drains."""
    plan = chain_plan([(0.9, 0.1), (0.5, 1.0), (0.5, 2.0)])
    arrivals = {"S": [(t, 3.0) for t in range(10)]}
    sim = Simulator(plan, schedulers.get("chain"), arrivals, starvation_limit=1)
    sim.run(until=8)
    assert sim.state.queued("O2") > 0 or sim.state.queued("O3") > 0
    sim.scheduler.detach()
    sim.scheduler = schedulers.get("pc")
    result = sim.run()
    assert result.starved_picks == 0
    assert result.total_output == pytest.approx(30 * 0.9 * 0.5 * 0.5)


# -- segment construction (§3.3) -----------------------------------------------------------------
def test_segment_construction_follows_release_capacity():
    """Jiang §3.3: a segment grows while the next operator releases memory at least as fast
    (eq 2.1); the root's output leaves the system (size 0)."""
    plan = chain_plan([(0.9, 1.0), (0.1, 1.0), (0.5, 10.0), (0.2, 0.1)])
    sel, cost = declared(plan)
    release = [operator_release_capacity(plan, op, sel, cost) for op in plan.names]
    assert release == pytest.approx([0.1, 0.9, 0.05, 10.0])
    assert SegmentList.build(plan, sel, cost).segments == [("O1", "O2"), ("O3", "O4")]
    assert memory_release_capacity(plan, ["O3", "O4"], sel, cost) == pytest.approx(1 / (10 + 0.5 * 0.1))


def test_simplified_segment_at_most_two_segments_per_path():
    release = [5.0, 4.0, 3.1, 2.0, 9.0, 1.0]
    assert partition_path(release, gamma=0.75, two_segments=True) == [(0, 3), (3, 6)]
    assert partition_path(release, gamma=1.0) == [(0, 1), (1, 2), (2, 3), (3, 5), (5, 6)]
    assert partition_path(release, gamma=0.5, two_segments=True) == [(0, 5), (5, 6)]
    plan = chain_plan([(0.5, 1.0), (0.6, 1.0), (0.9, 1.0), (0.5, 10.0)])
    segs = SegmentList.build(plan, *declared(plan), gamma=0.75, two_segments=True).segments
    assert len(segs) <= 2 and [op for s in segs for op in s] == list(plan.names)


def test_segment_pruning_and_query_counts():
    """Jiang §3.3 pruning: a segment contained in a listed one is dropped, a listed subset is
    replaced; removing a query forgets its operators, adding it back restores the list."""
    plan = Plan(
        [
            Operator("r", ("R",), 0.9, 1.0),
            Operator("j", ("r", "T"), 0.1, 1.0, kind="join"),
            Operator("top", ("j",), 0.5, 10.0),
            Operator("x", ("R",), 0.2, 0.1),
        ],
        streams=["R", "T"],
    )
    sel, cost = declared(plan)
    segs = SegmentList.build(plan, sel, cost)
    # path R: r(0.1) ≤ j(0.9) → [r, j], top; path T: [j], [top] — both contained, dropped.
    assert sorted(segs.segments) == [("r", "j"), ("top",), ("x",)]
    segs.remove_query("x")
    assert sorted(segs.segments) == [("r", "j"), ("top",)]
    segs.add_query(plan, "x", sel, cost)
    assert sorted(segs.segments) == sorted(SegmentList.build(plan, sel, cost).segments)
    with pytest.raises(SchedulerError, match="no query named 'nope'"):
        segs.add_query(plan, "nope", sel, cost)


@st.composite
def single_stream_workloads(draw):
    ops = []
    for q in range(draw(st.integers(1, 3))):
        prev = "S"
        for k in range(draw(st.integers(1, 5))):
            name = f"q{q}o{k}"
            ops.append(Operator(name, (prev,), draw(st.floats(0.05, 1.0)), draw(st.floats(0.05, 2.0))))
            prev = name
    times = draw(st.lists(st.integers(0, 30), min_size=1, max_size=12))
    return Plan(ops, streams=["S"]), {"S": [(t, draw(st.floats(0.1, 6.0))) for t in sorted(times)]}


@settings(
    max_examples=200, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]
)
@given(single_stream_workloads())
def test_jiang_theorem_3_segment_memory_at_most_chains_at_every_instant(workload):
    """Jiang Theorem 3: "the segment scheduling strategy requires at most the amount of memory
    required by the Chain scheduling strategy at any time instant" — checked exactly (no slack),
    instant by instant, under the two assumptions its proof makes:

    * time units: "schedule a single time unit for the operator segment" — a strategy decides
      only at the start of a time unit (``slotted``), where the arrivals come. Without it a run
      started just before an arrival holds the processor for up to a quantum while the new tuples
      wait (test_jiang_theorem_3_needs_time_units);
    * "the operators along the segment S_i have the same biggest priority" under Chain: Jiang's
      segments (non-decreasing operator release capacities, §3.3) are those of Chain's lower
      envelope. The construction looks one operator ahead, the envelope the whole path: where
      they differ, Chain can release more (test_jiang_theorem_3_needs_segments_on_the_envelope).

    On random plans (1–3 paths of 1–5 operators, σ ≤ 1) about half meet the second assumption."""
    plan, arrivals = workload
    assume(segments_follow_lower_envelope(plan))
    counterexample = jiang_theorem_3_counterexample(plan, arrivals)
    assert counterexample is None, counterexample


def plan_of_paths(*paths: list[tuple[float, float]]) -> Plan:
    ops = []
    for q, specs in enumerate(paths):
        prev = "S"
        for k, (sel, cost) in enumerate(specs):
            ops.append(Operator(f"q{q}o{k}", (prev,), sel, cost))
            prev = f"q{q}o{k}"
    return Plan(ops, streams=["S"])


def test_jiang_theorem_3_needs_segments_on_the_envelope():
    """One path of four operators whose release capacities (eq 2.1) are 0.109, 0.023, 0.011 and
    0.523 (the root): the construction makes [O0], [O1], [O2, O3] and serves O1 last, while
    Chain's envelope is the whole path (slope 0.189), since the root removes what is left of a
    tuple. Segment lets tuples pile up before O1 and holds more than Chain — also in time units,
    so the theorem does not extend to plans outside its proof's premise."""
    plan = plan_of_paths([(0.842, 1.446), (0.965, 1.518), (0.986, 1.273), (0.305, 1.912)])
    arrivals = {
        "S": [(0, 5.05), (1, 1.15), (4, 1.16), (7, 1.84), (10, 1.9), (14, 1.65), (15, 2.72), (24, 0.3), (25, 1.46), (27, 2.26)]
    }
    assert not segments_follow_lower_envelope(plan)
    assert sorted(SegmentList.build(plan, *declared(plan)).segments) == [("q0o0",), ("q0o1",), ("q0o2", "q0o3")]
    segment, chain = (max(memory_over_time(plan, arrivals, s, slotted=True).values()) for s in ("segment", "chain"))
    assert segment > chain + 0.4, (segment, chain)


def test_jiang_theorem_3_needs_time_units():
    """A plan that meets the envelope premise, under the `quantum` rule without time units: at
    t = 6 Segment has just started its [q2o0, q2o1] segment for a full quantum (its previous run
    ended a hair before 6) when 3.7 tuples arrive for q0o0, the cheapest release in the plan
    (16 per time unit), which wait until t = 7; Chain's run then had 0.25 left. Segment's
    memory at t = 7 exceeds Chain's by 4.4, more than the n = 3 paths. In time units both decide at
    t = 6 with the arrivals in view, and Segment never holds more."""
    plan = plan_of_paths(
        [(0.5495220782192264, 0.06197635073370192)],
        [
            (0.1737226110458065, 0.25987056954476667),
            (0.5283366832216526, 1.9031739944832389),
            (0.41607122589087825, 1.1918936450608455),
            (0.234945178583695, 0.6398458565730663),
            (0.7355624538356372, 0.5384875931253101),
        ],
        [(0.13224186164791862, 0.702110032203523), (0.7676988532150937, 0.6627201443612628)],
    )
    arrivals = {
        "S": [
            (1, 5.756648139627077),
            (4, 0.45729405585993244),
            (6, 0.6074326905486647),
            (6, 3.1108787100524724),
            (7, 0.21568223052192642),
            (7, 3.4801091519212837),
            (16, 0.34314242961843133),
            (22, 4.792925881780712),
            (23, 3.1742106715675926),
            (24, 0.7449078008942083),
            (28, 4.696092834855828),
        ]
    }
    assert segments_follow_lower_envelope(plan)
    segment, chain = (memory_over_time(plan, arrivals, s, slotted=False) for s in ("segment", "chain"))
    assert segment[7] > chain[7] + len(plan.paths), (segment[7], chain[7])
    segment, chain = (memory_over_time(plan, arrivals, s, slotted=True) for s in ("segment", "chain"))
    assert all(segment[t] <= chain[t] + 1e-9 for t in segment)


# -- Threshold (§3.4) ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def bursty():
    workload = load_workload(WORKLOADS / "jiang_threshold_bursty.toml")
    runs = {s: workload.simulator(schedulers.get(s)).run() for s in ("pc", "simplified_segment")}
    return workload, runs


def test_jiang_3_4_threshold_above_pc_peak_is_pc(bursty):
    """Jiang §3.4: with a memory limit whose T_max stays above pc's peak, threshold never enters
    saving mode and its outputs are exactly pc's."""
    workload, runs = bursty
    limit = 3 * runs["pc"].peak_queued()  # T_max ≥ M/2 > pc's peak
    sim = workload.simulator(schedulers.get("threshold", memory_limit=limit))
    result = sim.run()
    assert result.outputs == runs["pc"].outputs
    assert result.snapshots == runs["pc"].snapshots
    assert sim.scheduler.state_dict()["mode"] == "normal"


def test_jiang_3_4_threshold_below_pc_peak_saves_memory_and_beats_simplified_segment_delay(bursty):
    """Jiang §3.4 on bursty ON/OFF Pareto input (conf/workloads/jiang_threshold_bursty.toml):
    a limit of 0.7 × pc's peak gives a peak below pc's and a mean delay below simplified
    segment's (jobs/threshold_demo.py prints the table)."""
    workload, runs = bursty
    pc, ss = runs["pc"], runs["simplified_segment"]
    th = workload.simulator(schedulers.get("threshold", memory_limit=0.7 * pc.peak_queued())).run()
    print(
        f"\npeak/mean delay: pc {pc.peak_queued():.2f}/{pc.mean_delay():.3f}  "
        f"threshold {th.peak_queued():.2f}/{th.mean_delay():.3f}  "
        f"simplified_segment {ss.peak_queued():.2f}/{ss.mean_delay():.3f}"
    )
    assert th.peak_queued() < pc.peak_queued()
    assert th.mean_delay() < ss.mean_delay()
    assert th.total_output == pytest.approx(pc.total_output)


def test_threshold_eq_3_3():
    t_max, t_min = thresholds(100.0, 40.0, beta=0.9)
    assert (t_max, t_min) == pytest.approx((70.0, 40.0))  # (1 + 0.4)/2·100 < 90
    t_max, t_min = thresholds(100.0, 95.0, beta=0.9)
    assert (t_max, t_min) == pytest.approx((90.0, 81.0))  # β caps both


def test_threshold_mode_survives_a_round_trip():
    """The mode and the running mean are the serialised state: restored into a fresh instance
    mid-burst, the run continues exactly as the uninterrupted one."""
    workload = load_workload(WORKLOADS / "jiang_threshold_bursty.toml")
    limit = 20.0
    whole = workload.simulator(Threshold(memory_limit=limit)).run(until=400)
    sim = workload.simulator(Threshold(memory_limit=limit))
    saving_seen = False
    for t in range(0, 300, 5):
        sim.run(until=t)
        saving_seen |= sim.scheduler.mode == "saving"
    assert saving_seen
    saved = json.loads(json.dumps(sim.scheduler.state_dict()))
    assert set(saved) == {"mode", "queued_area", "start", "last_time", "last_queued"}
    fresh = sim.scheduler.clone()
    fresh.load_state_dict(saved)
    assert fresh.state_dict() == saved
    sim.scheduler.detach()
    sim.scheduler = fresh
    assert sim.run(until=400).outputs == whole.outputs


@pytest.mark.parametrize(
    "params, message",
    [
        ({"gamma": 0.0}, "gamma must be a finite number > 0 and <= 1, got 0.0"),
        ({"gamma": 1.5}, "gamma must be a finite number > 0 and <= 1, got 1.5"),
        ({"beta": 0.5}, "beta must be a finite number > 0.5 and < 1, got 0.5"),
        ({"beta": 1.0}, "beta must be a finite number > 0.5 and < 1, got 1.0"),
        ({"memory_limit": -3}, "memory_limit must be .* got -3"),
        ({"memory_limit": "lots"}, "memory_limit must be .* got 'lots'"),
        ({"quantum": 0}, "quantum must be .* got 0"),
    ],
)
def test_threshold_rejects_bad_parameters(params, message):
    with pytest.raises(SchedulerError, match=message):
        schedulers.get("threshold", **params)


def test_other_bad_parameters_and_states():
    with pytest.raises(SchedulerError, match="gamma must be a finite number > 0 and <= 1, got -0.1"):
        schedulers.get("simplified_segment", gamma=-0.1)
    with pytest.raises(SchedulerError, match="mode must be one of 'normal', 'saving', got 'panic'"):
        Threshold(memory_limit=5).load_state_dict({"mode": "panic"})
    with pytest.raises(SchedulerError, match="period must be an integer .* got 0"):
        schedulers.get("oldest_guard", period=0)
    with pytest.raises(SchedulerError, match="needs an inner strategy with static priorities"):
        schedulers.get("dynamic_priority", inner="rr")
    with pytest.raises(SchedulerError, match="unknown strategy|inner must be"):
        schedulers.get("oldest_guard", inner=42)


# -- starvation guards (§4.2) --------------------------------------------------------------------
STARVE_PLAN = Plan(
    [
        Operator("h", ("H",), 0.5, 0.1),  # capacity 10
        Operator("l1", ("L",), 0.5, 0.5),
        Operator("l2", ("l1",), 1.0, 1.0),  # capacity 1
    ],
    streams=["H", "L"],
)


def starving_arrivals(burst: int) -> dict:
    """H arrives at exactly its capacity for ``burst`` time units; L sends 0.2 tuples every 10."""
    return {"H": [(t, 10.0) for t in range(burst)], "L": [(t, 0.2) for t in range(0, burst, 10)]}


def worst_ages(strategy, arrivals, until: int) -> tuple[float, float]:
    """Largest age of the oldest tuple waiting on L's path and on H's, at every integer time."""
    sim = Simulator(STARVE_PLAN, strategy, arrivals, starvation_limit=1)
    worst_l = worst_h = 0.0
    for t in range(until + 1):
        sim.run(until=t)
        waiting = [o for o in (sim.state.oldest("l1"), sim.state.oldest("l2")) if o is not None]
        if waiting:
            worst_l = max(worst_l, t - min(waiting))
        if sim.state.oldest("h") is not None:
            worst_h = max(worst_h, t - sim.state.oldest("h"))
    return worst_l, worst_h


@pytest.mark.parametrize("burst", [150, 300])
def test_jiang_4_2_oldest_path_guard_bounds_the_starved_path(burst):
    """Jiang §4.2: H's input keeps its path (capacity 10) busy for the whole burst, so pc and
    chain never serve L (capacity 1): L's oldest tuple waits the whole burst. With the guard
    (every P-th pick serves the oldest path) L's age is bounded by P + W_L + 2, W_L = the time L's
    tuples need: each unit lasts at most one quantum, so a guard pick comes every ≤ P time units;
    H's oldest tuple is at most W_L + 1 old (H arrives at exactly its capacity, it only falls
    behind while L runs), so L's oldest wins a guard pick once older than that, and its unit
    takes ≤ 1 more time unit."""
    arrivals = starving_arrivals(burst)
    for name in ("pc", "chain"):
        assert worst_ages(schedulers.get(name), arrivals, burst + 40)[0] >= burst - 1
    work_l = sum(a for _, a in arrivals["L"]) * STARVE_PLAN.service_time(STARVE_PLAN.paths[1])
    for period in (5, 10):
        for inner in ("pc", "chain"):
            age_l, _ = worst_ages(schedulers.get("oldest_guard", inner=inner, period=period), arrivals, burst + 40)
            assert age_l <= period + work_l + 2, (inner, period, age_l)


def test_jiang_4_2_dynamic_priority_bounds_the_starved_path():
    """Jiang §4.2, Ĉ = C·τ·Q: L is served at a refresh once C_L·a_L·q_L > C_H·a_H·q_H. L's
    queue grows as 0.02·a_L while it waits, so a_L ≤ √(C_H·q_H·a_H / (C_L·0.02)) + 10 (parcel
    spacing) + P (refresh period), with H's worst age and queue from the same run. Far below
    pc's: L waits the whole burst under pc, and doubling the burst doubles that wait."""
    period = 5
    for burst in (300, 600):
        arrivals = starving_arrivals(burst)
        age_pc, _ = worst_ages(schedulers.get("pc"), arrivals, burst + 40)
        age_l, age_h = worst_ages(schedulers.get("dynamic_priority", period=period), arrivals, burst + 40)
        q_h = 10.0 * (age_h + 1)
        bound = math.sqrt(10.0 * q_h * max(age_h, 1.0) / (1.0 * 0.02)) + 10 + period
        assert age_pc >= burst - 1
        assert age_l <= bound, (burst, age_l, bound)
        assert age_l < 0.6 * age_pc
