"""The scheduler contract as checks anyone can run on a strategy (river's ``check_estimator``).

:func:`check_scheduler` runs every check on a strategy class (or a registry name, or a ready
instance to clone), on both engines: it never picks a unit with no work and never idles while
something can run, conserves tuples (on the executor the drained outputs are exactly FIFO's),
handles a blocking join and a union, is deterministic, derives its parameters from ``__init__``
and resumes exactly from its serialised state. The library's own strategies pass them
(tests/test_contract.py runs the same functions per strategy); a user's strategy gets them in
one call::

    from sparkqos.testing import check_scheduler
    check_scheduler(MyStrategy)             # raises AssertionError naming the check that failed
    check_scheduler(MyStrategy, quantum=0.5)

Both engines run one plan built by :func:`~sparkqos.testing.synthetic_plans`: three queries of
synthetic operators (declared σ and c) in classes H, C and N over one stream. The simulator
takes bursty arrivals; the executor takes the same arrivals as Arrow batches, serves a few units
after each batch so a backlog builds up the way the strategy lets it, and reads a deterministic
fake clock. Synthetic operators keep or drop a row by a hash of its sequence number, so on the
executor the rows every query outputs once the input is finished are the same under every
strategy: FIFO's.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Mapping
from typing import Any

from sparkqos import schedulers
from sparkqos.compile import QuerySet
from sparkqos.executor import EMIT, CompiledPlan, Executor
from sparkqos.executor.expressions import col
from sparkqos.model.plan import Operator, Plan
from sparkqos.schedulers.base import ClusterScheduler, Scheduler
from sparkqos.sim import Simulator
from sparkqos.sim.arrivals import on_off_pareto
from sparkqos.testing.twins import SCHEMA, FakeClock, SyntheticQuery, drive, feeds, rows_by_query, synthetic_plans

__all__ = [
    "ENGINES",
    "EXECUTOR_RULES",
    "RESUME_RULES",
    "SIM_RULES",
    "Factory",
    "check_cluster_threads",
    "check_conserves",
    "check_deterministic",
    "check_joins_and_unions",
    "check_parameters",
    "check_resumes",
    "check_scheduler",
    "executor",
    "factory",
]

#: A fresh, unattached strategy each call.
Factory = Callable[[], Scheduler]

ENGINES = ("sim", "executor")
#: Executor rows per simulated tuple (a time unit is a second on both engines, so strategies'
#: time parameters cover the same work), and units served after each batch (a backlog builds up).
ROWS_PER_UNIT = 20
UNITS_BETWEEN = 2
CLASSES = {"H": 6, "C": 3, "N": 1}
MIX = synthetic_plans(
    {
        "h": SyntheticQuery([(0.1, 0.05), (0.5, 0.5)], klass="H"),
        "c": SyntheticQuery([(0.9, 0.1), (0.9, 0.3), (0.1, 0.05), (1.0, 0.5)], klass="C"),
        "n": SyntheticQuery([(1.0, 0.05), (0.2, 0.2)], klass="N"),
    },
    classes=CLASSES,
    seed=7,
    rows_per_unit=ROWS_PER_UNIT,
)
#: The simulator's run rules.
SIM_RULES = ("quantum", "one")
#: Executor variants of the simulator's run rules: fig 4.1's workload rule as is, and many small
#: runs (10 % of the queue, at least 5 rows), which makes several times more picks.
EXECUTOR_RULES: dict[str, dict[str, Any]] = {"fig4_1": {}, "small_runs": {"ratio": 0.1, "threshold": 5}}
#: Executor restores, two ways. ``rows``: as the executor runs by default (estimates move as
#: measured, the clock ticks per reading); ``Executor.to_state()`` keeps the statistics gatherer
#: but not the σ / c the state had published to strategies, so a restored priority strategy ranks
#: on other numbers until the next publication, and only the same rows can be asked for.
#: ``exact``: estimates never move from the declared σ / c and time stands still between arrivals
#: (how often anything reads the clock changes nothing), so what a checkpoint does not hold cannot
#: steer the strategy: the restored run must be the uninterrupted one, pick by pick.
RESUME_RULES: dict[str, dict[str, Any]] = {"rows": {}, "exact": {"tolerance": 1e12}}


# -- what the checks compare -------------------------------------------------------------------------
def _expect(ok: bool, check: str, what: str) -> None:
    if not ok:
        raise AssertionError(f"{check}: {what}")


def _close(a: float, b: float, rel: float = 1e-6, abs_: float = 1e-12) -> bool:
    return a == b or abs(a - b) <= max(rel * abs(b), abs_)


def _close_maps(a: Mapping[Any, float], b: Mapping[Any, float]) -> bool:
    return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)


def factory(strategy: type[Scheduler] | Scheduler | str, **params: Any) -> Factory:
    """A way to make fresh copies of ``strategy``: a Scheduler class (built with ``params``), a
    registry name (its defaults, or ``params``) or an instance (cloned, ``params`` overriding)."""
    if isinstance(strategy, str):
        return lambda: schedulers.get(strategy, **params)
    if isinstance(strategy, Scheduler):
        return lambda: strategy.clone(**params)
    if isinstance(strategy, type) and issubclass(strategy, Scheduler):
        return lambda: strategy(**params)
    raise TypeError(f"check_scheduler takes a Scheduler class, instance or registry name, got {strategy!r}")


def three_query_plan() -> Plan:
    """h: S→(0.1, 0.05)→(0.5, 0.5); c: S→(0.9, 0.1)→(0.9, 0.3)→(0.1, 0.05)→(1.0, 0.5);
    n: S→(1.0, 0.05)→(0.2, 0.2); classes H 6, C 3, N 1."""
    return MIX.plan


def join_plan() -> Plan:
    ops = [
        Operator("r_sel", ("R",), 0.8, 0.1, klass="H"),
        Operator("join", ("r_sel", "T"), 0.6, 0.3, kind="join", klass="H"),
        Operator("after", ("join",), 0.1, 0.05, klass="H"),
        Operator("u", ("R", "T"), 0.5, 0.1, kind="union", klass="N"),
        Operator("u2", ("u",), 0.5, 0.2, klass="N"),
    ]
    return Plan(ops, streams=["R", "T"], classes={"H": 3, "N": 1})


def join_compiled() -> CompiledPlan:
    """:func:`join_plan` for the executor: a sliding-window join (last 5 rows) of R's synthetic
    filter with T on key ``k``, then a filter; a union of R and T, then a filter."""
    qs = QuerySet(classes={"H": 3, "N": 1})
    r, t = qs.stream("R", SCHEMA), qs.stream("T", SCHEMA)
    r.synthetic(0.8, seed=1).join(t.select("k", col("v").alias("w")), on="k", rows=5).synthetic(0.1, seed=2).sink(
        "joined", klass="H"
    )
    r.union(t).synthetic(0.5, seed=3).synthetic(0.5, seed=4).sink("merged", klass="N")
    return qs.build()


def bursty(plan: Plan, stream: str, load: float, until: float, seed: int):
    per_tuple = sum(plan.service_time(p) for p in plan.paths if p.stream == stream)
    return on_off_pareto(load / per_tuple, until, flows=16, seed=seed)


def expected_drained_output(plan: Plan, arrivals) -> float:
    """Σ arrivals × Πσ over every path: what a drained plan outputs."""
    total = 0.0
    for path in plan.paths:
        surviving = math.prod(plan[op].selectivity for op in path.operators)
        total += surviving * sum(a for _, a in arrivals.get(path.stream, []))
    return total


@functools.cache
def mix_arrivals() -> dict[str, list]:
    return {"S": bursty(MIX.plan, "S", 0.9, 300, seed=11)}


@functools.cache
def mix_feeds() -> list:
    return MIX.feeds(mix_arrivals())


@functools.cache
def join_arrivals() -> dict[str, list]:
    plan = join_plan()
    return {"R": bursty(plan, "R", 0.4, 150, seed=3), "T": bursty(plan, "T", 0.4, 150, seed=4)}


@functools.cache
def fifo_rows() -> dict[str, list[tuple]]:
    """What every query outputs on the executor, drained: FIFO's rows (any order)."""
    ex = executor(MIX.compiled, factory("fifo"))
    drive(ex, mix_feeds(), UNITS_BETWEEN)
    ex.finish()
    return rows_by_query(ex, internal=True)


