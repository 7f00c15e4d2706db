"""Transforms under Spark Connect: the client's plan, typed by the server, as analyzed-plan JSON.

A Connect DataFrame has no JVM plan to read, and Spark Connect offers the analyzed plan only as
text (``explain``). So :func:`connect_plans` reads the plan the client sends (the
``spark.connect.Relation`` protobuf of each transform's result) and writes it in the shape of
``queryExecution().analyzed().toJSON()`` — the nodes :mod:`sparkqos.compile.spark_plan` maps —
for the one mapping to serve both kinds of session. Spark's analyzer is not guessed at: every
type comes from the server. For each Filter/Project/withColumns one AnalyzePlan (schema) call
returns the type of every sub-expression (a projection of all of them over the node's input) and
another Spark's names of the node's output columns; sparkqos then makes the implicit casts explicit as the analyzer does
(numbers to the wider type, ``/`` on doubles) and checks that every node's type is the server's.
Aggregations, watermarks and generators, whose analyzed form is not the client's, are written as
the analyzer writes them by :mod:`sparkqos.spark.connect_relations`; a Python UDF's function
comes from the command the client pickled into the plan (the one classic pyspark puts in the JVM
plan). A SQL expression string is read by :mod:`sparkqos.spark.connect_sql` where the server
confirms the reading; one it does not confirm is natively refused (Spark evaluates it).
What it cannot place (types mixed other than numbers with numbers, an unknown construct) raises
:class:`~sparkqos.errors.UnsupportedTransform` or is written as a node of its own name, which
spark_plan rejects naming it — always before any data moves.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from typing import Any

import pyspark.sql.connect.proto as proto
from pyspark.sql.connect.dataframe import DataFrame as ConnectDataFrame
from pyspark.sql.connect.plan import CachedRelation

from sparkqos.compile.nodes import UNMAPPED, watermarks_through_aliases
from sparkqos.compile.spark_plan import SYNTHETIC_MARKER
from sparkqos.errors import UnsupportedTransform
from sparkqos.spark.connect_functions import FUNCTIONS, check, literal_node
from sparkqos.spark.connect_relations import (
    EXPR_ID,
    PKG,
    aggregate,
    contains,
    deduplicate,
    generate,
    generator_items,
    is_aggregate,
    is_window,
    watermark,
    window_items,
    window_select,
)
from sparkqos.spark.connect_relations import attr as _attr
from sparkqos.spark.connect_relations import type_name as _type_name
from sparkqos.spark.connect_sql import is_sql, read_sql
from sparkqos.spark.spark_part import RELATION_FIELD
from sparkqos.spark.udfs import PickledFunction, check_worker_settings

__all__ = ["connect_plans"]

_PKG, _EXPR_ID = PKG, EXPR_ID
#: Connect expression kinds not mapped → the Spark class spark_plan names when it rejects them.
_EXPRESSIONS = {
    "common_inline_user_defined_function": "PythonUDF",
    "window": "WindowExpression",
    "unresolved_regex": "colRegex",
    "lambda_function": "a lambda function",
}
#: Connect relation kinds → the Spark operator they become (named in UnsupportedTransform).
_RELATIONS = {
    "aggregate": "Aggregate",
    "join": "Join",
    "as_of_join": "Join",
    "lateral_join": "Join",
    "sort": "Sort",
    "limit": "GlobalLimit",
    "tail": "Tail",
    "offset": "Offset",
    "deduplicate": "Deduplicate",
    "sample": "Sample",
    "with_watermark": "EventTimeWatermark",
    "map_partitions": "MapInPandas",
    "group_map": "FlatMapGroupsInPandas",
    "apply_in_pandas_with_state": "FlatMapGroupsInPandasWithState",
    "local_relation": "LocalRelation",
    "read": "DataSourceV2Relation",
    "range": "Range",
    "sql": "SQL",
    "unpivot": "Expand",
    "hint": "ResolvedHint",
}


#: Spark's eval type of a ``mapInArrow`` function (PythonEvalType.SQL_MAP_ARROW_ITER_UDF).
_MAP_ARROW_ITER = 207


def _field_index(t: Any, name: str) -> int | None:
    """The position of field ``name`` in the struct type ``t`` (its JSON object), None if none."""
    names = [f["name"] for f in t.get("fields", [])] if isinstance(t, dict) else []
    return names.index(name) if name in names else None


def _camel(kind: str) -> str:
    return "".join(p.capitalize() for p in kind.split("_"))


class _Translator:
    """One query's Connect plan → analyzed-plan JSON nodes (pre-order, as ``toJSON()``)."""

    def __init__(self, query: str, df: ConnectDataFrame, source_id: int, n_source: int, time_zone: str):
        self.query, self.df, self.source_id, self.n_source = query, df, source_id, n_source
        self.time_zone = time_zone
        self.next_id = n_source  # ids 0..n-1 are the input's columns
        self.outputs: dict[int, list[tuple[dict[str, Any], str, str]]] = {}
        #: What the JSON leaves out, for the query's context: watermark delays (s) by the event-time
        #: column's expression id, and UDFs' functions by result expression id.
        self.watermarks: dict[int, float] = {}
        self.udfs: dict[int, PickledFunction] = {}

    def unsupported(self, operation: str, detail: str = "") -> UnsupportedTransform:
        return UnsupportedTransform(self.query, operation, detail)

    def fresh(self) -> dict[str, Any]:
        self.next_id += 1
        return {"product-class": _EXPR_ID, "id": self.next_id}

    def schema(self, rel: proto.Relation) -> Any:
        copy = proto.Relation()
        copy.CopyFrom(rel)
        return ConnectDataFrame(CachedRelation(copy), self.df.sparkSession).schema

    # -- relations -----------------------------------------------------------------------------
    def relation(self, rel: proto.Relation) -> tuple[list[dict[str, Any]], list[tuple[dict[str, Any], str, str]]]:
        """The JSON nodes of ``rel`` and its output attributes as (exprId, name, type)."""
        nodes, attrs = self._relation(rel)
        if nodes and nodes[0]["class"] != "__connect_input__":  # what a part Spark evaluates runs
            nodes[0][RELATION_FIELD] = base64.b64encode(rel.SerializeToString()).decode("ascii")
        if rel.HasField("common") and rel.common.HasField("plan_id"):
            self.outputs[rel.common.plan_id] = attrs  # what df["x"] of this DataFrame refers to
        return nodes, attrs

    def _relation(self, rel: proto.Relation) -> tuple[list[dict[str, Any]], list[tuple[dict[str, Any], str, str]]]:
        if rel.HasField("common") and rel.common.HasField("plan_id") and rel.common.plan_id == self.source_id:
            ids = [{"product-class": _EXPR_ID, "id": i} for i in range(self.n_source)]
            node = {"class": "__connect_input__", "num-children": 0, "output": ids}
            fields = self.df.schema.fields
            return [node], [(i, f.name, _type_name(f.dataType)) for i, f in zip(ids, fields, strict=True)]
        kind = rel.WhichOneof("rel_type")
        body = getattr(rel, kind)
        if kind in ("filter", "project", "with_columns", "aggregate") and contains(body, is_sql):
            body = read_sql(body, self.df.sparkSession, self.unsupported)
        if kind == "filter":
            nodes, attrs = self.relation(body.input)
            marker = _synthetic_marker(body.condition)
            if marker is not None:  # sparkqos.synthetic: the executor runs it from the marker alone
                return [{"class": f"{_PKG}.plans.logical.Filter", "num-children": 1, "condition": marker}, *nodes], attrs
            cond = self.typed(body.input, [body.condition], attrs)[0]
            return [{"class": f"{_PKG}.plans.logical.Filter", "num-children": 1, "condition": cond[0]}, *nodes], attrs
        if kind == "project" and not contains(body, is_window) and contains(body, is_aggregate):
            if any(e.WhichOneof("expr_type") == "unresolved_star" for e in body.expressions):
                raise self.unsupported("a select of aggregates and of every column (*)")
            return aggregate(self, rel, body.input, [], list(body.expressions))  # classic: an Aggregate
        if kind == "aggregate" and body.group_type == proto.Aggregate.GroupType.GROUP_TYPE_GROUPBY:
            return aggregate(self, rel, body.input, list(body.grouping_expressions), list(body.aggregate_expressions))
        if kind == "with_watermark":
            return watermark(self, body)
        if kind == "deduplicate":
            return deduplicate(self, body)
        bare = contains(body, is_aggregate) or (contains(body, is_window) and window_items(kind, body) is None)
        if kind in ("project", "with_columns") and bare:
            # classic: a Window operator under the Project, or an Aggregate instead of it
            nodes, _ = self.relation(body.input)
            out = [(self.fresh(), f.name, _type_name(f.dataType)) for f in self.schema(rel).fields]
            op = "Window" if contains(body, is_window) else "Aggregate"
            return [{"class": op, "num-children": 1}, *nodes], out
        if kind in ("project", "with_columns"):
            return self.project(rel, kind, body)
        if kind in ("drop", "with_columns_renamed", "to_df"):
            return self.rename(rel, kind, body)
        if kind == "set_op":
            return self.set_op(body)
        if kind == "map_partitions":
            # mapInPandas / mapInArrow: its output columns as classic's plan gives them (new ones),
            # so that the part Spark evaluates ends above it (sparkqos.compile.spark_part)
            nodes, _ = self.relation(body.input)
            out = [(self.fresh(), f.name, _type_name(f.dataType)) for f in self.schema(rel).fields]
            arrow = body.func.python_udf.eval_type == _MAP_ARROW_ITER
            node = {
                "class": f"{_PKG}.plans.logical.{'MapInArrow' if arrow else 'MapInPandas'}",
                "num-children": 1,
                "functionExpr": [{"class": f"{_PKG}.expressions.PythonUDF", "name": body.func.function_name}],
                "output": [[_attr(a)] for a in out],
            }
            return [node, *nodes], out
        if kind in ("subquery_alias", "repartition", "repartition_by_expression"):
            nodes, attrs = self.relation(body.input)
            return [{"class": _camel(kind), "num-children": 1}, *nodes], attrs
        # Anything else: a node named after the Spark operator, over its inputs, which spark_plan
        # rejects naming it (top down, as for classic plans).
        kids = [v for f, v in body.ListFields() if f.message_type is not None and f.message_type.name == "Relation"]
        name = _RELATIONS.get(kind, _camel(kind))
        if kind == "group_map" and body.HasField("transform_with_state_info"):  # transformWithStateInPandas
            name = "TransformWithStateInPySpark"
        if kind == "aggregate":  # rollup, cube, grouping sets (an Expand in Spark's plan), pivot
            name = "Pivot" if body.group_type == proto.Aggregate.GroupType.GROUP_TYPE_PIVOT else "Expand"
        nodes = [{"class": name, "num-children": len(kids)}]
        for kid in kids:
            nodes.extend(self.relation(kid)[0])
        out = [(self.fresh(), f.name, _type_name(f.dataType)) for f in self.schema(rel).fields]
        return nodes, out

    def project(self, rel: proto.Relation, kind: str, body: Any) -> tuple[list[dict[str, Any]], list[Any]]:
        nodes, attrs = self.relation(body.input)
        input_rel = body.input
        items = window_items(kind, body, attrs)
        if items is not None:  # lag & co.: a Window under the select, its items over both
            input_rel, items, nodes, attrs = window_select(self, input_rel, items, nodes, attrs)
            kind = "project"
        elif (gen_items := generator_items(self, kind, body, attrs)) is not None:
            # explode & co.: a Generate under the select, its items over both
            input_rel, items, nodes, attrs = generate(self, input_rel, gen_items, nodes, attrs)
            kind = "project"
        elif kind == "project":
            items = list(body.expressions)
        if kind == "project":
            stars = [e for e in items if e.WhichOneof("expr_type") == "unresolved_star"]
            if any(e.unresolved_star.HasField("unparsed_target") for e in stars):
                raise self.unsupported("a qualified star (t.*) in a select")
            exprs = [e for e in items if e.WhichOneof("expr_type") != "unresolved_star"]
        else:
            exprs = [a.expr for a in body.aliases]
        typed = self.typed(input_rel, exprs, attrs)
        names = [f.name for f in self.schema(rel).fields]
        out: list[tuple[dict[str, Any], str, str]] = []
        plist: list[list[dict[str, Any]]] = []

        def emit(e_nodes: list[dict[str, Any]], t: str, name: str) -> None:
            top = e_nodes[0]
            if short_class(top["class"]) == "AttributeReference" and top["name"] == name:
                plist.append(e_nodes)
                out.append((top["exprId"], name, t))
            else:
                eid = self.fresh()
                plist.append([{"class": f"{_PKG}.expressions.Alias", "num-children": 1, "name": name, "exprId": eid}, *e_nodes])
                out.append((eid, name, t))

        if kind == "project":
            k = 0
            for e in items:
                if e.WhichOneof("expr_type") == "unresolved_star":
                    for a in attrs:
                        plist.append([_attr(a)])
                        out.append(a)
                else:
                    e_nodes, t = typed[k]
                    k += 1
                    emit(e_nodes, t, names[len(out)] if len(out) < len(names) else "?")
        else:
            new = {a.name[0]: typed[i] for i, a in enumerate(body.aliases) if len(a.name) == 1}
            if len(new) != len(body.aliases):
                raise self.unsupported("withColumn with a multi-part column name")
            for a in attrs:
                if a[1] in new:
                    emit(*new.pop(a[1]), a[1])
                else:
                    plist.append([_attr(a)])
                    out.append(a)
            for name, (e_nodes, t) in new.items():
                emit(e_nodes, t, name)
        if [n for _, n, _ in out] != names:
            raise self.unsupported("a select whose output columns sparkqos cannot place", f"Spark gives {names}")
        return [{"class": f"{_PKG}.plans.logical.Project", "num-children": 1, "projectList": plist}, *nodes], out

    def rename(self, rel: proto.Relation, kind: str, body: Any) -> tuple[list[dict[str, Any]], list[Any]]:
        """``drop``, ``withColumnRenamed``/``withColumnsRenamed`` and ``toDF``: a Project of the
        input's columns, kept by name (drop) or by position under Spark's new names."""
        nodes, attrs = self.relation(body.input)
        fields = self.schema(rel).fields
        names = [f.name for f in fields]
        if kind == "drop":
            by_name = {a[1]: a for a in attrs}
            if len(by_name) != len(attrs) or any(n not in by_name for n in names):
                raise self.unsupported("Spark operation 'drop' on columns sparkqos cannot place")
            kept = [by_name[n] for n in names]
        elif len(names) != len(attrs):
            raise self.unsupported(f"Spark operation {kind!r} changing the number of columns")
        else:
            kept = attrs
        plist: list[list[dict[str, Any]]] = []
        out: list[tuple[dict[str, Any], str, str]] = []
        for a, f in zip(kept, fields, strict=True):
            check(self, a[2], _type_name(f.dataType), f.name)
            if a[1] == f.name:
                plist.append([_attr(a)])
                out.append(a)
            else:
                eid = self.fresh()
                plist.append([{"class": f"{_PKG}.expressions.Alias", "num-children": 1, "name": f.name, "exprId": eid}, _attr(a)])
                out.append((eid, f.name, a[2]))
        return [{"class": f"{_PKG}.plans.logical.Project", "num-children": 1, "projectList": plist}, *nodes], out

    def set_op(self, body: Any) -> tuple[list[dict[str, Any]], list[Any]]:
        left, lattrs = self.relation(body.left_input)
        right, rattrs = self.relation(body.right_input)
        op = {1: "Intersect", 2: "Union", 3: "Except"}.get(body.set_op_type, "SetOperation")
        if op != "Union":
            return [{"class": op, "num-children": 2}, *left, *right], lattrs
        if body.by_name:
            by = {n: a for a in rattrs for n in [a[1]]}
            if body.allow_missing_columns or sorted(by) != sorted(a[1] for a in lattrs):
                raise self.unsupported("Spark operation 'unionByName' with columns missing on one side")
            proj = [by[n] for _, n, _ in lattrs]
            right = [{"class": "Project", "num-children": 1, "projectList": [[_attr(a)] for a in proj]}, *right]
            rattrs = proj
        if [t for *_, t in lattrs] != [t for *_, t in rattrs]:
            raise self.unsupported("a union of inputs with different column types")
        union = [{"class": f"{_PKG}.plans.logical.Union", "num-children": 2}, *left, *right]
        return (union if body.is_all else [{"class": "Distinct", "num-children": 1}, *union]), lattrs

    # -- expressions -----------------------------------------------------------------------------
    def typed(self, input_rel: proto.Relation, exprs: list[proto.Expression], attrs: list[Any]) -> list[tuple[list[Any], str]]:
        """Each expression of ``exprs`` over ``input_rel`` as JSON nodes with its type; every
        sub-expression's type is asked of the server in one call."""
        subs: list[proto.Expression] = []
        counts = []
        for e in exprs:
            _walk(e, subs.append)
            counts.append(len(subs) - sum(counts))
        if not subs:
            return []
        probe = proto.Relation()
        probe.project.input.CopyFrom(input_rel)
        for k, e in enumerate(subs):
            item = probe.project.expressions.add()
            item.alias.expr.CopyFrom(e)
            item.alias.name.append(f"_sparkqos_{k}")
        types = [_type_name(f.dataType) for f in self.schema(probe).fields]
        out = []
        for e, n in zip(exprs, counts, strict=True):
            mine, types = types[:n], types[n:]
            try:
                out.append(self.expr(e, iter(mine), attrs))
            except UnsupportedTransform as exc:
                # An expression not mapped: a node the compiler refuses with this reason (when it
                # must compile it natively), so that Spark can evaluate the part holding it.
                unmapped = {"class": "Unmapped", "num-children": 0, UNMAPPED: [exc.operation, exc.detail]}
                out.append(([unmapped], mine[0]))
        return out

    def expr(self, e: proto.Expression, types: Any, attrs: list[Any]) -> tuple[list[Any], str]:
        """(JSON nodes, type) of ``e``; consumes ``types`` in the order :func:`_walk` visits."""
        spark_t = next(types)
        kind = e.WhichOneof("expr_type")
        sub = lambda x: self.expr(x, types, attrs)  # noqa: E731
        if kind == "unresolved_function" and _is_mapped(e):
            fn = e.unresolved_function.function_name
            written = FUNCTIONS[fn](self, fn, [sub(a) for a in e.unresolved_function.arguments], spark_t)
            # Not placed with these arguments: a node named after the function, which spark_plan rejects.
            return written if written is not None else ([{"class": fn, "num-children": 0}], spark_t)
        if kind in _KINDS and (kind != "common_inline_user_defined_function" or _is_mapped(e)):
            return _KINDS[kind](self, e, sub, spark_t, attrs)
        what = e.unresolved_function.function_name if kind == "unresolved_function" else _EXPRESSIONS.get(kind, _camel(kind))
        node = {"class": what, "num-children": 0}
        if kind == "common_inline_user_defined_function":  # refused by name (sparkqos.compile.udf)
            node["name"] = e.common_inline_user_defined_function.function_name
        return [node], spark_t

    def attribute(self, e: proto.Expression, sub: Sub, spark_t: Any, attrs: list[Any]) -> tuple[list[Any], str]:
        """A column by name: of this relation's input, of the DataFrame ``df["x"]`` names, or a
        field of a struct column (``col("s.x")``)."""
        ref = e.unresolved_attribute
        name = ref.unparsed_identifier
        bare = name[1:-1] if re.fullmatch(r"`[^`]*`", name) else name
        where = attrs
        if ref.HasField("plan_id"):  # df["x"]: the column x of that DataFrame, if still there
            where = self.outputs.get(ref.plan_id, [])
        found = [a for a in where if a[1] == bare] or [a for a in where if a[1].lower() == bare.lower()]
        ids = [a[0]["id"] for a in attrs]
        if len(found) == 1 and found[0][0]["id"] in ids:
            a = attrs[ids.index(found[0][0]["id"])]
            return [_attr(a)], check(self, a[2], spark_t, name)
        if not found and "." in bare and not ref.HasField("plan_id"):  # col("s.x"): a field of struct s
            nodes = self.struct_path(bare, attrs)
            if nodes is not None:
                return nodes, spark_t
        raise self.unsupported(
            f"column {name!r}", "a reference sparkqos cannot resolve (ambiguous, nested, or of another DataFrame)"
        )

    def extract_value(self, e: proto.Expression, sub: Sub, spark_t: Any, attrs: list[Any]) -> tuple[list[Any], str]:
        """``col("s").getField("x")``, ``col("s")["x"]``: a struct field by name."""
        child, ct = sub(e.unresolved_extract_value.child)
        key, kt = sub(e.unresolved_extract_value.extraction)
        name = key[0].get("value") if kt == "string" and short_class(key[0]["class"]) == "Literal" else None
        i = None if name is None else _field_index(ct, name)
        if i is None:
            raise self.unsupported("a field or element of a nested column other than a struct field by name")
        return [_get_field(i, name), *child], spark_t

    def cast(self, e: proto.Expression, sub: Sub, spark_t: Any, attrs: list[Any]) -> tuple[list[Any], str]:
        if e.cast.eval_mode == proto.Expression.Cast.EVAL_MODE_TRY:
            raise self.unsupported("Spark function 'try_cast'")
        child, _ = sub(e.cast.expr)
        return [{"class": f"{_PKG}.expressions.Cast", "num-children": 1, "dataType": spark_t}, *child], spark_t

    def expression_string(self, e: proto.Expression, sub: Sub, spark_t: Any, attrs: list[Any]) -> tuple[list[Any], str]:
        raise self.unsupported(
            "a SQL expression string under Spark Connect",
            f"{e.expression_string.expression!r}: write it with pyspark.sql.functions (F.col, F.when, ...)",
        )

    def python_udf(self, f: Any, sub: Callable[[proto.Expression], tuple[list[Any], str]], spark_t: Any) -> list[Any]:
        """A Python UDF as the analyzer's ``PythonUDF`` node; its function, loaded from the
        command the client pickled (as classic pyspark's), kept by result id in ``self.udfs``."""
        args = [sub(a) for a in f.arguments]
        result_id = self.fresh()
        try:
            self.udfs[result_id["id"]] = PickledFunction(f.python_udf.command, f.function_name)
        except Exception as exc:  # noqa: BLE001 - named in the error
            raise self.unsupported(
                f"UDF {f.function_name!r} whose function sparkqos cannot load", f"{type(exc).__name__}: {exc}"
            ) from exc
        node = {
            "class": f"{_PKG}.expressions.PythonUDF",
            "num-children": len(args),
            "name": f.function_name,
            "evalType": f.python_udf.eval_type,
            "dataType": spark_t,
            "resultId": result_id,
        }
        return [node, *(n for a, _ in args for n in a)]

    def struct_path(self, name: str, attrs: list[Any]) -> list[dict[str, Any]] | None:
        """``s.x.y`` as GetStructField nodes over the struct column ``s`` (None: no such path)."""
        head, *path = name.split(".")
        found = [a for a in attrs if a[1] == head] or [a for a in attrs if a[1].lower() == head.lower()]
        if len(found) != 1:
            return None
        nodes: list[dict[str, Any]] = [_attr(found[0])]
        t = found[0][2]
        for field in path:
            i = _field_index(t, field)
            if i is None:
                return None
            nodes.insert(0, _get_field(i, field))
            t = t["fields"][i]["type"]
        return nodes


