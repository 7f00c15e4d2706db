"""Spark's ``FlatMapGroupsInPandasWithState`` → :class:`~sparkqos.executor.operators.PandasWithState`.

``df.groupBy(keys).applyInPandasWithState(func, outputStructType, stateStructType, outputMode,
timeoutConf)`` reaches the analyzed plan as one node: its ``groupingAttributes``, a ``PythonUDF``
of evalType 208 over every column of the DataFrame (``functionExpr``; the function itself is read
from the JVM plan by :mod:`sparkqos.spark.udfs`, as for any UDF), the output attributes, the state
type, the output mode and the timeout. It runs as a native operator: the function called per key
and micro-batch with its state in the operator's own, checkpointed with the executor's.

The watermark of ``EventTimeTimeout`` (and of ``getCurrentWatermarkMs``) is the delay of a
watermarked column among the DataFrame's columns (plan context ``watermarks``). Refused with
:class:`~sparkqos.errors.UnsupportedTransform`, naming what: a grouping key that is not a column,
``EventTimeTimeout`` without ``withWatermark`` (Spark refuses it too), a watermarked column the
DataFrame no longer holds, a finite DataFrame (Spark runs it on streams only), a key, output or
state field of a type other than integers, floats, strings, booleans and timestamps, a column the
function reads that pandas would get otherwise than from Spark (a map, a timestamp inside an array
or struct), a Spark Connect plan (whose node carries no function here).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from sparkqos.compile.nodes import Node, Rel, parse_expr, spark_type
from sparkqos.executor.expressions import Col
from sparkqos.executor.operators import PandasWithState
from sparkqos.executor.operators.group_state import frame_type_supported, state_type_supported

_OPERATION = "applyInPandasWithState"
_TYPES = "integers, floats, strings, booleans and timestamps"


def _timeout(node: Node) -> str:
    """``NoTimeout`` / ``ProcessingTimeTimeout`` / ``EventTimeTimeout`` of the node's ``timeout``."""
    found = node.fields.get("timeout")
    name = str(found.get("object", "") if isinstance(found, dict) else found or "")
    return name.rsplit(".", 1)[-1].rstrip("$")


def _field_type(qc: Any, what: str, name: str, declared: Any) -> pa.DataType:
    t = spark_type(declared)
    if t is None or not state_type_supported(t):
        shown = declared if isinstance(declared, str) else (declared or {}).get("type", declared)
        raise qc.unsupported(f"{_OPERATION} with {what} field {name!r} of type {shown}", f"sparkqos runs it over {_TYPES}")
    return t


def apply_in_pandas_with_state(qc: Any, node: Node) -> Rel:
    f = node.fields
    if "functionExpr" not in f:  # a bare node of the Spark Connect reader
        raise qc.unsupported(
            f"{_OPERATION} under Spark Connect", "run the query with classic pyspark, where sparkqos reads the function"
        )
    child = qc.relation(node.children[0])
    keys = []
    for item in f["groupingAttributes"]:
        e = qc.expr(parse_expr(item), child)
        if not isinstance(e, Col):
            raise qc.unsupported(f"{_OPERATION} grouped by an expression", "add it with withColumn first and group by its name")
        keys.append(e.column)
    udf = parse_expr(f["functionExpr"])
    name = str(udf.fields.get("name") or "<udf>")
    fn = qc.context.get("udfs", {}).get(int(udf.fields["resultId"]["id"]))
    if fn is None:
        raise qc.unsupported(f"{_OPERATION} {name!r} whose Python function sparkqos could not read from the plan")
    columns = []
    for k in udf.children:
        e = qc.expr(k, child)
        if not isinstance(e, Col):  # PySpark passes the DataFrame's columns, never expressions
            raise qc.unsupported(f"{_OPERATION} {name!r} over an expression")
        columns.append(e.column)
    for column in keys:
        t = child.schema.field(column).type
        if not state_type_supported(t):
            raise qc.unsupported(f"{_OPERATION} grouped by {column!r} of type {t}", f"sparkqos groups it by {_TYPES}")
    for column in columns:
        t = child.schema.field(column).type
        if not frame_type_supported(t):
            raise qc.unsupported(
                f"{_OPERATION} over column {column!r} of type {t}",
                "sparkqos gives the function integers, floats, strings, booleans, timestamps, decimals, dates, binary, "
                "and arrays and structs of them without timestamps; select the columns it needs first",
            )
    output = pa.schema(
        [
            pa.field(a.fields["name"], _field_type(qc, "output", a.fields["name"], a.fields.get("dataType")))
            for a in (parse_expr(item) for item in f["outputAttrs"])
        ]
    )
    state_fields = (f.get("stateType") or {}).get("fields", [])
    state_type = pa.struct([pa.field(s["name"], _field_type(qc, "state", s["name"], s.get("type"))) for s in state_fields])
    timeout = _timeout(node)
    if not qc.context.get("streaming"):
        raise qc.unsupported(f"{_OPERATION} on a finite DataFrame", "Spark runs it on streams only")
    watermarks = qc.context.get("watermarks") or {}
    marked = [(col, watermarks[eid]) for eid, col in child.attrs if eid in watermarks]
    time_col = delay_us = None
    if marked:
        time_col, delay_s = marked[0]
        delay_us = int(round(delay_s * 1e6))
    elif watermarks:
        raise qc.unsupported(
            f"{_OPERATION} {name!r} over a DataFrame without its watermarked column",
            "keep the column withWatermark names among the DataFrame's columns",
        )
    if timeout == "EventTimeTimeout" and time_col is None:
        raise qc.unsupported(
            f"{_OPERATION} {name!r} with EventTimeTimeout on a stream without withWatermark", "Spark needs the watermark too"
        )
    op = PandasWithState(
        keys,
        columns,
        fn,
        output,
        state_type,
        timeout,
        time_col,
        delay_us,
        query=qc.query,
        udf=name,
        time_zone=qc.time_zone,
    )
    attrs = [(parse_expr(item).fields["exprId"]["id"], n) for item, n in zip(f["outputAttrs"], output.names, strict=True)]
    return qc.add("state", op, [child], attrs)
