"""The papers' worked tables and theorems as checks on the simulator, callable without pytest.

Each table check runs a workload file (conf/workloads) and returns the differences from the
printed table, the first one first (an empty list: the table comes out exactly). Each theorem has a
check of one workload, returning a counterexample or ``None``, and a check of a seeded sample of
random plans, returning a :class:`PaperCheck`. The tests (tests/test_paper_tables.py,
tests/test_properties.py, tests/test_path_strategies.py) assert on the same functions, the
theorems on workloads hypothesis draws; jobs/experiments/claims.py runs the samples for its table::

    from sparkqos.testing import papers
    papers.thesis_table_1_1(Path("conf/workloads"), "fifo")   # [] when the column comes out exactly
    papers.chain_theorem_4_2().held                            # True
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from sparkqos import schedulers
from sparkqos.model.plan import Operator, Plan
from sparkqos.schedulers.chain import lower_envelope, progress_chart
from sparkqos.schedulers.path import PathCapacity, operator_release_capacity, partition_path
from sparkqos.sim import SimResult, Simulator, load_workload

Arrivals = dict[str, list[tuple[float, float]]]

#: Values this close to the paper's are the paper's (the tables print two decimals of exact sums).
TABLE_TOLERANCE = 1e-9


@dataclass(frozen=True)
class PaperCheck:
    """A theorem checked on ``checked`` random workloads: the counterexamples found (none: held)."""

    checked: int
    counterexamples: tuple[str, ...]
    what: str

    @property
    def held(self) -> bool:
        return not self.counterexamples

    @property
    def detail(self) -> str:
        if self.held:
            return f"{self.what}: holds on all {self.checked} random workloads"
        return (
            f"{self.what}: {len(self.counterexamples)} of {self.checked} random workloads fail, first: {self.counterexamples[0]}"
        )


def run_workload(workloads: Path, name: str, strategy: str, until: float, **overrides) -> SimResult:
    """The workload file ``workloads/name`` (with its settings ``overrides``) under ``strategy``."""
    workload = load_workload(Path(workloads) / name)
    for key, value in overrides.items():
        setattr(workload, key, value)
    return workload.simulator(schedulers.get(strategy)).run(until=until)


def series_difference(label: str, got: Mapping[int, float], expected: Mapping[int, float]) -> str | None:
    """The first time at which ``got`` differs from ``expected`` by more than
    :data:`TABLE_TOLERANCE`, said in words, or ``None``."""
    for t in sorted(expected):
        value = got.get(t)
        if value is None or abs(value - expected[t]) > TABLE_TOLERANCE:
            return f"{label}: first difference at t={t}: got {value!r}, the paper has {expected[t]!r}"
    return None


# -- the tables ----------------------------------------------------------------------------------
#: Thesis (Sutherland 2004) §1.2, Table 1.1: queue size and cumulative throughput after each time unit.
THESIS_TABLE_1_1 = {
    #    t: (FIFO queue, MTIQ queue, FIFO throughput, MTIQ throughput)
    0: (1.0, 1.0, 0.0, 0.0),
    1: (1.9, 1.9, 0.0, 0.0),
    2: (2.0, 2.8, 0.09, 0.0),
    3: (2.9, 1.9, 0.09, 0.0),
    4: (3.0, 1.9, 0.18, 0.0),
    5: (3.9, 1.9, 0.18, 0.0),
}
#: The columns of :data:`THESIS_TABLE_1_1` per strategy and the dispatch each needs: FIFO's is
#: slotted, MTIQ's event-driven (run rule ``one`` for both, from the workload file).
THESIS_TABLE_1_1_COLUMNS = {"fifo": (0, 2, True), "mtiq": (1, 3, False)}

#: Jiang & Chakravarthy 2003, Table 2: queue size, tuple latency and throughput at t = 1..10.
JIANG_TABLE_2 = {
    #     t: (F queue, C queue, F latency, C latency, F throughput, C throughput)
    1: (1.0, 1.0, None, None, 0.0, 0.0),
    2: (1.2, 1.2, None, None, 0.0, 0.0),
    3: (3.0, 2.4, 2, None, 0.16, 0.0),
    4: (2.2, 1.6, None, None, 0.0, 0.0),
    5: (2.0, 0.8, 3, None, 0.16, 0.0),
    6: (1.2, 0.6, None, 5, 0.0, 0.16),
    7: (1.0, 0.4, 4, 5, 0.16, 0.16),
    8: (0.2, 0.2, None, 5, 0.0, 0.16),
    9: (0.0, 0.0, 6, 6, 0.16, 0.16),
    10: (1.0, 1.0, None, None, 0.0, 0.0),
}
JIANG_TABLE_2_COLUMNS = {"fifo": 0, "chain": 1}


def thesis_table_1_1(workloads: Path, strategy: str) -> list[str]:
    """Thesis Table 1.1's ``strategy`` column (fifo or mtiq): queue sizes and cumulative throughput
    at t = 0..5 against the simulator's; the differences, first first."""
    queue, throughput, slotted = THESIS_TABLE_1_1_COLUMNS[strategy]
    result = run_workload(workloads, "thesis_table_1_1.toml", strategy, 5, slotted=slotted)
    diffs = [
        series_difference(f"{strategy} queue", result.snapshots, {t: row[queue] for t, row in THESIS_TABLE_1_1.items()}),
        series_difference(
            f"{strategy} throughput",
            {t: result.cumulative_output(t) for t in THESIS_TABLE_1_1},
            {t: row[throughput] for t, row in THESIS_TABLE_1_1.items()},
        ),
    ]
    return [d for d in diffs if d]


