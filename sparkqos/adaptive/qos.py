"""Quality-of-service specifications: what the adaptive controller optimises.

Thesis (raindrop, Sutherland 2004) §5.1 (statistic, quantifier, weight; templates; default of equal
weights) and §3.3.2 (user-defined statistics).

A spec is a list of goals ``(statistic, maximize|minimize, weight)`` whose weights sum to 1. Each
statistic is a function of one evaluation window's measurements (:class:`Window`); the built-in
ones are ``output_rate``, ``queued`` (tuples in all queues — the memory goal), ``queued_bytes`` and
``delay``, and users register more with :func:`register_statistic`.

>>> spec = QosSpec.of(("delay", "minimize", 0.7), ("output_rate", "maximize", 0.3))
>>> spec.weights
{'delay': 0.7, 'output_rate': 0.3}
>>> resolve(None).name
'balanced'
>>> QosSpec.of(("delay", "minimize", 0.5))
Traceback (most recent call last):
  ...
sparkqos.errors.QosSpecError: QoS weights must sum to 1, got 0.5 (delay=0.5)
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkqos.errors import QosSpecError, check_choice, check_number

DIRECTIONS = ("maximize", "minimize")
#: Tolerance on Σ weights = 1.
WEIGHT_TOLERANCE = 1e-9
#: Where the shipped TOML templates live (a source checkout; the templates are also built in).
#: The built-in QoS templates as files (package data, so an installed wheel has them too).
CONF_DIR = Path(__file__).resolve().parent / "templates"

TOP_KEYS = ("name", "description", "goal")
GOAL_KEYS = ("statistic", "direction", "weight")


@dataclass(frozen=True, slots=True)
class Window:
    """What the controller measured over one evaluation window, from ``start`` to ``end``.

    ``outputs`` tuples left the query roots with ``delay_sum`` = Σ amount × delay;
    ``queued_mean`` / ``queued_bytes_mean`` are time-weighted means of the queued tuples / bytes
    sampled at each pick (a plain mean when the window has no duration); ``picks`` counts units.
    ``pending_mean`` (optional) is the time-weighted mean of the outputs the queued tuples will
    still produce (each queued tuple × the selectivities from its operator to the root): by
    Little's law, divided by the output rate, the mean delay those outputs are accruing.
    """

    start: float
    end: float
    picks: int
    outputs: float
    delay_sum: float
    queued_mean: float
    queued_bytes_mean: float
    pending_mean: float | None = None
    inputs: float | None = None
    work: float | None = None
    queued_start: float | None = None
    queued_end: float | None = None

    @property
    def duration(self) -> float:
        return self.end - self.start


Statistic = Callable[[Window], "float | None"]


def _output_rate(w: Window) -> float | None:
    return w.outputs / w.duration if w.duration > 0 else None


def _delay(w: Window) -> float | None:
    return w.delay_sum / w.outputs if w.outputs > 0 else None


_STATISTICS: dict[str, Statistic] = {
    "output_rate": _output_rate,
    "delay": _delay,
    "queued": lambda w: w.queued_mean,
    "queued_bytes": lambda w: w.queued_bytes_mean,
}
_BUILTIN = frozenset(_STATISTICS)


def register_statistic(name: str, fn: Statistic, *, replace: bool = False) -> None:
    """Make ``name`` usable in QoS specs; ``fn(window)`` returns a number, or None when the
    window says nothing about it (e.g. no output, so no delay).

    >>> register_statistic("outputs_per_pick", lambda w: w.outputs / w.picks if w.picks else None)
    >>> QosSpec.of(("outputs_per_pick", "maximize", 1.0)).statistics
    ('outputs_per_pick',)
    >>> unregister_statistic("outputs_per_pick")
    """
    if not isinstance(name, str) or not name.replace("_", "").isalnum():
        raise QosSpecError(f"statistic names are identifiers such as 'p99_delay', got {name!r}")
    if not callable(fn):
        raise QosSpecError(f"statistic {name!r} needs a function of a Window, got {fn!r}")
    if name in _BUILTIN:
        raise QosSpecError(f"statistic {name!r} is built in and cannot be replaced")
    if name in _STATISTICS and not replace:
        raise QosSpecError(f"a statistic named {name!r} is already registered")
    _STATISTICS[name] = fn


def unregister_statistic(name: str) -> None:
    if name in _BUILTIN:
        raise QosSpecError(f"statistic {name!r} is built in and cannot be removed")
    _STATISTICS.pop(name, None)


def statistics() -> list[str]:
    """Names usable in a QoS spec."""
    return sorted(_STATISTICS)


def measure(name: str, window: Window) -> float | None:
    """The value of statistic ``name`` over ``window`` (None: undefined there)."""
    try:
        fn = _STATISTICS[name]
    except KeyError:
        raise QosSpecError(f"unknown statistic {name!r}; known statistics are {statistics()}") from None
    value = fn(window)
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


@dataclass(frozen=True, slots=True)
class Goal:
    """One QoS requirement: ``statistic``, ``direction`` (maximize|minimize), ``weight``."""

    statistic: str
    direction: str
    weight: float

    def __post_init__(self) -> None:
        if self.statistic not in _STATISTICS:
            raise QosSpecError(f"unknown statistic {self.statistic!r}; known statistics are {statistics()}")
        where = f"goal {self.statistic!r}: "
        check_choice("direction", self.direction, DIRECTIONS, error=QosSpecError, where=where)
        w = check_number("weight", self.weight, low=0, error=QosSpecError, where=where)
        object.__setattr__(self, "weight", float(w))

    @property
    def maximize(self) -> bool:
        return self.direction == "maximize"


@dataclass(frozen=True, slots=True)
class QosSpec:
    """A named, validated list of goals (weights sum to 1 within 1e-9; each statistic once)."""

    goals: tuple[Goal, ...]
    name: str = "custom"
    description: str = ""

    def __post_init__(self) -> None:
        goals = tuple(self.goals)
        if not goals:
            raise QosSpecError(f"QoS spec {self.name!r} has no goals")
        if not all(isinstance(g, Goal) for g in goals):
            raise QosSpecError(f"QoS spec goals must be Goal objects, got {goals!r}")
        seen = [g.statistic for g in goals]
        dup = sorted({s for s in seen if seen.count(s) > 1})
        if dup:
            raise QosSpecError(f"QoS spec {self.name!r} names statistic(s) {dup} more than once")
        total = math.fsum(g.weight for g in goals)
        if abs(total - 1.0) > WEIGHT_TOLERANCE:
            parts = ", ".join(f"{g.statistic}={g.weight!r}" for g in goals)
            raise QosSpecError(f"QoS weights must sum to 1, got {total:.12g} ({parts})")
        object.__setattr__(self, "goals", goals)

    @classmethod
    def of(cls, *goals: tuple[str, str, float] | Goal, name: str = "custom", description: str = "") -> QosSpec:
        """Build from ``(statistic, direction, weight)`` triples."""
        built = []
        for g in goals:
            if isinstance(g, Goal):
                built.append(g)
                continue
            try:
                statistic, direction, weight = g
            except (TypeError, ValueError):
                raise QosSpecError(f"a goal is (statistic, direction, weight), got {g!r}") from None
            built.append(Goal(statistic, direction, weight))
        return cls(tuple(built), name, description)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], source: str = "<dict>") -> QosSpec:
        """From the TOML layout: ``name``, ``description`` and a list ``goal`` of tables with
        ``statistic``, ``direction``, ``weight``. Unknown keys are errors naming the allowed ones."""
        if not isinstance(d, Mapping):
            raise QosSpecError(f"{source}: a QoS spec is a table, got {type(d).__name__}")
        unknown = sorted(set(d) - set(TOP_KEYS))
        if unknown:
            raise QosSpecError(f"{source}: unknown key(s) {unknown}; allowed keys are {list(TOP_KEYS)}")
        goals = d.get("goal")
        if not isinstance(goals, list) or not goals:
            raise QosSpecError(f"{source}: needs at least one [[goal]] table, got {goals!r}")
        built = []
        for k, g in enumerate(goals):
            if not isinstance(g, Mapping):
                raise QosSpecError(f"{source}: goal {k} must be a table, got {g!r}")
            unknown = sorted(set(g) - set(GOAL_KEYS))
            missing = [key for key in GOAL_KEYS if key not in g]
            if unknown:
                raise QosSpecError(f"{source}: goal {k} has unknown key(s) {unknown}; allowed keys are {list(GOAL_KEYS)}")
            if missing:
                raise QosSpecError(f"{source}: goal {k} is missing {missing}")
            built.append(Goal(g["statistic"], g["direction"], g["weight"]))
        name = d.get("name", Path(source).stem if source != "<dict>" else "custom")
        description = d.get("description", "")
        if not isinstance(name, str) or not isinstance(description, str):
            raise QosSpecError(f"{source}: name and description must be strings, got {name!r}, {description!r}")
        return cls(tuple(built), name, description)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "goal": [{"statistic": g.statistic, "direction": g.direction, "weight": g.weight} for g in self.goals],
        }

    @property
    def statistics(self) -> tuple[str, ...]:
        return tuple(g.statistic for g in self.goals)

    @property
    def weights(self) -> dict[str, float]:
        return {g.statistic: g.weight for g in self.goals}

    def score(self, normalized: Mapping[str, float]) -> float:
        """Eq 5.2: Σ wᵢ·zᵢ with zᵢ ∈ [0, 1] given as "higher is larger" and flipped here to
        1 − zᵢ for minimize goals. A missing statistic counts as neutral (0.5)."""
        total = 0.0
        for g in self.goals:
            z = normalized.get(g.statistic)
            z = 0.5 if z is None else z
            total += g.weight * (z if g.maximize else 1.0 - z)
        return total


def load_qos(path: str | Path) -> QosSpec:
    """Read a QoS spec from a TOML file."""
    path = Path(path)
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        raise QosSpecError(f"QoS file {str(path)!r} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise QosSpecError(f"{path}: not valid TOML ({exc})") from None
    return QosSpec.from_dict(data, source=str(path))


_THIRD = 1.0 / 3.0

#: Built-in templates (thesis §5.1); templates/*.toml holds the same specs as files.
TEMPLATES: dict[str, QosSpec] = {
    name: QosSpec.of(*goals, name=name, description=description)
    for name, goals, description in (
        (
            "balanced",
            [("delay", "minimize", _THIRD), ("output_rate", "maximize", _THIRD), ("queued", "minimize", _THIRD)],
            "The thesis default (§5.1): equal weight on delay, output rate and memory.",
        ),
        (
            "low_latency",
            [("delay", "minimize", 0.7), ("output_rate", "maximize", 0.3)],
            "70% minimise tuple delay, 30% maximise output rate (thesis fig 6.4).",
        ),
        (
            "high_throughput",
            [("output_rate", "maximize", 0.7), ("delay", "minimize", 0.3)],
            "70% maximise output rate, 30% minimise tuple delay (thesis fig 6.5).",
        ),
        (
            "low_memory",
            [("queued", "minimize", 0.75), ("output_rate", "maximize", 0.25)],
            "75% minimise queued tuples, 25% maximise output (thesis table 5.1).",
        ),
    )
}

DEFAULT = "balanced"


def template(name: str) -> QosSpec:
    """A built-in template by name."""
    try:
        return TEMPLATES[name]
    except (KeyError, TypeError):
        raise QosSpecError(f"unknown QoS template {name!r}; templates are {sorted(TEMPLATES)}") from None


def resolve(qos: QosSpec | str | Path | Mapping[str, Any] | Iterable | None) -> QosSpec:
    """Whatever a user passed as ``qos``: a spec, a template name, a path to a TOML file, a
    TOML-layout mapping, a list of ``(statistic, direction, weight)`` triples, or None (default)."""
    if qos is None:
        return template(DEFAULT)
    if isinstance(qos, QosSpec):
        return qos
    if isinstance(qos, Path) or (isinstance(qos, str) and qos.endswith(".toml")):
        return load_qos(qos)
    if isinstance(qos, str):
        return template(qos)
    if isinstance(qos, Mapping):
        return QosSpec.from_dict(qos)
    if isinstance(qos, (list, tuple)):
        return QosSpec.of(*qos)
    raise QosSpecError(f"qos must be a QosSpec, template name, TOML path, mapping or list of goals, got {qos!r}")