#: A translated sub-expression: (JSON nodes, type) of a Connect expression.
Sub = Callable[[proto.Expression], tuple[list[Any], str]]

#: Connect expression kinds placed, other than function calls → the translator's method.
_KINDS: dict[str, Callable[[_Translator, proto.Expression, Sub, Any, list[Any]], tuple[list[Any], Any]]] = {
    "unresolved_attribute": _Translator.attribute,
    "literal": lambda tr, e, sub, spark_t, attrs: ([literal_node(tr, e.literal, spark_t)], spark_t),
    "alias": lambda tr, e, sub, spark_t, attrs: sub(e.alias.expr),
    "unresolved_extract_value": _Translator.extract_value,
    "cast": _Translator.cast,
    "expression_string": _Translator.expression_string,
    "common_inline_user_defined_function": lambda tr, e, sub, spark_t, attrs: (
        tr.python_udf(e.common_inline_user_defined_function, sub, spark_t),
        spark_t,
    ),
}


def _synthetic_marker(cond: proto.Expression) -> list[dict[str, Any]] | None:
    """The JSON condition spark_plan reads as a synthetic operator (``... AND marker IS NOT NULL``,
    see :mod:`sparkqos.spark.synthetic`), when ``cond`` is one; its hash part is not needed."""
    if cond.WhichOneof("expr_type") != "unresolved_function" or cond.unresolved_function.function_name != "and":
        return None
    args = cond.unresolved_function.arguments
    if len(args) != 2 or args[1].WhichOneof("expr_type") != "unresolved_function":
        return None
    test = args[1].unresolved_function
    if test.function_name.lower() != "isnotnull" or len(test.arguments) != 1:
        return None
    lit = test.arguments[0]
    if lit.WhichOneof("expr_type") != "literal" or lit.literal.WhichOneof("literal_type") != "string":
        return None
    if not lit.literal.string.startswith(SYNTHETIC_MARKER):
        return None
    expr = f"{_PKG}.expressions"
    return [
        {"class": f"{expr}.And", "num-children": 2},
        {"class": f"{expr}.Literal", "num-children": 0, "value": "true", "dataType": "boolean"},
        {"class": f"{expr}.IsNotNull", "num-children": 1},
        {"class": f"{expr}.Literal", "num-children": 0, "value": lit.literal.string, "dataType": "string"},
    ]


