"""Error classes, and the one helper that checks arguments.

Every error sparkqos raises on purpose is a :class:`SparkqosError`; one raised about an argument
carries ``parameter`` (its name), ``value`` (what was given) and ``expected`` (what would have been
accepted), and its message says all three. :func:`check_number` and :func:`check_choice` are the
only places such checks are written.

>>> check_number("quantum", 0.5, low=0, low_open=True)
0.5
>>> check_number("threshold", -1, integer=True, low=0, error=PlanError)
Traceback (most recent call last):
...
sparkqos.errors.PlanError: threshold must be an integer >= 0, got -1
>>> try:
...     check_choice("run", "fast", ("one", "quantum"), where="workload.toml: ")
... except ArgumentError as exc:
...     print(exc.parameter, exc.value, exc.expected)
run fast one of 'one', 'quantum'
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable
from typing import Any, TypeVar

_MISSING = object()


class SparkqosError(Exception):
    """Base class of every error sparkqos raises on purpose.

    ``parameter``, ``value`` and ``expected`` are set when the error is about one argument
    (None otherwise), so code can react to it without parsing the message.
    """

    parameter: str | None = None
    value: Any = None
    expected: str | None = None

    def __init__(self, *args: Any, parameter: str | None = None, value: Any = _MISSING, expected: str | None = None):
        super().__init__(*args)
        self.parameter = parameter
        self.value = None if value is _MISSING else value
        self.expected = expected


class ArgumentError(SparkqosError, ValueError):
    """A function or constructor was given a value outside what it accepts."""


class PlanError(SparkqosError, ValueError):
    """An operator plan is malformed (cycle, unknown input, bad selectivity or cost...)."""


class WorkloadError(SparkqosError, ValueError):
    """A workload file or workload definition is malformed."""


class QosSpecError(SparkqosError, ValueError):
    """A QoS specification is malformed (unknown statistic or direction, bad weights, unknown key)."""


class SchedulerError(SparkqosError):
    """A scheduler broke its contract or was configured wrongly."""


class UnknownStrategy(SchedulerError, KeyError):
    """A strategy name that is not in the registry."""

    def __init__(self, name: str, available: list[str]):
        self.name = name
        self.available = available
        super().__init__(f"unknown strategy {name!r}; registered strategies are: {', '.join(available)}")

    def __str__(self) -> str:  # KeyError would quote the whole message otherwise
        return self.args[0]


class SchemaMismatch(SparkqosError, ValueError):
    """A batch offered to a stream does not match the schema the plan declared for it."""


class ExpressionError(PlanError):
    """An expression refers to an unknown column or mixes incompatible types."""


class SourceError(SparkqosError, ValueError):
    """A streaming source was given a bad option (unknown payload, negative rate, missing file...)."""


class SinkError(SparkqosError, ValueError):
    """A sink was given a bad batch id, query name or output table."""


class CheckpointError(SparkqosError, ValueError):
    """A checkpoint cannot be written or read (bad batch id, state that is not JSON...)."""


class CheckpointCorrupt(CheckpointError):
    """A checkpoint file is torn or damaged (truncated, bad magic, checksum mismatch)."""


class ConfigError(SparkqosError, ValueError):
    """A configuration is malformed: unknown key, wrong type, bad value (a job's TOML file or
    --set override, a run's or an executor's options)."""


class RunnerError(ConfigError):
    """The streaming runner was configured or used wrongly."""


class TriggerError(RunnerError):
    """A trigger given as PySpark spells it breaks one of its rules; ``error_class`` names the
    rule as PySpark does (``ONLY_ALLOW_SINGLE_TRIGGER``, ``VALUE_NOT_TRUE``, ``VALUE_NOT_POSITIVE``)."""

    def __init__(self, *args: Any, error_class: str, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.error_class = error_class


class ExecutorOptionError(ArgumentError, RunnerError):
    """An executor option (:class:`~sparkqos.executor.options.ExecutorOptions`) is out of range."""


class PythonWorkerError(SparkqosError, RuntimeError):
    """Spark's Python workers cannot run sparkqos (another interpreter, or one without sparkqos,
    pyarrow or numpy): the message says what they run, what they lack and what to set."""


class StoppedInTrigger(SparkqosError, RuntimeError):
    """The streaming query was stopped while a trigger ran (its Spark job cancelled, a call into
    the JVM interrupted): raised out of ``foreachBatch`` for Spark's stream thread, which ends the
    query as stopped. The batch is not committed; Spark replays it on the next start.
    ``batch_id`` names the batch, ``java`` what the JVM said, in one line."""

    def __init__(self, batch_id: int, java: str):
        self.batch_id = batch_id
        self.java = java
        super().__init__(f"stopped inside batch {batch_id}: {java}")


class NotShardable(PlanError):
    """A query cannot run in the sharded lane: an operator keeps state across rows of different
    shard keys (a window, join, dedup or lag not keyed by ``shard_by``)."""


class UnsupportedTransform(SparkqosError, ValueError):
    """A query given as PySpark code uses a Spark operation or function sparkqos cannot run
    (yet); raised by ``sparkqos.stream`` / ``sparkqos.run`` before any data moves. ``query``,
    ``operation`` name what and where."""

    def __init__(self, query: str, operation: str, detail: str = ""):
        self.query = query
        self.operation = operation
        self.detail = detail
        more = f" ({detail})" if detail else ""
        super().__init__(f"query {query!r}: {operation}{more} is not supported by sparkqos (what runs where: docs/transforms.md)")


class UdfError(SparkqosError, RuntimeError):
    """A user's Python or pandas UDF failed on the data (it raised, or gave a result Spark would
    not accept) while the executor ran it. ``query`` and ``udf`` name where; the rows the failing
    run took are back in their queue, so nothing queued is lost."""

    def __init__(self, query: str, udf: str, problem: str):
        self.query = query
        self.udf = udf
        super().__init__(f"query {query!r}: UDF {udf!r} {problem}")


class PlacementError(SparkqosError, ValueError):
    """``placement=`` names no placement sparkqos knows (``"auto"``, ``"native"``, ``"spark"``),
    or a query cannot run where it asks (``"native"`` for a function only Spark computes)."""


class SparkPartError(SparkqosError, RuntimeError):
    """The part of a query Spark evaluates inside the micro-batch failed (a UDF raised, a
    function rejected its input). ``query`` names the query, ``functions`` what that part computes
    beyond sparkqos's own operators. Nothing was ingested from the batch, so no row is lost: the
    failed trigger runs again when the stream restarts from its checkpoint."""

    def __init__(self, query: str, functions: tuple[str, ...], problem: str):
        self.query = query
        self.functions = tuple(functions)
        named = ", ".join(functions) or "its expressions"
        super().__init__(f"query {query!r}: the part Spark evaluates ({named}) failed: {problem}")


E = TypeVar("E", bound=SparkqosError)


def _bound(op: str, x: float) -> str:
    return f"{op} {x:g}" if isinstance(x, float) else f"{op} {x}"


def check_number(
    parameter: str,
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    integer: bool = False,
    finite: bool = True,
    none_ok: bool = False,
    error: type[SparkqosError] = ArgumentError,
    where: str = "",
) -> Any:
    """``value`` if it is a number (an ``int`` with ``integer``; never a bool) within the bounds,
    else raise ``error`` naming ``parameter`` (prefixed by ``where``), the value and what was
    expected. ``low_open`` / ``high_open`` exclude the bound itself; ``finite`` rejects NaN and
    ±inf; ``none_ok`` lets None through."""
    if value is None and none_ok:
        return value
    ok = not isinstance(value, bool) and isinstance(value, int if integer else (int, float))
    if ok and not integer:
        ok = not (finite and not math.isfinite(value)) and not math.isnan(value)
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value < high if high_open else value <= high
    if ok:  # hot paths call this per operator run: the message is built only on failure
        return value
    words = ["an integer" if integer else ("a finite number" if finite else "a number")]
    if low is not None:
        words.append(_bound(">" if low_open else ">=", low))
    if high is not None:
        words.append(("and " if low is not None else "") + _bound("<" if high_open else "<=", high))
    expected = " ".join(words) + (" or None" if none_ok else "")
    raise error(f"{where}{parameter} must be {expected}, got {value!r}", parameter=parameter, value=value, expected=expected)


def check_choice(
    parameter: str, value: Any, choices: Iterable[Any], *, error: type[SparkqosError] = ArgumentError, where: str = ""
) -> Any:
    """``value`` if it is one of ``choices``, else raise ``error`` listing them."""
    options = list(choices)
    if value not in options:
        expected = "one of " + ", ".join(repr(c) for c in options)
        raise error(f"{where}{parameter} must be {expected}, got {value!r}", parameter=parameter, value=value, expected=expected)
    return value


def not_one_of(error: type[SparkqosError], message: str, parameter: str, value: Any, choices: Iterable[Any]) -> SparkqosError:
    """``error(message)`` about ``parameter``, whose ``value`` is not among ``choices`` (a list of
    names: columns, streams), for the caller to raise."""
    return error(message, parameter=parameter, value=value, expected=f"one of {list(choices)}")


def warn_deprecated(spelling: str, instead: str, *, stacklevel: int) -> None:
    """A DeprecationWarning that ``spelling`` (an old keyword, ``name=``, or value) is read one
    more release and ``instead`` is the one to give; ``stacklevel`` as the caller would pass it
    to :func:`warnings.warn`."""
    warnings.warn(f"{spelling} is deprecated: give {instead}", DeprecationWarning, stacklevel=stacklevel + 1)


class GrowingStateWarning(UserWarning):
    """A query keeps state that nothing bounds (e.g. ``dropDuplicates`` on a stream without a
    watermark on its keys, as Spark allows): it runs, and its state grows with every new key.
    ``query`` and ``operation`` name where; the operator's ``state_rows()`` is the size held."""

    def __init__(self, query: str, operation: str, detail: str):
        self.query, self.operation = query, operation
        super().__init__(f"query {query!r}: {operation} {detail}")
