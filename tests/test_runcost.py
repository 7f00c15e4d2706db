"""The cost-aware quantum: the executor's estimate of an operator run's fixed cost and the floor
it puts under every run's size (sparkqos.executor.runcost, the dispatcher's sizing)."""

from __future__ import annotations

import math

import pyarrow as pa
import pytest

from sparkqos import schedulers
from sparkqos.compile import QuerySet
from sparkqos.errors import ExecutorOptionError
from sparkqos.executor.loop import Executor
from sparkqos.executor.runcost import MAX_FLOOR_S, RunCost, queue_cost_s


def test_the_floor_is_the_work_that_makes_the_fixed_cost_its_share():
    cost = RunCost(0.05, queue_s=2e-4)
    assert cost.overhead_s == 2e-4 and cost.floor_s == pytest.approx(4e-3)
    assert cost.min_rows(1e-4) == 40  # 4 ms of work at 100 µs a row
    assert cost.min_rows(3e-4) == 14  # 4.2 ms: the run is rounded up, never short of the share
    assert cost.min_rows(0.0) == 0 and cost.min_rows(math.nan) == 0  # no cost known: no floor
    assert RunCost(0.10, queue_s=2e-4).min_rows(1e-4) == 20  # a larger share, a lower floor


def test_the_dispatch_part_follows_the_measured_units_smoothed():
    """Each unit's time outside its runs, per run, is smoothed with eq 3.1's weight; a unit that
    ran nothing, or whose runs took longer than the unit (clock skew), tells nothing."""
    cost = RunCost(0.05, queue_s=0.0)
    cost.observe(unit_s=0.012, kernel_s=0.010, runs=2)  # 1 ms a run around two runs
    assert cost.overhead_s == pytest.approx(1e-3)
    cost.observe(unit_s=0.003, kernel_s=0.0, runs=1)  # the machine got busier: 3 ms
    assert cost.overhead_s == pytest.approx(0.875e-3 + 0.125 * 3e-3)
    before = cost.overhead_s
    cost.observe(unit_s=0.01, kernel_s=0.0, runs=0)
    cost.observe(unit_s=0.01, kernel_s=0.02, runs=1)
    assert cost.overhead_s == before


def test_the_floor_never_asks_more_than_its_cap():
    """On a very slow machine a run is never made longer than MAX_FLOOR_S for the share's sake:
    one run cannot be interrupted."""
    cost = RunCost(0.05, queue_s=0.01)  # 10 ms a run would ask 200 ms of work
    assert cost.floor_s == MAX_FLOOR_S
    assert cost.min_rows(1e-4) == math.ceil(MAX_FLOOR_S / 1e-4)


def test_the_queue_part_is_measured_once_per_process():
    first = queue_cost_s()
    assert 0 < first < 0.01 and queue_cost_s() is first


def test_the_share_is_checked():
    for bad in (-0.1, 1.0, "5%"):
        with pytest.raises(ExecutorOptionError, match="overhead_share"):
            Executor(_chain(), "chain", overhead_share=bad)


def _chain(cost_s: float = 1e-4):
    qs = QuerySet()
    s = qs.stream("s", pa.schema([("x", pa.int64())]))
    s.synthetic(1.0, cost_s=0.0, seed=1).synthetic(1.0, cost_s=0.0, seed=2).sink("q")
    return qs.build()


def _runs(ex: Executor) -> list[tuple[str, int]]:
    """(operator, rows) of every run from here on."""
    log: list[tuple[str, int]] = []
    book = ex.dispatcher._book

    def logged(name, consumed, out, t0, t1, report):
        log.append((name, consumed))
        return book(name, consumed, out, t0, t1, report)

    ex.dispatcher._book = logged
    return log


class _Fixed(RunCost):
    """A fixed cost that stays as given: a fake clock's readings are not costs."""

    def observe(self, unit_s: float, kernel_s: float, runs: int) -> None:
        pass