@functools.cache
def fifo_join_rows() -> dict[str, list[tuple]]:
    return rows_by_query(run_join(factory("fifo"))[0], internal=True)


def simulate(make: Factory, plan: Plan, arrivals, until=None, **kw):
    """A simulator of ``plan`` under a fresh strategy that raises at the first pick of a unit
    with no work, and its result."""
    sim = Simulator(plan, make(), arrivals, starvation_limit=1, **kw)
    return sim, sim.run(until=until)


def executor(compiled: CompiledPlan, make: Factory, clock: FakeClock | None = None, **kw: Any) -> Executor:
    """A fresh executor of ``compiled`` under a fresh strategy that raises at the first pick
    of a unit with no work."""
    return Executor(compiled.fresh(), make(), clock=clock or FakeClock(), starvation_limit=1, **kw)


def record_picks(ex: Executor) -> list:
    """Every unit ``ex``'s strategy returns from now on."""
    picks = []
    pick = ex.scheduler.pick

    def recording(state):
        unit = pick(state)
        picks.append(unit)
        return unit

    ex.scheduler.pick = recording
    return picks


def assert_rows_conserved(ex: Executor, ingested: dict[str, int]) -> None:
    """Per operator: rows that entered its queues = rows it consumed + rows still queued, where
    what enters a leaf is every row ingested on its streams (each query its own copy) and what
    enters any other operator is what its inputs produced."""
    stats = ex.state.stats
    for op in ex.plan:
        entered = sum(ingested[i] if i in ingested else stats.operator(i).produced for i in op.inputs)
        left = stats.operator(op.name).consumed + ex.state.queued(op.name)
        _expect(entered == left, "conserves", f"{op.name}: {entered} rows entered, {left} consumed or queued")
    _expect(ex.state.total_queued == sum(ex.state.queued(op) for op in ex.plan.names), "conserves", "total_queued")
    _expect(ex.state.output_total == sum(len(ex.result(q)) for q in ex.compiled.roots), "conserves", "output_total != rows out")