def _get_field(ordinal: int, name: str) -> dict[str, Any]:
    return {"class": f"{_PKG}.expressions.GetStructField", "num-children": 1, "ordinal": ordinal, "name": name}


def short_class(cls: str) -> str:
    return cls.rsplit(".", 1)[-1]


def _is_mapped(e: proto.Expression) -> bool:
    kind = e.WhichOneof("expr_type")
    if kind in ("unresolved_attribute", "literal", "alias", "cast", "unresolved_extract_value"):
        return True
    if kind == "common_inline_user_defined_function":  # a Python UDF: its function is in the plan
        udf = e.common_inline_user_defined_function
        return udf.WhichOneof("function") == "python_udf" and bool(udf.python_udf.command)
    f = e.unresolved_function
    return kind == "unresolved_function" and not f.is_distinct and f.function_name in FUNCTIONS


def _walk(e: proto.Expression, visit: Callable[[proto.Expression], None]) -> None:
    """Pre-order over the sub-expressions :meth:`_Translator.expr` reads (one type each)."""
    visit(e)
    kind = e.WhichOneof("expr_type")
    if kind == "alias":
        _walk(e.alias.expr, visit)
    elif kind == "cast":
        _walk(e.cast.expr, visit)
    elif kind == "unresolved_extract_value":
        _walk(e.unresolved_extract_value.child, visit)
        _walk(e.unresolved_extract_value.extraction, visit)
    elif kind == "common_inline_user_defined_function" and _is_mapped(e):
        for a in e.common_inline_user_defined_function.arguments:
            _walk(a, visit)
    elif _is_mapped(e):
        for a in e.unresolved_function.arguments:
            _walk(a, visit)


