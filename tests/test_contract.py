"""One contract suite for every registered strategy, on both engines (river's check_estimator idea).

A strategy added to the registry gets these checks for free, in the simulator and in the
executor: it never picks a unit with no work, never idles while something can run, conserves
tuples, is deterministic, derives its parameters from ``__init__``, and resumes exactly from its
serialised state.

Both engines run the same plan, built once by :func:`sparkqos.testing.synthetic_plans`: three
queries of synthetic operators (declared σ and c) in classes H, C and N over one stream. The
simulator takes bursty arrivals; the executor takes the same arrivals as Arrow batches
(:func:`sparkqos.testing.feeds`), serves a few units after each batch so a backlog builds up the
way the strategy lets it, and reads a deterministic fake clock. Synthetic operators keep or drop
a row by a hash of its sequence number, so on the executor the rows every query outputs once the
input is finished are the same under every strategy: FIFO's.

Known failures are listed in ``KNOWN_FAILURES`` (check, engine, strategy[, rule]) → reason and
marked ``xfail(strict=True)`` on that single case, so a fix shows up as an unexpected pass. The
``check_*`` functions hold the checks, so a test can run them on a strategy of its own.
"""

from __future__ import annotations

import json
import math

import pytest

from sparkqos import Operator, Plan, schedulers
from sparkqos.compile import QuerySet
from sparkqos.errors import SchedulerError, UnknownStrategy
from sparkqos.executor import EMIT, Executor
from sparkqos.executor.expressions import ARRIVAL, col
from sparkqos.sim import Simulator
from sparkqos.sim.arrivals import on_off_pareto
from sparkqos.testing import SCHEMA, FakeClock, SyntheticQuery, drive, feeds, rows_by_query, synthetic_plans

ENGINES = ("sim", "executor")
STRATEGIES = schedulers.available()  # at collection: a strategy registered by then is checked too

#: (check, engine, strategy[, rule]) → why that case fails today (marked xfail(strict=True)).
KNOWN_FAILURES: dict[tuple[str, ...], str] = {}

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
#: Executor variants of the simulator's run rules: fig 4.1's workload rule as is, and many small
#: runs (10 % of the queue, at least 5 rows), which makes several times more picks.
EXECUTOR_RULES = {"fig4_1": {}, "small_runs": {"ratio": 0.1, "threshold": 5}}
SIM_RULES = ("quantum", "one")


def cases(check: str, rules: dict[str, tuple[str, ...]] | None = None) -> list:
    """``(engine, strategy[, rule])`` for every engine × registered strategy (× the engine's
    rules), each known failure marked xfail(strict=True)."""
    out = []
    for engine in ENGINES:
        for strategy in STRATEGIES:
            for rule in (rules or {}).get(engine, (None,)):
                args = (engine, strategy) if rule is None else (engine, strategy, rule)
                reason = KNOWN_FAILURES.get((check, *args))
                marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
                out.append(pytest.param(*args, marks=marks, id="-".join(args)))
    return out


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


def join_compiled():
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
    total = 0.0
    for path in plan.paths:
        surviving = math.prod(plan[op].selectivity for op in path.operators)
        total += surviving * sum(a for _, a in arrivals.get(path.stream, []))
    return total


def simulate(strategy: str, plan: Plan, arrivals, until=None, **kw):
    sim = Simulator(plan, schedulers.get(strategy), arrivals, starvation_limit=1, **kw)
    return sim, sim.run(until=until)


def executor(compiled, strategy: str, clock: FakeClock | None = None, **kw) -> Executor:
    """A fresh executor of ``compiled`` under a fresh ``strategy`` that raises at the first pick
    of a unit with no work."""
    return Executor(compiled.fresh(), schedulers.get(strategy), clock=clock or FakeClock(), starvation_limit=1, **kw)


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
        assert entered == stats.operator(op.name).consumed + ex.state.queued(op.name), op.name
    assert ex.state.total_queued == sum(ex.state.queued(op) for op in ex.plan.names)
    assert ex.state.output_total == sum(len(ex.result(q)) for q in ex.compiled.roots)


def internal_rows(ex: Executor, skip: dict[str, int] | None = None) -> dict[str, list[dict]]:
    """Each query's outputs in delivery order, with arrival, sequence and emit time (the first
    ``skip[query]`` rows left out)."""
    skip = skip or {}
    return {q: ex.result(q, internal=True).to_pylist()[skip.get(q, 0) :] for q in ex.compiled.roots}


