"""A deterministic discrete-event model of one processor serving an operator plan.

Semantics (docs/ARCHITECTURE.md, "The scheduler contract"): continuous virtual time; queues hold parcels
(amount, original arrival time); a run removes what it will process from its queue when it
starts and delivers σ × that downstream when it ends. Queue snapshots are taken at integer times,
after the completions and arrivals of that instant and before its dispatch, so work in flight is
not counted. Two run rules: ``one`` (at most one tuple per run, taking amount × c) and
``quantum`` (up to one quantum of time, i.e. quantum / c tuples; a run that empties its queue
ends early). ``slotted`` starts a new unit only on integer times. ``overhead`` (default 0) is a
start-up time charged to every operator run before its tuples are processed (thesis §4.5: batch
schedulers amortise it): the processor is busy and the run's output appears only after it.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from sparkqos.errors import SchedulerError, WorkloadError, check_choice, check_number
from sparkqos.model.plan import Plan
from sparkqos.model.state import EngineState, Unit
from sparkqos.schedulers.base import Scheduler

#: Parcels smaller than this are gone (fractional tuples accumulate float error).
EPS = 1e-12
#: Times this close to an integer are that integer.
TIME_EPS = 1e-9

RUN_RULES = ("one", "quantum")


@dataclass(frozen=True, slots=True)
class Output:
    """A parcel leaving a query root."""

    time: float
    amount: float
    delay: float
    query: str
    arrival: float


@dataclass(frozen=True, slots=True)
class Dispatch:
    time: float
    unit: Unit


@dataclass(frozen=True, slots=True)
class Step:
    """One run of one operator."""

    start: float
    end: float
    operator: str
    consumed: float


@dataclass
class SimResult:
    """``snapshots``: queued tuples at integer times, work in flight not counted (the papers'
    tables). ``fluid_snapshots``: the same instants with a run in flight counted pro rata — its
    input not yet processed plus the output produced so far — the memory of partially processed
    tuples that the Chain paper's theorems speak of."""

    snapshots: dict[int, float]
    outputs: list[Output]
    picks: int = 0
    starved_picks: int = 0
    end_time: float = 0.0
    fluid_snapshots: dict[int, float] = field(default_factory=dict)

    def cumulative_output(self, t: float) -> float:
        """Output amount delivered by time ``t`` (inclusive)."""
        return math.fsum(o.amount for o in self.outputs if o.time <= t + TIME_EPS)

    def peak_queued(self) -> float:
        return max(self.snapshots.values(), default=0.0)

    def peak_fluid(self) -> float:
        return max(self.fluid_snapshots.values(), default=0.0)

    @property
    def total_output(self) -> float:
        return math.fsum(o.amount for o in self.outputs)

    def mean_delay(self) -> float:
        """Amount-weighted mean delay of everything output."""
        total = self.total_output
        if total <= 0:
            return float("nan")
        return math.fsum(o.amount * o.delay for o in self.outputs) / total

    def to_json(self, digits: int = 12) -> dict:
        """The ``simulate --json`` document: snapshots keyed by integer time and every output."""
        return {
            "snapshots": {str(t): round(q, digits) for t, q in sorted(self.snapshots.items())},
            "outputs": [
                {
                    "time": round(o.time, digits),
                    "amount": round(o.amount, digits),
                    "delay": round(o.delay, digits),
                    "query": o.query,
                }
                for o in self.outputs
            ],
        }


class _Run:
    __slots__ = ("op", "taken", "start", "end")

    def __init__(self, op: str, taken: list[tuple[float, float]], start: float, end: float):
        self.op, self.taken, self.start, self.end = op, taken, start, end


def _snap(t: float) -> float:
    r = round(t)
    return float(r) if abs(t - r) < TIME_EPS else t


def _is_integer(t: float) -> bool:
    return abs(t - round(t)) < TIME_EPS


