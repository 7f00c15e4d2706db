"""hr, hnr, cqc and cos: CQC Algorithm 1's worked example, CQC §5 in the simulator, COS §3–5."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkqos import Operator, Plan, schedulers
from sparkqos.errors import SchedulerError
from sparkqos.schedulers.cos import operator_features, s_means
from sparkqos.schedulers.cqc import Cqc, class_quotas, next_credit
from sparkqos.schedulers.rate import fragment_statistics
from sparkqos.sim import Simulator, chain_plan

JOBS = Path(__file__).resolve().parent.parent / "jobs"


def load_job(name: str):
    spec = importlib.util.spec_from_file_location(name, JOBS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def three_class_plan(cost: float = 1.0) -> Plan:
    ops = [Operator(n, (s,), 0.5, cost, klass=k) for n, s, k in (("h", "A", "H"), ("c", "B", "C"), ("n", "D", "N"))]
    return Plan(ops, streams=["A", "B", "D"], classes={"H": 6, "C": 3, "N": 1})


# -- hr / hnr ---------------------------------------------------------------------------------
def test_hr_fragment_statistics_follow_sharaf_definitions():
    plan = chain_plan([(0.5, 1.0), (0.2, 2.0), (1.0, 4.0)])
    sel, cost = (lambda o: plan[o].selectivity), (lambda o: plan[o].cost)
    s, c, t = fragment_statistics(plan, "O1", sel, cost)
    assert (s, c, t) == pytest.approx((0.1, 1.0 + 0.5 * 2.0 + 0.1 * 4.0, 7.0))
    assert fragment_statistics(plan, "O3", sel, cost) == pytest.approx((1.0, 4.0, 4.0))
    hr = schedulers.get("hr").priorities(Simulator(plan, schedulers.get("hr"), {}).state)
    hnr = schedulers.get("hnr").priorities(Simulator(plan, schedulers.get("hnr"), {}).state)
    assert hr["O1"] == pytest.approx(0.1 / 2.4)
    assert hnr["O1"] == pytest.approx(0.1 / (2.4 * 7.0))


# -- cqc: Algorithm 1 worked example ------------------------------------------------------------
def test_cqc_quotas_worked_example():
    """CQC §4.2: priorities {6, 3, 1} and k = 20 give quotas {12, 6, 2}."""
    assert class_quotas({"H": 6, "C": 3, "N": 1}, 20) == {"H": 12.0, "C": 6.0, "N": 2.0}
    sim = Simulator(three_class_plan(), Cqc(k=20), {})
    sim.scheduler.attach(sim.state)
    assert sim.scheduler.quotas == {"H": 12.0, "C": 6.0, "N": 2.0}


def test_cqc_overrun_is_deducted_and_unused_quota_not_carried():
    """CQC Algorithm 1 step 3: an overrun of 3 by class H gives it 9 next round; a turn that used
    less than its quota gets back exactly Tᵢ; a non-positive credit sits one turn out."""
    assert next_credit(12, 12, 15) == 9
    assert next_credit(12, 9, 4) == 12
    cqc = Cqc(k=20)
    cqc.attach(Simulator(three_class_plan(), cqc, {}).state)
    cqc.charge("H", 15)
    assert cqc.credits["H"] == 9
    cqc.charge("H", 3)
    assert cqc.credits["H"] == 12
    with pytest.raises(SchedulerError, match="unknown class 'X'"):
        cqc.charge("X", 1)


def test_cqc_overrun_in_the_simulator():
    """CQC Algorithm 1 without preemption: every run lasts one quantum of 2 time units. H (quota
    6) runs 3 times; C (quota 3) runs twice, overruns by 1 and gets 2 next round — one run; N
    (quota 1) runs once, overruns by 1, so its credit is 0 and it sits the next turn out (2a)."""
    plan = three_class_plan(cost=1.5)
    sim = Simulator(plan, Cqc(k=10, quantum=2.0), {s: [(0, 50.0)] for s in "ABD"}, quantum=2.0, record_dispatches=True)
    sim.run(until=31)
    assert "".join(d.unit.head for d in sim.dispatches) == "hhhccnhhhchhhccn"


def test_cqc_skips_classes_without_work_and_never_idles():
    plan = three_class_plan()
    sim = Simulator(plan, Cqc(k=10), {"D": [(0, 5.0)], "A": [(3, 1.0)]}, record_dispatches=True)
    result = sim.run()
    heads = [(d.time, d.unit.head) for d in sim.dispatches]
    assert heads[0] == (0.0, "n")
    assert ("h" in [h for _, h in heads]) and result.starved_picks == 0
    assert result.total_output == pytest.approx(3.0)


def test_cqc_serves_source_operators_only_when_operational_ones_are_idle():
    """CQC §3: a class's source operators run only when none of its operational operators has
    input."""
    ops = [
        Operator("src", ("S",), 1.0, 0.1, klass="H", kind="source"),
        Operator("sel", ("src",), 0.5, 0.5, klass="H"),
    ]
    plan = Plan(ops, streams=["S"], classes={"H": 1})
    sim = Simulator(plan, Cqc(), {"S": [(0, 3.0)]}, run="one", record_dispatches=True)
    sim.run()
    assert [d.unit.head for d in sim.dispatches] == ["src", "sel", "src", "sel", "src", "sel"]


def test_cqc_state_round_trip():
    plan = three_class_plan(cost=1.5)
    arrivals = {s: [(0, 40.0)] for s in "ABD"}
    whole = Simulator(plan, Cqc(k=10), arrivals, record_dispatches=True)
    whole.run(until=60)
    sim = Simulator(plan, Cqc(k=10), arrivals, record_dispatches=True)
    sim.run(until=17.2)
    saved = json.loads(json.dumps(sim.scheduler.state_dict()))
    assert set(saved) == {"credit", "current", "used", "pick_time", "pick_cap"}
    fresh = Cqc(k=10)
    fresh.load_state_dict(saved)
    assert fresh.state_dict() == saved
    sim.scheduler.detach()
    sim.scheduler = fresh
    sim.run(until=60)
    assert [(d.time, d.unit.head) for d in sim.dispatches] == [(d.time, d.unit.head) for d in whole.dispatches]
    with pytest.raises(SchedulerError, match=r"unknown keys \['credits'\]"):
        Cqc().load_state_dict({"credits": {}})


def test_cqc_bad_parameters():
    with pytest.raises(SchedulerError, match="k must be a finite number > 0, got -1"):
        Cqc(k=-1)


@pytest.fixture(scope="module")
def cqc_job():
    return load_job("cqc_sim")


@pytest.mark.parametrize("workload", ["A", "B"])
def test_cqc_section_5_class_h_response_time(cqc_job, workload):
    """CQC §5, Figures 3–5: with three classes of queries near capacity, CQC gives class H a mean
    response time at least 9× lower than HR (paper: 9.4× workload A, 19.8× workload B). Shorter
    horizon than jobs/cqc_sim.py; classes C and N pay for it."""
    plan = cqc_job.cqc_plan(workload, seed=1)
    assert len(plan.queries) == 21 and len(plan.streams) == 27
    counts = {c: sum(1 for q in plan.queries.values() if q.klass == c) for c in "HCN"}
    assert counts == ({"H": 7, "C": 7, "N": 7} if workload == "A" else {"H": 2, "C": 8, "N": 11})
    arrivals = cqc_job.cqc_arrivals(plan, 0.85, 1500, seed=1)
    assert 0.9 < cqc_job.offered_load(plan, arrivals, 1500) < 1.05
    hr, _ = cqc_job.run(workload, "hr", 0.85, 1500, 1)
    cqc, _ = cqc_job.run(workload, "cqc", 0.85, 1500, 1)
    assert hr["H"] / cqc["H"] >= 9.0
    assert cqc["N"] > hr["N"]  # the low class pays (Figure 4)


# -- cos -----------------------------------------------------------------------------------------
def distinct_points(n: int = 12) -> list[tuple[float, float]]:
    return [((i * 7 % n) / n, (i * 5 % n) / n) for i in range(n)]


def test_s_means_extremes():
    """COS §4.2: a small T gives one cluster per operator (OTS), a large T one cluster (GTS)."""
    pts = distinct_points()
    assert sorted(set(s_means(pts, T=0.0))) == list(range(len(pts)))
    assert set(s_means(pts, T=1.0)) == {0}
    counts = [len(set(s_means(pts, T=t))) for t in (0.0, 0.05, 0.2, 0.5, 0.9, 1.0)]
    assert counts[0] == len(pts) and counts[-1] == 1
    assert all(a >= b for a, b in zip(counts, counts[1:]))


def test_s_means_members_are_similar_to_their_centre_and_deterministic():
    pts = distinct_points(20)
    labels = s_means(pts, T=0.3)
    assert labels == s_means(pts, T=0.3)
    for k in set(labels):
        members = [p for p, lab in zip(pts, labels) if lab == k]
        cx, cy = sum(p[0] for p in members) / len(members), sum(p[1] for p in members) / len(members)
        for x, y in members:
            assert 1 - math.exp(-((x - cx) ** 2 + (y - cy) ** 2) / (2 * 0.25**2)) <= 0.3 + 1e-9


def reference_s_means(points, T, width=0.25, max_iter=100):
    """S-means point by point, as COS §3.2 states it (the library's loop before it was vectorised;
    the most similar centre found as the nearest, which the RBF kernel makes the same one up to
    its last-bit rounding)."""
    n = len(points)
    centres = [(math.fsum(p[0] for p in points) / n, math.fsum(p[1] for p in points) / n)]
    labels = [-1] * n
    for _ in range(max_iter):
        new_labels, opened = [], False
        for p in points:
            best, best_d2 = -1, math.inf
            for j, c in enumerate(centres):
                d2 = (p[0] - c[0]) ** 2 + (p[1] - c[1]) ** 2
                if d2 < best_d2:
                    best, best_d2 = j, d2
            if 1.0 - math.exp(-best_d2 / (2.0 * width * width)) <= T + 1e-12:
                new_labels.append(best)
            else:
                centres.append(p)
                new_labels.append(len(centres) - 1)
                opened = True
        renumber = {}
        for lab in new_labels:
            renumber.setdefault(lab, len(renumber))
        new_labels = [renumber[lab] for lab in new_labels]
        members = [[] for _ in renumber]
        for p, lab in zip(points, new_labels):
            members[lab].append(p)
        new_centres = [(math.fsum(p[0] for p in m) / len(m), math.fsum(p[1] for p in m) / len(m)) for m in members]
        old_by_new = {new: old for old, new in renumber.items()}
        moved = len(new_centres) != len(centres) or any(
            abs(c[0] - centres[old_by_new[k]][0]) > 1e-12 or abs(c[1] - centres[old_by_new[k]][1]) > 1e-12
            for k, c in enumerate(new_centres)
        )
        stable = not opened and not moved and new_labels == labels
        labels, centres = new_labels, new_centres
        if stable:
            break
    return labels


unit_floats = st.floats(0.0, 1.0, allow_nan=False)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.tuples(unit_floats, unit_floats), min_size=1, max_size=60)
    | st.lists(st.tuples(st.sampled_from([0.0, 0.25, 0.5, 1.0]), st.sampled_from([0.0, 0.5, 1.0])), min_size=1, max_size=40),
    st.floats(0.0, 1.0),
)
def test_s_means_gives_the_point_by_point_labels(points, T):
    """The vectorised passes decide exactly as the point-by-point loop of COS §3.2 (duplicates
    and equal distances included)."""
    assert s_means(points, T) == reference_s_means(points, T)


def test_cos_clusters_on_a_plan_and_extremes():
    cos_job = load_job("cos_sim")
    plan = cos_job.cos_plan(queries=4, seed=3)
    feats = operator_features(plan, lambda o: plan[o].selectivity, lambda o: plan[o].cost)
    assert all(0 <= x <= 1 and 0 <= y <= 1 for x, y in feats)
    for T, expect in ((0.0, len(set(feats))), (1.0, 1)):
        cos = schedulers.get("cos", T=T)
        cos.attach(Simulator(plan, cos, {}).state)
        assert len(cos.clusters) == expect
        assert sorted(op for c in cos.clusters for op in c) == sorted(plan.names)
    with pytest.raises(SchedulerError, match="T must be a finite number >= 0 and <= 1, got 1.5"):
        schedulers.get("cos", T=1.5)


def _counted_s_means(monkeypatch):
    """The cos module with S-means counted (one entry in ``calls`` per clustering), a 3-query cos
    plan and a simulator state whose costs are read from ``cost`` (op → cost), for tests to move."""
    import sparkqos.schedulers.cos as cos_module

    plan = load_job("cos_sim").cos_plan(queries=3, seed=3)
    calls = []
    real = cos_module.s_means
    monkeypatch.setattr(cos_module, "s_means", lambda *a, **k: calls.append(1) or real(*a, **k))
    state = Simulator(plan, schedulers.get("fifo"), {}).state
    cost = {op: plan[op].cost for op in plan.names}
    monkeypatch.setattr(state, "cost", lambda op: cost[op])
    return cos_module, plan, state, cost, calls


def test_cos_reclusters_only_when_features_move_past_the_tolerance(monkeypatch):
    """S-means runs again only when some operator's normalised features moved more than
    recluster_tolerance since the last clustering; with 0, on every statistics move."""
    cos_module, plan, state, cost, calls = _counted_s_means(monkeypatch)
    for tolerance, expect in ((0.02, [1, 1, 2]), (0.0, [1, 2, 3])):
        calls.clear()
        cos = cos_module.Cos(T=0.3, recluster_tolerance=tolerance, recluster_period=0.0)
        cos.attach(state)
        seen = [len(calls)]
        first = cos.clusters
        op = plan.names[0]
        cost[op] *= 1.001  # a tiny move: within 0.02 on the normalised log-cost axis
        cos._rebuild(state)
        seen.append(len(calls))
        assert cos.clusters == first or tolerance == 0.0
        cost[op] *= 50.0  # far past it
        cos._rebuild(state)
        seen.append(len(calls))
        assert seen == expect
        cost[op] = plan[op].cost
    with pytest.raises(SchedulerError, match="recluster_tolerance"):
        cos_module.Cos(recluster_tolerance=-1)


def test_cos_reclusters_at_most_once_per_recluster_period(monkeypatch):
    """Past the tolerance, S-means still waits until recluster_period (state.now) has passed since
    the last clustering; every rebuild refreshes Chain's order inside the clusters."""
    cos_module, plan, state, cost, calls = _counted_s_means(monkeypatch)
    state._now = 10.0
    cos = cos_module.Cos(T=0.3, recluster_period=1.0)
    cos.attach(state)
    assert len(calls) == 1
    op = plan.names[0]
    seen = []
    for dt in (0.4, 0.4, 0.4, 0.4):  # every move far past the tolerance
        cost[op] *= 50.0 if len(seen) % 2 == 0 else 1 / 50.0
        state._now += dt
        cos._rebuild(state)
        seen.append(len(calls))
    assert seen == [1, 1, 2, 2]  # at 10.4 and 10.8 too soon; at 11.2 due; at 11.6 too soon again
    with pytest.raises(SchedulerError, match="recluster_period"):
        cos_module.Cos(recluster_period=-1)


