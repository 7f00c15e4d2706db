"""A streaming run's options: :class:`RunConfig`, made of named, frozen, validated parts.

* :class:`StrategyConfig` — which strategy (a registry name or a ready Scheduler), its parameters,
  the QoS it aims at and whether CQC's class shares sit above it;
* :class:`Trigger` — when micro-batches run, as PySpark spells it (``processingTime=``,
  ``availableNow=``, ``once=``; exactly one);
* :class:`Recovery` — what brings a run back: the checkpoint folder and how many checkpoints to
  keep (bytewax's ``RecoveryConfig`` idea: recovery is its own configuration);
* :class:`Outputs` — where the rows go: the output folder, or a sink and a dead-letter sink
  (:class:`Storage` gives both parts at once);
* :class:`~sparkqos.executor.options.ExecutorOptions` — how the executor serves (budget per
  trigger, whole batches, cluster threads, fig 4.1's rule, statistics, overload);
* :class:`Continuous` — the worker that serves between triggers, and its early writes (None: off);
* :class:`Input` — which stream the DataFrame feeds, its event-time column and its row checks;
* :class:`~sparkqos.runtime.intake.Intake` — how much a trigger may take in (back-pressure, spill).

Each part is a parameter of :class:`RunConfig`, and every part checks itself when it is made, so
a bad option fails before any Spark query starts, naming the key, the value and what was expected
(a :class:`~sparkqos.errors.ConfigError`). What depends on the query set (``stream``,
``arrival_col``) is checked by :class:`~sparkqos.runtime.trigger.TriggerLoop`, which sees the plan.

``sparkqos.stream``'s keywords (``checkpoint=``, ``output=``, ``strategy=``, ``trigger_s=``,
``budget_s=``...) are shorthands for fields of these parts, listed in :data:`SHORTHANDS`; each
belongs to exactly one part.

>>> cfg = RunConfig(checkpoint="/tmp/ckpt", strategy="cqc", trigger_s=1.0, budget_s=0.5)
>>> cfg.interval_s, cfg.effective_budget_s
(1.0, 0.5)
>>> cfg.make_scheduler()
Cqc(k=0.5, quantum=0.05)
>>> RunConfig(storage=Storage("/tmp/ckpt"), trigger=Trigger(availableNow=True)).interval_s is None
True
>>> Trigger(processingTime="2 seconds", once=True)  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
sparkqos.errors.TriggerError: ONLY_ALLOW_SINGLE_TRIGGER: give exactly one of processingTime, availableNow, once; got ...
>>> RunConfig(checkpoint="/tmp/ckpt", trigger_s=0)
Traceback (most recent call last):
...
sparkqos.errors.RunnerError: trigger_s must be a finite number > 0 or 'available_now', got 0

Fault injection for crash tests: ``fault="after_sink:3"`` SIGKILLs the process at that point of
batch 3; points are :data:`FAULT_POINTS`, several may be given comma-separated. The job decides
where the string comes from (``jobs/sensor_monitor.py``: ``--fault`` or ``SPARKQOS_FAULT``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import math
import re
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sparkqos import schedulers
from sparkqos.errors import (
    RunnerError,
    SparkqosError,
    TriggerError,
    UnknownStrategy,
    check_choice,
    check_number,
    warn_deprecated,
)
from sparkqos.executor.options import ExecutorOptions
from sparkqos.io.deadletter import DeadLetterSink, RowChecks
from sparkqos.io.sinks import MemorySink, ParquetSink, Sink
from sparkqos.model.plan import Plan
from sparkqos.runtime.intake import Intake
from sparkqos.runtime.targets import parse_durations, per_query
from sparkqos.schedulers.base import Scheduler
from sparkqos.schedulers.deadline import EarliestDeadline

__all__ = [
    "AVAILABLE_NOW",
    "DEFAULT_TRIGGER_S",
    "EARLY_WRITE_S",
    "FAULT_POINTS",
    "MAX_PERIOD_BUDGETS",
    "SHARDED_TRIGGER_S",
    "SHORTHANDS",
    "SLICE_S",
    "Continuous",
    "ExecutorOptions",
    "Input",
    "Intake",
    "Outputs",
    "Recovery",
    "RunConfig",
    "Storage",
    "StrategyConfig",
    "Trigger",
    "parse_faults",
]

#: ``trigger_s`` value that runs whatever input is available now, then stops (deprecated
#: spelling of ``Trigger(availableNow=True)``).
AVAILABLE_NOW = "available_now"

#: The micro-batch interval when no trigger is given. With the continuous worker serving between
#: triggers, the interval mostly sets how long a row waits in the source for the next micro-batch:
#: on 2 cores the main job's class-H p99 went from about 320 ms at 0.25 s to 175 ms at 0.1 s, on
#: one core from 348 to 228 ms (docs/benchmarks.md). Where Spark's per-trigger work takes longer
#: than the interval, micro-batches simply run back to back.
DEFAULT_TRIGGER_S = 0.1

#: The sharded lane's interval when no trigger is given: a sharded micro-batch carries a floor of
#: its own (the pack stage, the shuffle, the state store's way in and out: about half a second on
#: 2 cores), so its shards serve budgets of this length (docs/benchmarks.md, "The sharded lane").
SHARDED_TRIGGER_S = 0.25

#: How far the default ``top_class_s`` follows triggers that come further apart than the interval:
#: up to this many budgets (``RunConfig.top_class_s_for``). On half a core of the 2-core VM the
#: main job's 0.1 s micro-batches ran back to back every 0.23–0.30 s; serving a tenth of that at
#: once instead of a tenth of 0.1 s took class H's p99 from 477–667 ms to 432–494 ms over three
#: runs each (docs/benchmarks.md).
MAX_PERIOD_BUDGETS = 4

#: Default length of one slice of the continuous worker: a trigger waits at most about this long
#: for the slice in flight (a pause is taken between units, and no run is sized beyond the slice).
SLICE_S = 0.05

#: Default nice value of the continuous worker's thread (``Continuous.nice``).
WORKER_NICE = 0

#: Default least interval between two early writes (the classes above the lowest) by the continuous
#: worker (``Continuous.early_write_s``).
EARLY_WRITE_S = 0.05

#: Default seconds Spark's read path runs on synthetic rows before a processing-time stream starts
#: (``Input.warm_up_s``, :mod:`sparkqos.spark.warmup`): on one core of the 2-core VM the reads stop
#: getting faster after about this long.
WARM_UP_S = 3.0

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
    # sharded lane: the Python worker serving a shard, once, in that shard's micro-batch N
    "in_shard",
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


def _set(obj: Any, name: str, value: Any) -> None:
    object.__setattr__(obj, name, value)  # frozen: normalise once, in __post_init__


# -- the trigger ----------------------------------------------------------------------------------
_INTERVAL = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|millis(?:econds?)?|s|secs?|seconds?|m|mins?|minutes?|h|hours?)?\s*$")
#: Unit prefixes, longest first: "ms"/"milli..." before "m..." (minutes).
_UNIT_S = (("ms", 1e-3), ("milli", 1e-3), ("s", 1.0), ("m", 60.0), ("h", 3600.0))


def _interval_seconds(value: Any) -> float | None:
    """``processingTime`` in seconds: a number, or PySpark's interval string (``"2 seconds"``,
    ``"500 milliseconds"``, ``"1 minute"``); None when it is neither."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        m = _INTERVAL.match(value.lower())
        if m:
            unit = m.group(2) or "s"
            return float(m.group(1)) * next(f for prefix, f in _UNIT_S if unit.startswith(prefix))
    return None