class SimState(EngineState):
    """Queues of the simulated plan, as schedulers see them (declared σ and c as statistics)."""

    def __init__(self, plan: Plan):
        super().__init__(plan)
        self._ports: dict[str, list[deque[list[float]]]] = {op.name: [deque() for _ in op.inputs] for op in plan}
        self._amount: dict[str, float] = {op.name: 0.0 for op in plan}
        self._blocking: dict[str, bool] = {op.name: op.blocking for op in plan}
        self._total = 0.0
        self._now = 0.0

    # -- SchedulerState -------------------------------------------------------------------
    @property
    def now(self) -> float:
        return self._now

    def queued(self, op: str) -> float:
        return self._amount[op]

    def queued_bytes(self, op: str) -> float:
        return self._amount[op]

    def oldest(self, op: str) -> float | None:
        best = None
        for port in self._ports[op]:
            if port and (best is None or port[0][1] < best):
                best = port[0][1]
        return best

    @property
    def total_queued(self) -> float:
        return self._total if self._total > EPS else 0.0

    @property
    def total_queued_bytes(self) -> float:
        return self.total_queued

    @property
    def stats_version(self) -> int:
        return 0

    # -- engine side -------------------------------------------------------------------------
    def _refresh(self, op: str) -> None:
        ports = self._ports[op]
        ok = all(ports) if self._blocking[op] else any(ports)
        if ok:
            self._runnable.add(op)
        else:
            self._runnable.discard(op)

    def enqueue(self, op: str, port: int, amount: float, arrival: float) -> None:
        self._ports[op][port].append([amount, arrival])
        self._amount[op] += amount
        self._total += amount
        self._refresh(op)
        self.notify(op)

    def consume(self, op: str, limit: float) -> list[tuple[float, float]]:
        """Remove up to ``limit`` tuples from ``op``'s queues, oldest first across inputs.
        A blocking join stops as soon as one of its inputs is empty."""
        ports = self._ports[op]
        blocking = self._blocking[op]
        taken: list[tuple[float, float]] = []
        remaining = limit
        while remaining > EPS:
            best = None
            for port in ports:
                if port:
                    if best is None or port[0][1] < best[0][1]:
                        best = port
                elif blocking:
                    best = None
                    break
            if best is None:
                break
            parcel = best[0]
            take = parcel[0] if parcel[0] <= remaining + EPS else remaining
            parcel[0] -= take
            if parcel[0] <= EPS:
                take += parcel[0]
                best.popleft()
            remaining -= take
            taken.append((take, parcel[1]))
        got = math.fsum(a for a, _ in taken)
        self._amount[op] = max(self._amount[op] - got, 0.0) if any(ports) else 0.0
        self._total = max(self._total - got, 0.0)
        self._refresh(op)
        return taken


