"""Spark's ``PythonUDF`` expressions in a transform's plan → the executor's :class:`PythonUdf`.

``F.pandas_udf`` (scalar, Series → Series) and ``F.udf`` (pickled or Arrow-optimised) calls in a
``select``, ``withColumn`` or ``where`` reach the analyzed plan as ``PythonUDF`` nodes: the
function's name, its ``evalType``, the declared ``dataType`` and the argument expressions, but
not the function itself. The session side (:mod:`sparkqos.spark.udfs`) reads each function from
the JVM plan into the query's context as ``udfs``: result expression id → callable.

A UDF whose one argument is a UDF of the same kind runs as one chained call, as in Spark's
worker (the inner result reaches the outer function unconverted).

Refused with :class:`~sparkqos.errors.UnsupportedTransform`, naming them: grouped, aggregate,
window and iterator pandas UDFs, Arrow UDFs, UDTFs, UDFs called with keyword arguments, UDFs
over or returning a type other than integers, floats, strings and booleans, and a UDF of a Spark
Connect plan without a Python function (:mod:`sparkqos.spark.connect_plan` reads the function a
Python UDF's plan carries).
"""

from __future__ import annotations

from typing import Any

from sparkqos.compile.nodes import Node, Rel, spark_type
from sparkqos.executor.udf import Chained, PythonUdf, udf_type_supported

#: Spark's PythonEvalType values sparkqos runs, and how (see sparkqos.executor.udf).
_RUNS = {100: "rows", 101: "arrow_rows", 200: "pandas"}
#: The other Python function kinds, as users write them.
_REFUSED = {
    201: "a grouped map pandas UDF (applyInPandas)",
    202: "a grouped aggregate pandas UDF",
    203: "a window pandas UDF",
    204: "an iterator pandas UDF (Iterator[pd.Series] -> Iterator[pd.Series])",
    205: "mapInPandas",
    206: "a cogrouped applyInPandas",
    207: "mapInArrow",
    208: "applyInPandasWithState",
    217: "a grouped aggregate iterator pandas UDF",
    250: "an Arrow UDF (arrow_udf)",
    251: "an iterator Arrow UDF",
    252: "a grouped aggregate Arrow UDF",
    253: "a window Arrow UDF",
    254: "a grouped aggregate iterator Arrow UDF",
    300: "a Python UDTF",
    301: "an Arrow-optimised Python UDTF",
    302: "an Arrow UDTF",
}


def _kind(qc: Any, node: Node) -> str:
    f = node.fields
    name = str(f.get("name") or "<udf>")
    if "evalType" not in f:  # a Connect plan's UDF without a Python function (sparkqos.spark.connect_plan)
        raise qc.unsupported(
            f"udf under Spark Connect ({name!r})", "run the query with classic pyspark, where sparkqos reads the function"
        )
    eval_type = int(f["evalType"])
    kind = _RUNS.get(eval_type)
    if kind is None:
        what = _REFUSED.get(eval_type, f"a Python UDF of evalType {eval_type}")
        raise qc.unsupported(f"{what} {name!r}")
    return kind


def _function(qc: Any, node: Node) -> Any:
    name = node.fields.get("name")
    if any(k.cls == "NamedArgumentExpression" for k in node.children):
        raise qc.unsupported(f"UDF {name!r} called with keyword arguments", "pass its arguments by position")
    fn = qc.context.get("udfs", {}).get(int(node.fields["resultId"]["id"]))
    if fn is None:
        raise qc.unsupported(f"UDF {name!r} whose Python function sparkqos could not read from the plan")
    return fn


def python_udf(qc: Any, node: Node, rel: Rel) -> PythonUdf:
    f = node.fields
    name = str(f.get("name") or "<udf>")
    kind = _kind(qc, node)
    declared = f.get("dataType")
    to = spark_type(declared) if isinstance(declared, str) else None
    if to is None or not udf_type_supported(to):
        shown = declared if isinstance(declared, str) else (declared or {}).get("type", declared)
        raise qc.unsupported(
            f"UDF {name!r} returning {shown}", "sparkqos runs UDFs returning integers, floats, strings or booleans"
        )
    # Spark chains a UDF whose one argument is a UDF of the same kind into one call of both.
    functions = [_function(qc, node)]
    inner = node
    while (
        len(inner.children) == 1
        and inner.children[0].cls == "PythonUDF"
        and inner.children[0].fields.get("evalType") == f["evalType"]
    ):
        inner = inner.children[0]
        functions.insert(0, _function(qc, inner))
        name = f"{name}({inner.fields.get('name')})"
    args = [qc.expr(k, rel) for k in inner.children]
    for a, k in zip(args, inner.children, strict=True):
        t = a.check(rel.schema, qc.query)
        if not (udf_type_supported(t) or str(t) == "null"):
            raise qc.unsupported(f"UDF {name!r} over a {k.fields.get('dataType', t)} argument")
    fn = functions[0] if len(functions) == 1 else Chained(functions)
    return PythonUdf(name, fn, args, to, kind, qc.query)
