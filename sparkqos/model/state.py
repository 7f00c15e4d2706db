"""The scheduler contract's data: the unit of work a strategy returns and the read-only state it reads.

A scheduler reads a :class:`SchedulerState` (read-only) and returns a :class:`Unit` of work, or
None when nothing can run. Both engines (``sparkqos.sim``, ``sparkqos.executor``) implement the
state through :class:`EngineState`. See docs/ARCHITECTURE.md, "The scheduler contract".
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass

from sparkqos.model.plan import Plan

UNIT_KINDS = ("operator", "path", "segment", "cluster")


@dataclass(frozen=True, slots=True)
class Unit:
    """What to run next.

    ``operators`` is one operator (kind ``operator``) or a chain of operators listed bottom-up
    (``path``, ``segment``, ``cluster``). ``quota_tuples`` / ``quota_time`` cap how much the unit
    may consume / how long it may run; None leaves the engine's default (the simulator's run rule,
    the executor's workload rule, thesis fig 4.1).

    With ``carry`` the unit follows tuples: the first operator consumes its share and every later
    operator processes exactly what the operator below it produced (FIFO's "push the oldest tuple
    through its whole path", Jiang §2.2). Without it, every operator of the unit gets one run of
    its own input in turn, bottom-up.
    """

    kind: str
    operators: tuple[str, ...]
    quota_tuples: float | None = None
    quota_time: float | None = None
    carry: bool = False

    @property
    def head(self) -> str:
        return self.operators[0]


class SchedulerState(ABC):
    """What a scheduler may read. Engines implement it; schedulers never write to it."""

    plan: Plan

    @property
    @abstractmethod
    def now(self) -> float:
        """Current time (virtual time in the simulator, seconds in the executor)."""

    @abstractmethod
    def queued(self, op: str) -> float:
        """Tuples waiting in the input queues of ``op``."""

    @abstractmethod
    def queued_bytes(self, op: str) -> float:
        """Memory held by the input queues of ``op`` (tuple units in the simulator)."""

    @abstractmethod
    def oldest(self, op: str) -> float | None:
        """Arrival time of the oldest tuple waiting for ``op`` (None when its queues are empty)."""

    @abstractmethod
    def runnable(self, op: str) -> bool:
        """``op`` has input and is not blocked (a join waits for all of its inputs)."""

    @abstractmethod
    def runnable_operators(self) -> Iterable[str]:
        """Every runnable operator (engines may compute this by a scan: call it only on attach)."""

    @abstractmethod
    def selectivity(self, op: str) -> float:
        """Current (smoothed) selectivity estimate of ``op``."""

    @abstractmethod
    def cost(self, op: str) -> float:
        """Current (smoothed) processing time per input tuple of ``op``."""

    def output_rate(self, op: str) -> float:
        """Output tuples per time unit while running: σ / c unless an engine measures it."""
        return self.selectivity(op) / self.cost(op)

    @property
    @abstractmethod
    def total_queued(self) -> float:
        """Tuples waiting in all queues."""

    @property
    @abstractmethod
    def total_queued_bytes(self) -> float:
        """Memory held by all queues."""

    @property
    @abstractmethod
    def output_total(self) -> float:
        """Tuples delivered by all query roots so far (plan throughput, thesis eq 3.6)."""

    @property
    @abstractmethod
    def output_delay_total(self) -> float:
        """Σ amount × delay over everything delivered so far (mean delay = this / output_total)."""

    @property
    @abstractmethod
    def input_total(self) -> float:
        """Tuples that entered the plan's leaf queues from its streams so far (once per reading
        operator), less any dropped by load shedding. With :attr:`total_queued` it tells what the
        operators' work released from memory."""

    @property
    @abstractmethod
    def stats_version(self) -> int:
        """Changes whenever selectivity or cost estimates change; priorities depending on them are stale."""

    @abstractmethod
    def subscribe(self) -> list[str]:
        """A fresh event log: the engine appends an operator's name each time tuples enter its queues."""

    @abstractmethod
    def unsubscribe(self, log: list[str]) -> None:
        """Stop appending to ``log``."""


class EventLogs:
    """The event logs schedulers subscribe to (:meth:`SchedulerState.subscribe`): each engine, or
    view of one, appends an operator's name to every log when the operator receives tuples."""

    _logs: list[list[str]]

    def subscribe(self) -> list[str]:
        log: list[str] = []
        self._logs.append(log)
        return log

    def unsubscribe(self, log: list[str]) -> None:
        self._logs = [l for l in self._logs if l is not log]

    def notify(self, op: str) -> None:
        """``op`` received tuples: tell every subscribed scheduler."""
        for log in self._logs:
            log.append(op)


class EngineState(EventLogs, SchedulerState):
    """The bookkeeping both engines share: the set of runnable operators, the published σ and c,
    the event logs schedulers subscribe to, and the running output totals. An engine keeps
    ``_runnable`` current, calls :meth:`notify` whenever an operator receives tuples and
    :meth:`record_delivery` for what its roots deliver."""

    def __init__(self, plan: Plan):
        self.plan = plan
        self._sel = {op.name: float(op.selectivity) for op in plan}
        self._cost = {op.name: float(op.cost) for op in plan}
        self._runnable: set[str] = set()
        self._logs: list[list[str]] = []
        self._output_total = 0.0
        self._output_delay_total = 0.0
        self._input_total = 0.0
        self._work_total = 0.0

    def runnable(self, op: str) -> bool:
        return op in self._runnable

    def runnable_operators(self) -> list[str]:
        return [op for op in self.plan.names if op in self._runnable]

    @property
    def any_runnable(self) -> bool:
        return bool(self._runnable)

    def selectivity(self, op: str) -> float:
        return self._sel[op]

    def cost(self, op: str) -> float:
        return self._cost[op]

    @property
    def output_total(self) -> float:
        return self._output_total

    @property
    def output_delay_total(self) -> float:
        return self._output_delay_total

    @property
    def input_total(self) -> float:
        return self._input_total

    @property
    def work_total(self) -> float:
        """Time the operators have been busy so far (the simulator's run lengths, the executor's
        measured operator seconds)."""
        return self._work_total

    def record_delivery(self, amount: float, delay_total: float) -> None:
        """Roots delivered ``amount`` tuples whose delays sum to ``delay_total``."""
        self._output_total += amount
        self._output_delay_total += delay_total

    def record_input(self, amount: float) -> None:
        """``amount`` tuples entered the plan's queues from outside (counted once per reading
        operator: every query gets its own copy)."""
        self._input_total += amount

    def totals(self) -> dict[str, float]:
        """The running totals (outputs, their delays, inputs, work), for a checkpoint: a
        strategy that measures windows by their differences (the adaptive controller) resumes
        exactly only if they continue where they were."""
        return {
            "output": self._output_total,
            "output_delay": self._output_delay_total,
            "input": self._input_total,
            "work": self._work_total,
        }

    def load_totals(self, totals: dict[str, float]) -> None:
        """Continue the running totals saved by :meth:`totals`."""
        self._output_total = float(totals["output"])
        self._output_delay_total = float(totals["output_delay"])
        self._input_total = float(totals["input"])
        self._work_total = float(totals["work"])

    def record_work(self, seconds: float) -> None:
        """Operators ran for ``seconds`` (busy time, start-up included)."""
        self._work_total += seconds
