"""Spark's analyzed logical plans (parsed JSON) → a :class:`~sparkqos.executor.plan.CompiledPlan`.

Users write each continuous query as an ordinary PySpark transform (a function DataFrame →
DataFrame); :mod:`sparkqos.spark.transforms` applies it to the input DataFrame and hands this
module the analyzed plan as JSON (``queryExecution().analyzed().toJSON()``, parsed). Nothing here
imports pyspark: it maps one sparkqos operator to each Spark operator (Filter → ``where``,
Project → ``select``, Union → ``union``), so the strategies see operator-level selectivity and
cost, and each Spark expression to a typed executor expression computing Spark's result.

The JSON is a tree flattened in pre-order: every node has ``class`` and ``num-children`` and its
children follow it; expression-valued fields of a plan node (``condition``, ``projectList``) hold
their expression trees flattened the same way. After analysis every attribute reference carries
its ``exprId`` and type and every implicit cast is explicit, so the translation never guesses a
type. The input DataFrame's own plan appears as a subtree (renumbered when a query reads it twice,
e.g. ``df.union(df)``); it is found by comparing subtrees with expression ids canonicalised.

Anything not mapped raises :class:`~sparkqos.errors.UnsupportedTransform` naming the query and
the Spark operation or function, before any data moves.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import pyarrow as pa

from sparkqos.compile.nodes import (
    DEFAULT_STREAM,
    SYNTHETIC_MARKER,
    UNMAPPED,
    Node,
    Rel,
    parse_expr,
    parse_plan,
    spark_type,
)
from sparkqos.compile.spark_part import (
    SPARK_PART,
    SparkPart,
    Stager,
    check_placement,
    output_attrs,
    place,
    row_wise_chains,
    spark_functions,
    unique_names,
)
from sparkqos.compile.tables import EXPRESSIONS, INPUTS, RELATIONS
from sparkqos.compile.words import OPERATION_HINTS
from sparkqos.errors import ExpressionError, PlanError, UnsupportedTransform
from sparkqos.executor.expressions import (
    Alias,
    Call,
    CaseWhen,
    Cast,
    Col,
    Expr,
    InList,
    IsNull,
    Lit,
    Logical,
    Negate,
    Not,
    SqlCompare,
    StringMatch,
    Substring,
    cast_supported,
    spark_cast,
)
from sparkqos.executor.expressions.numeric import decimal_value
from sparkqos.executor.operators import PhysicalOperator, Project, Select, Synthetic, Union
from sparkqos.executor.plan import CompiledPlan
from sparkqos.executor.queues import with_internal
from sparkqos.model.plan import Operator, Plan

__all__ = ["DEFAULT_STREAM", "SYNTHETIC_MARKER", "compile_plans", "spark_type"]

#: Plan nodes that do not change which rows come out (only how Spark distributes them). A
#: watermark changes nothing by itself: its delay rides on the event-time attribute's metadata
#: (``spark.watermarkDelayMs``), where the stateful operators above it read it.
_PASS_THROUGH = {"SubqueryAlias", "Repartition", "RepartitionByExpression", "EventTimeWatermark"}
#: Plan nodes sparkqos runs.
_OPERATORS = {"__source__", SPARK_PART, "Filter", "Project", "Union", *_PASS_THROUGH}


#: The operators' labels as PySpark names what they run (refusals on a type say which).
_LABEL_WORDS = {
    "where": "where",
    "select": "select",
    "aggregate": "groupBy(...).agg(...)",
    "window_agg": "groupBy(window(...)).agg(...)",
    "session_window": "groupBy(session_window(...)).agg(...)",
    "dedup": "dropDuplicates",
    "lag": "lag(...).over(...)",
    "state": "groupBy(...).applyInPandasWithState(...)",
    "processor": "groupBy(...).transformWithStateInPandas(...)",
}

#: SQL names of common Spark functions whose class names differ from them.
_FUNCTION_NAMES = {
    "RegExpExtract": "regexp_extract",
    "RegExpExtractAll": "regexp_extract_all",
    "JsonToStructs": "from_json",
    "GetJsonObject": "get_json_object",
    "JsonTuple": "json_tuple",
    "StructsToJson": "to_json",
    "Sha2": "sha2",
    "Sha1": "sha1",
    "Md5": "md5",
    "Crc32": "crc32",
    "XxHash64": "xxhash64",
    "Murmur3Hash": "hash",
    "ParseToDate": "to_date",
    "ParseToTimestamp": "to_timestamp",
    "GetTimestamp": "to_timestamp",
    "Hour": "hour",
    "Minute": "minute",
    "DayOfWeek": "dayofweek",
    "DayOfMonth": "dayofmonth",
    "Month": "month",
    "Year": "year",
    "StringSplit": "split",
    "Explode": "explode",
    "PosExplode": "posexplode",
    "GetStructField": "a struct field",
    "CreateNamedStruct": "struct",
    "CreateArray": "array",
    "GetArrayItem": "an array element",
    "RegExpReplace": "regexp_replace",
    "RLike": "rlike",
    "Substring": "substring",
    "StringTrim": "trim",
    "StringTrimLeft": "ltrim",
    "StringTrimRight": "rtrim",
    "Concat": "concat",
    "ConcatWs": "concat_ws",
    "PythonUDF": "a Python UDF",
    "ScalaUDF": "a Scala UDF",
    "Pmod": "pmod",
    "DateFormatClass": "date_format",
    "CurrentTimestamp": "current_timestamp",
    "Rand": "rand",
    "Randn": "randn",
    "MonotonicallyIncreasingID": "monotonically_increasing_id",
    "Round": "round",
    "Between": "between",
    "BRound": "bround",
}

#: Arithmetic, mapped by compile/numeric.py (tables.EXPRESSIONS), which also types decimals.
_ARITHMETIC = {"Add": "+", "Subtract": "-", "Multiply": "*", "Divide": "/", "Remainder": "%", "IntegralDivide": "div"}
_COMPARISONS = {
    "EqualTo": "==",
    "LessThan": "<",
    "LessThanOrEqual": "<=",
    "GreaterThan": ">",
    "GreaterThanOrEqual": ">=",
}
_CALLS = {
    "Abs": "abs",
    "Sqrt": "sqrt",
    "Floor": "floor",
    "Ceil": "ceil",
    "IsNaN": "isnan",
    "IsNotNull": "is_not_null",
    "Lower": "lower",
    "Upper": "upper",
    "Length": "length",
    "Concat": "concat",
    "Coalesce": "coalesce",
    "Greatest": "greatest",
    "Least": "least",
    "Exp": "exp",
    "Log": "ln",
    "Logarithm": "log",  # (base, x)
    "Pow": "pow",
}
#: Functions Spark computes with the JVM's StrictMath (fdlibm): its results differ from the C
#: library's in the last bit (exp(1) is 2.7182818284590455 there), so sparkqos does not offer them
#: until executor/fdlibm.py reproduces them (it does exp, log and pow, mapped above).
_STRICT_MATH = {
    "Expm1": "expm1",
    "Log10": "log10",
    "Log2": "log2",
    "Log1p": "log1p",
    "Cbrt": "cbrt",
    "Sin": "sin",
    "Cos": "cos",
    "Tan": "tan",
    "Asin": "asin",
    "Acos": "acos",
    "Atan": "atan",
    "Atan2": "atan2",
    "Sinh": "sinh",
    "Cosh": "cosh",
    "Tanh": "tanh",
    "Hypot": "hypot",
}
_MATCHES = {"Contains": "contains", "StartsWith": "startswith", "EndsWith": "endswith", "Like": "like"}
#: Every expression class :meth:`_QueryCompiler.expr` maps (some only with literal arguments:
#: ``substring`` and pattern matches with literal patterns), besides the
#: handlers of tables.EXPRESSIONS. What a query computes beyond these, Spark evaluates.
NATIVE_EXPRESSIONS = frozenset(
    {
        *("AttributeReference", "Literal", "EulerNumber", "Alias", "UnaryPositive", "UnaryMinus", "EqualNullSafe"),
        *("And", "Or", "Not", "IsNull", "In", "CaseWhen", "Cast", "StringTrim", "StringTrimLeft", "StringTrimRight"),
        *("Substring", "Round", "Between"),
        *_ARITHMETIC,
        *_COMPARISONS,
        *_CALLS,
        *_MATCHES,
    }
)


def _synthetic_params(cond: Node) -> dict[str, Any] | None:
    """The parameters of a synthetic operator's marker (``hash_keeps AND marker IS NOT NULL``)."""
    if cond.cls != "And" or len(cond.children) != 2:
        return None
    marker = cond.children[1]
    if marker.cls != "IsNotNull" or marker.children[0].cls != "Literal":
        return None
    value = marker.children[0].fields.get("value")
    if not isinstance(value, str) or not value.startswith(SYNTHETIC_MARKER):
        return None
    return dict(json.loads(value[len(SYNTHETIC_MARKER) :]))


