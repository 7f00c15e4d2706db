"""Spark Connect relations whose analyzed form is not the client's: aggregations, watermarks,
generators, window functions and deduplications, written as the analyzed-plan JSON nodes
:mod:`sparkqos.compile.stateful`, :mod:`sparkqos.compile.nested` and :mod:`sparkqos.compile.keyed`
map (for :mod:`sparkqos.spark.connect_plan`, whose translator each function here takes as ``tr``).

* ``groupBy(...).agg(...)``, ``groupBy(...).count()``, ``df.agg(...)`` and a ``select`` of
  aggregates become an ``Aggregate`` with its grouping and aggregate expressions, as the analyzer
  writes them (keys as attribute references, each aggregate an ``Alias`` of an
  ``AggregateExpression`` of ``Count``, ``Sum``…), every type the server's.
* A ``window(ts, duration[, slide[, start]])`` key becomes the analyzer's rewrite of it under the
  Aggregate (``Project(named_struct(start, end) AS window, ...) <- Filter(isnotnull(ts))``), whose
  start expression carries ``(ts - start) % slide`` and whose end ``... + duration`` in
  microseconds, read from the call's interval strings as Spark reads them
  (:func:`sparkqos.compile.sessions.interval_string_us`); a ``session_window(ts, gap)`` key
  becomes its rewrite (``Filter(isnotnull(ts)) <- Project(named_struct(start, ts, end, ts + gap)
  AS session_window, ...)``).
* ``withWatermark(col, delay)`` passes its input's columns on, and its delay in seconds is kept by
  the event-time column's expression id — what classic pyspark reads from the JVM plan.
* ``explode``/``explode_outer``/``posexplode``/``posexplode_outer`` in a select (or
  ``withColumn``) become a ``Generate`` under the select; window functions that are items of
  a select (one window spec) a ``Window`` under it (compile/keyed.py runs ``lag`` over columns);
  ``dropDuplicates``/``distinct``/``dropDuplicatesWithinWatermark`` a ``Deduplicate``.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from typing import Any

import pyspark.sql.connect.proto as proto

from sparkqos.compile.sessions import interval_string_us
from sparkqos.spark.spark_part import AGGREGATES_FIELD, COLUMNS_FIELD, RELATION_FIELD

__all__ = [
    "AGGREGATE_CLASSES",
    "AGGREGATE_FUNCTIONS",
    "GENERATORS",
    "aggregate",
    "deduplicate",
    "generator_items",
    "watermark",
    "window_items",
    "window_select",
]

PKG = "org.apache.spark.sql.catalyst"
EXPR_ID = f"{PKG}.expressions.ExprId"
_E = f"{PKG}.expressions."

#: Connect aggregate function names → Spark's class (compile/stateful.py maps it: natively, or by
#: Spark over a group's rows).
AGGREGATE_CLASSES = {
    "count": "Count",
    "sum": "Sum",
    "avg": "Average",
    "mean": "Average",
    "min": "Min",
    "max": "Max",
    "first": "First",
    "last": "Last",
    "any_value": "AnyValue",
    "count_if": "CountIf",
    "bool_and": "BoolAnd",
    "every": "BoolAnd",
    "bool_or": "BoolOr",
    "some": "BoolOr",
    "any": "BoolOr",
    "stddev": "StddevSamp",
    "std": "StddevSamp",
    "stddev_samp": "StddevSamp",
    "stddev_pop": "StddevPop",
    "variance": "VarianceSamp",
    "var_samp": "VarianceSamp",
    "var_pop": "VariancePop",
    "skewness": "Skewness",
    "kurtosis": "Kurtosis",
    "max_by": "MaxBy",
    "min_by": "MinBy",
    "collect_list": "CollectList",
    "array_agg": "CollectList",
    "collect_set": "CollectSet",
    # no native version: Spark computes them over a group's rows (named as classic pyspark's plan names them)
    "approx_count_distinct": "HyperLogLogPlusPlus",
    "percentile_approx": "ApproximatePercentile",
    "approx_percentile": "ApproximatePercentile",
    "count_min_sketch": "CountMinSketchAgg",
    "histogram_numeric": "HistogramNumeric",
    "hll_sketch_agg": "HllSketchAgg",
    "hll_union_agg": "HllUnionAgg",
    "median": "Median",
    "mode": "Mode",
    "percentile": "Percentile",
    "product": "Product",
    "corr": "Corr",
}
#: Aggregates of doubles: Spark's analyzer casts their argument to double.
_OF_DOUBLES = ("StddevSamp", "StddevPop", "VarianceSamp", "VariancePop", "Skewness", "Kurtosis")
#: Aggregate functions: in a select they make Spark's plan an Aggregate (named as such).
AGGREGATE_FUNCTIONS = {
    *("count", "sum", "avg", "mean", "min", "max", "first", "last", "any_value", "collect_list", "collect_set"),
    *("stddev", "stddev_samp", "stddev_pop", "variance", "var_samp", "var_pop", "approx_count_distinct"),
    *("count_distinct", "sum_distinct", "median", "mode", "percentile", "percentile_approx", "count_if"),
    *("bool_and", "bool_or", "every", "some", "max_by", "min_by", "corr", "covar_pop", "covar_samp"),
    *("skewness", "kurtosis", "product", "bit_and", "bit_or", "bit_xor", "listagg", "string_agg"),
    *("std", "any", "array_agg", "approx_percentile", "count_min_sketch", "histogram_numeric", "hll_sketch_agg"),
    *("hll_union_agg",),
}
#: Connect generator names → (Spark's class, outer).
GENERATORS = {
    "explode": ("Explode", False),
    "explode_outer": ("Explode", True),
    "posexplode": ("PosExplode", False),
    "posexplode_outer": ("PosExplode", True),
}


def type_name(dt: Any) -> Any:
    """A type as the analyzed plan's JSON writes it: a name, or a struct as its JSON object."""
    if dt.typeName() == "struct":
        return dt.jsonValue()
    return dt.typeName() if dt.typeName() not in ("decimal", "array", "map") else dt.simpleString()


