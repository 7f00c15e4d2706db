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

Supported aggregates (:data:`AGGREGATES`, as users spell them): ``count`` (of rows, a literal or
a column), ``sum``, ``avg``/``mean``, ``min``, ``max`` (of any type Spark orders: structs and
arrays too), ``first``, ``last``, ``any_value`` (``ignorenulls`` too), ``count_if``,
``bool_and``/``every``, ``bool_or``/``some``/``any``, the variance family and moments
(``stddev``, ``stddev_pop``, ``variance``, ``var_pop``, ``skewness``, ``kurtosis``), ``max_by``,
``min_by``, ``collect_list``, ``collect_set``, over columns or expressions; keys that are columns
or expressions (computed by a select below the aggregate, as Spark's analyzer projects them). An
aggregate over a type its kernels do not take is refused here, before any data moves.

Every other aggregate function — the approximate ones (:data:`APPROXIMATE`: Spark's sketches, which
an exact aggregate would not reproduce), pandas UDAFs, any aggregate with a ``FILTER`` clause —
is computed by Spark over each group's buffered rows when the group is emitted
(:class:`SparkItems`): the aggregation keeps a ``collect_list`` of a struct of the columns they
read in its state, and a :class:`~sparkqos.executor.operators.SparkAggregates` above it has the
session side compute them (the compiler's ``stager``). Without a session side (placement
``"native"``) they are refused. A windowed aggregation on a stream without a watermark, distinct
aggregates and expressions over aggregates raise :class:`~sparkqos.errors.UnsupportedTransform`
naming them.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from sparkqos.compile.nodes import Node, Rel, parse_expr
from sparkqos.errors import GrowingStateWarning, UnsupportedTransform
from sparkqos.executor.expressions import Alias, Col
from sparkqos.executor.expressions.nested import MakeStruct
from sparkqos.executor.operators import (
    EventWindowAggregate,
    KeyedAggregate,
    PhysicalOperator,
    Project,
    SparkAggregates,
    WindowAgg,
)
from sparkqos.executor.operators.spark_aggregates import BUFFER

#: Spark's aggregate functions by class name → the executor's (:data:`~sparkqos.executor.operators.event_window.FUNCTIONS`).
#: ``bool_and``/``every`` and ``bool_or``/``some``/``any`` are Spark's min and max of booleans,
#: ``any_value`` its ``first``.
_AGGREGATES = {
    "Count": "count",
    "Sum": "sum",
    "Average": "avg",
    "Min": "min",
    "Max": "max",
    "First": "first",
    "Last": "last",
    "AnyValue": "first",
    "CountIf": "count_if",
    "BoolAnd": "min",
    "BoolOr": "max",
    "StddevSamp": "stddev_samp",
    "StddevPop": "stddev_pop",
    "VarianceSamp": "var_samp",
    "VariancePop": "var_pop",
    "Skewness": "skewness",
    "Kurtosis": "kurtosis",
    "MaxBy": "max_by",
    "MinBy": "min_by",
    "CollectList": "collect_list",
    "CollectSet": "collect_set",
}
#: The aggregate functions that run natively, as users write them (the README's list).
AGGREGATES = {
    "Count": "count",
    "Sum": "sum",
    "Average": "avg/mean",
    "Min": "min",
    "Max": "max",
    "First": "first",
    "Last": "last",
    "AnyValue": "any_value",
    "CountIf": "count_if",
    "BoolAnd": "bool_and/every",
    "BoolOr": "bool_or/some/any",
    "StddevSamp": "stddev/std/stddev_samp",
    "StddevPop": "stddev_pop",
    "VarianceSamp": "variance/var_samp",
    "VariancePop": "var_pop",
    "Skewness": "skewness",
    "Kurtosis": "kurtosis",
    "MaxBy": "max_by",
    "MinBy": "min_by",
    "CollectList": "collect_list/array_agg",
    "CollectSet": "collect_set",
}
#: Aggregates whose result is Spark's sketch of the group, not an exact value: sparkqos would
#: give other numbers, so they are refused by name.
APPROXIMATE = {
    "ApproximatePercentile": "percentile_approx",
    "HyperLogLogPlusPlus": "approx_count_distinct",
    "CountMinSketchAgg": "count_min_sketch",
    "HistogramNumeric": "histogram_numeric",
    "HllSketchAgg": "hll_sketch_agg",
    "HllUnionAgg": "hll_union_agg",
}
_AGG_NAMES = {"Median": "median", "Mode": "mode", "Percentile": "percentile", "Product": "product", "Corr": "corr"}


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
    key_ids: dict[int, str] = {}
    # A key that is an expression (groupBy(F.upper("name")), groupBy(F.col("j.id").alias("id"))) is
    # computed by a select below the aggregate, as Spark's analyzer projects it.
    key_exprs: list[tuple[Node, str]] = []
    extra: list[tuple[str, Any]] = []
    for g, w in zip(grouping, is_window, strict=True):
        if w:
            continue
        if g.cls == "AttributeReference" and _eid(g) in names:
            keys.append(names[_eid(g)])
            key_ids[_eid(g)] = names[_eid(g)]
            continue
        name = _key_name(node, g, [*names.values(), *keys])
        extra.append((name, qc.expr(g, base)))
        keys.append(name)
        key_exprs.append((g, name))
    aggs, out_attrs, order, spark = _aggregates(qc, node, base, names, key_ids, key_exprs, window_id, wname, extra)
    if spark.items:
        aggs.append(spark.buffer(qc, names, extra))
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
        if spark.items and op.update:
            warnings.warn(
                GrowingStateWarning(
                    qc.query,
                    f"groupBy({keys}).agg({', '.join(w for _, _, w in spark.items)}) on a stream",
                    "keeps every row of each key for the aggregates Spark computes (no watermark ends a running "
                    "aggregation's groups): its state grows with every row; group by a window to bound it",
                ),
                stacklevel=2,
            )
        natural, label = [*keys, *(a.name for a in aggs)], "aggregate"
    rel = qc.add(label, op, [base], [(None, n) for n in natural])  # a type its kernels do not take: refused now
    if spark.items:
        natural = [n for n in natural if n != BUFFER] + [name for _, name, _ in spark.items]
        rel = qc.add("spark_aggregates", spark.operator(qc, node), [rel], [(None, n) for n in natural])
    if order == natural and [n for _, n in out_attrs] == natural:
        rel.attrs = out_attrs
        return rel
    # agg() lists its columns in another order, or renames the window or a key: a select does it.
    exprs = [Col(o) if o == n else Alias(Col(o), n) for (_, n), o in zip(out_attrs, order, strict=True)]
    return qc.add("select", Project(exprs), [rel], out_attrs)


def _key_name(node: Node, key: Node, taken: list[str]) -> str:
    """The column name of a grouping ``key`` that is an expression: the name agg()'s list gives it
    (its alias), unless another column has it."""
    name = "group_key"
    for item in node.fields["aggregateExpressions"]:
        tree = parse_expr(item)
        if tree.cls == "Alias" and tree.children[0] == key:
            name = tree.fields["name"]
            break
    while name in taken:
        name += "_"
    return name


def _aggregates(
    qc: Any,
    node: Node,
    base: Rel,
    names: dict[int, str],
    key_ids: dict[int, str],
    key_exprs: list[tuple[Node, str]],
    window_id: int | None,
    wname: str,
    extra: list[tuple[str, Any]],
) -> tuple[list[WindowAgg], list[tuple[int, str]], list[str], SparkItems]:
    """The aggregates of ``node``'s agg() list that run natively; the output attributes and, for
    each, the operator's column it reads (``order``); the aggregates Spark computes. The arguments
    a select must compute first go to ``extra``."""
    aggs: list[WindowAgg] = []
    out_attrs: list[tuple[int, str]] = []
    order: list[str] = []
    spark = SparkItems()
    for index, item in enumerate(node.fields["aggregateExpressions"]):
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
        if tree.cls == "Alias" and any(tree.children[0] == g for g, _ in key_exprs):
            out_attrs.append((_eid(tree), tree.fields["name"]))
            order.append(next(n for g, n in key_exprs if tree.children[0] == g))
            continue
        if tree.cls != "Alias" or tree.children[0].cls != "AggregateExpression":
            raise qc.unsupported("an expression over aggregates in agg()", "compute it with a select after the agg")
        agg_expr = tree.children[0]
        if agg_expr.fields.get("isDistinct"):
            raise qc.unsupported("a distinct aggregate (countDistinct, sum_distinct)")
        fn_node = agg_expr.children[0]
        if qc.stager is not None and (fn_node.cls not in _AGGREGATES or len(agg_expr.children) > 1):
            # no native version (or a FILTER (WHERE ...) clause): Spark computes it over the group's rows
            spark.add(qc, index, tree, names)
            out_attrs.append((_eid(tree), tree.fields["name"]))
            order.append(tree.fields["name"])
            continue
        if len(agg_expr.children) > 1:  # a FILTER (WHERE ...) clause
            raise qc.unsupported("an aggregate with a filter clause")
        fn = _function(qc, fn_node)
        arg = fn_node.children[0] if fn_node.children else None
        column: str | None
        by = None
        if fn in ("max_by", "min_by"):
            column = _argument(qc, arg, base, names, extra)
            by = _argument(qc, fn_node.children[1], base, names, extra)
        elif fn == "count":
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
        null_on_divide = bool(fn_node.fields.get("nullOnDivideByZero", True))
        nullable = bool(qc.context.get("streaming"))  # Spark's schema of a streaming aggregation
        aggs.append(WindowAgg(fn, column, name, ignore, by, null_on_divide, nullable))
        out_attrs.append((_eid(tree), name))
        order.append(name)
    return aggs, out_attrs, order, spark


class SparkItems:
    """The aggregates of one agg() list that Spark computes, over each group's buffered rows
    (:class:`~sparkqos.executor.operators.SparkAggregates`): for each, its place in the list, its
    name and what it is in a PySpark user's words; and the columns they read, which the
    aggregation keeps per group (by expression id, with the compiled column's name)."""

    def __init__(self) -> None:
        self.items: list[tuple[int, str, str]] = []
        self.columns: dict[int, str] = {}

    def add(self, qc: Any, index: int, tree: Node, names: dict[int, str]) -> None:
        agg_expr = tree.children[0]
        read: list[str] = []
        todo = [agg_expr]
        while todo:
            n = todo.pop(0)
            if n.cls == "AttributeReference":
                if _eid(n) not in names:
                    raise qc.unsupported(
                        f"an aggregate Spark computes over column {n.fields.get('name')!r}",
                        "it reads a grouping key or the window; aggregate a column of the input",
                    )
                self.columns.setdefault(_eid(n), names[_eid(n)])
                if names[_eid(n)] not in read:
                    read.append(names[_eid(n)])
            todo = n.children + todo
        clause = " with a FILTER clause" if len(agg_expr.children) > 1 else ""
        self.items.append((index, tree.fields["name"], f"{_spark_function(agg_expr)}({', '.join(read)}){clause}"))

    def buffer(self, qc: Any, names: dict[int, str], extra: list[tuple[str, Any]]) -> WindowAgg:
        """The aggregate keeping each group's rows of the columns read: a collect_list of a struct
        of them (a struct is never null, so every row is kept), computed by a select below."""
        taken = [*names.values(), *(n for n, _ in extra)]
        arg = "agg_rows"
        while arg in taken:
            arg += "_"
        cols = list(self.columns.values())
        extra.append((arg, MakeStruct([f"c{j}" for j in range(len(cols))], [Col(c) for c in cols], [True] * len(cols))))
        return WindowAgg("collect_list", arg, BUFFER, True, None, True, bool(qc.context.get("streaming")))

    def operator(self, qc: Any, node: Node) -> SparkAggregates:
        """The operator computing them, with the session side's evaluator (``qc.stager``)."""
        words = [w for _, _, w in self.items]
        try:
            schema, evaluator = qc.stager.aggregates(qc.query, node.pos, [i for i, _, _ in self.items], list(self.columns))
        except UnsupportedTransform as e:  # the session side cannot (Spark Connect): named here
            raise qc.unsupported(f"aggregate functions sparkqos has no native version of: {', '.join(words)}", e.detail) from None
        fields = [pa.field(name, f.type) for (_, name, _), f in zip(self.items, schema, strict=True)]
        return SparkAggregates(BUFFER, pa.schema(fields), words, evaluator)


def _spark_function(agg_expr: Node) -> str:
    """An aggregate Spark computes, as a PySpark user names it."""
    fn = agg_expr.children[0]
    if fn.cls == "PythonUDAF":
        name = f"pandas UDAF {fn.fields.get('name')!r}"
    else:
        name = APPROXIMATE.get(fn.cls) or AGGREGATES.get(fn.cls, "").split("/")[0] or _AGG_NAMES.get(fn.cls) or fn.cls
    return name


def _function(qc: Any, fn_node: Node) -> str:
    """The native aggregate function of Spark's ``fn_node``; refused by name where there is none."""
    fn = _AGGREGATES.get(fn_node.cls)
    if fn is not None:
        return fn
    if fn_node.cls == "PythonUDAF":
        raise qc.unsupported(f"a grouped aggregate pandas UDF {fn_node.fields.get('name')!r}")
    if fn_node.cls in APPROXIMATE:
        raise qc.unsupported(
            f"the approximate aggregate function {APPROXIMATE[fn_node.cls]!r}",
            "its result is Spark's sketch of the group; with placement 'auto' Spark computes it over the group's rows",
        )
    raise qc.unsupported(f"aggregate function {_AGG_NAMES.get(fn_node.cls, fn_node.cls)!r}")


def _argument(qc: Any, arg: Node, base: Rel, names: dict[int, str], extra: list[tuple[str, Any]]) -> str:
    """The column an aggregate reads: a column of ``base``, or a new one computed by a select."""
    if arg.cls == "AttributeReference" and _eid(arg) in names:
        return names[_eid(arg)]
    name = f"agg_arg{len(extra)}"
    while name in names.values():
        name += "_"
    extra.append((name, qc.expr(arg, base)))
    return name
