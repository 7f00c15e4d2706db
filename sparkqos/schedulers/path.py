"""Path Capacity, Segment, Simplified Segment and Threshold scheduling.

Jiang & Chakravarthy, "Scheduling Strategies for Processing Continuous Queries over Streams",
UTA TR CSE-2003-30, §2.1 (capacities, eq 2.1–2.3) and §3.1–3.4 (the strategies, eq 3.1–3.3).

Every strategy here serves *chains of operators* bottom-up with ``carry`` (Jiang's "internal
scheduling strategy"): the head consumes up to one quantum's worth of tuples, each operator above
processes exactly what the one below produced. A unit is identified by its head operator. The
unit headed by a path's leaf is the path (or its first segment); an operator in the middle of a
path heads the *rest* of its path (or segment) from there, so tuples another strategy left
half-way (after an adaptive switch, or behind a blocked join) are still served, ranked by the
capacity of what remains to be done for them. Two paths with the same leaf (a union of two
streams) have the same operators, hence one unit and one capacity.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from sparkqos.errors import SchedulerError, check_choice, check_number
from sparkqos.model.plan import Plan
from sparkqos.model.state import SchedulerState, Unit
from sparkqos.schedulers.base import LazyHeap, PathScheduler, Scheduler

Stat = Callable[[str], float]


# -- capacities (Jiang §2.1, §3.3) ---------------------------------------------------------------
def input_tuple_size(plan: Plan, op: str) -> float:
    """Size of one input tuple of ``op``: 1 for a stream, the producer's ``tuple_size`` for an
    operator; with several inputs (a join) the mean of them (eq 2.1 asks for a weighted mean; the
    weights, i.e. input rates, are not known statically, so they are taken equal)."""
    sizes = [1.0 if src in plan.streams else plan[src].tuple_size for src in plan[op].inputs]
    return math.fsum(sizes) / len(sizes)


def output_tuple_size(plan: Plan, op: str) -> float:
    """Memory one output tuple of ``op`` holds in a queue; 0 at a query root, whose outputs the
    application consumes at once (Jiang §2.1)."""
    return 0.0 if plan.consumer(op) is None else plan[op].tuple_size


def processing_capacity(operators: Sequence[str], selectivity: Stat, cost: Stat) -> float:
    """Tuples a chain of operators (leaf first) can take in per time unit, eq 2.2 / 3.1:
    1 / Σₖ (Πⱼ<ₖ σⱼ)·cₖ.

    >>> sel, cost = {"A": 0.2, "B": 0.5}.get, {"A": 1.0, "B": 5.0}.get
    >>> processing_capacity(["A", "B"], sel, cost)  # 1 / (1 + 0.2·5)
    0.5
    """
    total, surviving = 0.0, 1.0
    for op in operators:
        total += surviving * cost(op)
        surviving *= selectivity(op)
    return 1.0 / total


def operator_release_capacity(plan: Plan, op: str, selectivity: Stat, cost: Stat) -> float:
    """Memory ``op`` releases per time unit, eq 2.1: (1/c)·(input size − output size·σ)."""
    return (input_tuple_size(plan, op) - output_tuple_size(plan, op) * selectivity(op)) / cost(op)


def memory_release_capacity(plan: Plan, operators: Sequence[str], selectivity: Stat, cost: Stat) -> float:
    """Memory a segment (leaf first) releases per time unit, eq 3.2:
    C_S^P · (input size − S_o·Πσ), S_o = 0 when the segment ends at a query root.

    >>> from sparkqos.sim import chain_plan
    >>> plan = chain_plan([(0.2, 1.0), (0.5, 5.0)])
    >>> sel, cost = (lambda o: plan[o].selectivity), (lambda o: plan[o].cost)
    >>> memory_release_capacity(plan, ["O1"], sel, cost)  # (1 − 0.2) / 1
    0.8
    >>> memory_release_capacity(plan, ["O1", "O2"], sel, cost)  # the root's output leaves: 1 / 2
    0.5
    """
    surviving = math.prod(selectivity(op) for op in operators)
    released = input_tuple_size(plan, operators[0]) - output_tuple_size(plan, operators[-1]) * surviving
    return processing_capacity(operators, selectivity, cost) * released


# -- segment construction (Jiang §3.3) -----------------------------------------------------------
def partition_path(release: Sequence[float], gamma: float = 1.0, two_segments: bool = False) -> list[tuple[int, int]]:
    """Split a path into segments ``[start, end)`` from its operators' memory release capacities.

    A segment grows while the next operator's capacity is at least γ times the current one's
    (Cᴹ_{j+1} ≥ γ·Cᴹ_j; γ = 1 is the segment strategy's "non-decreasing" rule). With
    ``two_segments`` (simplified segment strategy) only the first segment is grown this way and
    the rest of the path forms the second.

    >>> partition_path([0.1, 0.9, 0.05, 0.2])
    [(0, 2), (2, 4)]
    >>> partition_path([0.8, 0.7, 0.3, 0.2], gamma=0.75, two_segments=True)
    [(0, 2), (2, 4)]
    """
    out: list[tuple[int, int]] = []
    start, n = 0, len(release)
    while start < n:
        end = start + 1
        while end < n and release[end] >= gamma * release[end - 1]:
            end += 1
        if two_segments and out:
            end = n
        out.append((start, end))
        start = end
    return out


class SegmentList:
    """The system segment list with Jiang's pruning and per-query sharing counts (§3.3).

    A new segment is dropped when a segment holding all its operators is listed already (the
    query then shares that segment); otherwise it replaces every listed segment it contains.
    Each operator of a listed segment counts the queries using it; removing a query decrements
    the counts, drops operators that reach zero and segments left empty.

    >>> from sparkqos.sim import chain_plan
    >>> plan = chain_plan([(0.9, 1.0), (0.1, 1.0), (0.5, 10.0)])
    >>> segs = SegmentList.build(plan, lambda o: plan[o].selectivity, lambda o: plan[o].cost)
    >>> segs.segments
    [('O1', 'O2'), ('O3',)]
    """

    def __init__(self) -> None:
        self._segments: list[tuple[str, ...]] = []
        self._users: list[dict[str, set[str]]] = []  # per segment: operator -> queries using it

    @classmethod
    def build(cls, plan: Plan, selectivity: Stat, cost: Stat, gamma: float = 1.0, two_segments: bool = False) -> SegmentList:
        """Segments of every query of ``plan``."""
        segs = cls()
        for query in plan.queries:
            segs.add_query(plan, query, selectivity, cost, gamma, two_segments)
        return segs

    @property
    def segments(self) -> list[tuple[str, ...]]:
        return list(self._segments)

    def add_query(
        self, plan: Plan, query: str, selectivity: Stat, cost: Stat, gamma: float = 1.0, two_segments: bool = False
    ) -> None:
        """Partition the operator paths of ``query`` and merge their segments into the list."""
        if query not in plan.queries:
            raise SchedulerError(f"no query named {query!r} in the plan; it has {sorted(plan.queries)}")
        for path in plan.paths:
            if path.query != query:
                continue
            release = [operator_release_capacity(plan, op, selectivity, cost) for op in path.operators]
            for a, b in partition_path(release, gamma, two_segments):
                self._add(path.operators[a:b], query)

    def remove_query(self, query: str) -> None:
        """Forget ``query``: its operators' counts drop; operators and segments nobody uses go."""
        segments, users = [], []
        for seg, use in zip(self._segments, self._users):
            for op in seg:
                use[op].discard(query)
            kept = tuple(op for op in seg if use[op])
            if kept:
                segments.append(kept)
                users.append({op: use[op] for op in kept})
        self._segments, self._users = segments, users

    def _add(self, segment: tuple[str, ...], query: str) -> None:
        new = set(segment)
        for seg, use in zip(self._segments, self._users):
            if new <= set(seg):  # a superset (or the same segment) is listed: share it
                for op in segment:
                    use[op].add(query)
                return
        users: dict[str, set[str]] = {op: {query} for op in segment}
        keep_s, keep_u = [], []
        for seg, use in zip(self._segments, self._users):
            if set(seg) < new:  # a subset: the new segment replaces it and inherits its users
                for op, qs in use.items():
                    users[op] |= qs
            else:
                keep_s.append(seg)
                keep_u.append(use)
        self._segments = keep_s + [segment]
        self._users = keep_u + [users]


def segment_suffixes(plan: Plan, segments: Iterable[tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
    """For every operator, the chain it heads: from it to the end of the longest listed segment
    containing it. Segments through one operator are all prefixes of its upward path, so the
    longest one contains the others."""
    out: dict[str, tuple[str, ...]] = {}
    for seg in segments:
        for k, op in enumerate(seg):
            rest = seg[k:]
            if len(rest) > len(out.get(op, ())):
                out[op] = rest
    for op in plan.names:  # a plan change can leave an operator uncovered: serve it alone
        out.setdefault(op, (op,))
    return out


# -- strategies ----------------------------------------------------------------------------------
class _ChainUnits(PathScheduler):
    """Static priority per unit head; the unit is a carry chain (path, segment or their rest).
    Subclasses give :meth:`chains` (head → operators) and :meth:`chain_priority`."""

    unit_kind = "path"

    def __init__(self, quantum: float | None = 1.0):
        super().__init__()
        check_number("quantum", quantum, low=0, low_open=True, none_ok=True, error=SchedulerError)
        self.quantum = None if quantum is None else float(quantum)

    def chains(self, state: SchedulerState) -> dict[str, tuple[str, ...]]:
        raise NotImplementedError

    def chain_priority(self, state: SchedulerState, chain: tuple[str, ...]) -> float:
        raise NotImplementedError

    def layout(self, state: SchedulerState) -> tuple[dict[str, float], dict[str, Unit]]:
        """Priority and unit of every operator, as the strategy ranks them now."""
        prio: dict[str, float] = {}
        units: dict[str, Unit] = {}
        sel, cost = state.selectivity, state.cost
        for head, chain in self.chains(state).items():
            prio[head] = self.chain_priority(state, chain)
            quota = None if self.quantum is None else processing_capacity(chain, sel, cost) * self.quantum
            units[head] = Unit(self.unit_kind, chain, quota_tuples=quota, carry=True)
        return prio, units

    def priorities(self, state: SchedulerState) -> dict[str, float]:
        return self.layout(state)[0]

    def units(self, state: SchedulerState) -> dict[str, Unit]:
        return self.layout(state)[1]

    def _rebuild(self, state: SchedulerState) -> None:
        self._priority, self._units = self.layout(state)
        self._heap = _priority_heap(state, self._priority)


def _priority_heap(state: SchedulerState, prio: dict[str, float]) -> LazyHeap:
    index, oldest = state.plan.index, state.oldest
    heap = LazyHeap(lambda op: (-prio[op], oldest(op), index[op]), state.runnable)
    for op in state.runnable_operators():
        heap.push(op)
    return heap


class PathCapacity(_ChainUnits):
    """Serve the operator path of highest processing capacity C_P = 1 / Σₖ(Πⱼ<ₖσⱼ)cₖ (eq 2.2)
    that has work, bottom-up, one quantum at a time (quota C_P·quantum tuples); ties go to the
    oldest tuple (Jiang §3.1). Re-picking after every quantum serves a path "until its queue is
    empty or a path of higher capacity has work". Capacities use the current statistics.

    Below, path B (B1 → B2) needs 0.5 + 0.2·1 = 0.7 time units per tuple, path A 2: B's tuple
    is pushed through both of B's operators before A runs, and latency is lowest (Theorem 1).

    >>> from sparkqos import Operator, Plan
    >>> from sparkqos.sim import Simulator
    >>> plan = Plan([Operator("A1", ("S",), 1.0, 2.0), Operator("B1", ("S",), 0.2, 0.5),
    ...              Operator("B2", ("B1",), 1.0, 1.0)], streams=["S"])
    >>> sim = Simulator(plan, PathCapacity(), {"S": [(0, 1.0)]}, record_dispatches=True)
    >>> _ = sim.run()
    >>> [d.unit.operators for d in sim.dispatches]
    [('B1', 'B2'), ('A1',), ('A1',)]
    >>> [(s.operator, s.start, s.end) for s in sim.steps]
    [('B1', 0.0, 0.5), ('B2', 0.5, 0.7), ('A1', 0.7, 1.7), ('A1', 1.7, 2.7)]
    """

    def chains(self, state: SchedulerState) -> dict[str, tuple[str, ...]]:
        plan = state.plan
        return {op: plan.upstream_path(op) for op in plan.names}

    def chain_priority(self, state: SchedulerState, chain: tuple[str, ...]) -> float:
        # A tuple waiting half-way stands for 1/Πσ (operators below it) input tuples: rank the
        # rest of its path by input tuples finished per time unit, which is the path capacity
        # for a leaf and never less than it for the rest of the path (Theorem 1's exchange
        # argument weighs each tuple by the input tuples it finishes).
        plan, sel = state.plan, state.selectivity
        below = 0.0
        for i in plan.paths_of(chain[0]):
            ops = plan.paths[i].operators
            below = max(below, math.prod(sel(op) for op in ops[: ops.index(chain[0])]))
        capacity = processing_capacity(chain, sel, state.cost)
        return capacity / below if below > 0 else capacity


class Segment(_ChainUnits):
    """Serve the segment of highest memory release capacity (eq 3.2) that has work; segments
    come from Jiang's construction algorithm with subset/superset pruning (§3.3) over the
    current statistics, rebuilt when the plan (its set of queries) or the statistics change.

    O1 barely shrinks a tuple but O2 removes most of it, so O1 and O2 form one segment
    (release capacities 0.1 ≤ 0.9); the root O3 (0.1) starts a second one, served last.

    >>> from sparkqos.sim import Simulator, chain_plan
    >>> plan = chain_plan([(0.9, 1.0), (0.1, 1.0), (0.5, 10.0)])
    >>> sim = Simulator(plan, Segment(), {"S": [(0, 0.5)]}, record_dispatches=True)
    >>> _ = sim.run()
    >>> [d.unit.operators for d in sim.dispatches]
    [('O1', 'O2'), ('O3',)]
    """

    unit_kind = "segment"
    _gamma = 1.0
    _two_segments = False

    def segment_list(self, state: SchedulerState) -> SegmentList:
        return SegmentList.build(state.plan, state.selectivity, state.cost, self._gamma, self._two_segments)

    def chains(self, state: SchedulerState) -> dict[str, tuple[str, ...]]:
        return segment_suffixes(state.plan, self.segment_list(state).segments)

    def chain_priority(self, state: SchedulerState, chain: tuple[str, ...]) -> float:
        return memory_release_capacity(state.plan, chain, state.selectivity, state.cost)


class SimplifiedSegment(Segment):
    """Segment scheduling with at most two segments per path (Jiang §3.3): the first grows from
    the leaf while Cᴹ_{i+1} ≥ γ·Cᴹ_i (similarity factor γ, default 3/4); the rest of the path is
    the second segment. Fewer segments, so a tuple is buffered at most twice along its path.

    With release capacities 0.5, 0.4 and 0.1 (root), γ = 3/4 keeps O1 and O2 together where
    the segment strategy (γ = 1) would split after O1:

    >>> from sparkqos.sim import Simulator, chain_plan
    >>> plan = chain_plan([(0.5, 1.0), (0.6, 1.0), (0.5, 10.0)])
    >>> sim = Simulator(plan, SimplifiedSegment(), {"S": [(0, 0.2)]}, record_dispatches=True)
    >>> _ = sim.run()
    >>> [d.unit.operators for d in sim.dispatches]
    [('O1', 'O2'), ('O3',)]
    >>> sim = Simulator(plan, Segment(), {"S": [(0, 0.2)]}, record_dispatches=True)
    >>> _ = sim.run()
    >>> [d.unit.operators for d in sim.dispatches]
    [('O1',), ('O2',), ('O3',)]
    """

    _two_segments = True

    def __init__(self, gamma: float = 0.75, quantum: float | None = 1.0):
        super().__init__(quantum)
        self.gamma = float(
            check_number("gamma", gamma, low=0, high=1, low_open=True, error=SchedulerError, where="similarity factor ")
        )

    @property
    def _gamma(self) -> float:  # type: ignore[override]
        return self.gamma


NORMAL, SAVING = "normal", "saving"


def thresholds(memory_limit: float, mean_queued: float, beta: float = 0.9) -> tuple[float, float]:
    """Jiang eq 3.3: T_max = min((1+α)/2·M, β·M) with α = M̄/M; T_min = min(M̄, β·T_max).

    >>> thresholds(100.0, 20.0)
    (60.0, 20.0)
    >>> thresholds(100.0, 90.0)
    (90.0, 81.0)
    """
    alpha = mean_queued / memory_limit
    t_max = min((1 + alpha) / 2 * memory_limit, beta * memory_limit)
    return t_max, min(mean_queued, beta * t_max)


class Threshold(Scheduler):
    """Path capacity in normal mode, simplified segment in memory-saving mode (Jiang §3.4).

    At every pick it reads the queued memory M_c (``state.total_queued_bytes``, in the engine's
    memory units) and enters saving mode when M_c ≥ T_max, returning to normal when M_c ≤ T_min,
    thresholds from eq 3.3 with ``memory_limit`` M and safety factor β ∈ (0.5, 1). M̄, "the mean
    total queue memory", is the time average of M_c sampled at picks (each sample holds until
    the next), so how often an engine happens to ask does not weigh in. With
    ``memory_limit=None`` it never saves memory and is exactly path capacity. The mode and the
    running mean are its serialised state.

    >>> from sparkqos import Operator, Plan
    >>> from sparkqos.sim import Simulator
    >>> plan = Plan([Operator("A1", ("S",), 1.0, 2.0), Operator("B1", ("S",), 0.2, 0.5),
    ...              Operator("B2", ("B1",), 1.0, 1.0)], streams=["S"])
    >>> sim = Simulator(plan, Threshold(memory_limit=1.0), {"S": [(0, 1.0)]}, record_dispatches=True)
    >>> _ = sim.run()
    >>> [d.unit.operators for d in sim.dispatches]  # 2 queued ≥ T_max = 0.9: B split in segments
    [('B1',), ('B2',), ('A1',), ('A1',)]
    >>> sim.scheduler.state_dict()["mode"]
    'normal'
    """

    def __init__(self, memory_limit: float | None = None, beta: float = 0.9, gamma: float = 0.75, quantum: float | None = 1.0):
        # memory_limit: the queue memory available, in the engine's memory units (None: no limit).
        check_number("memory_limit", memory_limit, low=0, low_open=True, none_ok=True, error=SchedulerError)
        check_number("beta", beta, low=0.5, high=1, low_open=True, high_open=True, error=SchedulerError, where="safety factor ")
        check_number("gamma", gamma, low=0, high=1, low_open=True, error=SchedulerError, where="similarity factor ")
        check_number("quantum", quantum, low=0, low_open=True, none_ok=True, error=SchedulerError)
        self.memory_limit = memory_limit
        self.beta = float(beta)
        self.gamma = float(gamma)
        self.quantum = None if quantum is None else float(quantum)
        self._normal = PathCapacity(quantum)
        self._saving = SimplifiedSegment(gamma, quantum)
        self.mode = NORMAL
        self._area = 0.0  # ∫ M_c dt since the first pick
        self._start: float | None = None
        self._last_time = 0.0
        self._last_queued = 0.0
        self._heaps: dict[str, LazyHeap] = {}
        self._units: dict[str, dict[str, Unit]] = {}

    def _rebuild(self, state: SchedulerState) -> None:
        for mode, strategy in ((NORMAL, self._normal), (SAVING, self._saving)):
            prio, self._units[mode] = strategy.layout(state)
            self._heaps[mode] = _priority_heap(state, prio)

    def _on_enqueue(self, op: str, state: SchedulerState) -> None:
        for heap in self._heaps.values():
            heap.ensure(op)

    @property
    def mean_queued(self) -> float:
        """M̄: time-averaged queued memory over the picks seen so far."""
        if self._start is None:
            return 0.0
        span = self._last_time - self._start
        return self._area / span if span > 0 else self._last_queued

    def _observe(self, now: float, queued: float) -> None:
        if self._start is None:
            self._start = self._last_time = now
        elif now > self._last_time:
            self._area += self._last_queued * (now - self._last_time)
            self._last_time = now
        self._last_queued = queued
        if self.memory_limit is None:
            return
        t_max, t_min = thresholds(self.memory_limit, self.mean_queued, self.beta)
        if self.mode == NORMAL and queued >= t_max:
            self.mode = SAVING
        elif self.mode == SAVING and queued <= t_min:
            self.mode = NORMAL

    def _choose(self, state: SchedulerState) -> Unit | None:
        self._observe(state.now, state.total_queued_bytes)
        op = self._heaps[self.mode].top()
        return None if op is None else self._units[self.mode][op]

    _STATE_KEYS = ("mode", "queued_area", "start", "last_time", "last_queued")

    def state_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "queued_area": self._area,
            "start": self._start,
            "last_time": self._last_time,
            "last_queued": self._last_queued,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        unknown = set(state) - set(self._STATE_KEYS)
        if unknown:
            raise SchedulerError(f"Threshold state has unknown keys {sorted(unknown)}; expected {list(self._STATE_KEYS)}")
        where = "Threshold state: "
        mode = check_choice("mode", state.get("mode", NORMAL), (NORMAL, SAVING), error=SchedulerError, where=where)
        values = {}
        for key in self._STATE_KEYS[1:]:
            v = state.get(key, None if key == "start" else 0.0)
            memory = key in ("queued_area", "last_queued")
            check_number(key, v, low=0 if memory else None, none_ok=key == "start", error=SchedulerError, where=where)
            values[key] = None if v is None else float(v)
        self.mode = mode
        self._area, self._start = values["queued_area"], values["start"]
        self._last_time, self._last_queued = values["last_time"], values["last_queued"]