@pytest.fixture(scope="module")
def mix():
    plan = three_query_plan()
    return plan, {"S": bursty(plan, "S", 0.9, 300, seed=11)}


@pytest.fixture(scope="module")
def mix_feeds(mix):
    return MIX.feeds(mix[1])


@pytest.fixture(scope="module")
def fifo_rows(mix_feeds):
    """What every query outputs on the executor, drained: FIFO's rows (any order)."""
    ex = executor(MIX.compiled, "fifo")
    drive(ex, mix_feeds, UNITS_BETWEEN)
    ex.finish()
    return rows_by_query(ex, internal=True)


@pytest.fixture(scope="module")
def join_arrivals():
    plan = join_plan()
    return {"R": bursty(plan, "R", 0.4, 150, seed=3), "T": bursty(plan, "T", 0.4, 150, seed=4)}


def run_join(strategy: str, join_arrivals) -> tuple[Executor, int]:
    """:func:`join_compiled` under ``strategy`` on the executor, drained; and the rows ingested."""
    ex = executor(join_compiled(), strategy)
    ingested = drive(ex, feeds(join_arrivals, rows_per_unit=ROWS_PER_UNIT), UNITS_BETWEEN)
    ex.finish()
    return ex, ingested


@pytest.fixture(scope="module")
def fifo_join_rows(join_arrivals):
    return rows_by_query(run_join("fifo", join_arrivals)[0], internal=True)


@pytest.mark.parametrize("engine,strategy,run_rule", cases("conserves", {"sim": SIM_RULES, "executor": tuple(EXECUTOR_RULES)}))
def test_conserves_tuples_and_never_starves(engine, strategy, run_rule, mix, mix_feeds, fifo_rows):
    check_conserves(engine, strategy, run_rule, mix, mix_feeds, fifo_rows)


def check_conserves(engine, strategy, run_rule, mix, mix_feeds, fifo_rows):
    """Drained, every strategy delivers Σ arrivals × Πσ per path (executor: exactly FIFO's rows,
    and every row is accounted for at every operator, mid-run too); it never picks an empty unit
    (starvation_limit=1 makes either engine raise) and never idles while an operator can run."""
    plan, arrivals = mix
    if engine == "sim":
        _, result = simulate(strategy, plan, arrivals, run=run_rule)
        assert result.starved_picks == 0
        assert result.total_output == pytest.approx(expected_drained_output(plan, arrivals), rel=1e-9)
        assert list(result.snapshots.values())[-1] == pytest.approx(0.0, abs=1e-9)
        assert all(o.delay >= 0 for o in result.outputs)
        return
    ex = executor(MIX.compiled, strategy, **EXECUTOR_RULES[run_rule])
    ingested = {"S": drive(ex, mix_feeds, UNITS_BETWEEN)}
    assert ex.state.total_queued > 0  # a backlog the strategy had to manage
    assert_rows_conserved(ex, ingested)
    report = ex.finish()
    assert ex.starved_picks == 0
    assert report.idle and ex.state.total_queued == 0
    assert_rows_conserved(ex, ingested)
    assert rows_by_query(ex, internal=True) == fifo_rows
    assert all(min(ex.delays(q).to_pylist(), default=0.0) >= 0 for q in ex.compiled.roots)


CLUSTERED = [s for s in STRATEGIES if hasattr(schedulers.get(s), "pick_cluster")]


@pytest.mark.parametrize("strategy", CLUSTERED)
def test_cluster_threads_conserve_tuples(strategy, mix_feeds, fifo_rows):
    """Executor only: a strategy with clusters (COS §4.2) also runs each cluster in its own
    thread; picks are then not reproducible, but every row is still accounted for and the
    drained outputs are FIFO's."""
    ex = executor(MIX.compiled, strategy, cluster_threads=2)
    try:
        ingested = {"S": drive(ex, mix_feeds, UNITS_BETWEEN)}
        assert_rows_conserved(ex, ingested)
        report = ex.finish()
        assert ex.state.total_queued == 0
        assert_rows_conserved(ex, ingested)
        assert rows_by_query(ex, internal=True) == fifo_rows
        # The CPU the cluster threads used is summed over them: at most two threads' worth of
        # the drains' wall time (slack for the clocks' granularity).
        assert 0 < report.cpu_s <= 2 * report.seconds + 0.05
    finally:
        ex.close()