def _inline_with(node: Node) -> Node | None:
    """``BETWEEN``'s replacement (``With(x >= low AND x <= high, x)``, Spark evaluating ``x``
    once) with ``x`` written in place of its references: one deterministic expression, the same
    rows (None for another shape)."""
    if node.cls != "With" or len(node.children) != 2 or node.children[1].cls != "CommonExpressionDef":
        return None
    value = node.children[1].children[0]
    todo = [value]
    while todo:  # a UDF may be nondeterministic: evaluated once, as Spark does
        n = todo.pop()
        if n.cls == "PythonUDF":
            return None
        todo.extend(n.children)

    def inline(n: Node) -> Node:
        return value if n.cls == "CommonExpressionRef" else Node(n.cls, n.fields, [inline(k) for k in n.children])

    return inline(node.children[0])


class _QueryCompiler:
    """Compiles one query's plan tree into operators named ``query/k:label``."""

    def __init__(
        self,
        query: str,
        klass: str | None,
        stream: str,
        schema: pa.Schema,
        ops: dict[str, PhysicalOperator],
        plan_ops: list[Operator],
        time_zone: str = "UTC",
        context: Mapping[str, Any] | None = None,
    ):
        self.query, self.klass, self.stream, self.schema = query, klass, stream, schema
        self.ops, self.plan_ops = ops, plan_ops
        self.time_zone = time_zone
        #: What the plan JSON leaves out for this query (static tables' rows, UDFs' functions),
        #: read by the session side (sparkqos.spark.transforms.CONTEXT_READERS).
        self.context: Mapping[str, Any] = context or {}
        self.counter = 0
        #: The session side, when Spark may evaluate parts of the query (aggregates sparkqos has
        #: no native version of, over a group's buffered rows); None: everything runs natively.
        self.stager: Any = None

    def unsupported(self, operation: str, detail: str = "") -> UnsupportedTransform:
        return UnsupportedTransform(self.query, operation, detail)

    # -- operators -----------------------------------------------------------------------------
    def add(self, label: str, op: PhysicalOperator, inputs: Sequence[Rel], attrs: list[tuple[int, str]]) -> Rel:
        self.counter += 1
        name = f"{self.query}/{self.counter}:{label}"
        try:
            schema = op.bind(name, [r.schema for r in inputs])
        except ExpressionError as e:
            # a type its kernels do not take: refused (or, over the input, handed to Spark) now,
            # never on a micro-batch
            raise self.unsupported(f"{_LABEL_WORDS.get(label, label)} on these types", str(e)) from None
        self.ops[name] = op
        self.plan_ops.append(
            Operator(name, tuple(r.name for r in inputs), op.selectivity, op.cost_s, self.query, self.klass, op.kind)
        )
        return Rel(name, schema, attrs)

    def relation(self, node: Node) -> Rel:
        if node.cls == "__source__":
            ids = node.fields["source"].ids or [None] * len(self.schema)
            return Rel(self.stream, with_internal(self.schema), list(zip(ids, self.schema.names, strict=True)))
        if node.cls == SPARK_PART:
            part: SparkPart = node.fields["part"]
            return Rel(part.stream, with_internal(part.schema), node.fields["attrs"])
        if node.cls in _PASS_THROUGH:
            return self.relation(node.children[0])
        if node.cls == "Filter":
            child = self.relation(node.children[0])
            cond = parse_expr(node.fields["condition"])
            params = _synthetic_params(cond)
            if params is not None:
                return self.add("synthetic", Synthetic(**params), [child], child.attrs)
            pred = self.expr(cond, child)
            return self.add("where", Select(pred), [child], child.attrs)
        if node.cls == "Project":
            return self.project(node)
        if node.cls == "Union":
            return self.union(node)
        handler = RELATIONS.get(node.cls)
        if handler is not None:
            return handler(self, node)
        raise self.unsupported_operation(node)

    def check_operations(self, node: Node) -> None:
        """Raise for the first operation (top down) sparkqos cannot run, before any expression is
        looked at: what a user most needs to hear is which operation, not which function."""
        if node.cls not in _OPERATORS and node.cls not in RELATIONS:
            raise self.unsupported_operation(node)
        if node.cls == SPARK_PART:  # what is under it Spark evaluates
            return
        inputs = INPUTS.get(node.cls)
        for child in node.children if inputs is None else inputs(node):
            self.check_operations(child)

    def unsupported_operation(self, node: Node) -> UnsupportedTransform:
        if not node.children:
            return self.unsupported(
                f"reading {node.cls}",
                "a query may only read the DataFrame given to sparkqos.stream()/run(), not another DataFrame",
            )
        hint = OPERATION_HINTS.get(node.cls)
        return self.unsupported(f"Spark operation {node.cls!r}", hint or "")

    def project(self, node: Node) -> Rel:
        child = self.relation(node.children[0])
        exprs: list[Expr] = []
        attrs: list[tuple[int, str]] = []
        for item in node.fields["projectList"]:
            tree = parse_expr(item)
            if tree.cls == "Alias":
                name = tree.fields["name"]
                e = self.expr(tree.children[0], child)
                eid = tree.fields["exprId"]["id"]
            elif tree.cls == "AttributeReference":
                name, eid = tree.fields["name"], tree.fields["exprId"]["id"]
                if (eid, name) in attrs:  # Spark lists a window function's result twice above its Window
                    continue
                e = self.expr(tree, child)
            else:
                raise self.unsupported(f"Spark expression {tree.cls!r} at the top of a select")
            # Spark's own intermediate Projects may hold two columns of one name (a window
            # function's result replacing a column): inside the plan columns are found by
            # expression id, so one runs under another name. A query's result may not (checked in
            # compile_plans).
            while name in (n for _, n in attrs):
                name = f"{name}_{eid}"
            if not (isinstance(e, Col) and e.column == name):
                e = Alias(e, name)  # an Alias of a column under its own name stays a plain Col
            exprs.append(e)
            attrs.append((eid, name))
        names = [n for _, n in attrs]
        if names == [n for _, n in child.attrs] and all(isinstance(e, Col) for e in exprs):
            # Every column as it is (Spark adds these, e.g. to renumber a stream read twice in a
            # union): nothing to run; the columns go on under their new expression ids.
            return Rel(child.name, child.schema, attrs)
        return self.add("select", Project(exprs), [child], attrs)

    def union(self, node: Node) -> Rel:
        kids = [self.relation(c) for c in node.children]
        first = [n for _, n in kids[0].attrs]
        inputs: list[Rel] = []
        for i, kid in enumerate(kids):
            names = [n for _, n in kid.attrs]
            if i and (names != first or kid.name in {r.name for r in inputs}):
                # Spark's union matches columns by position and names them after the first input;
                # the executor's matches by name, and an operator cannot read one input twice.
                cols = [Col(n) if n == f else Alias(Col(n), f) for n, f in zip(names, first, strict=True)]
                kid = self.add("select", Project(cols), [kid], list(zip([a for a, _ in kid.attrs], first, strict=True)))
            inputs.append(kid)
        return self.add("union", Union(len(inputs)), inputs, kids[0].attrs)

    # -- expressions -----------------------------------------------------------------------------
    def expr(self, node: Node, rel: Rel) -> Expr:
        """The executor expression computing Spark's ``node`` over ``rel``'s columns."""
        cls, f, kids = node.cls, node.fields, node.children
        if UNMAPPED in f:
            raise self.unsupported(*f[UNMAPPED])
        handler = EXPRESSIONS.get(cls)
        if handler is not None:
            return handler(self, node, rel)
        sub: Callable[[Node], Expr] = lambda n: self.expr(n, rel)  # noqa: E731
        if cls == "AttributeReference":
            eid = f["exprId"]["id"]
            for a, name in rel.attrs:
                if a == eid or (a is None and name == f["name"]):
                    return Col(name)
            raise self.unsupported(f"column {f['name']!r}", "a reference to a column of another DataFrame")
        if cls == "Literal":
            return self.literal(f)
        if cls == "EulerNumber":  # e(), and the base of SQL's one-argument log(x)
            return Lit(math.e, pa.float64())
        if cls in ("Alias", "UnaryPositive"):
            return sub(kids[0])
        if cls == "UnaryMinus":
            return Negate(sub(kids[0]))
        if cls in _COMPARISONS:
            return SqlCompare(_COMPARISONS[cls], sub(kids[0]), sub(kids[1]))
        if cls == "EqualNullSafe":
            return SqlCompare("==", sub(kids[0]), sub(kids[1]), null_safe=True)
        if cls in ("And", "Or"):
            return Logical(cls.lower(), sub(kids[0]), sub(kids[1]))
        if cls == "Not":
            return Not(sub(kids[0]))
        if cls == "IsNull":
            return IsNull(sub(kids[0]))
        if cls == "In":
            return InList(sub(kids[0]), [sub(k) for k in kids[1:]])
        if cls == "CaseWhen":
            parts = [sub(k) for k in kids]
            branches = list(zip(parts[0::2], parts[1::2], strict=False))
            otherwise = parts[-1] if len(parts) % 2 else None
            types = [v.check(rel.schema, self.query) for _, v in branches]
            if otherwise is not None:
                types.append(otherwise.check(rel.schema, self.query))
            known = [t for t in types if not pa.types.is_null(t)]
            return CaseWhen(branches, otherwise, known[0] if known else pa.null())
        if cls == "Cast":
            return self.cast(node, rel)
        if cls == "Between":
            inlined = _inline_with(kids[0]) if kids else None
            if inlined is None:
                raise self.unsupported("Spark function 'between' in a form sparkqos cannot read")
            return sub(inlined)
        if cls in ("StringTrim", "StringTrimLeft", "StringTrimRight"):
            if len(kids) != 1:
                raise self.unsupported(f"Spark function '{cls}' with characters to trim")
            return Call({"StringTrim": "trim", "StringTrimLeft": "ltrim", "StringTrimRight": "rtrim"}[cls], sub(kids[0]))
        if cls == "Substring":
            bounds = [k.fields.get("value") if k.cls == "Literal" else None for k in kids[1:]]
            if any(b is None for b in bounds):
                raise self.unsupported("Spark function 'substring' with a position or length that is not a literal")
            return Substring(sub(kids[0]), int(bounds[0]), int(bounds[1]))
        if cls in _CALLS:
            return Call(_CALLS[cls], *(sub(k) for k in kids))
        if cls in _MATCHES:
            if cls == "Like" and f.get("escapeChar") not in (None, "\\"):
                raise self.unsupported("Spark function 'like' with an escape character other than '\\'")
            pattern = kids[1]
            if pattern.cls != "Literal":
                raise self.unsupported(f"Spark function {_MATCHES[cls]!r} with a pattern that is not a literal")
            return StringMatch(_MATCHES[cls], sub(kids[0]), pattern.fields.get("value"))
        if cls in _STRICT_MATH:
            raise self.unsupported(
                f"Spark function {_STRICT_MATH[cls]!r}",
                "Spark computes it with the JVM's StrictMath, whose last bits sparkqos does not reproduce yet",
            )
        name = _FUNCTION_NAMES.get(cls, cls)
        raise self.unsupported(f"Spark function {name!r}")

    def cast(self, node: Node, rel: Rel, child: Expr | None = None) -> Expr:
        """Spark's ``cast`` of ``node``'s child (:func:`cast_supported` says which); ``child``: that
        child already compiled."""
        child = self.expr(node.children[0], rel) if child is None else child
        to = spark_type(node.fields["dataType"])
        src = child.check(rel.schema, self.query)
        if to is None or not cast_supported(src, to):
            raise self.unsupported(f"Spark function 'cast' from {src} to {node.fields['dataType']}")
        if isinstance(child, Lit):
            # The analyzer's casts of literals (60 → 60.0 beside a double column): cast once
            # here, by the same function, rather than on every batch.
            return Lit(spark_cast(child.evaluate(None), to).as_py(), to)
        return Cast(child, to)

    def literal(self, f: dict[str, Any]) -> Lit:
        t = spark_type(f["dataType"])
        if t is None or pa.types.is_binary(t):  # the JSON prints a binary literal as a JVM reference
            raise self.unsupported(f"a {f['dataType']} literal")
        raw = f.get("value")
        if raw is None:
            return Lit(None, t)
        if pa.types.is_timestamp(t):
            # Spark prints a timestamp literal as wall-clock time in the session time zone (an
            # ambiguous time of a DST change reads as the earlier instant); timestamp_ntz as is.
            value: Any = datetime.fromisoformat(raw)
            if t.tz is not None:
                try:
                    zone = ZoneInfo(self.time_zone)
                except (ValueError, KeyError, ZoneInfoNotFoundError):
                    raise self.unsupported(f"a timestamp literal in session time zone {self.time_zone!r}") from None
                value = value.replace(tzinfo=zone).astimezone(UTC)
        elif pa.types.is_integer(t):
            value = int(raw)
        elif pa.types.is_floating(t):
            value = float(raw)  # "NaN", "Infinity" and "-Infinity" parse too
        elif pa.types.is_boolean(t):
            value = raw == "true"
        elif pa.types.is_decimal(t):
            value = decimal_value(raw, t)
        else:
            value = str(raw)
        return Lit(value, t)


