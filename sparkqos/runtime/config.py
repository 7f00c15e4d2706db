"""The runner's options: one frozen, validated :class:`RunConfig` per streaming query set.

Every keyword of :func:`sparkqos.stream` is a field here, checked once when the config is made, so
a bad option fails before any Spark query starts and names the key. What depends on the query set
(``stream``, ``arrival_col``) is checked by :class:`~sparkqos.runtime.trigger.TriggerLoop`, which
sees the plan.

Fault injection for crash tests: ``fault="after_sink:3"`` SIGKILLs the process at that point of
batch 3; points are :data:`FAULT_POINTS`, several may be given comma-separated. The job decides
where the string comes from (``jobs/sensor_monitor.py``: ``--fault`` or ``SPARKQOS_FAULT``).

>>> cfg = RunConfig(checkpoint="/tmp/ckpt", strategy="cqc", trigger_s=1.0, budget_s=0.5)
>>> cfg.interval_s, cfg.effective_budget_s
(1.0, 0.5)
>>> cfg.make_scheduler()
Cqc(k=0.5, quantum=0.05)
>>> RunConfig(checkpoint="/tmp/ckpt", trigger_s=0)
Traceback (most recent call last):
...
sparkqos.errors.RunnerError: trigger_s must be a finite number > 0 or 'available_now', got 0
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sparkqos import schedulers
from sparkqos.errors import RunnerError, SparkqosError, UnknownStrategy, check_choice, check_number
from sparkqos.model.plan import Plan
from sparkqos.runtime.deadletter import DeadLetterSink, RowChecks
from sparkqos.runtime.intake import Intake
from sparkqos.runtime.sinks import Sink
from sparkqos.schedulers.base import Scheduler

__all__ = ["AVAILABLE_NOW", "EARLY_WRITE_S", "FAULT_POINTS", "SLICE_S", "RunConfig", "parse_faults"]

#: ``trigger_s`` value that runs whatever input is available now, then stops.
AVAILABLE_NOW = "available_now"

#: Default length of one slice of the continuous worker (``continuous=True``): a trigger waits at
#: most about this long for the slice in flight (a pause is taken between units, and no run is sized
#: beyond the slice); not yet tuned by measurement (issue 13, phase 2).
SLICE_S = 0.05

#: Default least interval between two early writes of the top class's outputs by the continuous
#: worker (``RunConfig.early_write_s``).
EARLY_WRITE_S = 0.05

#: Where a crash can be injected, in the order a trigger passes them.
FAULT_POINTS = (
    "before_ingest",
    "after_ingest",
    "after_run",
    "after_sink",
    "after_checkpoint",
    "after_progress",
    # continuous mode only: in the worker, after a slice that served rows once batch N was
    # committed (the executor ahead of the checkpoint), and while batch N's trigger pauses it
    "between_triggers",
    "in_pause",
    # continuous mode with early writes: in the worker, right after it wrote a part of batch N
    "after_early_write",
)


def parse_faults(text: str | None) -> dict[str, set[int]]:
    """``"after_sink:3,before_ingest:5"`` → ``{"after_sink": {3}, "before_ingest": {5}}``.

    >>> parse_faults("after_sink:3, after_sink:4")
    {'after_sink': {3, 4}}
    """
    out: dict[str, set[int]] = {}
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        point, _, batch = item.partition(":")
        if point not in FAULT_POINTS or not batch.strip().isdigit():
            expected = f"POINT:BATCH_ID with POINT one of {', '.join(FAULT_POINTS)}"
            raise RunnerError(f"fault {item!r} must be {expected}", parameter="fault", value=item, expected=expected)
        out.setdefault(point, set()).add(int(batch))
    return out


def _strategies_taking(parameter: str) -> list[str]:
    """Registered strategies whose constructor takes ``parameter`` (for error messages)."""
    names = []
    for name in schedulers.available():
        with contextlib.suppress(SparkqosError):
            if parameter in type(schedulers.get(name))._param_names():
                names.append(name)
    return names


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    """Every option of one sparkqos streaming run (see :func:`sparkqos.stream`).

    ``strategy`` is a registry name (its time parameters are sized to the trigger by the strategy's
    own :meth:`~sparkqos.schedulers.base.Scheduler.sized_params`) or a ready :class:`Scheduler`
    (used as given); ``strategy_params`` and ``qos`` go with a name. ``trigger_s`` is the
    micro-batch interval or ``"available_now"``; ``budget_s`` the executor seconds per trigger
    (default: the interval, 1 s with ``available_now``). ``checkpoint`` holds our state
    (``<checkpoint>/sparkqos``, the newest ``keep_checkpoints``) and Spark's (``<checkpoint>/spark``);
    ``output`` gets ``outputs/``, ``deadletter/`` and ``metrics/`` unless ``sink`` / ``dead_letter``
    say otherwise. ``arrival_col`` names the event-time column (default ``ts`` when the stream
    has one). ``on_progress(progress)`` and ``on_delays(batch_id, {query: seconds})`` are called
    after every trigger; ``executor_args`` go to the :class:`~sparkqos.executor.loop.Executor`;
    ``checks`` decide which rows are dead letters; ``fault`` injects crashes (:func:`parse_faults`).
    ``intake`` (:class:`~sparkqos.runtime.intake.Intake`) bounds what the queues hold: a trigger
    waits for the executor while too many rows are queued, queued bytes beyond a limit spill to
    disk, and the progress reports how far behind the stream is.

    ``continuous`` (issue 13; on by default) serves the queues on a worker thread
    between triggers too, in slices of ``slice_s`` seconds (default :data:`SLICE_S`), instead of
    for ``budget_s`` inside each trigger; a trigger pauses it, writes what it produced since the
    last trigger, serves what is queued for up to ``top_class_s`` seconds (default a tenth of
    the budget; 0: not at all) so that those rows are written by this trigger, and checkpoints.
    With class shares on and several priority levels it serves class by class from the top
    priority down (the top class always gets one round, a lower class only while time is left);
    otherwise — class shares off, or a single priority level — the strategy in force serves.
    ``budget_s`` then only sizes the strategy's time parameters (and the default
    ``top_class_s``).

    ``early_write_s`` (continuous mode): between triggers the worker writes the top class's new
    outputs to the sink as soon as it has them, at most every ``early_write_s`` seconds (default
    :data:`EARLY_WRITE_S`; 0: only triggers write), as parts of the next batch, so class H's rows
    do not wait for the next trigger. The trigger that commits the batch keeps the parts this run
    wrote and replaces anything else of that batch id, so a batch replayed after a crash still
    leaves exactly its last attempt in the sink. Only sinks with ``write_part`` take parts
    (``ParquetSink``, ``MemorySink``); plans without a top class (a single class, or a tie at the
    top) write at triggers only.

    ``class_shares`` (issue 13; by default on for a strategy given by name, off for a Scheduler
    instance, which is used as given) puts CQC's level 1 — a weighted
    round robin over the query classes with quotas and credit — above the strategy, which then
    orders the work inside each class (schedulers/classes.py; ``adaptive``: above each candidate).
    A plan with a single class runs the strategy as is. The papers' plain strategies are one
    setting away: ``class_shares=False``.

    The defaults (trigger 0.25 s, continuous, class shares) are measured on 2 cores: the main job
    gives class H < C < N in mean and p99 delay with class H's p99 under a second, and against
    four streaming queries in FAIR pools at their best trigger class H's p99 is about half and
    every class's mean lower (benchmarks/vs_fair_pools.py; issue 13's note has the figures). With
    the worker serving between triggers a short trigger costs little executor time: what it sets
    is how soon outputs reach the sink. A 2 s trigger without them put class H behind class N.
    """

    checkpoint: str | Path
    stream: str | None = None
    strategy: str | Scheduler = "adaptive"
    strategy_params: Mapping[str, Any] | None = None
    qos: Any = None
    trigger_s: float | str = 0.25
    budget_s: float | None = None
    sink: Sink | None = None
    output: str | Path | None = None
    arrival_col: str | None = None
    name: str = "sparkqos"
    keep_checkpoints: int = 3
    whole_batches: bool = True
    on_progress: Callable[[dict[str, Any]], None] | None = None
    on_delays: Callable[[int, dict[str, np.ndarray]], None] | None = None
    executor_args: Mapping[str, Any] | None = None
    checks: RowChecks | None = None
    dead_letter: DeadLetterSink | str | Path | None = None
    fault: str | None = None
    continuous: bool = True
    slice_s: float | None = None
    top_class_s: float | None = None
    early_write_s: float | None = None
    class_shares: bool | None = None
    intake: Intake = field(default_factory=Intake)
    #: ``fault`` parsed: injection point → batch ids.
    faults: Mapping[str, frozenset[int]] = field(init=False, repr=False, compare=False)
    _strategy_class: type[Scheduler] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        def set_(name: str, value: Any) -> None:
            object.__setattr__(self, name, value)  # frozen: normalise once, here

        if self.trigger_s != AVAILABLE_NOW:
            try:
                check_number("trigger_s", self.trigger_s, low=0, low_open=True, error=RunnerError)
            except RunnerError as exc:  # the one non-number it accepts belongs in what is expected
                expected = f"{exc.expected} or {AVAILABLE_NOW!r}"
                raise RunnerError(
                    f"trigger_s must be {expected}, got {self.trigger_s!r}",
                    parameter="trigger_s",
                    value=self.trigger_s,
                    expected=expected,
                ) from None
            set_("trigger_s", float(self.trigger_s))
        check_number("budget_s", self.budget_s, low=0, low_open=True, none_ok=True, error=RunnerError)
        if self.budget_s is not None:
            set_("budget_s", float(self.budget_s))
        check_number("keep_checkpoints", self.keep_checkpoints, low=1, integer=True, error=RunnerError)
        check_choice("whole_batches", self.whole_batches, (True, False), error=RunnerError)
        check_choice("continuous", self.continuous, (True, False), error=RunnerError)
        check_choice("class_shares", self.class_shares, (True, False, None), error=RunnerError)
        if not isinstance(self.intake, Intake):
            raise RunnerError(
                f"intake must be a sparkqos.Intake, got {self.intake!r}",
                parameter="intake",
                value=self.intake,
                expected="an Intake",
            )
        if self.class_shares is None:
            set_("class_shares", not isinstance(self.strategy, Scheduler))
        check_number("slice_s", self.slice_s, low=0, low_open=True, none_ok=True, error=RunnerError)
        check_number("top_class_s", self.top_class_s, low=0, none_ok=True, error=RunnerError)
        check_number("early_write_s", self.early_write_s, low=0, none_ok=True, error=RunnerError)
        for name in ("slice_s", "top_class_s", "early_write_s"):
            if getattr(self, name) is not None:
                set_(name, float(getattr(self, name)))
        set_("checkpoint", Path(self.checkpoint))
        if self.output is not None:
            set_("output", Path(self.output))
        set_("strategy_params", types.MappingProxyType(dict(self.strategy_params or {})))
        set_("executor_args", types.MappingProxyType(dict(self.executor_args or {})))
        set_("faults", types.MappingProxyType({p: frozenset(b) for p, b in parse_faults(self.fault).items()}))
        set_("_strategy_class", self._resolve_strategy())

    def _resolve_strategy(self) -> type[Scheduler]:
        if isinstance(self.strategy, Scheduler):
            if self.class_shares:
                raise RunnerError(
                    "class_shares=True wraps a strategy given by name, not a Scheduler instance "
                    "(wrap it yourself: schedulers.ClassShares(inner=...))",
                    parameter="class_shares",
                    value=True,
                    expected="a strategy name, or class_shares=False",
                )
            if self.strategy_params or self.qos is not None:
                raise RunnerError(
                    "give strategy_params/qos with a strategy name, not with a Scheduler instance",
                    parameter="strategy",
                    value=self.strategy,
                    expected="a strategy name",
                )
            return type(self.strategy)
        try:
            cls = type(schedulers.get(self.strategy))
        except UnknownStrategy as exc:
            exc.parameter, exc.value, exc.expected = "strategy", self.strategy, f"one of {', '.join(exc.available)}"
            raise
        if self.qos is not None and "qos" not in cls._param_names():
            takers = " or ".join(repr(n) for n in _strategies_taking("qos")) or "no registered"
            raise RunnerError(
                f"qos applies to the {takers} strategy, not to {self.strategy!r}",
                parameter="qos",
                value=self.qos,
                expected=f"None with strategy {self.strategy!r}",
            )
        return cls

    # -- derived -------------------------------------------------------------------------------------
    @property
    def interval_s(self) -> float | None:
        """The micro-batch interval in seconds; None with ``available_now``."""
        return None if self.trigger_s == AVAILABLE_NOW else self.trigger_s

    @property
    def effective_budget_s(self) -> float:
        """Executor seconds per trigger: ``budget_s``, else the interval, else 1."""
        return self.budget_s if self.budget_s is not None else (self.interval_s or 1.0)

    @property
    def effective_slice_s(self) -> float:
        """Seconds of one slice of the continuous worker: ``slice_s``, else :data:`SLICE_S`."""
        return self.slice_s if self.slice_s is not None else SLICE_S

    @property
    def effective_early_write_s(self) -> float:
        """Least seconds between two early writes of the worker: ``early_write_s``, else
        :data:`EARLY_WRITE_S` (0: none)."""
        return self.early_write_s if self.early_write_s is not None else EARLY_WRITE_S

    @property
    def effective_top_class_s(self) -> float:
        """Seconds a continuous trigger serves at once (the top classes first, or by the strategy):
        ``top_class_s``, else a tenth of the budget."""
        return self.top_class_s if self.top_class_s is not None else self.effective_budget_s / 10

    def make_scheduler(self, plan: Plan | None = None) -> Scheduler:
        """The strategy to run: the given instance, or a new one of the named strategy with its time
        parameters sized to the trigger (its ``qos`` defaulting to ``qos``). Built through the
        registry (:func:`~sparkqos.schedulers.registry.build`), so a wrong parameter name is
        reported as the registry reports it. With ``class_shares``, under CQC's class shares
        (``adaptive``: under each candidate), unless ``plan`` has a single class.

        >>> RunConfig(checkpoint="/tmp/ckpt", strategy="chain", class_shares=True, trigger_s=1.0).make_scheduler()
        ClassShares(inner='chain', k=1.0, quantum=0.1, inner_params=None)
        """
        if isinstance(self.strategy, Scheduler):
            return self.strategy
        params = dict(self.strategy_params)
        if self.qos is not None:
            params.setdefault("qos", self.qos)
        shares = self.class_shares and (plan is None or len({q.klass for q in plan.queries.values()}) > 1)
        return schedulers.build(self.strategy, self.effective_budget_s, self.interval_s, class_shares=shares, **params)