def connect_plans(
    df: ConnectDataFrame, results: dict[str, ConnectDataFrame], time_zone: str
) -> tuple[dict[str, list[dict[str, Any]]], list[dict[str, Any]], list[int], dict[str, dict[str, Any]]]:
    """(query → plan JSON nodes, the input's plan nodes, the input's expression ids, query → what
    the JSON leaves out for its context: ``watermarks`` and ``udfs`` as classic pyspark's readers
    give them) for :func:`sparkqos.compile.spark_plan.compile_plans`, from Connect DataFrames."""
    client = df.sparkSession.client
    n = len(df.schema.fields)
    source_id = df._plan._plan_id
    source = [
        {"class": "__connect_input__", "num-children": 0, "output": [{"product-class": _EXPR_ID, "id": i} for i in range(n)]}
    ]
    plans = {}
    contexts: dict[str, dict[str, Any]] = {}
    for name, result in results.items():
        tr = _Translator(name, df, source_id, n, time_zone)
        plans[name] = tr.relation(result._plan.plan(client))[0]
        contexts[name] = {"watermarks": watermarks_through_aliases(tr.watermarks, plans[name])}
        if tr.udfs:
            check_worker_settings(name, result)
            contexts[name]["udfs"] = tr.udfs
    return plans, source, list(range(n)), contexts
