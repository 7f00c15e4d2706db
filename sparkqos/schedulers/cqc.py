"""Continuous Query Class (CQC) scheduling: weighted round robin over query classes, Highest Rate
inside each class (Al Moakar et al., DMSN 2009, §3–4 and Algorithm 1).

Level 1 gives class i the time slice Tᵢ = Pᵢ·k / ΣP per round, without preempting: a class whose
last run goes past its quota owes the excess, deducted from its next quota (negative credit),
while quota a class leaves unused is not carried over. Level 2 is HR over the class's operators;
source operators (kind ``"source"``, the stream readers of AQSIOS) run only when no operational
operator of the class has input.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from sparkqos.errors import SchedulerError, check_number
from sparkqos.model.state import SchedulerState, Unit
from sparkqos.schedulers.base import LazyHeap, Scheduler
from sparkqos.schedulers.rate import highest_rate_priorities

#: Credit below this is spent (float error of summed run times).
CREDIT_EPS = 1e-9


def class_quotas(priorities: Mapping[str, float], k: float) -> dict[str, float]:
    """Ideal time slice Tᵢ = Pᵢ·k / ΣP of each class (Algorithm 1, setup step 2).

    >>> class_quotas({"H": 6, "C": 3, "N": 1}, 20)
    {'H': 12.0, 'C': 6.0, 'N': 2.0}
    """
    total = math.fsum(priorities.values())
    return {name: p * k / total for name, p in priorities.items()}


def next_credit(slice_: float, credit: float, used: float) -> float:
    """Quota for a class's next turn (Algorithm 1, execution step 3): back to its full slice if it
    stayed within ``credit``, else the slice minus the overrun (the excess over ``credit``).

    >>> next_credit(12, 12, 15)   # class H overran its 12 units by 3
    9
    >>> next_credit(12, 12, 5)    # unused quota is not carried over
    12
    """
    if used <= credit + CREDIT_EPS:
        return slice_
    return slice_ - (used - credit)


class ClassTurns:
    """Level 1 of CQC Algorithm 1, on its own: whose turn it is among the query classes.

    Classes take turns in decreasing priority (ties by name); class i may use its credit, at most
    Tᵢ = Pᵢ·k / ΣP (:func:`class_quotas`), per turn. Time is counted through ``now``: each call of
    :meth:`next_class` first charges the class that ran the previous dispatch with the time since
    :meth:`ran` was called, at most the ``cap`` given there (how long that dispatch could have
    lasted: the scheduler cannot otherwise tell a run that ended early from an idle processor).
    A turn ends when the class has used its credit or has no work left; its next credit is
    :func:`next_credit`. A class whose credit is not positive sits its turn out and gains Tᵢ
    (step 2a); a class with no work returns at once, having used nothing, so its credit goes
    back to Tᵢ (step 3a).

    Shared by :class:`Cqc` (HR inside each class) and
    :class:`~sparkqos.schedulers.classes.ClassShares` (any strategy inside each class), so the
    two choose classes with one implementation. The mutable part round-trips through
    :meth:`state_dict` / :meth:`load_state_dict` (the keys of :class:`Cqc`'s state).
    """

    STATE_KEYS = frozenset({"credit", "current", "used", "pick_time", "pick_cap"})

    def __init__(self, k: float):
        self.k = k
        self.order: list[str] = []
        self.slice: dict[str, float] = {}
        self.credit: dict[str, float] = {}
        self.current: str | None = None
        self.used = 0.0
        self.pick_time: float | None = None
        self.pick_cap = 0.0
        #: A saved state (:meth:`state_dict`) the next :meth:`setup` continues from.
        self.pending: dict[str, Any] | None = None

    def setup(self, priorities: Mapping[str, float], where: str = "Cqc") -> None:
        """The plan's classes and priorities (setup steps 1–2). Credits are kept when the
        classes are the same (a rebuild after a statistics update), else reset to the quotas;
        then a ``pending`` saved state is loaded (``where`` names the strategy in its errors)."""
        self.order = sorted(priorities, key=lambda c: (-priorities[c], c))
        self.slice = class_quotas({c: priorities[c] for c in self.order}, self.k)
        if not self.credit or set(self.credit) != set(self.order):
            self.credit = dict(self.slice)
            self.current = None
            self.used = 0.0
            self.pick_time = None
        if self.pending is not None:
            self.load_state_dict(self.pending, where=where)
            self.pending = None

    def next_class(self, now: float, has_work: Callable[[str], bool]) -> str | None:
        """The class whose turn it is at ``now`` (the current one while it has credit and work),
        or None when no class has work."""
        if self.pick_time is not None:
            self.used += min(max(now - self.pick_time, 0.0), self.pick_cap)
            self.pick_time = None
        current = self.current
        if current is not None:
            if self.used < self.credit[current] - CREDIT_EPS and has_work(current):
                return current
            self.credit[current] = next_credit(self.slice[current], self.credit[current], self.used)
            self.current = None
            self.used = 0.0
        if not any(has_work(c) for c in self.order):
            return None
        # Cycle from the class after the last one served; each pass raises every negative credit
        # by its slice, so a class with work is reached after finitely many passes.
        n = len(self.order)
        i = 0 if current is None else self.order.index(current) + 1
        while True:
            klass = self.order[i % n]
            i += 1
            if self.credit[klass] <= CREDIT_EPS:  # step 2a: sit this turn out
                self.credit[klass] += self.slice[klass]
                continue
            if not has_work(klass):  # a turn that returns at once used nothing: step 3a
                self.credit[klass] = self.slice[klass]
                continue
            self.current = klass
            self.used = 0.0
            return klass

    def ran(self, now: float, cap: float) -> None:
        """The current class was given a dispatch at ``now`` that can last at most ``cap``."""
        self.pick_time = now
        self.pick_cap = cap

    def charge(self, klass: str, used: float, where: str = "Cqc") -> None:
        """End ``klass``'s turn after it ran for ``used`` time units (Algorithm 1, step 3)."""
        if klass not in self.credit:
            raise SchedulerError(f"{where}: unknown class {klass!r}; classes are {self.order}")
        self.credit[klass] = next_credit(self.slice[klass], self.credit[klass], used)
        if self.current == klass:
            self.current, self.used, self.pick_time = None, 0.0, None

    def state_dict(self) -> dict[str, Any]:
        return {
            "credit": dict(self.credit),
            "current": self.current,
            "used": self.used,
            "pick_time": self.pick_time,
            "pick_cap": self.pick_cap,
        }

    @classmethod
    def check_state(cls, state: Mapping[str, Any], where: str = "Cqc") -> None:
        """Raise SchedulerError unless ``state`` looks like :meth:`state_dict`'s."""
        if not isinstance(state, Mapping):
            raise SchedulerError(f"{where} state must be a table, got {state!r}")
        unknown = set(state) - cls.STATE_KEYS
        if unknown:
            raise SchedulerError(f"{where} state has unknown keys {sorted(unknown)}; expected {sorted(cls.STATE_KEYS)}")
        credit = state.get("credit", {})
        if not isinstance(credit, dict) or not all(isinstance(v, (int, float)) for v in credit.values()):
            raise SchedulerError(f"{where} state: credit must map class names to numbers, got {credit!r}")

    def load_state_dict(self, saved: Mapping[str, Any], where: str = "Cqc") -> None:
        """Continue from ``saved`` (after :meth:`setup` with the same classes)."""
        credit = {str(c): float(v) for c, v in saved.get("credit", {}).items()}
        if not credit:  # saved before this strategy first ran (e.g. an idle adaptive candidate)
            return
        if set(credit) != set(self.order):
            raise SchedulerError(f"{where} state names classes {sorted(credit)}; the plan has {sorted(self.order)}")
        current = saved.get("current")
        if current is not None and current not in credit:
            raise SchedulerError(f"{where} state: current class {current!r} is not one of {sorted(credit)}")
        self.credit = credit
        self.current = current
        self.used = float(saved.get("used", 0.0))
        pick_time = saved.get("pick_time")
        self.pick_time = None if pick_time is None else float(pick_time)
        self.pick_cap = float(saved.get("pick_cap", 0.0))


class SharesClasses(Scheduler):
    """A strategy that shares time between query classes itself, with CQC's level 1
    (:class:`ClassTurns`, ``_turns``): class shares leave it as it is."""

    _turns: ClassTurns

    @property
    def quotas(self) -> dict[str, float]:
        """Tᵢ of each class, highest priority first (empty until attached)."""
        return dict(self._turns.slice)

    @property
    def credits(self) -> dict[str, float]:
        """Quota each class may use in its next (or current) turn."""
        return dict(self._turns.credit)

    @classmethod
    def class_shares_params(cls, name: str, params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """Already shares time between classes: unchanged."""
        return name, dict(params)


class Cqc(SharesClasses):
    """Two-level class scheduler (CQC Algorithm 1).

    ``k`` is the length of one round of the weighted round robin, in the engine's time units
    (virtual time in the simulator, seconds in the executor); class i gets Pᵢ·k / ΣP of it.
    Quota is counted in time through ``state.now``: at each pick the class that made the previous
    pick is charged the time since then, at most the length its run could have had
    (min(``quantum``, queued × cost) of the operator picked) — the scheduler cannot otherwise
    tell a run that ended early from an idle processor. Every unit asks for at most ``quantum``
    of time, so a class can overrun its quota by less than one quantum per turn.

    Classes take turns in decreasing priority. A class whose credit is not positive sits its
    turn out and gains Tᵢ (step 2a); a class with no runnable operator returns at once, having
    used nothing, so its credit goes back to Tᵢ (step 3a). Only classes with work are served, and
    a pick returns None only when no operator of any class can run. Level 1 is
    :class:`ClassTurns`, which :class:`~sparkqos.schedulers.classes.ClassShares` shares to put
    any strategy in place of HR.

    Three one-operator queries in classes of priority 6, 3, 1 and k = 10: each round serves H
    for 6 time units, C for 3 and N for 1.

    >>> from sparkqos import Operator, Plan
    >>> from sparkqos.sim import Simulator
    >>> plan = Plan([Operator("h", ("A",), 0.5, 1.0, klass="H"),
    ...              Operator("c", ("B",), 0.5, 1.0, klass="C"),
    ...              Operator("n", ("D",), 0.5, 1.0, klass="N")],
    ...             streams=["A", "B", "D"], classes={"H": 6, "C": 3, "N": 1})
    >>> sim = Simulator(plan, Cqc(k=10), {s: [(0, 30.0)] for s in "ABD"}, record_dispatches=True)
    >>> _ = sim.run(until=19.5)
    >>> "".join(d.unit.head for d in sim.dispatches)
    'hhhhhhcccnhhhhhhcccn'
    """

    def __init__(self, k: float = 20.0, quantum: float = 1.0):
        check_number("k", k, low=0, low_open=True, error=SchedulerError, where="Cqc: ")
        check_number("quantum", quantum, low=0, low_open=True, error=SchedulerError, where="Cqc: ")
        self.k = k
        self.quantum = quantum
        self._turns = ClassTurns(k)
        self._operational: dict[str, LazyHeap] = {}
        self._sources: dict[str, LazyHeap] = {}
        self._units: dict[str, Unit] = {}

    @classmethod
    def sized_params(cls, budget_s: float, period_s: float | None = None, **params: Any) -> dict[str, Any]:
        """Left unset, the round ``k`` becomes the trigger's budget, so a round (every class's
        share) fits in one trigger; the quantum becomes a tenth of it, as for every strategy.

        >>> Cqc.sized_for(2.0)
        Cqc(k=2.0, quantum=0.2)
        >>> Cqc.sized_for(2.0, k=5.0)
        Cqc(k=5.0, quantum=0.2)
        """
        params.setdefault("k", budget_s)
        return super().sized_params(budget_s, period_s, **params)

    # -- derived structures -------------------------------------------------------------------
    def _rebuild(self, state: SchedulerState) -> None:
        plan = state.plan
        turns = self._turns
        turns.setup(plan.classes)
        prio = highest_rate_priorities(state)
        index = plan.index
        oldest = state.oldest
        key = lambda op: (-prio[op], oldest(op), index[op])  # noqa: E731
        self._operational = {c: LazyHeap(key, state.runnable) for c in turns.order}
        self._sources = {c: LazyHeap(key, state.runnable) for c in turns.order}
        self._units = {op: Unit("operator", (op,), quota_time=self.quantum) for op in plan.names}
        for op in state.runnable_operators():
            self._heap_of(op, state).push(op)

    def _heap_of(self, op: str, state: SchedulerState) -> LazyHeap:
        plan = state.plan
        heaps = self._sources if plan[op].kind == "source" else self._operational
        return heaps[plan.class_of(op)]

    def _on_enqueue(self, op: str, state: SchedulerState) -> None:
        self._heap_of(op, state).ensure(op)

    def _top(self, klass: str) -> str | None:
        op = self._operational[klass].top()
        return op if op is not None else self._sources[klass].top()

    # -- the pick ------------------------------------------------------------------------------
    def _choose(self, state: SchedulerState) -> Unit | None:
        now = state.now
        klass = self._turns.next_class(now, lambda c: self._top(c) is not None)
        if klass is None:
            return None
        op = self._top(klass)
        self._turns.ran(now, min(self.quantum, state.queued(op) * state.cost(op)))
        return self._units[op]

    # -- introspection and state ---------------------------------------------------------------
    def charge(self, klass: str, used: float) -> None:
        """End ``klass``'s turn after it ran for ``used`` time units (Algorithm 1, step 3); for
        engines that run a class for a whole turn themselves, and for tests."""
        self._turns.charge(klass, used)

    def state_dict(self) -> dict[str, Any]:
        if self._state is None and self._turns.pending is not None:
            return dict(self._turns.pending)
        return self._turns.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        ClassTurns.check_state(state)
        self._turns.pending = dict(state)
        if self._state is not None:
            self._rebuild(self._state)