def internal_rows(ex: Executor, skip: dict[str, int] | None = None) -> dict[str, list[dict]]:
    """Each query's outputs in delivery order, with arrival, sequence and emit time (the first
    ``skip[query]`` rows left out)."""
    skip = skip or {}
    return {q: ex.result(q, internal=True).to_pylist()[skip.get(q, 0) :] for q in ex.compiled.roots}


def run_join(make: Factory) -> tuple[Executor, int]:
    """:func:`join_compiled` under a fresh strategy on the executor, drained; and the rows ingested."""
    ex = executor(join_compiled(), make)
    ingested = drive(ex, feeds(join_arrivals(), rows_per_unit=ROWS_PER_UNIT), UNITS_BETWEEN)
    ex.finish()
    return ex, ingested


# -- the checks ----------------------------------------------------------------------------------------
def check_parameters(make: Factory) -> None:
    """Parameters come from ``__init__``: a clone is a new instance of the same class with the
    same parameters, and ``repr`` names the class."""
    s = make()
    clone = s.clone()
    _expect(type(clone) is type(s) and clone is not s, "parameters", f"clone() of {s!r} is {clone!r}")
    _expect(clone.params() == s.params(), "parameters", f"clone's params {clone.params()} != {s.params()}")
    _expect(repr(s).startswith(type(s).__name__ + "("), "parameters", f"repr {s!r} does not name {type(s).__name__}")


def check_conserves(engine: str, make: Factory, run_rule: str) -> None:
    """Drained, every strategy delivers Σ arrivals × Πσ per path (executor: exactly FIFO's rows,
    and every row is accounted for at every operator, mid-run too); it never picks an empty unit
    (starvation_limit=1 makes either engine raise) and never idles while an operator can run."""
    where = f"conserves ({engine}, {run_rule})"
    plan, arrivals = MIX.plan, mix_arrivals()
    if engine == "sim":
        _, result = simulate(make, plan, arrivals, run=run_rule)
        _expect(result.starved_picks == 0, where, f"{result.starved_picks} picks of units with no work")
        want = expected_drained_output(plan, arrivals)
        _expect(_close(result.total_output, want, rel=1e-9), where, f"output {result.total_output}, expected {want}")
        last = list(result.snapshots.values())[-1]
        _expect(_close(last, 0.0, abs_=1e-9), where, f"{last} tuples left queued")
        _expect(all(o.delay >= 0 for o in result.outputs), where, "an output before its input arrived")
        return
    ex = executor(MIX.compiled, make, **EXECUTOR_RULES[run_rule])
    ingested = {"S": drive(ex, mix_feeds(), UNITS_BETWEEN)}
    _expect(ex.state.total_queued > 0, where, "no backlog built up")  # a backlog the strategy had to manage
    assert_rows_conserved(ex, ingested)
    report = ex.finish()
    _expect(ex.starved_picks == 0, where, f"{ex.starved_picks} picks of units with no work")
    _expect(report.idle and ex.state.total_queued == 0, where, f"finish left {ex.state.total_queued} rows queued")
    assert_rows_conserved(ex, ingested)
    _expect(rows_by_query(ex, internal=True) == fifo_rows(), where, "the drained outputs are not FIFO's rows")
    _expect(all(min(ex.delays(q).to_pylist(), default=0.0) >= 0 for q in ex.compiled.roots), where, "a negative delay")