class Moving:
    """A simulator's state with a clock and a statistics version a test moves."""

    def __init__(self, state, now: float):
        self.state, self.now, self.stats_version = state, now, 0

    def __getattr__(self, name):
        return getattr(self.state, name)


def test_cos_follows_statistics_moves_at_most_once_per_recluster_period(monkeypatch):
    """A statistics move within recluster_period of the last rebuild waits: on a large plan some
    estimate moves every few runs, and each rebuild (Chain's envelopes over every path, the heaps)
    holds the executor's lock the cluster threads share. The move is taken in at the first pick
    once the period has passed, even when nothing moves then."""
    cos_module, plan, state, cost, calls = _counted_s_means(monkeypatch)
    moving = Moving(state, 10.0)
    cos = cos_module.Cos(T=0.3, recluster_period=1.0)
    rebuilds = []
    real = cos._rebuild
    monkeypatch.setattr(cos, "_rebuild", lambda st: rebuilds.append(st.now) or real(st))
    cos.attach(moving)
    for dt, moved in ((0.3, True), (0.3, True), (0.3, False), (0.3, False), (0.3, True), (0.3, False)):
        moving.now += dt
        moving.stats_version += moved
        cos.pick_cluster(0, moving)
    # attach at 10.0; moves at 10.3 and 10.6 wait; due at 11.2 (nothing moves then); the move at
    # 11.5 waits until 12.2, past the last pick
    assert [round(t, 1) for t in rebuilds] == [10.0, 11.2]


