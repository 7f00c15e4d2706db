"""What a user asks of each query's latency: targets (``slo=``) and load shedding (``shed=``).

Both are mappings from a query name or a query class to a duration — a number of seconds or a
string such as ``"500ms"``, ``"0.5 s"``, ``"2s"`` or ``"1min"``. A query's own entry wins over its
class's. A target turns class shares into deadlines (:class:`~sparkqos.schedulers.deadline.EarliestDeadline`:
a row's deadline is its event time plus its query's target) and is reported per trigger
(``sloMet``, ``sloViolations``). A shedding age lets a query drop, under sustained overload, the
rows that fell further behind the stream than that age
(:class:`~sparkqos.runtime.shedding.Shedder`); a query without one never loses a row.

>>> parse_durations("slo", {"fire": "500 ms", "C": "2s", "N": 30})
{'fire': 0.5, 'C': 2.0, 'N': 30.0}
>>> parse_durations("slo", {"fire": "soon"})
Traceback (most recent call last):
...
sparkqos.errors.ConfigError: slo['fire']: 'soon' is not a duration; give seconds (0.5) or a string such as '500ms', '2s', '1min'
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from sparkqos.errors import ConfigError

__all__ = ["duration_s", "parse_durations", "per_query"]

_UNITS = {"ms": 1e-3, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(ms|s|sec|min|m|h)?\s*$")


def duration_s(where: str, value: Any) -> float:
    """``value`` (seconds, or a string with a unit) in seconds, > 0; a :class:`ConfigError`
    naming ``where`` otherwise."""
    example = "give seconds (0.5) or a string such as '500ms', '2s', '1min'"
    if isinstance(value, bool):
        raise ConfigError(f"{where}: {value!r} is not a duration; {example}")
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str) and (m := _DURATION.match(value)):
        seconds = float(m.group(1)) * _UNITS[m.group(2) or "s"]
    else:
        raise ConfigError(f"{where}: {value!r} is not a duration; {example}")
    if not (math.isfinite(seconds) and seconds > 0):
        raise ConfigError(f"{where}: the duration must be more than 0 seconds, got {value!r}")
    return seconds


def parse_durations(name: str, spec: Mapping[str, Any] | None) -> dict[str, float]:
    """``spec`` (query or class name → duration) in seconds; {} for None."""
    if spec is None:
        return {}
    if not isinstance(spec, Mapping):
        raise ConfigError(f"{name} must map query or class names to durations, got {spec!r}")
    out = {}
    for key, value in spec.items():
        if not isinstance(key, str) or not key:
            raise ConfigError(f"{name}: keys are query or class names, got {key!r}")
        out[key] = duration_s(f"{name}[{key!r}]", value)
    return out


def per_query(name: str, durations: Mapping[str, float], queries: Mapping[str, str]) -> dict[str, float]:
    """``durations`` (by query or class) resolved for each query of ``queries`` (query → class):
    a query's own entry, else its class's. A key that is neither raises, naming it.

    >>> per_query("slo", {"fire": 0.5, "N": 30.0}, {"fire": "H", "zone": "N", "archive": "N", "anomaly": "C"})
    {'fire': 0.5, 'zone': 30.0, 'archive': 30.0}
    """
    classes = set(queries.values())
    unknown = sorted(k for k in durations if k not in queries and k not in classes)
    if unknown:
        raise ConfigError(
            f"{name}: {', '.join(map(repr, unknown))} is neither a query nor a class of the plan; "
            f"queries {sorted(queries)}, classes {sorted(classes)}"
        )
    out = {}
    for query, klass in queries.items():
        if query in durations:
            out[query] = durations[query]
        elif klass in durations:
            out[query] = durations[klass]
    return out