def jiang_table_2(workloads: Path, strategy: str) -> list[str]:
    """Jiang Table 2's ``strategy`` column (fifo or chain; the plan of Figure 1, operators of
    Table 1, run rule ``quantum``): queue size, tuple latency and throughput per time unit against
    the simulator's; the differences, first first."""
    column = JIANG_TABLE_2_COLUMNS[strategy]
    result = run_workload(workloads, "jiang_table_2.toml", strategy, 10)
    diffs = []
    queue = series_difference(f"{strategy} queue", result.snapshots, {t: row[column] for t, row in JIANG_TABLE_2.items()})
    if queue:
        diffs.append(queue)
    for t, row in JIANG_TABLE_2.items():
        at_t = [o for o in result.outputs if t - 1 < o.time <= t]
        latency, throughput = row[2 + column], row[4 + column]
        amount = math.fsum(o.amount for o in at_t)
        if abs(amount - throughput) > TABLE_TOLERANCE:
            diffs.append(f"{strategy} throughput at t={t}: got {amount!r}, the paper has {throughput!r}")
        if latency is None and at_t:
            diffs.append(f"{strategy}: no output expected at t={t}, got {at_t}")
        elif latency is not None and not (len(at_t) == 1 and math.isclose(at_t[0].delay, latency, rel_tol=1e-6, abs_tol=1e-12)):
            diffs.append(f"{strategy} latency at t={t}: got {[o.delay for o in at_t]}, the paper has [{latency}]")
    return diffs


# -- random workloads ----------------------------------------------------------------------------
def random_single_stream_workload(rng: random.Random) -> tuple[Plan, Arrivals]:
    """1–3 operator paths of 1–5 operators over stream S (σ in [0.05, 1], c in [0.05, 2]) and
    1–12 arrivals of 0.1–6 tuples at integer times in [0, 30]: the workloads the theorem tests
    draw with hypothesis, drawn from ``rng``."""
    ops = []
    for q in range(rng.randint(1, 3)):
        prev = "S"
        for k in range(rng.randint(1, 5)):
            ops.append(Operator(f"q{q}o{k}", (prev,), rng.uniform(0.05, 1.0), rng.uniform(0.05, 2.0)))
            prev = f"q{q}o{k}"
    times = sorted(rng.randint(0, 30) for _ in range(rng.randint(1, 12)))
    return Plan(ops, streams=["S"]), {"S": [(t, rng.uniform(0.1, 6.0)) for t in times]}