def test_cos_offers_every_runnable_operator_while_a_statistics_move_waits(monkeypatch):
    """While a move waits, an operator that became runnable is offered even when no event log
    named it: an owner that rebuilds itself on the move (class shares) leaves that to the inner's
    rebuild, so a strategy must return a unit whenever one can run."""
    cos_module, plan, state, cost, calls = _counted_s_means(monkeypatch)
    moving = Moving(state, 10.0)
    cos = cos_module.Cos(T=0.3, recluster_period=1.0)
    cos.attach(moving)
    assert cos.pick(moving) is None
    op = next(o.name for o in plan if o.inputs[0] in plan.streams)
    state.enqueue(op, 0, 5.0, arrival=10.0)
    cos._log.clear()  # what the owner's rebuild does with the event
    moving.now, moving.stats_version = 10.1, 1
    unit = cos.pick(moving)
    assert unit is not None and unit.head == op


def test_cos_one_cluster_is_chain():
    """T = 1: one cluster running Chain — the same schedule as chain."""
    plan = load_job("cos_sim").cos_plan(queries=3, seed=5)
    arrivals = load_job("cos_sim").cos_arrivals(plan, 0.9, 200, seed=5)
    a = Simulator(plan, schedulers.get("cos", T=1.0), arrivals).run()
    b = Simulator(plan, schedulers.get("chain"), arrivals).run()
    assert a.snapshots == b.snapshots


