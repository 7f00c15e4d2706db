"""One contract suite for every registered strategy, on both engines (river's check_estimator idea).

A strategy added to the registry gets these checks for free, in the simulator and in the
executor (the README's test command runs them on one strategy of each family, CI on every one:
``strategies`` in tests/conftest.py): it never picks a unit with no work, never idles while something can run, conserves
tuples, is deterministic, derives its parameters from ``__init__``, and resumes exactly from its
serialised state. The checks themselves are published in :mod:`sparkqos.testing.checks`
(:func:`sparkqos.testing.check_scheduler` runs them all on a user's strategy); here they run per
strategy, engine and rule, so a failure names its case.

Known failures are listed in ``KNOWN_FAILURES`` (check, engine, strategy[, rule]) → reason and
marked ``xfail(strict=True)`` on that single case, so a fix shows up as an unexpected pass.
"""

from __future__ import annotations

import pytest

from sparkqos import schedulers
from sparkqos.errors import SchedulerError, UnknownStrategy
from sparkqos.executor import Executor
from sparkqos.executor.expressions import ARRIVAL
from sparkqos.schedulers.base import ClusterScheduler
from sparkqos.sim import Simulator
from sparkqos.testing import FakeClock, check_scheduler, checks, drive, feeds
from sparkqos.testing.checks import ENGINES, EXECUTOR_RULES, MIX, RESUME_RULES, SIM_RULES, UNITS_BETWEEN, factory
from tests.conftest import strategies

#: At collection: a strategy registered by then is checked too (every one under SPARKQOS_SLOW=1,
#: one of each family otherwise: tests/conftest.py's strategies).
STRATEGIES = strategies()

#: (check, engine, strategy[, rule]) → why that case fails today (marked xfail(strict=True)).
KNOWN_FAILURES: dict[tuple[str, ...], str] = {}


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


@pytest.mark.parametrize("engine,strategy,run_rule", cases("conserves", {"sim": SIM_RULES, "executor": tuple(EXECUTOR_RULES)}))
def test_conserves_tuples_and_never_starves(engine, strategy, run_rule):
    checks.check_conserves(engine, factory(strategy), run_rule)


CLUSTERED = [s for s in STRATEGIES if isinstance(schedulers.get(s), ClusterScheduler)]


@pytest.mark.parametrize("strategy", CLUSTERED)
def test_cluster_threads_conserve_tuples(strategy):
    checks.check_cluster_threads(factory(strategy))


@pytest.mark.parametrize("engine,strategy", cases("joins_and_unions"))
def test_joins_and_unions(engine, strategy):
    checks.check_joins_and_unions(engine, factory(strategy))


@pytest.mark.parametrize("engine,strategy", cases("deterministic"))
def test_deterministic(engine, strategy):
    checks.check_deterministic(engine, factory(strategy))


@pytest.mark.parametrize("engine,strategy,how", cases("resumes", {"sim": ("exact",), "executor": tuple(RESUME_RULES)}))
def test_resumes_exactly_from_serialised_state(engine, strategy, how):
    checks.check_resumes(engine, factory(strategy), how)


def test_executor_state_reports_the_oldest_waiting_row():
    """What strategies rank by: at every pick, ``state.oldest(op)`` is the arrival of the oldest
    row in ``op``'s queues (executor; the simulator's parcels are exact by construction)."""
    ex = checks.executor(MIX.compiled, factory("rr"))
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
    drive(ex, checks.mix_feeds()[:60], UNITS_BETWEEN)
    assert wrong == []


@pytest.mark.parametrize("strategy", schedulers.available())
def test_parameters_come_from_init(strategy):
    s = schedulers.get(strategy)
    assert s.name == strategy
    checks.check_parameters(factory(strategy))


def test_unknown_strategy_lists_the_registered_ones():
    with pytest.raises(UnknownStrategy, match="unknown strategy 'chian'.*chain.*fifo"):
        schedulers.get("chian")


def test_bad_parameters_name_the_allowed_ones():
    with pytest.raises(SchedulerError, match=r"strategy 'rr' takes parameters \['quantum'\]"):
        schedulers.get("rr", quantom=2)


def test_user_strategy_registration():
    """A user strategy registers by name and runs like a built-in (here: LIFO by arrival), and
    passes the same checks on both engines (:func:`~sparkqos.testing.check_scheduler`), by name
    and as a class."""
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
        plan, arrivals = MIX.plan, {"S": [(0, 1.0), (1, 1.0)]}
        _, result = checks.simulate(factory("newest_first"), plan, arrivals)
        assert result.total_output == pytest.approx(checks.expected_drained_output(plan, arrivals))
        check_scheduler("newest_first")
        check_scheduler(NewestFirst)
        with pytest.raises(SchedulerError, match="already registered"):
            schedulers.register("newest_first")(schedulers.Fifo)
    finally:
        schedulers.unregister("newest_first")


def run_engine(engine: str, scheduler, **kw) -> None:
    """Feed a little input to the mix plan and run ``scheduler`` until nothing can run."""
    if engine == "sim":
        Simulator(MIX.plan, scheduler, {"S": [(0, 1.0)]}, **kw).run()
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


def test_every_built_in_strategy_is_in_the_table_whatever_was_imported_first():
    """The registry starts from one table: a fresh interpreter that imports only the registry
    knows every built-in strategy, ``adaptive`` (defined above the schedulers) included, and each
    class knows its name before anything asked for it."""
    import subprocess
    import sys

    code = (
        "from sparkqos.schedulers import registry\n"
        "from sparkqos.schedulers.basic import Fifo\n"
        "assert Fifo().name == 'fifo'\n"
        "print(registry.available(), type(registry.get('adaptive')).__module__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == f"{sorted(schedulers.available())} sparkqos.adaptive.controller"