class Simulator:
    """Runs ``scheduler`` over ``plan`` with the given arrivals.

    ``arrivals`` maps each stream to ``[(time, amount), ...]``; every operator that reads the
    stream receives its own copy of each parcel (Chain §2).

    >>> from sparkqos.schedulers import get
    >>> plan = chain_plan([(0.5, 1.0)])
    >>> Simulator(plan, get("fifo"), {"S": [(0, 1.0)]}).run().to_json()
    {'snapshots': {'0': 1.0, '1': 0.0}, 'outputs': [{'time': 1.0, 'amount': 0.5, 'delay': 1.0, 'query': 'O1'}]}
    """

    def __init__(
        self,
        plan: Plan,
        scheduler: Scheduler,
        arrivals: Mapping[str, Iterable[Sequence[float]]],
        run: str = "quantum",
        slotted: bool = False,
        quantum: float = 1.0,
        record_dispatches: bool = False,
        starvation_limit: int = 100,
        overhead: float = 0.0,
    ):
        check_choice("run", run, RUN_RULES, error=WorkloadError)
        check_number("quantum", quantum, low=0, low_open=True, error=WorkloadError)
        check_number("overhead", overhead, low=0, error=WorkloadError)  # time per operator run
        self.overhead = float(overhead)
        self.plan = plan
        self.scheduler = scheduler
        self.run_rule = run
        self.slotted = bool(slotted)
        self.quantum = float(quantum)
        self.starvation_limit = starvation_limit
        self.state = SimState(plan)
        self._arrivals = self._merge_arrivals(arrivals)
        self._ai = 0
        self._targets: dict[str, list[tuple[str, int]]] = {s: [] for s in plan.streams}
        self._out_port: dict[str, tuple[str, int] | None] = {}
        for op in plan:
            for port, src in enumerate(op.inputs):
                if src in self._targets:
                    self._targets[src].append((op.name, port))
            consumer = plan.consumer(op.name)
            self._out_port[op.name] = None if consumer is None else (consumer, plan[consumer].inputs.index(op.name))
        self._query = {op.name: plan.query_of(op.name) for op in plan}
        self._time = 0.0
        self._next_snap = 0
        self._run: _Run | None = None
        self._unit: Unit | None = None
        self._step = 0
        self._carry_left = 0.0
        self._carry_next = 0.0
        self.outputs: list[Output] = []
        self.snapshots: dict[int, float] = {}
        self.fluid_snapshots: dict[int, float] = {}
        self.picks = 0
        self.starved_picks = 0
        self.record_dispatches = record_dispatches
        self.dispatches: list[Dispatch] = []
        self.steps: list[Step] = []

    def _merge_arrivals(self, arrivals: Mapping[str, Iterable[Sequence[float]]]) -> list[tuple[float, int, str, float]]:
        merged = []
        for stream, items in arrivals.items():
            if stream not in self.plan.streams:
                raise WorkloadError(f"arrivals for unknown stream {stream!r}; the plan reads {list(self.plan.streams)}")
            order = self.plan.streams.index(stream)
            for k, item in enumerate(items):
                try:
                    t, amount = item
                    t, amount = float(t), float(amount)
                except (TypeError, ValueError):
                    raise WorkloadError(f"arrival {k} of stream {stream!r} must be [time, amount], got {item!r}") from None
                where = f"arrival {k} of stream {stream!r}: "
                check_number("time", t, low=0, error=WorkloadError, where=where)
                check_number("amount", amount, low=0, low_open=True, error=WorkloadError, where=where)
                merged.append((_snap(t), order, stream, amount))
        merged.sort(key=lambda a: (a[0], a[1]))
        return merged

    # -- the loop ----------------------------------------------------------------------------
    def run(self, until: float | None = None) -> SimResult:
        """Advance to time ``until`` (inclusive), or until everything has drained when None."""
        check_number("until", until, low=0, none_ok=True, error=WorkloadError)
        state = self.state
        arrivals = self._arrivals
        t = self._time
        while True:
            state._now = t
            if self._run is not None and self._run.end <= t + TIME_EPS:
                self._complete()
            while self._ai < len(arrivals) and arrivals[self._ai][0] <= t + TIME_EPS:
                _, _, stream, amount = arrivals[self._ai]
                for op, port in self._targets[stream]:
                    state.enqueue(op, port, amount, arrivals[self._ai][0])
                    state.record_input(amount)
                self._ai += 1
            if self._next_snap <= t + TIME_EPS and (until is None or self._next_snap <= until + TIME_EPS):
                self._snapshot(t)
            stuck = False
            if self._run is None:
                if self._unit is not None:
                    self._continue_unit(t)
                if self._run is None and self._unit is None and (not self.slotted or _is_integer(t)):
                    stuck = not self._start_unit(t)

            candidates = []
            if self._run is not None:
                candidates.append(self._run.end)
            if self._ai < len(arrivals):
                candidates.append(arrivals[self._ai][0])
            idle_with_work = self._run is None and not stuck and state.any_runnable
            if self.slotted and idle_with_work:
                candidates.append(math.floor(t + TIME_EPS) + 1.0)
            if until is not None:
                if self._next_snap <= until + TIME_EPS:
                    candidates.append(float(self._next_snap))
            elif self._run is not None or self._ai < len(arrivals) or idle_with_work:
                candidates.append(float(self._next_snap))
            if not candidates:
                break
            t_next = min(candidates)
            if until is not None and t_next > until + TIME_EPS:
                t = float(until)
                break
            t = t_next
        if until is None and self._next_snap - 1 < t - TIME_EPS:  # the drained state, once
            self._snapshot(t)
        self._time = t
        return SimResult(dict(self.snapshots), list(self.outputs), self.picks, self.starved_picks, t, dict(self.fluid_snapshots))

    def _snapshot(self, t: float) -> None:
        queued = self.state.total_queued
        fluid = queued
        run = self._run
        if run is not None and run.end > t:
            amount = math.fsum(a for a, _ in run.taken)
            busy = run.end - run.start - self.overhead  # the start-up part processes nothing
            done = max(t - run.start - self.overhead, 0.0) / busy if busy > 0 else 0.0
            kept = 0.0 if self._out_port[run.op] is None else self.state.selectivity(run.op)
            fluid += amount * ((1.0 - done) + done * kept)
        self.snapshots[self._next_snap] = queued
        self.fluid_snapshots[self._next_snap] = fluid
        self._next_snap += 1

    # -- dispatch ------------------------------------------------------------------------------
    def _start_unit(self, t: float) -> bool:
        state = self.state
        for _ in range(self.starvation_limit):
            self.picks += 1
            unit = self.scheduler.pick(state)
            if unit is None:
                if state.any_runnable:
                    raise SchedulerError(f"{self.scheduler!r} returned no unit while {state.runnable_operators()} can run")
                return False
            if not unit.operators or any(op not in self.plan for op in unit.operators):
                raise SchedulerError(f"{self.scheduler!r} returned a unit with unknown operators: {unit!r}")
            if state.runnable(unit.head):
                break
            self.starved_picks += 1
        else:
            raise SchedulerError(f"{self.scheduler!r} picked units with no work {self.starvation_limit} times in a row at t={t}")
        self._unit = unit
        self._step = 0
        self._carry_left = 0.0
        self._carry_next = 0.0
        if self.record_dispatches:
            self.dispatches.append(Dispatch(t, unit))
        self._continue_unit(t)
        return True

    def _per_run_limit(self, op: str, quota_tuples: float | None, quota_time: float | None) -> float:
        cost = self.state.cost(op)
        if self.run_rule == "one":
            limit = 1.0
            if quota_time is not None:
                limit = min(limit, quota_time / cost)
        else:
            q = self.quantum if quota_time is None else min(self.quantum, quota_time)
            limit = q / cost
        if quota_tuples is not None:
            limit = min(limit, quota_tuples)
        return limit

    def _continue_unit(self, t: float) -> None:
        """Start the next run of the current unit, or finish the unit."""
        unit = self._unit
        state = self.state
        while self._step < len(unit.operators):
            op = unit.operators[self._step]
            if unit.carry and self._step > 0:
                if self._carry_left <= EPS or not state.runnable(op):
                    break
                limit = min(self._carry_left, self._per_run_limit(op, None, None))
            else:
                if not state.runnable(op):
                    if unit.carry:
                        break
                    self._step += 1
                    continue
                limit = self._per_run_limit(op, unit.quota_tuples, unit.quota_time)
            taken = state.consume(op, limit)
            consumed = math.fsum(a for a, _ in taken)
            end = _snap(t + self.overhead + consumed * state.cost(op))
            self._run = _Run(op, taken, t, end)
            state.record_work(end - t)
            if self.record_dispatches:
                self.steps.append(Step(t, end, op, consumed))
            return
        self._unit = None

    def _complete(self) -> None:
        run, self._run = self._run, None
        state = self.state
        sel = state.selectivity(run.op)
        target = self._out_port[run.op]
        produced = 0.0
        for amount, arrival in run.taken:
            out = amount * sel
            if out <= EPS:
                continue
            produced += out
            if target is None:
                self.outputs.append(Output(run.end, out, run.end - arrival, self._query[run.op], arrival))
                state.record_delivery(out, out * (run.end - arrival))
            else:
                state.enqueue(target[0], target[1], out, arrival)
        unit = self._unit
        if unit.carry:
            if self._step > 0:
                self._carry_left -= math.fsum(a for a, _ in run.taken)
            self._carry_next += produced
            if self._step == 0 or self._carry_left <= EPS:
                self._step += 1
                self._carry_left, self._carry_next = self._carry_next, 0.0
        else:
            self._step += 1


def chain_plan(specs: Sequence[tuple[float, float]], stream: str = "S") -> Plan:
    """A single-stream plan O1 → O2 → … from ``[(selectivity, cost), ...]`` (for examples and tests)."""
    from sparkqos.model.plan import Operator

    ops = []
    prev = stream
    for i, (sel, cost) in enumerate(specs, start=1):
        ops.append(Operator(f"O{i}", (prev,), sel, cost))
        prev = f"O{i}"
    return Plan(ops, streams=[stream])