def _sized(share: float, cost_s: float, overhead_s: float) -> Executor:
    """An executor of :func:`_chain` whose strategy and statistics say ``cost_s`` a row and
    whose fixed cost per run is ``overhead_s`` (measured: never; the clock is fake)."""
    ticks = iter(range(1, 1 << 40))
    ex = Executor(_chain().fresh(), schedulers.get("pc", quantum=1.0), clock=lambda: next(ticks) * 1e-6, overhead_share=share)
    if ex.dispatcher.run_cost is not None:
        ex.dispatcher.run_cost = _Fixed(share, queue_s=overhead_s)
    for op in ex.plan.names:
        ex.state._cost[op] = cost_s
    return ex


def test_a_quota_in_tuples_is_raised_to_the_floor():
    """pc's quota is its path capacity × quantum in tuples; a quota of 10 rows at 100 µs (1 ms of
    work against 0.2 ms of fixed cost, 17 %) becomes 40 rows (4 ms, 5 %), for the head and, with
    carry, for the operator above, which takes its floor from its own queue, oldest rows first."""
    assert _first_unit_of_a_pc_quota(0.05, 100) == [("q/1:synthetic", 40), ("q/2:synthetic", 40)]
    assert _first_unit_of_a_pc_quota(0, 100) == [("q/1:synthetic", 10), ("q/2:synthetic", 10)]


def _first_unit_of_a_pc_quota(share: float, rows: int) -> list:
    """The runs of one unit whose quota is 10 tuples of a 2-operator path at 100 µs each (0.2 ms
    of fixed cost), with ``rows`` queued."""
    ex = _sized(share, 1e-4, 2e-4)
    ex.scheduler.quantum = 10 * 2e-4
    ex.ingest("s", pa.table({"x": list(range(rows))}))
    log = _runs(ex)
    ex.run(max_units=1)
    return log


def test_the_floor_takes_only_what_is_queued():
    assert _first_unit_of_a_pc_quota(0.05, 25) == [("q/1:synthetic", 25), ("q/2:synthetic", 25)]


def test_a_run_cut_to_the_budget_keeps_its_floor():
    """The time left in a budget cuts a run to what its cost fits, but not below the floor: with
    1 ms of fixed cost at 100 µs a row the floor is 200 rows, above the workload threshold of 50."""
    ex = _sized(0.05, 1e-4, 1e-3)
    ex.dispatcher._deadline = ex.clock() + 1e-3  # 1 ms left: 10 rows' worth
    assert ex.dispatcher._time_cap("q/1:synthetic", 5000, None) == 200
    assert ex.dispatcher._time_cap("q/1:synthetic", 120, None) == 120  # fewer asked: as asked
    bare = _sized(0, 1e-4, 1e-3)
    bare.dispatcher._deadline = bare.clock() + 1e-3
    assert bare.dispatcher._time_cap("q/1:synthetic", 5000, None) == bare.threshold == 50


def test_the_floor_changes_run_sizes_not_the_answer():
    """Larger runs, the same rows out: every strategy's results are the bare executor's."""
    rows = pa.table({"x": list(range(3000))})
    for name in ("pc", "chain", "rr", "mtiq", "fifo"):
        outs = []
        for share in (0, 0.05):
            ex = Executor(_chain().fresh(), schedulers.get(name), overhead_share=share)
            for k in range(0, 3000, 100):
                ex.ingest("s", rows.slice(k, 100))
                ex.run(max_units=2)
            ex.finish()
            outs.append(sorted(ex.result("q").column("x").to_pylist()))
        assert outs[0] == outs[1] == list(range(3000)), name


def test_the_executor_measures_its_fixed_cost_as_it_serves():
    """Served in one thread, the executor hands every unit's time outside its runs to the
    estimate: after a run it is a positive figure below a millisecond-scale bound."""
    ex = Executor(_chain().fresh(), schedulers.get("chain"), overhead_share=0.05)
    for k in range(20):
        ex.ingest("s", pa.table({"x": list(range(k * 10, k * 10 + 10))}))
    ex.run()
    cost = ex.dispatcher.run_cost
    assert cost.dispatch_s is not None and 0 < cost.overhead_s < 0.05
