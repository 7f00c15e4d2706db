"""Class shares over any strategy: CQC's level 1 above, the strategy in force inside each class.

CQC Algorithm 1 (Al Moakar et al., DMSN 2009, §3–4) has two levels: a weighted round robin over
the query classes — class i gets the time slice Tᵢ = Pᵢ·k / ΣP per round, an overrun is deducted
from its next quota (negative credit), unused quota is not carried over — and Highest Rate inside
the class whose turn it is. :class:`ClassShares` keeps level 1 exactly (the same
:class:`~sparkqos.schedulers.cqc.ClassTurns` object :class:`~sparkqos.schedulers.cqc.Cqc` uses)
and puts any strategy at level 2, so class priority is honoured whatever strategy is in force;
``ClassShares("hr")`` is CQC up to HR's tie-breaks.

How the inner strategy is kept to the chosen class, without knowing it: it never sees the whole
plan. Each class gets its own inner instance, attached to a :class:`ClassView` of the engine's
state: a read-only :class:`~sparkqos.model.state.SchedulerState` whose plan is the sub-plan of
that class's queries, whose queues, statistics and clock are the engine's, and whose event log
carries only that class's operators. Any strategy — operator, path, segment or cluster units,
heaps, rings, statistics — works on it unchanged, and whatever it returns belongs to the class.

Quota is counted in time, as CQC does: through ``state.now`` (virtual time in the simulator,
seconds in the executor), each pick charging the class of the previous dispatch with the time
since, at most what that dispatch could have lasted (its operators' queued work at their costs,
each run capped by the unit's quota). Units go out with ``quota_time`` at most ``quantum`` (the
inner's own quota when smaller), so a turn overruns its credit by at most its last unit's run:
less than one quantum per operator, plus, for a ``carry`` unit (FIFO's paths), the work carried
up the path. As in CQC, the overrun is deducted from the class's next credit. A plan with a
single class is served by the inner strategy alone, on the engine's state: class shares change
nothing there.

``adaptive`` puts class shares under each candidate instead (``Adaptive(class_shares=ClassShares(k=...))``,
what :func:`~sparkqos.schedulers.registry.build` does for it), so its controller still measures
and scores whole-plan windows while every candidate it runs honours the class shares.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from sparkqos.errors import SchedulerError, check_number
from sparkqos.model.plan import Plan
from sparkqos.model.state import EventLogs, SchedulerState, Unit
from sparkqos.schedulers import registry
from sparkqos.schedulers.base import LazyHeap, Scheduler, in_force_of
from sparkqos.schedulers.cqc import ClassTurns, SharesClasses


class ClassView(EventLogs, SchedulerState):
    """One class's part of an engine's state, read-only: the sub-plan of the class's queries, the
    engine's queues, statistics and clock for its operators, and an event log of its own (filled
    by :meth:`notify`). Queued totals are the class's; output, input and work totals are the
    whole plan's (the engines do not count them per class)."""

    def __init__(self, parent: SchedulerState, klass: str):
        plan = parent.plan
        ops = [op for op in plan if plan.class_of(op.name) == klass]
        if not ops:
            raise SchedulerError(f"ClassView: no query of the plan is in class {klass!r}")
        streams = [s for s in plan.streams if any(s in op.inputs for op in ops)]
        self.plan = Plan(ops, streams=streams, classes={klass: plan.classes[klass]})
        self.parent = parent
        self.klass = klass
        self._names = frozenset(self.plan.names)
        self._logs: list[list[str]] = []

    @property
    def now(self) -> float:
        return self.parent.now

    def queued(self, op: str) -> float:
        return self.parent.queued(op)

    def queued_bytes(self, op: str) -> float:
        return self.parent.queued_bytes(op)

    def oldest(self, op: str) -> float | None:
        return self.parent.oldest(op)

    def runnable(self, op: str) -> bool:
        return op in self._names and self.parent.runnable(op)

    def runnable_operators(self) -> list[str]:
        return [op for op in self.parent.runnable_operators() if op in self._names]

    def selectivity(self, op: str) -> float:
        return self.parent.selectivity(op)

    def cost(self, op: str) -> float:
        return self.parent.cost(op)

    def output_rate(self, op: str) -> float:
        return self.parent.output_rate(op)

    @property
    def total_queued(self) -> float:
        return math.fsum(self.parent.queued(op) for op in self.plan.names)

    @property
    def total_queued_bytes(self) -> float:
        return math.fsum(self.parent.queued_bytes(op) for op in self.plan.names)

    @property
    def output_total(self) -> float:
        return self.parent.output_total

    @property
    def output_delay_total(self) -> float:
        return self.parent.output_delay_total

    @property
    def input_total(self) -> float:
        return self.parent.input_total

    @property
    def work_total(self) -> float:
        return getattr(self.parent, "work_total", 0.0)

    @property
    def stats_version(self) -> int:
        return self.parent.stats_version