def check_cluster_threads(make: Factory) -> None:
    """Executor only: a strategy with clusters (COS §4.2) also runs each cluster in its own
    thread; picks are then not reproducible, but every row is still accounted for and the
    drained outputs are FIFO's."""
    where = "cluster threads"
    ex = executor(MIX.compiled, make, cluster_threads=2)
    try:
        ingested = {"S": drive(ex, mix_feeds(), UNITS_BETWEEN)}
        assert_rows_conserved(ex, ingested)
        report = ex.finish()
        _expect(ex.state.total_queued == 0, where, f"finish left {ex.state.total_queued} rows queued")
        assert_rows_conserved(ex, ingested)
        _expect(rows_by_query(ex, internal=True) == fifo_rows(), where, "the drained outputs are not FIFO's rows")
        # The CPU the cluster threads used is summed over them: at most two threads' worth of
        # the drains' wall time (slack for the clocks' granularity).
        _expect(0 < report.cpu_s <= 2 * report.seconds + 0.05, where, f"cpu {report.cpu_s} s in {report.seconds} s")
    finally:
        ex.close()


def check_joins_and_unions(engine: str, make: Factory) -> None:
    """A blocking join and a union over two streams: no starvation, no crash, and output never
    exceeds what the plan can produce (executor: a row-window join's answer does not depend on
    the order operators ran in, so it is FIFO's)."""
    where = f"joins and unions ({engine})"
    arrivals = join_arrivals()
    if engine == "sim":
        plan = join_plan()
        _, result = simulate(make, plan, arrivals)
        _expect(result.starved_picks == 0, where, f"{result.starved_picks} picks of units with no work")
        most = expected_drained_output(plan, arrivals)
        _expect(0 < result.total_output <= most + 1e-9, where, f"output {result.total_output}, at most {most}")
        return
    ex, ingested = run_join(make)
    _expect(ex.starved_picks == 0 and ex.state.total_queued == 0, where, "starved or left rows queued")
    rows = rows_by_query(ex, internal=True)
    _expect(all(rows.values()), where, "a query output nothing")
    # A join row per pair in a 5-row window, a union row per input.
    _expect(sum(map(len, rows.values())) <= 6 * ingested, where, "more rows than the plan can produce")
    _expect(rows == fifo_join_rows(), where, "the drained outputs are not FIFO's rows")


def check_deterministic(engine: str, make: Factory) -> None:
    """The same input, seed and (executor) fake clock give the same picks and the same outputs."""
    where = f"deterministic ({engine})"
    plan, arrivals = MIX.plan, mix_arrivals()
    if engine == "sim":
        a = simulate(make, plan, arrivals, until=200)[1]
        b = simulate(make, plan, arrivals, until=200)[1]
        _expect(a.snapshots == b.snapshots, where, "two runs' snapshots differ")
        _expect(a.outputs == b.outputs, where, "two runs' outputs differ")
        return
    runs = []
    for _ in range(2):
        ex = executor(MIX.compiled, make)
        picks = record_picks(ex)
        drive(ex, mix_feeds(), UNITS_BETWEEN)
        ex.finish()
        runs.append((picks, internal_rows(ex)))
    (picks_a, out_a), (picks_b, out_b) = runs
    _expect(len(picks_a) > len(mix_feeds()), where, f"only {len(picks_a)} picks")
    _expect(picks_a == picks_b, where, "two runs' picks differ")
    _expect(out_a == out_b, where, "two runs' outputs differ")