def _split(qc: _QueryCompiler, tree: Node, placement: str, stager: Stager, parts: dict[str, SparkPart]) -> None:
    """Hand each row-wise part of ``tree`` over the input that ``placement`` puts in Spark to the
    session side (``stager``): its top node becomes a :data:`SPARK_PART` node, in place (handlers
    hold references to the nodes under theirs), and its stream is added to ``parts``."""

    def native_error(top: Node) -> UnsupportedTransform | None:
        trial = _QueryCompiler(qc.query, qc.klass, qc.stream, qc.schema, {}, [], qc.time_zone, qc.context)
        try:
            trial.check_operations(top)
            trial.relation(top)
        except UnsupportedTransform as exc:
            return exc
        return None

    native = set(NATIVE_EXPRESSIONS) | set(EXPRESSIONS)
    for k, chain in enumerate(row_wise_chains(tree, INPUTS, SYNTHETIC_MARKER)):
        reason = place(qc.query, chain, placement, native_error)
        if reason is None:
            continue
        top, src = chain[0], chain[-1].children[0]
        ids = src.fields["source"].ids or [None] * len(qc.schema)
        attrs = output_attrs(top, list(zip(ids, qc.schema.names, strict=True)))
        names = unique_names([n for _, n in attrs], [a for a, _ in attrs])
        arrow, recipe = stager(qc.query, top.pos, src.pos)
        if len(arrow) != len(names):
            raise PlanError(f"query {qc.query!r}: Spark's part gives columns {arrow.names}, the plan {names}")
        stream = f"spark:{qc.query}" + (f"#{k}" if k else "")
        part = SparkPart(
            query=qc.query,
            stream=stream,
            pos=top.pos,
            source_pos=src.pos,
            steps=tuple(n.cls for n in chain),
            functions=spark_functions(chain, native, _FUNCTION_NAMES),
            reason=reason,
            schema=pa.schema([pa.field(n, f.type, f.nullable) for n, f in zip(names, arrow, strict=True)]),
            carried=tuple(
                (s, names[i])
                for i, (eid, _) in enumerate(attrs)
                for sid, s in zip(ids, qc.schema.names)
                if eid is not None and eid == sid
            ),
            klass=qc.klass,
            recipe=recipe,
        )
        # the nodes below stay (a join handler looks for the input under its sides); nothing maps them
        top.cls, top.fields = SPARK_PART, {"part": part, "attrs": list(zip([a for a, _ in attrs], names, strict=True))}
        parts[stream] = part