def random_independent_paths(rng: random.Random) -> tuple[Plan, Arrivals]:
    """2–5 operator paths of 1–3 operators, each over a stream of its own with one arrival at
    t = 0 of 0.2–4 tuples: Jiang Theorem 1's setting (tuples waiting on every path, no new ones)."""
    ops, arrivals = [], {}
    for q in range(rng.randint(2, 5)):
        prev = stream = f"S{q}"
        for k in range(rng.randint(1, 3)):
            ops.append(Operator(f"q{q}o{k}", (prev,), rng.uniform(0.05, 1.0), rng.uniform(0.05, 2.0)))
            prev = f"q{q}o{k}"
        arrivals[stream] = [(0, rng.uniform(0.2, 4.0))]
    return Plan(ops, streams=list(arrivals)), arrivals


def _sample(
    what: str,
    draw: Callable[[random.Random], tuple[Plan, Arrivals]],
    check: Callable[[Plan, Arrivals], str | None],
    samples: int,
    seed: int,
    premise: Callable[[Plan], bool] | None = None,
) -> PaperCheck:
    """``check`` on ``samples`` workloads drawn from ``random.Random(seed)`` (those meeting
    ``premise``; at most 20 draws per sample)."""
    rng = random.Random(seed)
    found, checked = [], 0
    for _ in range(samples * 20):
        if checked == samples:
            break
        plan, arrivals = draw(rng)
        if premise is not None and not premise(plan):
            continue
        checked += 1
        counterexample = check(plan, arrivals)
        if counterexample:
            found.append(counterexample)
    return PaperCheck(checked, tuple(found), what)


# -- Chain paper, Theorem 4.2 --------------------------------------------------------------------
#: The strategies chain's peak memory is compared with.
CHAIN_BASELINES = ("fifo", "rr", "greedy", "mtiq")


def drained(strategy: str, plan: Plan, arrivals: Arrivals) -> SimResult:
    """``plan`` under ``strategy`` (run rule ``quantum``) until every queue is empty."""
    return Simulator(plan, schedulers.get(strategy), arrivals, run="quantum", starvation_limit=1).run()


def chain_theorem_4_2_counterexample(plan: Plan, arrivals: Arrivals) -> str | None:
    """Chain paper Theorem 4.2 in the form that survives non-preemptive dispatch: chain's peak
    queued memory (work in flight counted pro rata) is at most every baseline's peak + n, n the
    number of operator paths. A baseline that exceeds it, said in words, or ``None``."""
    n = len(plan.paths)
    chain_peak = drained("chain", plan, arrivals).peak_fluid()
    for strategy in CHAIN_BASELINES:
        other = drained(strategy, plan, arrivals).peak_fluid()
        if chain_peak > other + n + 1e-9:
            return f"chain peak {chain_peak} > {strategy} peak {other} + {n}"
    return None


def chain_theorem_4_2(samples: int = 150, seed: int = 42) -> PaperCheck:
    """:func:`chain_theorem_4_2_counterexample` on ``samples`` random single-stream workloads."""
    return _sample(
        "chain's peak ≤ fifo's, rr's, greedy's and mtiq's + n",
        random_single_stream_workload,
        chain_theorem_4_2_counterexample,
        samples,
        seed,
    )


# -- Jiang & Chakravarthy, Theorem 1 -------------------------------------------------------------
class FixedOrder(PathCapacity):
    """Path capacity's units and quotas, but the paths served in a given order of queries."""

    def __init__(self, order: tuple[str, ...] = ()):
        super().__init__()
        self.order = order

    def chain_priority(self, state, chain):
        return -float(self.order.index(state.plan.query_of(chain[0])))


def total_path_latency(sim: Simulator, arrival: float = 0.0) -> float:
    """Σ over input tuples of (time its path is done with it − arrival): each dispatch takes
    its head's tuples off the leaf queue and is done with them when its last run ends. ``sim``
    must have run with ``record_dispatches=True``."""
    steps, total, j = sim.steps, 0.0, 0
    for k, d in enumerate(sim.dispatches):
        nxt = sim.dispatches[k + 1].time if k + 1 < len(sim.dispatches) else math.inf
        if steps[j].operator != d.unit.head or not math.isclose(steps[j].start, d.time, rel_tol=1e-6, abs_tol=1e-12):
            raise ValueError(f"dispatch {k} at {d.time} of {d.unit.head} does not start with its head's run: {steps[j]}")
        taken, end = steps[j].consumed, steps[j].end
        j += 1
        while j < len(steps) and steps[j].start < nxt - 1e-12:
            end = max(end, steps[j].end)
            j += 1
        total += taken * (end - arrival)
    return total