def check_resumes(engine: str, make: Factory, how: str = "exact") -> None:
    """Stop half-way, serialise the strategy's state through JSON into a fresh instance, carry
    on: the run is identical to an uninterrupted one (executor: ``to_state()`` and
    ``queue_tables()`` into a fresh executor of the same plan with a fresh strategy and a clock
    that carries on; both finish the input. They deliver the same rows, and ``exact``
    (:data:`RESUME_RULES`): the same picks and the same outputs in the same order at the same
    times)."""
    where = f"resumes ({engine}, {how})"
    plan, arrivals = MIX.plan, mix_arrivals()
    if engine == "sim":
        _, whole = simulate(make, plan, arrivals, until=250)

        sim, _ = simulate(make, plan, arrivals, until=120)
        saved = json.loads(json.dumps(sim.scheduler.state_dict()))
        fresh = sim.scheduler.clone()
        fresh.load_state_dict(saved)
        sim.scheduler.detach()
        sim.scheduler = fresh
        resumed = sim.run(until=250)
        _expect(_close_maps(resumed.snapshots, whole.snapshots), where, "the resumed snapshots differ")
        _expect(len(resumed.outputs) == len(whole.outputs), where, "the resumed run output another number of parcels")
        for got, want in zip(resumed.outputs, whole.outputs):
            same = (got.query, got.arrival) == (want.query, want.arrival)
            _expect(same and _close(got.time, want.time) and _close(got.amount, want.amount), where, f"{got} != {want}")
        return
    kw = RESUME_RULES[how]
    feeds_ = mix_feeds()
    half = len(feeds_) // 2
    a = executor(MIX.compiled, make, clock=FakeClock(step=0) if how == "exact" else None, **kw)
    drive(a, feeds_[:half], UNITS_BETWEEN)
    _expect(a.state.total_queued > 0, where, "no backlog at the checkpoint")
    saved = a.to_state(queues=False)
    for key in ("scheduler", "stats", "seq"):  # what a checkpoint keeps as JSON
        saved[key] = json.loads(json.dumps(saved[key]))
    tables = a.queue_tables()
    delivered = {q: len(a.result(q)) for q in a.compiled.roots}

    b = executor(MIX.compiled, make, clock=a.clock.copy(), **kw)
    b.load_state(saved)
    b.load_queue_tables(tables)
    _expect(all(b.state.queued(op) == a.state.queued(op) for op in a.plan.names), where, "restored queues differ")
    _expect(b.state.total_queued == a.state.total_queued, where, "restored total_queued differs")
    picks = {}
    for name, ex in (("whole", a), ("resumed", b)):
        picks[name] = record_picks(ex)
        drive(ex, feeds_[half:], UNITS_BETWEEN)
        ex.finish()
        _expect(ex.starved_picks == 0 and ex.state.total_queued == 0, where, f"the {name} run starved or left rows")
    whole = internal_rows(a, skip=delivered)
    resumed = internal_rows(b)
    if how == "exact":
        _expect(picks["resumed"] == picks["whole"], where, "the resumed picks differ")
        _expect(resumed == whole, where, "the resumed outputs differ")
    else:
        _expect(_sorted_keys(resumed) == _sorted_keys(whole), where, "the resumed run delivered other rows")


def _row_key(row: dict) -> tuple:
    """An output row without its emit time."""
    return tuple(v for k, v in row.items() if k != EMIT)


def _sorted_keys(rows: dict[str, list[dict]]) -> dict[str, list[tuple]]:
    return {q: sorted(map(_row_key, r)) for q, r in rows.items()}


def check_scheduler(strategy: type[Scheduler] | Scheduler | str, **params: Any) -> None:
    """Run every contract check on ``strategy`` — a Scheduler class (built with ``params``), a
    registry name or an instance (cloned) — on both engines; raise :class:`AssertionError`
    naming the first check that fails. Takes seconds: each check runs a few hundred time units
    of bursty input."""
    make = factory(strategy, **params)
    check_parameters(make)
    for engine in ENGINES:
        for rule in SIM_RULES if engine == "sim" else EXECUTOR_RULES:
            check_conserves(engine, make, rule)
        check_joins_and_unions(engine, make)
        check_deterministic(engine, make)
        for how in ("exact",) if engine == "sim" else RESUME_RULES:
            check_resumes(engine, make, how)
    if isinstance(make(), ClusterScheduler):
        check_cluster_threads(make)