@dataclass(frozen=True)
class Trigger:
    """When micro-batches run, as PySpark's ``DataStreamWriter.trigger`` spells it: exactly one of
    ``processingTime`` (a number of seconds, or an interval string such as ``"2 seconds"``),
    ``availableNow=True`` (what is available now, in batches, then stop) or ``once=True`` (it
    all in one batch, then stop). More than one, or none, is PySpark's
    ``ONLY_ALLOW_SINGLE_TRIGGER`` (a :class:`~sparkqos.errors.TriggerError` with that
    ``error_class``).

    >>> Trigger(processingTime="500 milliseconds").interval_s
    0.5
    >>> Trigger(availableNow=True).spark_kwargs()
    {'availableNow': True}
    """

    processingTime: float | str | None = None  # noqa: N815 - PySpark's spelling
    availableNow: bool | None = None  # noqa: N815
    once: bool | None = None

    def __post_init__(self) -> None:
        given = {k: v for k, v in dataclasses.asdict(self).items() if v is not None}
        if len(given) != 1:
            got = ", ".join(f"{k}={v!r}" for k, v in given.items()) or "none"
            raise TriggerError(
                f"ONLY_ALLOW_SINGLE_TRIGGER: give exactly one of processingTime, availableNow, once; got {got}",
                error_class="ONLY_ALLOW_SINGLE_TRIGGER",
                parameter="trigger",
                value=given,
                expected="exactly one of processingTime, availableNow, once",
            )
        for name in ("availableNow", "once"):
            if getattr(self, name) not in (None, True):
                raise TriggerError(
                    f"VALUE_NOT_TRUE: {name} must be True, got {getattr(self, name)!r}",
                    error_class="VALUE_NOT_TRUE",
                    parameter=name,
                    value=getattr(self, name),
                    expected="True",
                )
        if self.processingTime is not None:
            seconds = _interval_seconds(self.processingTime)
            if seconds is None or not math.isfinite(seconds) or seconds <= 0:
                expected = "a number of seconds > 0 or an interval such as '2 seconds'"
                raise TriggerError(
                    f"VALUE_NOT_POSITIVE: processingTime must be {expected}, got {self.processingTime!r}",
                    error_class="VALUE_NOT_POSITIVE",
                    parameter="processingTime",
                    value=self.processingTime,
                    expected=expected,
                )

    @property
    def interval_s(self) -> float | None:
        """The micro-batch interval in seconds; None with ``availableNow`` or ``once``."""
        return None if self.processingTime is None else _interval_seconds(self.processingTime)

    def spark_kwargs(self) -> dict[str, Any]:
        """The keywords of ``DataStreamWriter.trigger`` for this trigger."""
        if self.processingTime is not None:
            return {"processingTime": f"{self.interval_s} seconds"}
        return {"availableNow": True} if self.availableNow else {"once": True}

    @classmethod
    def seconds(cls, trigger_s: float | str) -> Trigger:
        """The ``trigger_s=`` shorthand: a number of seconds (or the deprecated ``"available_now"``)."""
        if trigger_s == AVAILABLE_NOW:
            warn_deprecated("trigger_s='available_now'", "trigger=Trigger(availableNow=True)", stacklevel=4)
            return cls(availableNow=True)
        try:
            check_number("trigger_s", trigger_s, low=0, low_open=True, error=RunnerError)
        except RunnerError as exc:  # the one non-number it accepts belongs in what is expected
            expected = f"{exc.expected} or {AVAILABLE_NOW!r}"
            raise RunnerError(
                f"trigger_s must be {expected}, got {trigger_s!r}", parameter="trigger_s", value=trigger_s, expected=expected
            ) from None
        return cls(processingTime=float(trigger_s))


