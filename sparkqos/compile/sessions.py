"""Spark's ``session_window`` in a transform's plan → the executor's SessionWindowAggregate.

``df.withWatermark("ts", "10 seconds").groupBy(F.session_window("ts", "5 minutes"), "user").agg(...)``
reaches the analyzer as an ``Aggregate`` over the session rewrite (Spark's SessionWindowing rule):
``Filter(isnotnull(ts)[ AND session_window.end > session_window.start]) ← Project(named_struct(start,
ts, end, ts + gap) AS session_window, ...)``; the merging of overlapping sessions is no plan node
(Spark's physical MergingSessions does it). :func:`session_window` recognises that shape for the
Aggregate handler of :mod:`sparkqos.compile.stateful`, which maps the whole of it to one
:class:`~sparkqos.executor.operators.SessionWindowAggregate`.

The gap must be a literal: an interval string as Spark reads it (``"5 minutes"``, ``"1 hour 30
minutes"``, ``"2.5 seconds"``, ``"interval 1 day"``; Spark takes no day-time interval there). A
gap computed per row (``session_window(ts, F.when(...))``), one in months or years (calendar
arithmetic), one in days under a session time zone other than UTC (days of 23 or 25 hours), and a
gap of zero or less (Spark drops every row) raise :class:`~sparkqos.errors.UnsupportedTransform`
naming them.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from sparkqos.compile.nodes import Node, parse_expr
from sparkqos.compile.stateful import TimeWindow, time_column
from sparkqos.executor.operators import SessionWindowAggregate, WindowAgg

#: Microseconds per unit of Spark's interval strings (IntervalUtils.stringToInterval).
_UNITS_US = {
    "week": 7 * 86_400_000_000,
    "day": 86_400_000_000,
    "hour": 3_600_000_000,
    "minute": 60_000_000,
    "second": 1_000_000,
    "millisecond": 1_000,
    "microsecond": 1,
}
_PAIR = re.compile(r"([+-]?)(\d+)(?:\.(\d{1,9}))?\s+([a-z]+?)s?(?=\s|$)")
_UTC = {"UTC", "Etc/UTC", "GMT", "Etc/GMT", "Z", "+00:00", "UCT", "Universal", "Zulu"}
_HOW = "session_window(ts, 'N seconds|minutes|hours|days') with a literal gap"


def interval_string_us(text: str) -> tuple[int, bool] | None:
    """Spark's reading of an interval string as (microseconds, whether it counts days), for the
    units of a fixed length; None for anything else (months, years, a malformed string).

    >>> interval_string_us("1 hour 30 minutes"), interval_string_us("interval 2.5 seconds")
    ((5400000000, False), (2500000, False))
    >>> interval_string_us("1 week"), interval_string_us("1 month"), interval_string_us("1.5 hours")
    ((604800000000, True), None, None)
    """
    rest = text.strip().lower()
    if rest.startswith("interval"):
        rest = rest[len("interval") :].strip()
    total, days, pos = 0, False, 0
    while pos < len(rest):
        m = _PAIR.match(rest, pos)
        if m is None or m.group(4) not in _UNITS_US:
            return None
        sign, whole, frac, unit = m.groups()
        if frac is not None and unit != "second":  # Spark takes a fraction of seconds only
            return None
        value = int(whole) * _UNITS_US[unit] + (int(frac.ljust(9, "0")) // 1000 if frac else 0)
        total += -value if sign == "-" else value
        days = days or unit in ("week", "day")
        pos = m.end()
        while pos < len(rest) and rest[pos].isspace():
            pos += 1
    return (total, days) if rest else None


def _unwrap(node: Node) -> Node:
    while node.cls in ("KnownNullable", "PreciseTimestampConversion", "Cast") and node.children:
        node = node.children[0]
    return node


def _gap_us(qc: Any, add: Node) -> int:
    """The gap of the session rewrite's ``ts + gap`` (a TimestampAddInterval) in µs."""
    gap = add.children[1]
    while gap.cls == "Cast" and gap.children:
        gap = gap.children[0]
    if gap.cls != "Literal":
        raise qc.unsupported("session_window with a gap that is an expression (a dynamic gap)", _HOW)
    value = gap.fields.get("value")
    if gap.fields.get("dataType") == "string" and value is not None:
        read = interval_string_us(str(value))
        if read is None:
            raise qc.unsupported(f"session_window with the gap {value!r}", f"{_HOW}; months and years are not")
        gap_us, days = read
        zone = add.fields.get("timeZoneId")
        if days and zone not in _UTC:
            raise qc.unsupported(
                f"session_window with a gap in days ({value!r}) under the session time zone {zone!r}",
                "a day there may last 23 or 25 hours; give the gap in hours",
            )
    else:  # Spark itself takes only a calendar interval, which a literal gives as a string
        raise qc.unsupported(f"session_window with a gap of type {gap.fields.get('dataType')}", _HOW)
    if gap_us <= 0:
        raise qc.unsupported(f"session_window with a gap of {gap_us} µs", f"Spark drops every row; {_HOW} above zero")
    return gap_us


def _operator(
    add: Node, qc: Any, keys: list[str], aggs: list[WindowAgg], time_col: str, delay_us: int | None, name: str
) -> SessionWindowAggregate:
    return SessionWindowAggregate(keys, aggs, time_col, _gap_us(qc, add), delay_us, name)


def session_window(child: Node) -> TimeWindow | None:
    """``session_window(ts, gap)`` when ``child`` (the node under an Aggregate) is the analyzer's
    rewrite of it."""
    if child.cls != "Filter" or not child.children or child.children[0].cls != "Project":
        return None
    project = child.children[0]
    for item in project.fields.get("projectList", []):
        tree = parse_expr(item)
        if tree.cls != "Alias" or tree.children[0].cls != "CreateNamedStruct" or len(tree.children[0].children) != 4:
            continue
        struct = tree.children[0]
        add = _unwrap(struct.children[3])
        ts = time_column(struct.children[1])
        if add.cls == "TimestampAddInterval" and len(add.children) == 2 and ts is not None and project.children:
            return TimeWindow(ts, project.children[0], "session_window", functools.partial(_operator, add))
    return None
