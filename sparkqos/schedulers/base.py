"""The scheduler contract shared by the simulator and the executor.

A scheduler reads a :class:`SchedulerState` (read-only) and returns a :class:`Unit` of work, or
None when nothing can run. It never touches queues, Arrow data or clocks. Engines tell it what
changed through an event log (operators whose queues received tuples) and a statistics version
(bumped when selectivities or costs were re-estimated), so a scheduler keeps its priorities in
heaps and does logarithmic work per pick instead of scanning every operator.
"""

from __future__ import annotations

import heapq
import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

from sparkqos.errors import SchedulerError, check_number
from sparkqos.model.plan import Plan
from sparkqos.model.state import SchedulerState, Unit
from sparkqos.schedulers.builtin import NAME_OF

#: What :meth:`Scheduler.in_force` names before a selector's first pick: no strategy has run yet
#: (the same mark as the progress console's).
NO_STRATEGY_YET = "-"


def in_force_of(component: str | Scheduler) -> tuple[str, dict[str, float]]:
    """:meth:`Scheduler.in_force` of a strategy nested as its owner keeps it: a registry name is
    the strategy in force as it stands."""
    return (component, {}) if isinstance(component, str) else component.in_force()


class Scheduler(ABC):
    """Base class of every strategy.

    Parameters are the ``__init__`` arguments (river-style): ``params()``, ``clone()`` and ``repr``
    derive from the signature. Mutable *state* (a round-robin cursor, credits, a mode) is
    separate: ``state_dict()`` returns it as JSON-able data and ``load_state_dict()`` restores it.
    Derived structures (heaps of priorities) are rebuilt on :meth:`attach` and never serialised.

    Subclasses implement :meth:`_rebuild` (from the whole state), :meth:`_on_enqueue` (an operator
    received tuples) and :meth:`_choose` (the pick itself).
    """

    #: Registry name: from the table of built-ins, or set by :func:`sparkqos.schedulers.register`.
    name: ClassVar[str] = ""
    #: ``__init__`` keywords kept one release for old callers: not parameters (``params()``, ``repr``).
    DEPRECATED: ClassVar[tuple[str, ...]] = ()
    #: True for a strategy whose ``qos`` parameter takes a QoS spec (``adaptive``): a runner's
    #: ``qos=`` shorthand goes to such a strategy, and is refused with any other.
    TAKES_QOS: ClassVar[bool] = False

    _state: SchedulerState | None = None
    _log: list[str] | None = None
    _stats_seen: int = -1

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A built-in strategy takes its registry name from the table
        (:data:`~sparkqos.schedulers.builtin.BUILT_IN`) when it is defined."""
        super().__init_subclass__(**kwargs)
        name = NAME_OF.get(f"{cls.__module__}:{cls.__qualname__}")
        if name is not None:
            cls.name = name

    # -- parameters (derived from __init__) -------------------------------------------------
    @classmethod
    def _param_names(cls) -> list[str]:
        if cls.__init__ is object.__init__:
            return []
        sig = inspect.signature(cls.__init__)
        plain = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        return [name for name, p in sig.parameters.items() if name != "self" and p.kind in plain and name not in cls.DEPRECATED]

    def params(self) -> dict[str, Any]:
        return {p: getattr(self, p) for p in self._param_names()}

    def clone(self, **overrides: Any) -> Scheduler:
        """A fresh, unattached scheduler with the same parameters (some overridden)."""
        return type(self)(**{**self.params(), **overrides})

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params().items())
        return f"{type(self).__name__}({args})"

    # -- sizing to an engine's time unit ----------------------------------------------------
    @classmethod
    def sized_params(cls, budget_s: float, period_s: float | None = None, **params: Any) -> dict[str, Any]:
        """``params`` with the time parameters left unset sized to a trigger of ``budget_s``
        seconds of executor time (``period_s``: the trigger interval, None when there is none).

        Strategies state time in the papers' units; on Spark a unit is a second of executor time,
        so defaults such as a quantum of 1 would let one unit overrun a short trigger. Each
        strategy declares its own rule here, so engines never need to know which strategy has
        which time parameter. Default: a ``quantum`` (the longest unit of work) whose default
        is not None becomes a tenth of the budget. What ``params`` sets is kept.
        """
        check_number("budget_s", budget_s, low=0, low_open=True, error=SchedulerError, where=f"{cls.__name__}: ")
        check_number("period_s", period_s, low=0, low_open=True, none_ok=True, error=SchedulerError, where=f"{cls.__name__}: ")
        out = dict(params)
        quantum = inspect.signature(cls.__init__).parameters.get("quantum")
        if quantum is not None and quantum.default not in (None, inspect.Parameter.empty) and "quantum" not in out:
            out["quantum"] = budget_s / 10
        return out

    @classmethod
    def sized_for(cls, budget_s: float, period_s: float | None = None, **params: Any) -> Scheduler:
        """A new instance with :meth:`sized_params` (override that, not this)."""
        return cls(**cls.sized_params(budget_s, period_s, **params))

    @classmethod
    def class_shares_params(cls, name: str, params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """The strategy to build instead of ``name`` (this class's registry name, with ``params``)
        when class shares are on (:func:`sparkqos.schedulers.registry.build`): by default
        ``class_shares`` over it (schedulers/classes.py: CQC's level 1 above, this strategy inside
        each class, given as the component ``{"name": name, "params": params}``). A strategy that
        delegates to others (``adaptive``) or already shares time between classes (``cqc``) says
        otherwise here, so callers never name strategies."""
        return "class_shares", {"inner": {"name": name, "params": dict(params)}}

    # -- state ------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Serialisable mutable state (empty for stateless strategies)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned; takes effect at the next attach."""
        if state:
            raise SchedulerError(f"{type(self).__name__} holds no state, got {sorted(state)}")

    def in_force(self) -> tuple[str, dict[str, float]]:
        """The strategy that orders the work now, and its scores, as progress reports it: this
        strategy by its registry name (its class name when unregistered), no scores. A strategy
        that runs others (a selector, class shares) names the one in force instead."""
        return self.name or type(self).__name__, {}

    def reseed(self, seed: int) -> None:
        """Restart the strategy's random generator from ``seed`` (the sharded lane derives one per
        shard and micro-batch, so a replayed batch makes the same draws). Deterministic
        strategies have none: nothing to do."""
        del seed

    # -- engine protocol --------------------------------------------------------------------
    def attach(self, state: SchedulerState) -> None:
        """Start serving ``state``: subscribe to its events and build priorities from scratch."""
        self.detach()
        self._state = state
        self._log = state.subscribe()
        self._stats_seen = state.stats_version
        self._rebuild(state)

    def detach(self) -> None:
        """Stop listening (the adaptive controller parks strategies it is not using)."""
        if self._state is not None and self._log is not None:
            self._state.unsubscribe(self._log)
        self._state = None
        self._log = None

    def pick(self, state: SchedulerState) -> Unit | None:
        """The next unit of work, or None when no operator can run."""
        self._catch_up(state)
        return self._choose(state)

    def _catch_up(self, state: SchedulerState) -> None:
        """Before a pick: attach to ``state`` (a new one), rebuild when the statistics moved, else
        take in the operators that received tuples since the last pick."""
        if state is not self._state:
            self.attach(state)
        elif state.stats_version != self._stats_seen:
            self._stats_seen = state.stats_version
            self._log.clear()
            self._rebuild(state)
        log = self._log
        if log:
            for op in log:
                self._on_enqueue(op, state)
            log.clear()

    @abstractmethod
    def _rebuild(self, state: SchedulerState) -> None: ...

    @abstractmethod
    def _on_enqueue(self, op: str, state: SchedulerState) -> None: ...

    @abstractmethod
    def _choose(self, state: SchedulerState) -> Unit | None: ...


class LazyHeap:
    """A max-priority queue of runnable operators with lazy invalidation.

    ``key(op)`` returns a tuple ordered so that the *smallest* key is served first. Entries go
    stale when an operator's queue changes; :meth:`top` checks the entry it is about to return
    against the live key and re-inserts it when they differ, so each pick costs O(log n)
    amortised instead of a scan.
    """

    __slots__ = ("_heap", "_version", "_key", "_runnable")

    def __init__(self, key: Callable[[str], tuple], runnable: Callable[[str], bool]):
        self._heap: list[tuple] = []
        self._version: dict[str, int] = {}
        self._key = key
        self._runnable = runnable

    def clear(self) -> None:
        self._heap.clear()
        self._version.clear()

    def has_entry(self, op: str) -> bool:
        return self._version.get(op, 0) % 2 == 1

    def push(self, op: str) -> None:
        """Insert ``op`` with its current key, superseding any entry it had. An operator that
        cannot run gets no entry (its next arrival brings it back)."""
        v = self._version.get(op, 0)
        if not self._runnable(op):
            self._version[op] = v + 1 if v % 2 == 1 else v
            return
        v = v + 2 if v % 2 == 1 else v + 1  # odd versions mark a live entry
        self._version[op] = v
        heapq.heappush(self._heap, (self._key(op), v, op))

    def ensure(self, op: str) -> None:
        """Insert ``op`` unless it already has a live entry."""
        if self._version.get(op, 0) % 2 == 0:
            self.push(op)

    def top(self) -> str | None:
        heap = self._heap
        version = self._version
        while heap:
            key, v, op = heap[0]
            if version.get(op) != v:
                heapq.heappop(heap)
                continue
            if not self._runnable(op):
                heapq.heappop(heap)
                version[op] = v + 1  # even: no live entry
                continue
            live = self._key(op)
            if live != key:
                heapq.heapreplace(heap, (live, v, op))
                continue
            return op
        return None

    def __len__(self) -> int:
        return len(self._heap)


class HeapScheduler(Scheduler):
    """Serves the runnable operator with the smallest key, kept in a :class:`LazyHeap`.

    Subclasses give :meth:`_key` (a function of an operator, built from the state on every
    rebuild) and may override :meth:`_unit` (default: the operator alone). ``REINSERT``: whether
    an arrival can improve an operator's key (then every enqueue re-inserts it; otherwise only an
    operator without a live entry is inserted).
    """

    REINSERT: ClassVar[bool] = True

    def __init__(self) -> None:
        self._units: dict[str, Unit] = {}
        self._heap: LazyHeap | None = None

    @abstractmethod
    def _key(self, state: SchedulerState) -> Callable[[str], tuple]: ...

    def _unit(self, plan: Plan, op: str) -> Unit:
        return Unit("operator", (op,))

    def _rebuild(self, state: SchedulerState) -> None:
        plan = state.plan
        self._units = {op: self._unit(plan, op) for op in plan.names}
        self._heap = LazyHeap(self._key(state), state.runnable)
        for op in state.runnable_operators():
            self._heap.push(op)

    def _on_enqueue(self, op: str, state: SchedulerState) -> None:
        if self.REINSERT:
            self._heap.push(op)
        else:
            self._heap.ensure(op)

    def _choose(self, state: SchedulerState) -> Unit | None:
        op = self._heap.top()
        return None if op is None else self._units[op]


class PriorityScheduler(HeapScheduler):
    """Serves the runnable operator with the highest priority; ties go to the oldest tuple.

    Subclasses give :meth:`priorities` (recomputed only when statistics change). Among equally
    old tuples the one furthest along its path goes first, so a chain of operators with one
    priority pushes a batch through before starting the next (Chain §4.1: at most one tuple in
    the middle of each segment).
    """

    REINSERT = False  # a static priority: only ties on the oldest tuple can change

    def __init__(self) -> None:
        super().__init__()
        self._priority: dict[str, float] = {}

    @abstractmethod
    def priorities(self, state: SchedulerState) -> dict[str, float]: ...

    def _key(self, state: SchedulerState) -> Callable[[str], tuple]:
        plan = state.plan
        self._priority = prio = self.priorities(state)
        index = plan.index
        remaining = {op: len(plan.upstream_path(op)) for op in plan.names}  # fewer = further along
        oldest = state.oldest
        return lambda op: (-prio[op], oldest(op), remaining[op], index[op])


class PathScheduler(PriorityScheduler):
    """A priority strategy whose unit for each operator is a chain of operators above it (a path,
    a segment or their rest), served with carry: :meth:`units` gives them. The starvation guards
    serve "the path" of an operator with these units."""

    @abstractmethod
    def units(self, state: SchedulerState) -> dict[str, Unit]:
        """The unit serving each operator, as the strategy would offer it now."""


class ClusterScheduler(Scheduler):
    """A strategy whose operators form clusters that can be served side by side (COS §4.2): an
    engine may give each cluster its own thread (``ExecutorOptions.cluster_threads``), asking
    :meth:`pick_cluster` for one cluster's next unit. :meth:`pick` still serves the clusters in
    turn, so any engine can run it in one thread."""

    @property
    @abstractmethod
    def clusters(self) -> list[tuple[str, ...]]:
        """Operators of each cluster, in plan order (empty until attached)."""

    @abstractmethod
    def pick_cluster(self, cluster: int, state: SchedulerState) -> Unit | None:
        """The next unit of cluster ``cluster`` alone, or None when none of its operators can run.
        Not thread-safe: an engine running clusters in threads serialises calls to :meth:`pick`
        and :meth:`pick_cluster`."""