# -- the strategy -----------------------------------------------------------------------------------
def _strategies_taking_qos() -> list[str]:
    """Registered strategies that take a QoS spec (for error messages)."""
    names = []
    for name in schedulers.available():
        with contextlib.suppress(SparkqosError):
            if type(schedulers.get(name)).TAKES_QOS:
                names.append(name)
    return names


@dataclass(frozen=True)
class StrategyConfig:
    """The strategy of a run. ``name`` is a registry name — its time parameters sized to the
    trigger by the strategy's own :meth:`~sparkqos.schedulers.base.Scheduler.sized_params`, built
    with ``params`` and ``qos`` — or a ready :class:`Scheduler`, used as given.

    ``class_shares`` (default: on for a name, off for an instance) puts CQC's level 1 — a weighted
    round robin over the query classes with quotas and credit — above the strategy, which then
    orders the work inside each class (schedulers/classes.py; ``adaptive``: above each
    candidate). A plan with a single class runs the strategy as is; the papers' plain strategies
    are ``class_shares=False``.

    A strategy nested in this one is one of its ``params``, spelled as this config is: a name or
    a ``{"name": ..., "params": {...}}`` table (or a Scheduler, used as given), so a TOML file's
    tables map 1:1 to the constructor tree; what a name or a table leaves unset is sized too:

    >>> cqc = {"name": "cqc", "params": {"k": 3.0}}
    >>> StrategyConfig("adaptive", params={"candidates": ["fifo", cqc]}, class_shares=False).make(None, 0.5).candidates
    ['fifo', Cqc(k=3.0, quantum=0.05)]
    """

    name: str | Scheduler = "adaptive"
    params: Mapping[str, Any] = field(default_factory=dict)
    qos: Any = None
    class_shares: bool | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.params, Mapping):
            raise RunnerError(
                f"strategy params must be a mapping of parameter name to value, got {self.params!r}",
                parameter="params",
                value=self.params,
                expected="a mapping",
            )
        _set(self, "params", types.MappingProxyType(dict(self.params)))
        check_choice("class_shares", self.class_shares, (True, False, None), error=RunnerError)
        if self.class_shares is None:
            _set(self, "class_shares", not isinstance(self.name, Scheduler))
        self.strategy_class()  # checks the name and what goes with it

    def strategy_class(self) -> type[Scheduler]:
        """The class of the strategy this builds (its name and parameters checked)."""
        if isinstance(self.name, Scheduler):
            if self.class_shares:
                raise RunnerError(
                    "class_shares=True wraps a strategy given by name, not a Scheduler instance "
                    "(wrap it yourself: schedulers.ClassShares(inner=...))",
                    parameter="class_shares",
                    value=True,
                    expected="a strategy name, or class_shares=False",
                )
            if self.params or self.qos is not None:
                raise RunnerError(
                    "give strategy params/qos with a strategy name, not with a Scheduler instance",
                    parameter="strategy",
                    value=self.name,
                    expected="a strategy name",
                )
            return type(self.name)
        try:
            cls = type(schedulers.get(self.name))
        except UnknownStrategy as exc:
            exc.parameter, exc.value, exc.expected = "strategy", self.name, f"one of {', '.join(exc.available)}"
            raise
        if self.qos is not None and not cls.TAKES_QOS:
            takers = " or ".join(repr(n) for n in _strategies_taking_qos()) or "no registered"
            raise RunnerError(
                f"qos applies to the {takers} strategy, not to {self.name!r}",
                parameter="qos",
                value=self.qos,
                expected=f"None with strategy {self.name!r}",
            )
        return cls

    def make(self, plan: Plan | None = None, budget_s: float = 1.0, interval_s: float | None = None) -> Scheduler:
        """The strategy to run: the given instance, or a new one of the named strategy with its time
        parameters sized to a trigger of ``budget_s`` executor seconds every ``interval_s``
        (its ``qos`` defaulting to ``qos``), built through the registry
        (:func:`~sparkqos.schedulers.registry.build`), so a wrong parameter name is reported as
        the registry reports it. With ``class_shares``, under CQC's class shares, unless ``plan``
        has a single class."""
        if isinstance(self.name, Scheduler):
            return self.name
        params = dict(self.params)
        if self.qos is not None:
            params.setdefault("qos", self.qos)
        shares = self.class_shares and (plan is None or len({q.klass for q in plan.queries.values()}) > 1)
        return schedulers.build(self.name, budget_s, interval_s, class_shares=shares, **params)