def run_bound(state: SchedulerState, unit: Unit) -> float:
    """How long ``unit`` can run at most with the queues and statistics of ``state``: each
    operator's queued work (plus what the one below it hands on) at its cost, an operator's own
    input capped by the unit's quotas; with ``carry``, the operators above the first process what
    the one below produced."""
    total, carried = 0.0, 0.0
    for i, op in enumerate(unit.operators):
        cost = state.cost(op)
        follows = unit.carry and i > 0
        amount = carried if follows else state.queued(op) + carried
        if not follows and unit.quota_tuples is not None:
            amount = min(amount, unit.quota_tuples)
        t = amount * cost
        if not follows and unit.quota_time is not None and t > unit.quota_time:
            t = unit.quota_time
            amount = t / cost
        total += t
        carried = amount * state.selectivity(op)
    return total


class ClassShares(SharesClasses):
    """CQC Algorithm 1's level 1 (weighted round robin over classes with quotas and credit)
    above any strategy ``inner``, which orders the work inside the class whose turn it is (see
    the module: one instance per class, each on a :class:`ClassView`).

    ``inner`` is a component (cloned per class): a Scheduler, a registry name (its defaults) or a
    ``{"name", "params"}`` table as configuration files give it — ``ClassShares(PathCapacity(quantum=0.2))``
    is ``ClassShares({"name": "pc", "params": {"quantum": 0.2}})``; ``k`` the length of a round and
    ``quantum`` the longest unit, in the engine's time units. ``inner=None`` leaves the inner to an
    owner (adaptive's ``class_shares``: each candidate in turn) and cannot serve alone. ``inner_params`` is the deprecated
    spelling of the inner strategy's parameters (a DeprecationWarning; give the strategy itself).

    Two one-operator queries in classes of priority 2 and 1, k = 6: each round serves H for 4 time
    units and N for 2, whatever the strategy inside (fifo here; HR inside is
    :class:`~sparkqos.schedulers.cqc.Cqc`, whose example has three classes):

    >>> from sparkqos import Operator, Plan
    >>> from sparkqos.sim import Simulator
    >>> plan = Plan([Operator("h", ("A",), 0.5, 1.0, klass="H"), Operator("n", ("B",), 0.5, 1.0, klass="N")],
    ...             streams=["A", "B"], classes={"H": 2, "N": 1})
    >>> sim = Simulator(plan, ClassShares("fifo", k=6), {s: [(0, 30.0)] for s in "AB"}, record_dispatches=True)
    >>> _ = sim.run(until=11.5)
    >>> "".join(d.unit.head for d in sim.dispatches)
    'hhhhnnhhhhnn'
    """

    DEPRECATED = ("inner_params",)

    def __init__(
        self,
        inner: registry.Component | None = "hr",
        k: float = 20.0,
        quantum: float = 1.0,
        inner_params: Mapping[str, Any] | None = None,
    ):
        check_number("k", k, low=0, low_open=True, error=SchedulerError, where="class_shares: ")
        check_number("quantum", quantum, low=0, low_open=True, error=SchedulerError, where="class_shares: ")
        if inner_params is not None:
            registry.deprecated("class_shares", "inner_params", "the inner strategy itself: inner=PathCapacity(quantum=0.2)")
            inner = registry.with_params(inner, inner_params, where="class_shares: inner_params")
        self.inner = None if inner is None else registry.component(inner, where="class_shares: inner")
        self.k = k
        self.quantum = quantum
        proto = None if self.inner is None else self._make_inner()
        if proto is not None and type(proto).class_shares_params(registry.label(proto), {})[0] != "class_shares":
            raise SchedulerError(
                f"class_shares: {proto!r} shares time between classes itself or delegates to other strategies; "
                "give a plain strategy (adaptive takes class_shares=ClassShares(...) to put class shares under each candidate)"
            )
        self._turns = ClassTurns(k)
        self._inners: dict[str, Scheduler] = {}
        self._views: dict[str, ClassView] = {}
        self._ready: dict[str, LazyHeap] = {}
        self._single: str | None = None
        self._parent: SchedulerState | None = None
        self._restored_inner: dict[str, dict[str, Any]] = {}

    def _make_inner(self) -> Scheduler:
        if self.inner is None:
            raise SchedulerError("class_shares: inner=None leaves the inner strategy to an owner (adaptive); give a strategy")
        return self.inner.clone() if isinstance(self.inner, Scheduler) else registry.get(self.inner)

    @classmethod
    def sized_params(cls, budget_s: float, period_s: float | None = None, **params: Any) -> dict[str, Any]:
        """Left unset, the round ``k`` becomes the trigger's budget (as CQC's) and the quantum a
        tenth of it; an inner strategy given by name or table is sized by its own rule (a
        Scheduler is used as given).

        >>> ClassShares.sized_for(2.0, inner="pc")
        ClassShares(inner=PathCapacity(quantum=0.2), k=2.0, quantum=0.2)
        >>> ClassShares.sized_for(2.0, inner={"name": "pc", "params": {"quantum": 0.5}}).inner
        PathCapacity(quantum=0.5)
        """
        params.setdefault("k", budget_s)
        if params.get("inner_params") is not None:
            registry.deprecated("class_shares", "inner_params", "the inner strategy itself: inner=PathCapacity(quantum=0.2)")
            params["inner"] = registry.with_params(params.get("inner", "hr"), params.pop("inner_params"), where="inner_params")
        params.pop("inner_params", None)
        if params.get("inner") is not None:
            params["inner"] = registry.sized_component(params["inner"], budget_s, period_s, where="class_shares: inner")
        return super().sized_params(budget_s, period_s, **params)

    # -- derived structures -------------------------------------------------------------------
    def _rebuild(self, state: SchedulerState) -> None:
        plan = state.plan
        self._turns.setup(plan.classes, where="ClassShares")
        if state is not self._parent:  # a new engine state: new views, the inners re-attach
            used = sorted({plan.class_of(op) for op in plan.names})
            if set(self._inners) != set(used):
                for inner in self._inners.values():
                    inner.detach()
                self._inners = {c: self._make_inner() for c in used}
            for c, saved in self._restored_inner.items():
                if c not in self._inners:
                    raise SchedulerError(f"ClassShares state holds class {c!r}; the plan's classes are {used}")
                self._inners[c].load_state_dict(saved)
            self._restored_inner = {}
            self._single = used[0] if len(used) == 1 else None
            self._views = {} if self._single is not None else {c: ClassView(state, c) for c in used}
            self._parent = state
        index = plan.index
        self._ready = {c: LazyHeap(index.__getitem__, state.runnable) for c in self._inners}
        for op in state.runnable_operators():
            self._ready[plan.class_of(op)].push(op)

    def _on_enqueue(self, op: str, state: SchedulerState) -> None:
        klass = state.plan.class_of(op)
        self._ready[klass].ensure(op)
        view = self._views.get(klass)
        if view is not None:
            view.notify(op)

    def _has_work(self, klass: str) -> bool:
        ready = self._ready.get(klass)
        return ready is not None and ready.top() is not None

    # -- the pick ------------------------------------------------------------------------------
    def _choose(self, state: SchedulerState) -> Unit | None:
        if self._single is not None:
            return self._inners[self._single].pick(state)
        now = state.now
        klass = self._turns.next_class(now, self._has_work)
        if klass is None:
            return None
        unit = self._inners[klass].pick(self._views[klass])
        if unit is None:  # the inner idles with work: the engine reports it
            return None
        if unit.quota_time is None or unit.quota_time > self.quantum:
            unit = dataclasses.replace(unit, quota_time=self.quantum)
        self._turns.ran(now, run_bound(state, unit))
        return unit

    def detach(self) -> None:
        super().detach()
        for inner in self._inners.values():
            inner.detach()

    def in_force(self) -> tuple[str, dict[str, float]]:
        """The strategy that orders the work inside each class (this one's own name with
        ``inner=None``, before an owner gives it one)."""
        return super().in_force() if self.inner is None else in_force_of(self.inner)

    # -- introspection and state ---------------------------------------------------------------
    @property
    def inners(self) -> dict[str, Scheduler]:
        """The inner strategy of each class (empty until attached)."""
        return dict(self._inners)

    def state_dict(self) -> dict[str, Any]:
        if self._turns.pending is not None:
            turns = dict(self._turns.pending)
        elif self._parent is None:
            turns = {}
        else:
            turns = self._turns.state_dict()
        inner = {c: s.state_dict() for c, s in self._inners.items()}
        inner.update(self._restored_inner)
        return {"turns": turns, "inner": inner}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if not isinstance(state, Mapping) or set(state) - {"turns", "inner"}:
            raise SchedulerError(f"ClassShares state is a table with keys 'turns' and 'inner', got {state!r}")
        turns = state.get("turns", {})
        ClassTurns.check_state(turns, where="ClassShares")
        inner = state.get("inner", {})
        if not isinstance(inner, Mapping) or not all(isinstance(v, Mapping) for v in inner.values()):
            raise SchedulerError(f"ClassShares state: inner must map class names to strategy states, got {inner!r}")
        self._turns.pending = dict(turns)
        self._restored_inner = {str(c): dict(v) for c, v in inner.items()}
        if self._state is not None:
            attached = self._state
            self.detach()
            self._parent = None
            self.attach(attached)