def attr(a: tuple[dict[str, Any], str, Any]) -> dict[str, Any]:
    eid, name, t = a
    return {"class": f"{_E}AttributeReference", "num-children": 0, "name": name, "dataType": t, "exprId": eid}


def literal(value: str | None, t: Any) -> dict[str, Any]:
    return {"class": f"{_E}Literal", "num-children": 0, "value": value, "dataType": t}


def alias(name: str, eid: dict[str, Any]) -> dict[str, Any]:
    return {"class": f"{_E}Alias", "num-children": 1, "name": name, "exprId": eid}


def _call(e: proto.Expression) -> Any:
    """The function call ``e`` is, under any aliases (None: not a call)."""
    while e.WhichOneof("expr_type") == "alias":
        e = e.alias.expr
    return e.unresolved_function if e.WhichOneof("expr_type") == "unresolved_function" else None


def _pandas_udaf(e: proto.Expression) -> Any:
    """The pandas UDAF (``F.pandas_udf`` of Series to scalar) ``e`` calls, under any aliases (None:
    not one)."""
    from pyspark.util import PythonEvalType

    while e.WhichOneof("expr_type") == "alias":
        e = e.alias.expr
    if e.WhichOneof("expr_type") != "common_inline_user_defined_function":
        return None
    f = e.common_inline_user_defined_function
    grouped = f.WhichOneof("function") == "python_udf" and f.python_udf.eval_type == PythonEvalType.SQL_GROUPED_AGG_PANDAS_UDF
    return f if grouped else None


def _string_literal(e: proto.Expression) -> str | None:
    lit = e.literal if e.WhichOneof("expr_type") == "literal" else None
    return lit.string if lit is not None and lit.WhichOneof("literal_type") == "string" else None