# -- recovery and outputs ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Recovery:
    """What brings a run back after a crash (bytewax's ``RecoveryConfig``): ``checkpoint`` holds
    our state (``<checkpoint>/sparkqos``, the newest ``keep_checkpoints``) and Spark's
    (``<checkpoint>/spark``).

    ``fsync``: the run's own files — checkpoints, the segments they refer to, the default sink's
    Parquet files and dead letters — are fsynced before they are renamed into place, so they
    survive a machine's crash (power loss), not only the process's. Off by default: every file
    is still written atomically (a temporary file renamed over the target), which is what a
    crashed or killed process needs, and Spark writes its own offset and commit logs beside
    them in ``<checkpoint>/spark`` through Hadoop's local file system, which does not fsync, so
    after a machine's crash the pair is no more durable with it; on the 2-core VM's disk each
    fsync cost about 5 ms, 35–40 ms of each trigger of the main job."""

    checkpoint: str | Path
    keep_checkpoints: int = 3
    fsync: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.checkpoint, (str, Path)) or not str(self.checkpoint):
            raise RunnerError(
                f"checkpoint must be a folder path, got {self.checkpoint!r}",
                parameter="checkpoint",
                value=self.checkpoint,
                expected="a folder path",
            )
        _set(self, "checkpoint", Path(self.checkpoint))
        check_number("keep_checkpoints", self.keep_checkpoints, low=1, integer=True, error=RunnerError)
        if not isinstance(self.fsync, bool):
            raise RunnerError(
                f"fsync must be true or false, got {self.fsync!r}", parameter="fsync", value=self.fsync, expected="a bool"
            )


@dataclass(frozen=True)
class Outputs:
    """Where a run's rows go: ``output`` gets ``outputs/``, ``deadletter/`` and ``metrics/``
    unless ``sink`` / ``dead_letter`` say otherwise (without ``output``, outputs go to a
    :class:`~sparkqos.io.sinks.MemorySink` and bad rows raise)."""

    output: str | Path | None = None
    sink: Sink | None = None
    dead_letter: DeadLetterSink | str | Path | None = None

    def __post_init__(self) -> None:
        if self.output is not None:
            _set(self, "output", Path(self.output))
        if self.sink is not None and not isinstance(self.sink, Sink):
            raise RunnerError(
                f"sink must be a Sink, got {self.sink!r}", parameter="sink", value=self.sink, expected="a sparkqos Sink"
            )

    def make_sink(self, fsync: bool = False) -> Sink:
        """``sink``, else Parquet files in ``<output>/outputs`` (fsynced with ``fsync``, see
        :class:`Recovery`), else memory."""
        if self.sink is not None:
            return self.sink
        return ParquetSink(self.output / "outputs", fsync=fsync) if self.output is not None else MemorySink()

    def make_dead_letter(self, fsync: bool = False) -> DeadLetterSink | None:
        """``dead_letter`` (a sink or its folder), else ``<output>/deadletter``, else None (bad rows raise)."""
        dead_letter = self.dead_letter
        if dead_letter is None and self.output is not None:
            dead_letter = self.output / "deadletter"
        if dead_letter is not None and not isinstance(dead_letter, DeadLetterSink):
            dead_letter = DeadLetterSink(dead_letter, fsync=fsync)
        return dead_letter


@dataclass(frozen=True)
class Storage:
    """:class:`Recovery` and :class:`Outputs` given as one part (``RunConfig(storage=...)``, the
    spelling kept for callers that give both at once): ``checkpoint`` and ``keep_checkpoints`` are
    the recovery's, ``output``, ``sink`` and ``dead_letter`` the outputs'."""

    checkpoint: str | Path
    output: str | Path | None = None
    sink: Sink | None = None
    dead_letter: DeadLetterSink | str | Path | None = None
    keep_checkpoints: int = 3

    def __post_init__(self) -> None:
        recovery, outputs = Recovery(self.checkpoint, self.keep_checkpoints), Outputs(self.output, self.sink, self.dead_letter)
        _set(self, "checkpoint", recovery.checkpoint)
        _set(self, "output", outputs.output)

    @property
    def recovery(self) -> Recovery:
        return Recovery(self.checkpoint, self.keep_checkpoints)

    @property
    def outputs(self) -> Outputs:
        return Outputs(self.output, self.sink, self.dead_letter)

    def make_sink(self) -> Sink:
        """:meth:`Outputs.make_sink`, fsynced as the recovery says."""
        return self.outputs.make_sink(self.recovery.fsync)

    def make_dead_letter(self) -> DeadLetterSink | None:
        """:meth:`Outputs.make_dead_letter`, fsynced as the recovery says."""
        return self.outputs.make_dead_letter(self.recovery.fsync)