def compile_plans(
    plans: Mapping[str, Sequence[dict[str, Any]]],
    source: Sequence[dict[str, Any]],
    source_ids: Sequence[int],
    schema: pa.Schema,
    *,
    outputs: Mapping[str, pa.Schema] | None = None,
    time_zone: str = "UTC",
    classes: Mapping[str, str] | None = None,
    priorities: Mapping[str, float] | None = None,
    stream: str = DEFAULT_STREAM,
    context: Mapping[str, Mapping[str, Any]] | None = None,
    placement: str = "auto",
    stager: Stager | None = None,
) -> CompiledPlan:
    """Compile each query's analyzed plan (parsed JSON) over the input whose own analyzed plan is
    ``source`` (output expression ids ``source_ids``, Arrow ``schema``) into one plan.

    ``outputs`` (query → the Arrow schema Spark gives the query's result) is checked against what
    the executor will deliver; ``time_zone`` is the session's (timestamp literals are printed in
    it); ``classes`` maps query → class, ``priorities`` class → priority; ``context`` maps query →
    what its plan JSON leaves out (see :attr:`_QueryCompiler.context`). With a ``stager`` (the
    session side, which can evaluate parts in Spark), ``placement`` decides which row-wise parts
    over the input Spark evaluates (:mod:`sparkqos.compile.spark_part`); without one, none.
    """
    check_placement(placement)
    classes = dict(classes or {})
    unknown = sorted(set(classes) - set(plans))
    if unknown:
        raise PlanError(f"classes names unknown queries {unknown}; queries are {sorted(plans)}")
    if len(set(schema.names)) != len(schema.names):
        raise PlanError(f"the input DataFrame has duplicate column names: {schema.names}")
    ops: dict[str, PhysicalOperator] = {}
    plan_ops: list[Operator] = []
    roots: dict[str, str] = {}
    parts: dict[str, SparkPart] = {}
    for query, nodes in plans.items():
        if not isinstance(query, str) or not query or "/" in query:
            raise PlanError(f"query names are non-empty strings without '/', got {query!r}")
        qc = _QueryCompiler(query, classes.get(query), stream, schema, ops, plan_ops, time_zone, (context or {}).get(query))
        tree = parse_plan(nodes, source, source_ids)
        if stager is not None:
            _split(qc, tree, placement, stager, parts)
            qc.stager = None if placement == "native" else stager
        qc.check_operations(tree)
        rel = qc.relation(tree)
        if rel.name == stream or rel.name in parts:  # the transform returns its input: one operator passing it on
            rel = qc.add("select", Project([Col(n) for _, n in rel.attrs]), [rel], rel.attrs)
        roots[query] = rel.name
        expected = (outputs or {}).get(query)
        names = [n for _, n in rel.attrs] if expected is None else expected.names
        doubled = sorted({n for n in names if names.count(n) > 1})
        if doubled:
            raise UnsupportedTransform(query, "two output columns with the same name", f"{doubled[0]!r}; rename one")
        got = [(f.name, f.type) for f in rel.schema if f.name in {n for _, n in rel.attrs}]
        if expected is not None and [n for n, _ in got] != expected.names:
            names = expected.names
            twice = sorted({n for n in names if names.count(n) > 1})
            raise UnsupportedTransform(
                query,
                "a result with two columns of the same name"
                if twice
                else "a result whose columns sparkqos does not name as Spark",
                f"{twice}; drop or rename one (e.g. after a join)"
                if twice
                else f"Spark gives {names}, sparkqos {[n for n, _ in got]}",
            )
        if expected is not None and got != [(f.name, f.type) for f in expected]:
            # A safety net: every node is meant to give Spark's type; never deliver another one.
            raise UnsupportedTransform(
                query,
                "a result type sparkqos does not reproduce",
                f"Spark gives {expected.types}, sparkqos {[t for _, t in got]}",
            )
    plan = Plan(plan_ops, streams=[stream, *parts], classes=dict(priorities or {}))
    sources = {stream: schema, **{s: p.schema for s, p in parts.items()}}
    return CompiledPlan(plan, ops, sources, roots, spark_parts=parts)