@pytest.mark.parametrize("engine,strategy", cases("joins_and_unions"))
def test_joins_and_unions(engine, strategy, join_arrivals, fifo_join_rows):
    """A blocking join and a union over two streams: no starvation, no crash, and output never
    exceeds what the plan can produce (executor: a row-window join's answer does not depend on
    the order operators ran in, so it is FIFO's)."""
    arrivals = join_arrivals
    if engine == "sim":
        plan = join_plan()
        _, result = simulate(strategy, plan, arrivals)
        assert result.starved_picks == 0
        assert 0 < result.total_output <= expected_drained_output(plan, arrivals) + 1e-9
        return
    ex, ingested = run_join(strategy, arrivals)
    assert ex.starved_picks == 0 and ex.state.total_queued == 0
    rows = rows_by_query(ex, internal=True)
    assert all(rows.values())
    assert sum(map(len, rows.values())) <= 6 * ingested  # a join row per pair in a 5-row window, a union row per input
    assert rows == fifo_join_rows


@pytest.mark.parametrize("engine,strategy", cases("deterministic"))
def test_deterministic(engine, strategy, mix, mix_feeds):
    check_deterministic(engine, strategy, mix, mix_feeds)


def check_deterministic(engine, strategy, mix, mix_feeds):
    """The same input, seed and (executor) fake clock give the same picks and the same outputs."""
    plan, arrivals = mix
    if engine == "sim":
        a = simulate(strategy, plan, arrivals, until=200)[1]
        b = simulate(strategy, plan, arrivals, until=200)[1]
        assert a.snapshots == b.snapshots
        assert a.outputs == b.outputs
        return
    runs = []
    for _ in range(2):
        ex = executor(MIX.compiled, strategy)
        picks = record_picks(ex)
        drive(ex, mix_feeds, UNITS_BETWEEN)
        ex.finish()
        runs.append((picks, internal_rows(ex)))
    (picks_a, out_a), (picks_b, out_b) = runs
    assert len(picks_a) > len(mix_feeds)
    assert picks_a == picks_b
    assert out_a == out_b


#: Executor restores, two ways. ``rows``: as the executor runs by default (estimates move as
#: measured, the clock ticks per reading); ``Executor.to_state()`` keeps the statistics gatherer
#: but not the σ / c the state had published to strategies, so a restored priority strategy ranks
#: on other numbers until the next publication, and only the same rows can be asked for.
#: ``exact``: estimates never move from the declared σ / c and time stands still between arrivals
#: (how often anything reads the clock changes nothing), so what a checkpoint does not hold cannot
#: steer the strategy: the restored run must be the uninterrupted one, pick by pick.
RESUME_RULES = {"rows": {}, "exact": {"tolerance": 1e12}}


@pytest.mark.parametrize("engine,strategy,how", cases("resumes", {"sim": ("exact",), "executor": tuple(RESUME_RULES)}))
def test_resumes_exactly_from_serialised_state(engine, strategy, how, mix, mix_feeds):
    check_resumes(engine, strategy, how, mix, mix_feeds)