# -- the worker between triggers ----------------------------------------------------------------------
@dataclass(frozen=True)
class Continuous:
    """The continuous worker: the executor serves the queues on a thread between triggers too, in
    slices of ``slice_s`` seconds. A trigger pauses it, writes what it produced since the last
    trigger, serves what is queued for up to ``top_class_s`` seconds (None: a tenth of the
    budget; 0: not at all) so that those rows are written by this trigger, and checkpoints. With
    class shares on and several priority levels it serves class by class from the top priority
    down (the top class always gets one round, a lower class only while time is left);
    otherwise the strategy in force serves.

    ``early_write_s``: between triggers the worker writes the new outputs of every class above the
    lowest as soon as it has them, at most every ``early_write_s`` seconds (0: only triggers write), as parts of the
    next batch (:class:`~sparkqos.io.sinks.PartedSink` only; plans without a top class write
    at triggers only).

    ``nice``: the worker's thread runs this much below the process's scheduling priority (Linux
    threads have their own nice value), so where cores are short — one core, a busy neighbour —
    the trigger's thread and Spark's own threads, which take the next micro-batch in and serve the
    top class, go first; the worker takes the cycles left. 0: the same priority.
    """

    slice_s: float | None = SLICE_S
    top_class_s: float | None = None
    early_write_s: float | None = EARLY_WRITE_S
    nice: int = WORKER_NICE

    def __post_init__(self) -> None:
        for name, default in (("slice_s", SLICE_S), ("early_write_s", EARLY_WRITE_S)):
            if getattr(self, name) is None:  # None: the default, as for top_class_s
                _set(self, name, default)
        check_number("slice_s", self.slice_s, low=0, low_open=True, error=RunnerError)
        check_number("top_class_s", self.top_class_s, low=0, none_ok=True, error=RunnerError)
        check_number("early_write_s", self.early_write_s, low=0, error=RunnerError)
        check_number("nice", self.nice, low=0, high=19, integer=True, error=RunnerError)
        for name in ("slice_s", "top_class_s", "early_write_s"):
            if getattr(self, name) is not None:
                _set(self, name, float(getattr(self, name)))