def _session_key(tr: Any, call: Any, input_rel: proto.Relation, attrs: list[Any], key: tuple[Any, str, Any]) -> list[Any]:
    """The analyzer's rewrite of ``session_window(ts, gap)`` as a Filter over a Project, both over
    the input's nodes (added by the caller): the Project's Alias defines ``key``."""
    if len(call.arguments) != 2:
        raise tr.unsupported("a session_window() sparkqos cannot read", "session_window(time column, 'gap')")
    (ts_nodes, _), (gap_nodes, _) = tr.typed(input_rel, list(call.arguments), attrs)
    end = [{"class": f"{_E}TimestampAddInterval", "num-children": 2, "timeZoneId": tr.time_zone}, *ts_nodes, *gap_nodes]
    project, not_null = _window_nodes(key, attrs, ts_nodes, ts_nodes, end)
    return [not_null, project]


def _window_key(tr: Any, call: Any, input_rel: proto.Relation, attrs: list[Any], key: tuple[Any, str, Any]) -> list[Any]:
    """The analyzer's rewrite of ``window(ts, duration[, slide[, start]])`` as a Project over a
    Filter, both over the input's nodes (added by the caller): the Project's Alias defines ``key``."""
    if call.function_name == "session_window":
        return _session_key(tr, call, input_rel, attrs, key)
    args = list(call.arguments)
    texts = [_string_literal(a) for a in args[1:]]
    if not 2 <= len(args) <= 4 or None in texts:
        raise tr.unsupported("a window() sparkqos cannot read", "window(time column, 'duration'[, 'slide'[, 'start']])")
    read = [interval_string_us(t) for t in (texts + [texts[0], "0 seconds"][len(texts) - 1 :])[:3]]
    size, slide, start = (None if r is None else r[0] for r in read)
    if None in (size, slide, start):
        raise tr.unsupported(f"window() durations {texts}", "give them as '<n> <unit>' (weeks to microseconds)")
    ((ts_nodes, _),) = tr.typed(input_rel, [args[0]], attrs)
    longs = [literal(str(v), "long") for v in (start, slide, size)]
    start_expr = [
        {"class": f"{_E}Subtract", "num-children": 2},
        *ts_nodes,
        {"class": f"{_E}Remainder", "num-children": 2},
        {"class": f"{_E}Subtract", "num-children": 2},
        *ts_nodes,
        longs[0],
        longs[1],
    ]
    end_expr = [{"class": f"{_E}Add", "num-children": 2}, *start_expr, longs[2]]
    project, not_null = _window_nodes(key, attrs, ts_nodes, start_expr, end_expr)
    return [project, not_null]