def jiang_theorem_1_counterexample(plan: Plan, arrivals: Arrivals, run_rule: str = "quantum") -> str | None:
    """Jiang Theorem 1: with tuples waiting on every path and no new arrivals, serving the paths
    by decreasing capacity (pc) gives a total tuple latency no larger than any other order of
    serving them (every permutation of the queries). An order that does better, or ``None``."""
    sim = Simulator(plan, PathCapacity(), arrivals, run=run_rule, record_dispatches=True)
    sim.run()
    pc = total_path_latency(sim)
    for order in itertools.permutations(plan.queries):
        other = Simulator(plan, FixedOrder(order), arrivals, run=run_rule, record_dispatches=True)
        other.run()
        latency = total_path_latency(other)
        if pc > latency * (1 + 1e-9) + 1e-9:
            return f"run rule {run_rule}: pc's total latency {pc} > {latency} serving {order} (paths {plan.paths})"
    return None


def jiang_theorem_1(samples: int = 40, seed: int = 20031, run_rules: tuple[str, ...] = ("quantum", "one")) -> PaperCheck:
    """:func:`jiang_theorem_1_counterexample` on ``samples`` random independent-path workloads,
    under each run rule."""
    checks = [
        _sample(
            "pc's total latency ≤ every order of serving the paths",
            random_independent_paths,
            lambda plan, arrivals, rule=rule: jiang_theorem_1_counterexample(plan, arrivals, rule),
            samples,
            seed,
        )
        for rule in run_rules
    ]
    return PaperCheck(
        sum(c.checked for c in checks),
        tuple(x for c in checks for x in c.counterexamples),
        f"pc's total latency ≤ every order of serving the paths (run rules {', '.join(run_rules)})",
    )


# -- Jiang & Chakravarthy, Theorem 3 -------------------------------------------------------------
def segments_follow_lower_envelope(plan: Plan) -> bool:
    """The premise of Jiang's proof of Theorem 3: on every path, the segments of the construction
    algorithm (§3.3, γ = 1) are exactly the segments of Chain's lower envelope, so "the operators
    along the segment S_i have the same biggest priority" under Chain."""
    sel, cost = (lambda op: plan[op].selectivity), (lambda op: plan[op].cost)
    for path in plan.paths:
        release = [operator_release_capacity(plan, op, sel, cost) for op in path.operators]
        starts = [0] + [end for _, end in partition_path(release)]
        if starts != lower_envelope(progress_chart(plan, path, sel, cost)):
            return False
    return True


def memory_over_time(plan: Plan, arrivals: Arrivals, strategy: str, slotted: bool) -> dict[int, float]:
    """Queued tuples at each integer time, work in flight counted pro rata (run rule ``quantum``)."""
    sim = Simulator(plan, schedulers.get(strategy), arrivals, run="quantum", slotted=slotted, starvation_limit=1)
    return sim.run().fluid_snapshots


def jiang_theorem_3_counterexample(plan: Plan, arrivals: Arrivals) -> str | None:
    """Jiang Theorem 3: segment's memory is at most chain's at every instant, in time units
    (``slotted``) — on a plan whose segments follow Chain's lower envelope
    (:func:`segments_follow_lower_envelope`, the proof's premise). The first instant segment
    holds more, or ``None``."""
    segment, chain = (memory_over_time(plan, arrivals, s, slotted=True) for s in ("segment", "chain"))
    for t, queued in segment.items():
        if queued > chain[t] + 1e-9:
            return f"at t={t} segment holds {queued}, chain {chain[t]}"
    return None


def jiang_theorem_3(samples: int = 200, seed: int = 3) -> PaperCheck:
    """:func:`jiang_theorem_3_counterexample` on ``samples`` random single-stream workloads that
    meet the proof's premise."""
    return _sample(
        "segment's memory ≤ chain's at every instant, in time units",
        random_single_stream_workload,
        jiang_theorem_3_counterexample,
        samples,
        seed,
        premise=segments_follow_lower_envelope,
    )