def test_cos_conserves_tuples_like_fifo_when_drained():
    cos_job = load_job("cos_sim")
    plan = cos_job.cos_plan(queries=5, seed=2)
    arrivals = cos_job.cos_arrivals(plan, 0.9, 300, seed=2)
    fifo = Simulator(plan, schedulers.get("fifo"), arrivals).run()
    sim = Simulator(plan, schedulers.get("cos"), arrivals, starvation_limit=1)
    cos = sim.run()
    assert cos.total_output == pytest.approx(fifo.total_output, rel=1e-9)
    # what is left is what no order can process: join inputs whose other side ran dry
    assert list(cos.snapshots.values())[-1] == pytest.approx(list(fifo.snapshots.values())[-1], abs=1e-9)
    assert cos.starved_picks == 0
    assert 1 < len(sim.scheduler.clusters) < len(plan)


def test_cos_pick_cluster_serves_only_that_cluster():
    plan = chain_plan([(0.9, 2.0), (0.1, 0.25), (0.2, 0.2)])
    cos = schedulers.get("cos", T=0.3)
    sim = Simulator(plan, cos, {"S": [(0, 2.0)]})
    sim.state.enqueue("O3", 0, 1.0, 0.0)
    assert cos.pick_cluster(0, sim.state) is None or cos.pick_cluster(0, sim.state).head == "O1"
    assert cos.pick_cluster(1, sim.state).head == "O3"
    with pytest.raises(SchedulerError, match="no cluster 5"):
        cos.pick_cluster(5, sim.state)


def test_cos_section_5_table_runs_on_the_full_plan_shape():
    """COS §5.1 shape: 40 queries × 8 operators = 320 operators; the job's table has a row per
    strategy with finite memory and latency and equal drained output (short horizon here)."""
    cos_job = load_job("cos_sim")
    plan = cos_job.cos_plan(40, seed=3)
    assert len(plan) == 320 and len(plan.queries) == 40
    kinds = sorted(plan[o].kind for o in plan.queries["q0"].operators)
    assert kinds == ["filter"] * 6 + ["join", "map"]
    arrivals = cos_job.cos_arrivals(plan, 0.9, 150, seed=3)
    rows = {n: cos_job.measure(plan, arrivals, schedulers.get(n)) for n in ("fifo", "chain", "cos")}
    outs = [r["output"] for r in rows.values()]
    assert max(outs) == pytest.approx(min(outs), rel=1e-9)
    assert all(math.isfinite(r["memory"]) and r["latency"] > 0 for r in rows.values())
    assert rows["chain"]["memory"] <= rows["fifo"]["memory"]