def _window_nodes(
    key: tuple[Any, str, Any], attrs: list[Any], ts_nodes: list[Any], start: list[Any], end: list[Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The two nodes of the analyzer's rewrite of a (session) window: a Project defining ``key``
    as the struct (start, end) beside the input's columns, and a Filter keeping rows whose time is
    not null; the caller stacks them in the order its rewrite has."""
    struct = [{"class": f"{_E}CreateNamedStruct", "num-children": 4}]
    struct += [literal("start", "string"), *start, literal("end", "string"), *end]
    project = {
        "class": f"{PKG}.plans.logical.Project",
        "num-children": 1,
        "projectList": [[alias(key[1], key[0]), *struct], *[[attr(a)] for a in attrs]],
    }
    not_null = [{"class": f"{_E}IsNotNull", "num-children": 1}, *ts_nodes]
    return project, {"class": f"{PKG}.plans.logical.Filter", "num-children": 1, "condition": not_null}


def _aggregate_expression(tr: Any, e: proto.Expression, input_rel: proto.Relation, attrs: list[Any]) -> list[Any]:
    """An aggregate of agg()'s list as ``AggregateExpression(function(arguments))`` nodes; what is
    not a call of an aggregate function, a node compile/stateful.py refuses as an expression over
    aggregates."""
    udaf = _pandas_udaf(e)
    if udaf is not None:  # Spark computes it over the group's rows (compile/stateful.py)
        typed = tr.typed(input_rel, list(udaf.arguments), attrs)
        kids = [n for nodes, _ in typed for n in nodes]
        fn = {"class": "PythonUDAF", "num-children": len(typed), "name": udaf.function_name}
        return [{"class": f"{_E}aggregate.AggregateExpression", "num-children": 1, "isDistinct": False}, fn, *kids]
    call = _call(e)
    if call is None or call.function_name not in AGGREGATE_FUNCTIONS:
        return [{"class": "an expression over aggregates", "num-children": 0}]
    name = call.function_name
    args = list(call.arguments)
    cls = AGGREGATE_CLASSES.get(name, name)  # another aggregate function: refused by its name
    fields: dict[str, Any] = {}
    kids: list[Any] = []
    if name == "count" and len(args) == 1 and args[0].WhichOneof("expr_type") in ("unresolved_star", "literal"):
        if args[0].WhichOneof("expr_type") == "unresolved_star" or args[0].literal.WhichOneof("literal_type") != "null":
            args, kids = [], [literal("1", "integer")]  # the analyzer's count(*) and count(1)
    if name in ("first", "last", "any_value") and len(args) == 2:
        flag = args[1].literal if args[1].WhichOneof("expr_type") == "literal" else None
        if flag is None or flag.WhichOneof("literal_type") != "boolean":
            raise tr.unsupported(f"Spark function {name!r} whose ignorenulls is not a literal")
        fields["ignoreNulls"], args = flag.boolean, args[:1]
    if cls in ("CollectList", "CollectSet"):
        fields["ignoreNulls"] = True  # Spark's collect functions skip nulls (its plan JSON says so)
    typed = tr.typed(input_rel, args, attrs) if args else []
    if cls in _OF_DOUBLES:  # the analyzer's implicit cast of the argument (a long's extremes lose bits, as in Spark)
        typed = [
            (n if t == "double" else [{"class": f"{_E}Cast", "num-children": 1, "dataType": "double"}, *n], "double")
            for n, t in typed
        ]
    kids += [n for nodes, _ in typed for n in nodes]
    fn = {"class": cls, "num-children": len(typed) or len(kids), **fields}
    agg = {"class": f"{_E}aggregate.AggregateExpression", "num-children": 1, "isDistinct": bool(call.is_distinct)}
    return [agg, fn, *kids]


def aggregate(
    tr: Any, rel: proto.Relation, input_rel: proto.Relation, grouping: list[proto.Expression], aggs: list[proto.Expression]
) -> tuple[list[dict[str, Any]], list[Any]]:
    """An Aggregate of ``grouping`` keys and ``aggs`` over ``input_rel`` (``rel``: the relation
    whose output it is): its JSON nodes and output attributes."""
    nodes, attrs = tr.relation(input_rel)
    fields = tr.schema(rel).fields
    if len(fields) != len(grouping) + len(aggs):
        names = [f.name for f in fields]
        raise tr.unsupported("an aggregation whose output columns sparkqos cannot place", f"Spark gives {names}")
    out = [(tr.fresh(), f.name, type_name(f.dataType)) for f in fields]
    windows = [
        k for k, g in enumerate(grouping) if (c := _call(g)) is not None and c.function_name in ("window", "session_window")
    ]
    if len(windows) > 1:
        raise tr.unsupported("a groupBy over two time windows")
    below = nodes
    if windows:
        below = _window_key(tr, _call(grouping[windows[0]]), input_rel, attrs, out[windows[0]]) + nodes
    plain = [g for k, g in enumerate(grouping) if k not in windows]
    typed = iter(tr.typed(input_rel, plain, attrs))
    keys: list[list[Any]] = []
    for k in range(len(grouping)):
        if k in windows:
            keys.append([attr(out[k])])
            continue
        key_nodes, _ = next(typed)
        top = key_nodes[0]
        if top["class"].endswith("AttributeReference"):  # the key goes on under the input's id
            out[k] = (top["exprId"], out[k][1], top["dataType"])
        keys.append(key_nodes)
    items = []
    for k, key_nodes in enumerate(keys):
        if key_nodes[0]["class"].endswith("AttributeReference"):
            items.append([attr(out[k])])
        else:  # an expression as key: compile/stateful.py refuses it, naming it
            items.append([alias(out[k][1], out[k][0]), *key_nodes])
    for k, e in enumerate(aggs):
        a = out[len(grouping) + k]
        items.append([alias(a[1], a[0]), *_aggregate_expression(tr, e, input_rel, attrs)])
    node = {"class": f"{PKG}.plans.logical.Aggregate", "num-children": 1}
    node.update(groupingExpressions=keys, aggregateExpressions=items)
    # what the session side needs for the aggregates Spark computes over a group's rows (the
    # stager's aggregates()): each item's client expression, and the input's names and types
    node[AGGREGATES_FIELD] = [None] * len(keys) + [base64.b64encode(_detached(e)).decode("ascii") for e in aggs]
    fields = tr.schema(input_rel).fields
    if len(fields) == len(attrs):
        node[COLUMNS_FIELD] = {str(a[0]["id"]): [a[1], f.dataType.json()] for a, f in zip(attrs, fields, strict=True)}
    return [node, *below], out


def _detached(e: proto.Expression) -> bytes:
    """``e`` without the plan ids its column references carry (``df["x"]``): computed over a
    DataFrame of the group's rows, they name that DataFrame's columns."""
    e = proto.Expression.FromString(e.SerializeToString())
    todo = [e]
    while todo:
        msg = todo.pop()
        if msg.DESCRIPTOR.name == "UnresolvedAttribute":
            msg.ClearField("plan_id")
        for field, value in msg.ListFields():
            if field.message_type is None or field.message_type.GetOptions().map_entry:
                continue
            repeated = field.is_repeated if hasattr(field, "is_repeated") else field.label == field.LABEL_REPEATED
            todo.extend(value if repeated else [value])
    while e.WhichOneof("expr_type") == "alias":  # the name is the aggregation's
        e = e.alias.expr
    return e.SerializeToString()


def watermark(tr: Any, body: Any) -> tuple[list[dict[str, Any]], list[Any]]:
    """``withWatermark(col, delay)``: its input's columns passed on; the delay kept by the column's
    expression id in ``tr.watermarks``."""
    nodes, attrs = tr.relation(body.input)
    found = [a for a in attrs if a[1] == body.event_time] or [a for a in attrs if a[1].lower() == body.event_time.lower()]
    delay = interval_string_us(body.delay_threshold)
    if len(found) != 1 or delay is None:
        what = f"withWatermark({body.event_time!r}, {body.delay_threshold!r})"
        raise tr.unsupported(what, "a column of the input and a delay '<n> <unit>' (weeks to microseconds)")
    tr.watermarks[found[0][0]["id"]] = delay[0] / 1e6
    return [{"class": f"{PKG}.plans.logical.EventTimeWatermark", "num-children": 1}, *nodes], attrs


def deduplicate(tr: Any, body: Any) -> tuple[list[dict[str, Any]], list[Any]]:
    """``dropDuplicates([keys])``, ``distinct()`` and ``dropDuplicatesWithinWatermark(keys)``: a
    Deduplicate over the key attributes (every column without keys), its input's columns passed on."""
    nodes, attrs = tr.relation(body.input)
    if body.all_columns_as_keys or not body.column_names:
        keys = list(attrs)
    else:
        keys = []
        for name in body.column_names:
            found = [a for a in attrs if a[1] == name] or [a for a in attrs if a[1].lower() == name.lower()]
            if len(found) != 1:
                raise tr.unsupported(f"a dropDuplicates key {name!r} sparkqos cannot place", "a column of its input")
            keys.append(found[0])
    cls = "DeduplicateWithinWatermark" if body.within_watermark else "Deduplicate"
    node = {"class": f"{PKG}.plans.logical.{cls}", "num-children": 1, "keys": [[attr(a)] for a in keys]}
    return [node, *nodes], attrs


def generator_items(tr: Any, kind: str, body: Any, attrs: list[Any]) -> list[proto.Expression] | None:
    """The select items of a ``select``/``withColumns`` holding a generator (``withColumns`` as the
    select Spark makes of it: every input column, replaced or not, then the new ones); None when
    it holds none."""
    items = _items(kind, body, attrs)
    if items is None or not any((c := _call(e)) is not None and c.function_name in GENERATORS for e in items):
        return None
    return items


def _items(kind: str, body: Any, attrs: list[Any]) -> list[proto.Expression] | None:
    """A ``select``'s items, or the select Spark makes of a ``withColumns``: every input column,
    replaced or not, then the new ones (None: a multi-part name)."""
    if kind == "project":
        return list(body.expressions)
    new = {a.name[0]: a for a in body.aliases if len(a.name) == 1}
    if len(new) != len(body.aliases):
        return None
    items = []
    for a in attrs:
        items.append(_aliased(new.pop(a[1]).expr, a[1]) if a[1] in new else _column(a[1]))
    items.extend(_aliased(a.expr, n) for n, a in new.items())
    return items


def _column(name: str) -> proto.Expression:
    e = proto.Expression()
    e.unresolved_attribute.unparsed_identifier = "`" + name.replace("`", "``") + "`"
    return e


def _aliased(expr: proto.Expression, name: str) -> proto.Expression:
    e = proto.Expression()
    e.alias.expr.CopyFrom(expr)
    e.alias.name.append(name)
    return e


def generate(
    tr: Any, input_rel: proto.Relation, items: list[proto.Expression], nodes: list[Any], attrs: list[Any]
) -> tuple[proto.Relation, list[proto.Expression], list[Any], list[Any]]:
    """A select's generator as a ``Generate`` over ``input_rel``: the relation of the input's columns
    and the generator's (what the other items are typed over), the select's items with the
    generator's columns referred to by name, and the Generate's JSON nodes (over the input's
    ``nodes``) and output attributes."""
    gens = [k for k, e in enumerate(items) if (c := _call(e)) is not None and c.function_name in GENERATORS]
    if len(gens) > 1:
        raise tr.unsupported("two generators (explode) in one select", "Spark allows one")
    g = items[gens[0]]
    call = _call(g)
    cls, outer = GENERATORS[call.function_name]
    if len(call.arguments) != 1:
        raise tr.unsupported(f"Spark function {call.function_name!r} with {len(call.arguments)} arguments")
    both = proto.Relation()
    both.project.input.CopyFrom(input_rel)
    both.project.expressions.add().unresolved_star.SetInParent()
    both.project.expressions.add().CopyFrom(g)
    fields = tr.schema(both).fields
    made = [(tr.fresh(), f.name, type_name(f.dataType)) for f in fields[len(attrs) :]]
    if len(made) != (2 if cls == "PosExplode" else 1) or {n for _, n, _ in made} & {a[1] for a in attrs}:
        what = f"{call.function_name} into columns sparkqos cannot place"
        raise tr.unsupported(what, "alias them with names the input does not have")
    ((arg, _),) = tr.typed(input_rel, [call.arguments[0]], attrs)
    node = {
        "class": f"{PKG}.plans.logical.Generate",
        "num-children": 1,
        "generator": [{"class": f"{_E}{cls}", "num-children": 1}, *arg],
        "unrequiredChildIndex": [],
        "outer": outer,
        "generatorOutput": [[attr(m)] for m in made],
    }
    rest: list[proto.Expression] = []
    for k, e in enumerate(items):
        if k == gens[0]:
            rest.extend(_column(n) for _, n, _ in made)
        elif e.WhichOneof("expr_type") == "unresolved_star" and not e.unresolved_star.HasField("unparsed_target"):
            rest.extend(_column(a[1]) for a in attrs)  # the input's columns, not the generator's
        else:
            rest.append(e)
    return both, rest, [node, *nodes], attrs + made


def _window(e: proto.Expression) -> Any:
    while e.WhichOneof("expr_type") == "alias":
        e = e.alias.expr
    return e.window if e.WhichOneof("expr_type") == "window" else None


def window_items(kind: str, body: Any, attrs: list[Any] | None = None) -> list[proto.Expression] | None:
    """The select items of a ``select``/``withColumns`` whose window functions are each the whole
    of an item, none inside another (what the analyzer's ``Window`` node takes), as
    :func:`generator_items` gives them; None for a select without them or with others
    (``attrs``: the input's columns; without them, only whether)."""
    exprs = list(body.expressions) if kind == "project" else [a.expr for a in body.aliases]
    tops = [w for e in exprs if (w := _window(e)) is not None]
    nested = [contains(w, is_window) for w in tops] + [contains(e, is_window) for e in exprs if _window(e) is None]
    if not tops or any(nested):
        return None
    return _items(kind, body, attrs) if attrs is not None else []


def window_select(
    tr: Any, input_rel: proto.Relation, items: list[proto.Expression], nodes: list[Any], attrs: list[Any]
) -> tuple[proto.Relation, list[proto.Expression], list[Any], list[Any]]:
    """A select's window functions (one window spec) as the analyzer's ``Window`` node over
    ``input_rel``, as :func:`generate` returns a generator's: the relation of the input's columns
    and the functions' results, the items referring to those by name, the nodes and attributes."""
    found = [k for k, e in enumerate(items) if _window(e) is not None]
    specs = set()
    for k in found:
        w = proto.Expression.Window()
        w.CopyFrom(_window(items[k]))
        w.ClearField("window_function")
        specs.add(w.SerializeToString(deterministic=True))
    spec = _window(items[found[0]])
    if len(specs) > 1 or spec.HasField("frame_spec"):
        raise tr.unsupported("window functions over two window specs or a frame in one select under Spark Connect")
    both = proto.Relation()
    both.project.input.CopyFrom(input_rel)
    both.project.expressions.add().unresolved_star.SetInParent()
    for k in found:
        both.project.expressions.add().CopyFrom(items[k])
    made = [(tr.fresh(), f.name, type_name(f.dataType)) for f in tr.schema(both).fields[len(attrs) :]]
    if len(made) != len(found) or {n for _, n, _ in made} & {a[1] for a in attrs}:
        raise tr.unsupported("a window function's result under a column name its input has", "give it a new name")
    expressions = []
    below: list[list[Any]] = []  # lag arguments that are expressions, computed by a select below
    computing: list[proto.Expression] = []  # the same as Connect expressions
    for k, m in zip(found, made, strict=True):
        call = _window(items[k]).window_function
        fn = call.unresolved_function if call.WhichOneof("expr_type") == "unresolved_function" else None
        if fn is None or fn.function_name != "lag" or not 1 <= len(fn.arguments) <= 3:
            name = fn.function_name if fn is not None else call.WhichOneof("expr_type")
            expressions.append(
                [alias(m[1], m[0]), {"class": f"{_E}WindowExpression", "num-children": 1}, {"class": name, "num-children": 0}]
            )
            continue
        args = tr.typed(input_rel, list(fn.arguments), attrs)
        (src, st), (offset, _) = args[0], args[1] if len(args) > 1 else ([literal("1", "integer")], "integer")
        if not src[0]["class"].endswith("AttributeReference"):  # the analyzer computes it below: _w0, _w1...
            computed = (tr.fresh(), f"_w{len(below)}", st)
            below.append([alias(computed[1], computed[0]), *src])
            computing.append(_aliased(fn.arguments[0], computed[1]))
            src = [attr(computed)]
        default, dt = args[2] if len(args) > 2 else ([literal(None, st)], st)  # lag's default: null
        default = default if dt in (st, "void") else [{"class": f"{_E}Cast", "num-children": 1, "dataType": st}, *default]
        lag = [{"class": f"{_E}Lag", "num-children": 3}, *src, *offset, *default]
        expressions.append([alias(m[1], m[0]), {"class": f"{_E}WindowExpression", "num-children": 1}, *lag])
    partition = [nodes_ for nodes_, _ in tr.typed(input_rel, list(spec.partition_spec), attrs)]
    order = []
    for o, (o_nodes, _) in zip(spec.order_spec, tr.typed(input_rel, [o.child for o in spec.order_spec], attrs), strict=True):
        direction = "Descending$" if o.direction == proto.Expression.SortOrder.SORT_DIRECTION_DESCENDING else "Ascending$"
        last = o.null_ordering == proto.Expression.SortOrder.SORT_NULLS_LAST or (
            o.null_ordering == proto.Expression.SortOrder.SORT_NULLS_UNSPECIFIED and direction == "Descending$"
        )
        sort = {"class": f"{_E}SortOrder", "num-children": 1}
        sort.update(
            direction={"object": f"{_E}{direction}"}, nullOrdering={"object": f"{_E}{'NullsLast$' if last else 'NullsFirst$'}"}
        )
        order.append([sort, *o_nodes])
    node = {"class": f"{PKG}.plans.logical.Window", "num-children": 1}
    node.update(windowExpressions=expressions, partitionSpec=partition, orderSpec=order)
    if below:
        lower = proto.Relation()  # what Spark runs when it evaluates that select (sparkqos.spark.spark_part)
        lower.project.input.CopyFrom(input_rel)
        lower.project.expressions.add().unresolved_star.SetInParent()
        lower.project.expressions.extend(computing)
        project = {"class": f"{PKG}.plans.logical.Project", "num-children": 1}
        project.update(projectList=[*[[attr(a)] for a in attrs], *below])
        project[RELATION_FIELD] = base64.b64encode(lower.SerializeToString()).decode("ascii")
        nodes = [project, *nodes]
    rest: list[proto.Expression] = []
    for k, e in enumerate(items):
        if k in found:
            rest.append(_column(made[found.index(k)][1]))
        elif e.WhichOneof("expr_type") == "unresolved_star" and not e.unresolved_star.HasField("unparsed_target"):
            rest.extend(_column(a[1]) for a in attrs)
        else:
            rest.append(e)
    return both, rest, [node, *nodes], attrs + made


def is_window(e: proto.Expression) -> bool:
    return e.WhichOneof("expr_type") == "window"


def is_aggregate(e: proto.Expression) -> bool:
    f = e.unresolved_function
    return e.WhichOneof("expr_type") == "unresolved_function" and f.function_name in AGGREGATE_FUNCTIONS


def held_messages(msg: Any) -> Iterator[tuple[Any, bool]]:
    """Each message ``msg``'s fields hold — not its input relations, not map entries — and
    whether it is an Expression: the walk of :func:`contains` and of the SQL-string reader."""
    for f, v in msg.ListFields():
        if f.message_type is None or f.message_type.name == "Relation" or f.message_type.GetOptions().map_entry:
            continue
        repeated = f.is_repeated if hasattr(f, "is_repeated") else f.label == f.LABEL_REPEATED
        for item in v if repeated else [v]:
            yield item, f.message_type.name == "Expression"


def contains(msg: Any, test: Callable[[proto.Expression], bool]) -> bool:
    """Whether an expression passing ``test`` appears anywhere in ``msg`` (not in its inputs)."""
    return any((is_expression and test(item)) or contains(item, test) for item, is_expression in held_messages(msg))