# -- the input ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Input:
    """What comes in: ``stream`` names the stream of the query set this DataFrame feeds (needed
    when it reads several), ``arrival_col`` its event-time column (default ``ts`` when the
    stream has one), ``checks`` which rows are dead letters
    (:class:`~sparkqos.io.deadletter.RowChecks`; default: the stream's schema and finite
    numbers). ``warm_up_s``: before the query starts, Spark's read path runs on synthetic rows of
    the input's schema for up to this many seconds, once per Spark application and only with a
    processing-time trigger, so that the first micro-batches are not slowed by a cold JVM
    (:mod:`sparkqos.spark.warmup`); 0 turns it off."""

    stream: str | None = None
    arrival_col: str | None = None
    checks: RowChecks | None = None
    warm_up_s: float = WARM_UP_S

    def __post_init__(self) -> None:
        for name in ("stream", "arrival_col"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise RunnerError(f"{name} must be a name, got {value!r}", parameter=name, value=value, expected="a string")
        check_number("warm_up_s", self.warm_up_s, low=0, error=RunnerError)
        if self.checks is not None and not isinstance(self.checks, RowChecks):
            raise RunnerError(
                f"checks must be RowChecks, got {self.checks!r}", parameter="checks", value=self.checks, expected="RowChecks"
            )


# -- the whole run -----------------------------------------------------------------------------------
#: ``sparkqos.stream``'s keywords: each is a field of one part of :class:`RunConfig`.
SHORTHANDS: Mapping[str, tuple[str, str]] = types.MappingProxyType(
    {
        "checkpoint": ("recovery", "checkpoint"),
        "keep_checkpoints": ("recovery", "keep_checkpoints"),
        "fsync": ("recovery", "fsync"),
        "output": ("outputs", "output"),
        "sink": ("outputs", "sink"),
        "dead_letter": ("outputs", "dead_letter"),
        "qos": ("strategy", "qos"),
        "class_shares": ("strategy", "class_shares"),
        "strategy_params": ("strategy", "params"),
        "slice_s": ("continuous", "slice_s"),
        "top_class_s": ("continuous", "top_class_s"),
        "early_write_s": ("continuous", "early_write_s"),
        "worker_nice": ("continuous", "nice"),
        "stream": ("input", "stream"),
        "arrival_col": ("input", "arrival_col"),
        "checks": ("input", "checks"),
        "warm_up_s": ("input", "warm_up_s"),
        # Every ExecutorOptions field, so sparkqos.run's executor keywords mean the same here.
        # (not ``shed``: a run's ``shed=`` is the load shedding its user chose, RunConfig.shed;
        # the executor's drop beyond its memory limit is ExecutorOptions(shed=True))
        **{name: ("executor", name) for name in ExecutorOptions.names() if name != "shed"},
    }
)
#: Shorthands that stay one release, with a DeprecationWarning naming their replacement.
_DEPRECATED = {
    "strategy_params": "strategy=StrategyConfig(name, params={...})",
    "executor_args": "executor=ExecutorOptions(...)",
}


class _Unset:
    """The default of a keyword whose absence matters (a shorthand given beside its part is an
    error, and None is a value some take: ``early_write_s=None`` turns early writes off)."""

    _instance: _Unset | None = None

    def __new__(cls) -> _Unset:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNSET"

    def __reduce__(self) -> str:
        return "UNSET"


#: A keyword of :func:`sparkqos.stream` / :func:`sparkqos.run` that was not given.
UNSET: Any = _Unset()

#: The keywords ``sparkqos.stream`` and ``sparkqos.run`` share (one signature, written out in
#: both so ``help()`` and IDEs show it) that ``run`` refuses, and why: run computes a finite
#: DataFrame's answer in memory and returns it, so nothing is stored, triggered or reported.
NOT_FOR_RUN: Mapping[str, str] = types.MappingProxyType(
    {
        **dict.fromkeys(
            (
                "storage",
                "recovery",
                "outputs",
                "checkpoint",
                "output",
                "sink",
                "dead_letter",
                "keep_checkpoints",
                "fsync",
                "fault",
            ),
            "sparkqos.run returns every query's output in memory: there is no sink, dead letter or checkpoint to write",
        ),
        **dict.fromkeys(
            ("trigger", "trigger_s"),
            "sparkqos.run has no trigger: its batches (batch_rows rows each) arrive one a second of the executor's clock",
        ),
        **dict.fromkeys(
            ("continuous", "slice_s", "top_class_s", "early_write_s", "worker_nice"),
            "sparkqos.run has no worker between triggers: it serves units_between units after each batch",
        ),
        **dict.fromkeys(
            ("input", "stream", "arrival_col", "checks", "warm_up_s", "intake"),
            "sparkqos.run reads the DataFrame's own rows, all of them, stamped with their batch's time",
        ),
        **dict.fromkeys(
            ("name", "on_progress", "on_delays"), "sparkqos.run reports no progress: it returns every query's output"
        ),
        **dict.fromkeys(("shards", "shard_by"), "the sharded lane serves a stream inside Spark's tasks; use sparkqos.stream"),
        **dict.fromkeys(
            ("slo", "shed"),
            "sparkqos.run computes a finite DataFrame's answer: latency targets and load shedding are about a stream's rows",
        ),
    }
)
#: ``sparkqos.run``'s own keywords that ``sparkqos.stream`` refuses, and why.
NOT_FOR_STREAM: Mapping[str, str] = types.MappingProxyType(
    dict.fromkeys(
        ("batch_rows", "units_between"),
        "a stream's batches are Spark's micro-batches (trigger=) and it serves by time (budget_s=), not by units",
    )
)


def refuse(entry: str, keywords: Mapping[str, Any], defaults: Mapping[str, Any], reasons: Mapping[str, str]) -> None:
    """Raise for the first of ``keywords`` that ``reasons`` lists and that was given (differs from
    its value in ``defaults``), with the reason: ``entry`` does not take it."""
    for key, value in keywords.items():
        if key in reasons and value is not defaults[key] and value != defaults[key]:
            raise RunnerError(
                f"{entry} does not take {key}=: {reasons[key]}",
                parameter=key,
                value=value,
                expected=f"{key}={defaults[key]!r} (not given)",
            )


def strategy_and_executor(
    strategy: StrategyConfig | str | Scheduler, executor: ExecutorOptions | None, **shorthands: Any
) -> tuple[StrategyConfig, ExecutorOptions]:
    """The strategy and executor parts of a run from ``strategy``, ``executor`` and their
    shorthands (:data:`SHORTHANDS`), checked as :class:`RunConfig` checks them: what
    ``sparkqos.run`` serves under."""
    given = isinstance(strategy, StrategyConfig)
    fields = _shorthand_fields(shorthands, {"strategy": strategy if given else None, "executor": executor})
    if not given:
        fields["strategy"]["name"] = strategy
    part = dataclasses.replace(strategy, **fields["strategy"]) if given else StrategyConfig(**fields["strategy"])
    return part, ExecutorOptions.of(executor, **fields["executor"])


@dataclass(frozen=True, init=False)
class RunConfig:
    """Every option of one sparkqos streaming run (see :func:`sparkqos.stream`), in named parts:
    ``recovery``, ``outputs``, ``strategy``, ``trigger``, ``executor``, ``continuous`` (None:
    triggers alone serve), ``input`` and ``intake`` (see the module); ``storage`` gives the
    recovery and the outputs at once (read back as :attr:`storage`). ``strategy`` may be a registry
    name or a Scheduler for short, ``continuous`` True or False. ``name`` names the query and its
    metrics; ``on_progress(progress)`` and ``on_delays(batch_id, {query: seconds})`` are called
    after every trigger; ``fault`` injects crashes (:func:`parse_faults`). The keywords of
    :data:`SHORTHANDS` set one field of a part each (``checkpoint=`` is
    ``recovery=Recovery(...)``'s ``checkpoint``, ``trigger_s=`` a ``Trigger(processingTime=...)``).

    The defaults (trigger 0.1 s, adaptive with class shares, continuous with early writes,
    whole batches) are measured on 2 cores in the README: with the worker serving between
    triggers a short trigger costs little executor time, and what it sets is how soon outputs
    reach the sink.
    """

    recovery: Recovery
    outputs: Outputs
    strategy: StrategyConfig
    trigger: Trigger
    executor: ExecutorOptions
    continuous: Continuous | None
    input: Input
    intake: Intake
    name: str
    on_progress: Callable[[dict[str, Any]], None] | None
    on_delays: Callable[[int, dict[str, np.ndarray]], None] | None
    fault: str | None
    #: Latency targets and shedding ages in seconds, by query or class name (:mod:`sparkqos.runtime.targets`).
    slo: Mapping[str, float]
    shed: Mapping[str, float]
    #: ``fault`` parsed: injection point → batch ids.
    faults: Mapping[str, frozenset[int]] = field(init=False, repr=False, compare=False)

    def __init__(
        self,
        storage: Storage | None = None,
        recovery: Recovery | None = None,
        outputs: Outputs | None = None,
        strategy: StrategyConfig | str | Scheduler = "adaptive",
        trigger: Trigger | None = None,
        executor: ExecutorOptions | None = None,
        continuous: Continuous | bool | None = True,
        input: Input | None = None,  # noqa: A002 - the part's name
        intake: Intake | None = None,
        name: str = "sparkqos",
        on_progress: Callable[[dict[str, Any]], None] | None = None,
        on_delays: Callable[[int, dict[str, np.ndarray]], None] | None = None,
        fault: str | None = None,
        slo: Mapping[str, Any] | None = None,
        shed: Mapping[str, Any] | None = None,
        **shorthands: Any,
    ):
        given_by = {"recovery": "recovery", "outputs": "outputs"}  # the keyword that gave each part
        if storage is not None:
            for part, given in (("recovery", recovery), ("outputs", outputs)):
                if given is not None:
                    raise _both(part, "storage")
                given_by[part] = "storage"
            recovery, outputs = storage.recovery, storage.outputs
        parts: dict[str, Any] = {
            "recovery": recovery,
            "outputs": outputs,
            "strategy": strategy if isinstance(strategy, StrategyConfig) else None,
            "executor": executor,
            "continuous": continuous if isinstance(continuous, Continuous) else None,
            "input": input,
        }
        fields = _shorthand_fields(shorthands, parts, given_by=given_by)
        if not isinstance(strategy, StrategyConfig):
            fields["strategy"]["name"] = strategy
        if recovery is None and "checkpoint" not in fields["recovery"]:
            raise RunnerError("checkpoint is required", parameter="checkpoint", value=None, expected="a folder path")
        if "trigger_s" in shorthands:
            if trigger is not None:
                raise _both("trigger_s", "trigger")
            trigger = Trigger.seconds(shorthands["trigger_s"])
        if trigger is not None and not isinstance(trigger, Trigger):
            raise RunnerError(
                f"trigger must be a Trigger, got {trigger!r}", parameter="trigger", value=trigger, expected="a Trigger"
            )
        _set(self, "trigger", trigger if trigger is not None else Trigger(processingTime=DEFAULT_TRIGGER_S))
        kinds = {"recovery": Recovery, "outputs": Outputs, "strategy": StrategyConfig, "input": Input}
        for part, cls in kinds.items():
            given = parts[part]
            _set(self, part, dataclasses.replace(given, **fields[part]) if given is not None else cls(**fields[part]))
        _set(self, "executor", ExecutorOptions.of(executor, **fields["executor"]))  # names an unknown option
        _set(self, "continuous", _continuous(continuous, fields["continuous"]))
        if intake is not None and not isinstance(intake, Intake):
            raise RunnerError(
                f"intake must be a sparkqos.Intake, got {intake!r}", parameter="intake", value=intake, expected="an Intake"
            )
        _set(self, "intake", intake if intake is not None else Intake())
        if not isinstance(name, str) or not name:
            raise RunnerError(f"name must be a non-empty string, got {name!r}", parameter="name", value=name, expected="a name")
        _set(self, "name", name)
        _set(self, "on_progress", on_progress)
        _set(self, "on_delays", on_delays)
        _set(self, "fault", fault)
        _set(self, "slo", parse_durations("slo", slo))
        _set(self, "shed", parse_durations("shed", shed))
        _set(self, "faults", types.MappingProxyType({p: frozenset(b) for p, b in parse_faults(fault).items()}))

    def replace(self, **changes: Any) -> RunConfig:
        """A copy with some parts (or top-level options) changed (``storage``: the recovery and
        the outputs)."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init}
        if "storage" in changes:
            del values["recovery"], values["outputs"]
        values.update(changes)
        return RunConfig(**values)

    @property
    def storage(self) -> Storage:
        """The recovery and the outputs as one :class:`Storage`."""
        r, o = self.recovery, self.outputs
        return Storage(r.checkpoint, o.output, o.sink, o.dead_letter, r.keep_checkpoints)

    # -- derived ------------------------------------------------------------------------------------
    @property
    def interval_s(self) -> float | None:
        """The micro-batch interval in seconds; None with ``availableNow`` or ``once``."""
        return self.trigger.interval_s

    @property
    def effective_budget_s(self) -> float:
        """Executor seconds per trigger: ``executor.budget_s``, else the interval, else 1."""
        budget = self.executor.budget_s
        return budget if budget is not None else (self.interval_s or 1.0)

    @property
    def effective_top_class_s(self) -> float:
        """Seconds a continuous trigger serves at once (the top classes first, or by the strategy):
        ``continuous.top_class_s``, else a tenth of the budget (before any trigger's period is
        known: the trigger loop uses :meth:`top_class_s_for`)."""
        return self.top_class_s_for(None)

    def top_class_s_for(self, period_s: float | None) -> float:
        """:attr:`effective_top_class_s` for triggers that start ``period_s`` apart (None: not
        known yet): where Spark's per-trigger work outlasts a short interval, micro-batches run
        back to back, each bringing in that much more, so the default tenth is of that period, up
        to :data:`MAX_PERIOD_BUDGETS` budgets. A ``top_class_s`` given is kept."""
        top = None if self.continuous is None else self.continuous.top_class_s
        if top is not None:
            return top
        budget = self.effective_budget_s
        if period_s is not None and self.interval_s is not None and period_s > budget:
            budget = min(period_s, MAX_PERIOD_BUDGETS * budget)
        return budget / 10

    def make_scheduler(self, plan: Plan | None = None) -> Scheduler:
        """The strategy to run, sized to this run's trigger (:meth:`StrategyConfig.make`).

        >>> RunConfig(checkpoint="/tmp/ckpt", strategy="chain", class_shares=True, trigger_s=1.0).make_scheduler()
        ClassShares(inner='chain', k=1.0, quantum=0.1)
        """
        scheduler = self.strategy.make(plan, self.effective_budget_s, self.interval_s)
        if self.slo and plan is not None:
            targets = per_query("slo", self.slo, {q: query.klass for q, query in plan.queries.items()})
            scheduler = EarliestDeadline(scheduler, targets=targets)
        return scheduler


def _continuous(continuous: Continuous | bool | None, fields: dict[str, Any]) -> Continuous | None:
    """The ``continuous`` part: given, made of its shorthands (True), or None (False, None)."""
    if isinstance(continuous, Continuous):
        return dataclasses.replace(continuous, **fields)
    check_choice("continuous", continuous, (True, False, None), error=RunnerError)
    # With continuous=False the worker's options have nothing to set: jobs pass them whatever the mode.
    return Continuous(**fields) if continuous else None


def _both(short: str, part: str) -> RunnerError:
    return RunnerError(
        f"give {short}= or {part}=, not both", parameter=short, value=short, expected=f"{short}= or {part}=, not both"
    )


def _shorthand_fields(
    shorthands: Mapping[str, Any], parts: Mapping[str, Any], stacklevel: int = 4, given_by: Mapping[str, str] | None = None
) -> dict[str, dict[str, Any]]:
    """The fields each of ``parts`` gets from the ``shorthands`` keywords; an unknown keyword, or
    one given beside its part (``given_by``: the keyword that gave a part, its name by default),
    raises naming it (``stacklevel``: where a deprecation warning points, the caller's caller by
    default)."""
    fields: dict[str, dict[str, Any]] = {p: {} for p in parts}
    for key, value in shorthands.items():
        if key in _DEPRECATED:
            warn_deprecated(f"{key}=", _DEPRECATED[key], stacklevel=stacklevel)
        if key == "trigger_s":
            continue
        if key == "executor_args":
            if parts["executor"] is not None:
                raise _both(key, "executor")
            fields["executor"].update(dict(value or {}))
            continue
        if key not in SHORTHANDS:
            allowed = sorted([*SHORTHANDS, "trigger_s", "storage", *RunConfig.__dataclass_fields__])
            allowed.remove("faults")
            near = difflib.get_close_matches(key, allowed, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise RunnerError(
                f"unknown run option {key!r}{hint}; options are {', '.join(allowed)}",
                parameter=key,
                value=value,
                expected=f"one of {', '.join(allowed)}",
            )
        part, name = SHORTHANDS[key]
        if parts[part] is not None:
            raise _both(key, (given_by or {}).get(part, part))
        fields[part][name] = value
    return fields
