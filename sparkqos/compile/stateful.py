"""Spark's event-time aggregation in a transform's plan → the executor's EventWindowAggregate.

``df.withWatermark("ts", "2 seconds").groupBy(F.window("ts", "10 seconds"[, slide]), "zone").agg(...)``
reaches the analyzer as an ``Aggregate`` over the window rewrite (Spark's TimeWindowing rule):
tumbling, ``Project(window struct AS window, ...) ← Filter(isnotnull(ts))``; sliding,
``Filter(isnotnull(ts) AND ts in window) ← Expand(one projection per overlapping window)``. This
module recognises that shape (:func:`time_window`) and maps the whole of it to one
:class:`~sparkqos.executor.operators.EventWindowAggregate`, which assigns rows to Spark's windows
itself. The time windows an Aggregate may group by are a table the compiler's tables hand to
:func:`aggregate` (:data:`sparkqos.compile.tables.WINDOWS`): ``window`` read here,
``session_window`` by :mod:`sparkqos.compile.sessions`. What the analyzed JSON leaves out comes from the plan context
(:mod:`sparkqos.spark.transforms`): the window's duration, slide and start (read from the
unresolved ``window(...)`` call), the watermark delay of the event-time column (from the
``EventTimeWatermark`` node) and whether the input is a stream.

An ``Aggregate`` without a time window (``groupBy("k").agg(...)``, ``df.agg(...)``) maps to a
:class:`~sparkqos.executor.operators.KeyedAggregate`: on a stream Spark's update output mode
(each trigger emits the keys changed since the last one, once each; no watermark needed, the
state is one row per key), on a
finite DataFrame the final table.

Supported aggregates: ``count`` (of rows, a literal or a column), ``sum``, ``avg``/``mean``,
``min``, ``max``, ``first``, ``last`` (``ignorenulls`` too), over columns or expressions, keys
that are columns. A windowed aggregation on a stream without a watermark, distinct aggregates,
expressions over aggregates and other aggregate functions raise
:class:`~sparkqos.errors.UnsupportedTransform` naming them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sparkqos.compile.nodes import Node, Rel, parse_expr
from sparkqos.executor.expressions import Alias, Col
from sparkqos.executor.operators import EventWindowAggregate, KeyedAggregate, PhysicalOperator, Project, WindowAgg

_AGGREGATES = {"Count": "count", "Sum": "sum", "Average": "avg", "Min": "min", "Max": "max", "First": "first", "Last": "last"}
_AGG_NAMES = {
    "CollectList": "collect_list",
    "CollectSet": "collect_set",
    "StddevSamp": "stddev",
    "StddevPop": "stddev_pop",
    "VarianceSamp": "variance",
    "VariancePop": "var_pop",
    "ApproximatePercentile": "percentile_approx",
    "HyperLogLogPlusPlus": "approx_count_distinct",
    "CountIf": "count_if",
    "BoolAnd": "bool_and",
    "BoolOr": "bool_or",
    "MaxBy": "max_by",
    "MinBy": "min_by",
}


@dataclass(frozen=True)
class TimeWindow:
    """A time window of a groupBy as the analyzer rewrote it under the Aggregate: its event-time
    attribute, the relation under the rewrite, the operator's label in the plan, and
    ``operator(compiler, keys, aggs, time_col, delay_us, name)``, the operator grouping by it
    (raising UnsupportedTransform for what of the window it cannot run)."""

    time: Node
    below: Node
    label: str
    operator: Callable[[Any, list[str], list[WindowAgg], str, int | None, str], PhysicalOperator]


#: Reads the rewrite of one kind of time window from the node under an Aggregate: None when the
#: node is not that rewrite.
WindowReader = Callable[[Node], "TimeWindow | None"]


def _is_window_struct(node: Node) -> bool:
    t = node.fields.get("dataType")
    if not isinstance(t, dict) or t.get("type") != "struct":
        return False
    fields = [(f.get("name"), f.get("type")) for f in t.get("fields", [])]
    return len(fields) == 2 and fields[0][0] == "start" and fields[1][0] == "end" and fields[0][1] == fields[1][1]


def _eid(node: Node) -> int:
    return node.fields["exprId"]["id"]


def time_column(cond: Node) -> Node | None:
    """The event-time attribute of the window rewrite's filter (``isnotnull(ts)``, or
    ``ts >= window.start AND ts < window.end``): its first timestamp attribute."""
    todo = [cond]
    while todo:
        node = todo.pop(0)
        if node.cls == "AttributeReference" and node.fields.get("dataType") in ("timestamp", "timestamp_ntz"):
            return node
        todo = node.children + todo
    return None


def _rewrite(child: Node) -> tuple[Node, Node] | None:
    """(event-time attribute, the relation under it) when ``child`` is the analyzer's rewrite of
    ``window()`` under an Aggregate."""
    node = child
    if node.cls == "Project" and node.children and node.children[0].cls == "Filter":  # tumbling
        ts = time_column(parse_expr(node.children[0].fields["condition"]))
        if ts is not None:
            return ts, node.children[0].children[0]
    if node.cls == "Filter" and node.children and node.children[0].cls == "Expand":  # sliding
        ts = time_column(parse_expr(node.fields["condition"]))
        if ts is not None:
            return ts, node.children[0].children[0]
    return None


def _literal_int(node: Node) -> int | None:
    while node.cls == "Cast" and node.children:
        node = node.children[0]
    if node.cls == "Literal" and node.fields.get("dataType") in ("long", "integer") and node.fields.get("value") is not None:
        return int(node.fields["value"])
    return None


def _find(node: Node, cls: str) -> Node | None:
    todo = [node]
    while todo:
        n = todo.pop(0)
        if n.cls == cls:
            return n
        todo = n.children + todo
    return None


def _window_params(qc: Any, child: Node) -> tuple[int, int, int]:
    """(duration, slide, start) in µs of the window() the analyzer rewrote under ``child``.

    The rewrite computes ``start = t − ((t − startTime) % slide [+ slide when negative]) − i·slide``
    and ``end = start + duration`` as a named struct (Spark's TimeWindowing): the ``%`` reads
    ``(t − startTime) % slide`` and the ``end`` field ``… + duration``."""
    struct = None
    if child.cls == "Project":
        for item in child.fields["projectList"]:
            tree = parse_expr(item)
            if tree.cls == "Alias" and tree.children[0].cls == "CreateNamedStruct":
                struct = tree.children[0]
                break
    elif child.cls == "Filter" and child.children[0].cls == "Expand":
        first = child.children[0].fields["projections"][0]
        tree = parse_expr(first[0])
        struct = tree if tree.cls == "CreateNamedStruct" else None
    if struct is None or len(struct.children) != 4:
        raise qc.unsupported("a window() sparkqos cannot read", "window(time column, 'duration'[, 'slide'[, 'start']])")
    rem = _find(struct.children[1], "Remainder")
    end = struct.children[3]
    while end.cls in ("KnownNullable", "PreciseTimestampConversion") and end.children:
        end = end.children[0]
    slide = start = size = None
    if rem is not None and rem.children[0].cls == "Subtract":
        start, slide = _literal_int(rem.children[0].children[1]), _literal_int(rem.children[1])
    if end.cls == "Add":
        size = _literal_int(end.children[1])
    if None in (slide, start, size) or not (0 < slide <= size):
        raise qc.unsupported("a window() sparkqos cannot read", "window(time column, 'duration'[, 'slide'[, 'start']])")
    return size, slide, start


def _event_window(
    child: Node, qc: Any, keys: list[str], aggs: list[WindowAgg], time_col: str, delay_us: int | None, name: str
) -> EventWindowAggregate:
    size_us, slide_us, start_us = _window_params(qc, child)
    return EventWindowAggregate(keys, aggs, time_col, size_us, slide_us, start_us, delay_us, name)


def time_window(child: Node) -> TimeWindow | None:
    """``window(ts, duration[, slide[, start]])`` when ``child`` is the analyzer's rewrite of it."""
    found = _rewrite(child)
    if found is None:
        return None
    return TimeWindow(found[0], found[1], "window_agg", functools.partial(_event_window, child))


def _time_window(child: Node, windows: Mapping[str, WindowReader]) -> TimeWindow | None:
    for read in windows.values():
        found = read(child)
        if found is not None:
            return found
    return None


def _windows(node: Node) -> list[Node]:
    grouping = [parse_expr(g) for g in node.fields.get("groupingExpressions", [])]
    return [g for g in grouping if g.cls == "AttributeReference" and _is_window_struct(g)]


def aggregate_inputs(node: Node, windows: Mapping[str, WindowReader]) -> list[Node]:
    found = _time_window(node.children[0], windows) if node.children and _windows(node) else None
    return node.children if found is None else [found.below]


def aggregate(qc: Any, node: Node, windows: Mapping[str, WindowReader]) -> Rel:
    """An Aggregate, grouped by one of the time ``windows`` (function name → reader of its
    rewrite, :data:`sparkqos.compile.tables.WINDOWS`) or by keys alone."""
    if "groupingExpressions" not in node.fields:  # a bare node of the Spark Connect reader (withColumn of an aggregate)
        raise qc.unsupported("Spark operation 'Aggregate'", "an aggregation sparkqos does not read under Spark Connect")
    grouping = [parse_expr(g) for g in node.fields["groupingExpressions"]]
    window_attrs = _windows(node)
    if len(window_attrs) > 1:
        raise qc.unsupported("a groupBy over two time windows")
    window_id = _eid(window_attrs[0]) if window_attrs else None
    wname = window_attrs[0].fields["name"] if window_attrs else "window"
    if window_attrs:
        window = _time_window(node.children[0], windows)
        if window is None:
            how = f"group by {' or '.join(windows)}(col, ...) and columns"
            raise qc.unsupported("a groupBy whose time window sparkqos cannot place", how)
        base = qc.relation(window.below)
    else:
        base = qc.relation(node.children[0])
    names = dict(base.attrs)
    is_window = [g.cls == "AttributeReference" and _eid(g) == window_id for g in grouping]
    keys: list[str] = []
    for g, w in zip(grouping, is_window, strict=True):
        if w:
            continue
        if g.cls != "AttributeReference" or _eid(g) not in names:
            raise qc.unsupported("a groupBy key that is an expression", "add it with withColumn and group by its name")
        keys.append(names[_eid(g)])
    key_ids = {_eid(g): names[_eid(g)] for g, w in zip(grouping, is_window, strict=True) if not w}
    aggs, out_attrs, order, extra = _aggregates(qc, node, base, names, key_ids, window_id, wname)
    if extra:
        cols = [Col(n) for _, n in base.attrs] + [Alias(e, n) for n, e in extra]
        base = qc.add("select", Project(cols), [base], base.attrs + [(None, n) for n, _ in extra])
    if window_attrs:
        ts = window.time
        if _eid(ts) not in names:
            raise qc.unsupported(f"{wname}() over a computed column", "add the column with withColumn before withWatermark")
        time_col = names[_eid(ts)]
        delay_s = (qc.context.get("watermarks") or {}).get(_eid(ts))
        if delay_s is None and qc.context.get("streaming"):
            raise qc.unsupported(
                f"groupBy({wname}(...)) on a stream without withWatermark",
                f"Spark's append mode needs a watermark on {time_col!r} to know when a window is complete",
            )
        delay_us = None if delay_s is None else int(round(delay_s * 1e6))
        op: Any = window.operator(qc, keys, aggs, time_col, delay_us, wname)
        natural, label = [wname, *keys, *(a.name for a in aggs)], window.label
    else:
        # Spark's update mode on a stream; the final table at the end of a finite DataFrame
        op = KeyedAggregate(keys, aggs, update=bool(qc.context.get("streaming")))
        natural, label = [*keys, *(a.name for a in aggs)], "aggregate"
    rel = qc.add(label, op, [base], [(None, n) for n in natural])
    if order == natural and [n for _, n in out_attrs] == natural:
        rel.attrs = out_attrs
        return rel
    # agg() lists its columns in another order, or renames the window or a key: a select does it.
    exprs = [Col(o) if o == n else Alias(Col(o), n) for (_, n), o in zip(out_attrs, order, strict=True)]
    return qc.add("select", Project(exprs), [rel], out_attrs)


def _aggregates(
    qc: Any, node: Node, base: Rel, names: dict[int, str], key_ids: dict[int, str], window_id: int | None, wname: str
) -> tuple[list[WindowAgg], list[tuple[int, str]], list[str], list[tuple[str, Any]]]:
    """The aggregates of ``node``'s agg() list; the output attributes and, for each, the operator's
    column it reads (``order``); and the arguments a select must compute first (``extra``)."""
    extra: list[tuple[str, Any]] = []
    aggs: list[WindowAgg] = []
    out_attrs: list[tuple[int, str]] = []
    order: list[str] = []
    for item in node.fields["aggregateExpressions"]:
        tree = parse_expr(item)
        if tree.cls == "AttributeReference" and _eid(tree) == window_id:
            out_attrs.append((_eid(tree), tree.fields["name"]))
            order.append(wname)
            continue
        if tree.cls == "AttributeReference" and _eid(tree) in key_ids:
            out_attrs.append((_eid(tree), key_ids[_eid(tree)]))
            order.append(key_ids[_eid(tree)])
            continue
        if tree.cls == "Alias" and tree.children[0].cls == "AttributeReference":
            inner = _eid(tree.children[0])
            if inner == window_id or inner in key_ids:
                out_attrs.append((_eid(tree), tree.fields["name"]))
                order.append(wname if inner == window_id else key_ids[inner])
                continue
        if tree.cls != "Alias" or tree.children[0].cls != "AggregateExpression":
            raise qc.unsupported("an expression over aggregates in agg()", "compute it with a select after the agg")
        agg_expr = tree.children[0]
        if agg_expr.fields.get("isDistinct"):
            raise qc.unsupported("a distinct aggregate (countDistinct, sum_distinct)")
        if len(agg_expr.children) > 1:  # a FILTER (WHERE ...) clause
            raise qc.unsupported("an aggregate with a filter clause")
        fn_node = agg_expr.children[0]
        fn = _AGGREGATES.get(fn_node.cls)
        if fn is None:
            if fn_node.cls == "PythonUDAF":
                raise qc.unsupported(f"a grouped aggregate pandas UDF {fn_node.fields.get('name')!r}")
            name = _AGG_NAMES.get(fn_node.cls, fn_node.cls)
            raise qc.unsupported(f"aggregate function {name!r}")
        arg = fn_node.children[0] if fn_node.children else None
        column: str | None
        if fn == "count":
            if len(fn_node.children) != 1:
                raise qc.unsupported("count over several columns")
            if arg.cls == "Literal" and arg.fields.get("value") is not None:
                fn, column = "count_all", None
            else:
                column = _argument(qc, arg, base, names, extra)
        else:
            column = _argument(qc, arg, base, names, extra)
        ignore = bool(fn_node.fields.get("ignoreNulls", False))
        if fn in ("first", "last") and len(fn_node.children) > 1:
            flag = fn_node.children[1]
            ignore = flag.fields.get("value") == "true"
        name = tree.fields["name"]
        aggs.append(WindowAgg(fn, column, name, ignore))
        out_attrs.append((_eid(tree), name))
        order.append(name)
    return aggs, out_attrs, order, extra


def _argument(qc: Any, arg: Node, base: Rel, names: dict[int, str], extra: list[tuple[str, Any]]) -> str:
    """The column an aggregate reads: a column of ``base``, or a new one computed by a select."""
    if arg.cls == "AttributeReference" and _eid(arg) in names:
        return names[_eid(arg)]
    name = f"agg_arg{len(extra)}"
    while name in names.values():
        name += "_"
    extra.append((name, qc.expr(arg, base)))
    return name