def check_resumes(engine, strategy, how, mix, mix_feeds):
    """Stop half-way, serialise the strategy's state through JSON into a fresh instance, carry
    on: the run is identical to an uninterrupted one (executor: ``to_state()`` and
    ``queue_tables()`` into a fresh executor of the same plan with a fresh strategy of the same
    name and a clock that carries on; both finish the input. They deliver the same rows, and
    ``exact``: the same picks and the same outputs in the same order at the same times)."""
    plan, arrivals = mix
    if engine == "sim":
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
        return
    kw = RESUME_RULES[how]
    half = len(mix_feeds) // 2
    a = executor(MIX.compiled, strategy, clock=FakeClock(step=0) if how == "exact" else None, **kw)
    drive(a, mix_feeds[:half], UNITS_BETWEEN)
    assert a.state.total_queued > 0
    saved = a.to_state(queues=False)
    for key in ("scheduler", "stats", "seq"):  # what a checkpoint keeps as JSON
        saved[key] = json.loads(json.dumps(saved[key]))
    tables = a.queue_tables()
    delivered = {q: len(a.result(q)) for q in a.compiled.roots}

    b = executor(MIX.compiled, strategy, clock=a.clock.copy(), **kw)
    b.load_state(saved)
    b.load_queue_tables(tables)
    assert all(b.state.queued(op) == a.state.queued(op) for op in a.plan.names)
    assert b.state.total_queued == a.state.total_queued
    picks = {}
    for name, ex in (("whole", a), ("resumed", b)):
        picks[name] = record_picks(ex)
        drive(ex, mix_feeds[half:], UNITS_BETWEEN)
        ex.finish()
        assert ex.starved_picks == 0 and ex.state.total_queued == 0
    whole = internal_rows(a, skip=delivered)
    resumed = internal_rows(b)
    if how == "exact":
        assert picks["resumed"] == picks["whole"]
        assert resumed == whole
    else:
        assert {q: sorted(map(row_key, r)) for q, r in resumed.items()} == {q: sorted(map(row_key, r)) for q, r in whole.items()}


def row_key(row: dict) -> tuple:
    """An output row without its emit time."""
    return tuple(v for k, v in row.items() if k != EMIT)


def test_executor_state_reports_the_oldest_waiting_row(mix_feeds):
    """What strategies rank by: at every pick, ``state.oldest(op)`` is the arrival of the oldest
    row in ``op``'s queues (executor; the simulator's parcels are exact by construction)."""
    ex = executor(MIX.compiled, "rr")
    wrong = []
    pick = ex.scheduler.pick

    def checking(state):
        queued = {}
        for key, table in ex.queue_tables().items():
            op = key.rpartition("#")[0]
            low = min(table.column(ARRIVAL).to_pylist())
            queued[op] = min(low, queued.get(op, low))
        wrong.extend((op, state.oldest(op), queued.get(op)) for op in ex.plan.names if state.oldest(op) != queued.get(op))
        return pick(state)

    ex.scheduler.pick = checking
    drive(ex, mix_feeds[:60], UNITS_BETWEEN)
    assert wrong == []


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


def test_user_strategy_registration(mix, mix_feeds, fifo_rows):
    """A user strategy registers by name and runs like a built-in (here: LIFO by arrival), and
    passes the same checks on both engines."""
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
        for engine in ENGINES:
            check_conserves(engine, "newest_first", SIM_RULES[0] if engine == "sim" else "fig4_1", mix, mix_feeds, fifo_rows)
            check_deterministic(engine, "newest_first", mix, mix_feeds)
            for how in ("exact",) if engine == "sim" else tuple(RESUME_RULES):
                check_resumes(engine, "newest_first", how, mix, mix_feeds)
        with pytest.raises(SchedulerError, match="already registered"):
            schedulers.register("newest_first")(schedulers.Fifo)
    finally:
        schedulers.unregister("newest_first")


def run_engine(engine: str, scheduler, **kw) -> None:
    """Feed a little input to the mix plan and run ``scheduler`` until nothing can run."""
    if engine == "sim":
        Simulator(three_query_plan(), scheduler, {"S": [(0, 1.0)]}, **kw).run()
    else:
        ex = Executor(MIX.compiled.fresh(), scheduler, clock=FakeClock(), **kw)
        drive(ex, feeds({"S": [(0, 2.0)]}))
        ex.run()


@pytest.mark.parametrize("engine", ENGINES)
def test_a_strategy_that_picks_empty_units_is_caught(engine):
    from sparkqos.schedulers import Scheduler, Unit

    class Broken(Scheduler):
        def _rebuild(self, state):
            pass

        def _on_enqueue(self, op, state):
            pass

        def _choose(self, state):
            return Unit("operator", ("h/2:synthetic",))  # h's second operator has no input at first

    with pytest.raises(SchedulerError, match="no work 3 times in a row"):
        run_engine(engine, Broken(), starvation_limit=3)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_strategy_that_idles_with_work_is_caught(engine):
    from sparkqos.schedulers import Scheduler

    class Lazy(Scheduler):
        def _rebuild(self, state):
            pass

        def _on_enqueue(self, op, state):
            pass

        def _choose(self, state):
            return None

    with pytest.raises(SchedulerError, match="returned no unit while"):
        run_engine(engine, Lazy())
