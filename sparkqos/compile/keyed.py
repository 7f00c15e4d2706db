"""Per-key stateful plan nodes of a transform's plan: Spark's ``Window`` (lag only) → KeyedLag,
``Deduplicate`` / ``DeduplicateWithinWatermark`` → Deduplicate.

``df.withColumn("prev_lat", F.lag("lat").over(Window.partitionBy("mmsi").orderBy("ts")))``
reaches the analyzer as a ``Window`` node (one per distinct window spec) whose expressions are
``lag(input, offset, default)`` over the node's ``partitionSpec`` and ``orderSpec``; an argument
that is an expression is computed by a Project the analyzer puts below (``_w0``). Spark's
streaming engine refuses window functions, so the oracle of such a transform is Spark's batch run;
sparkqos runs it on a stream under the assumption :mod:`sparkqos.executor.operators.lag`
documents (the rows of a key arrive in order). Only ``lag`` with an offset of at least 1, over
columns, ordered ascending with nulls first (Spark's default) by numeric or timestamp columns;
every other window function, ordering or frame raises
:class:`~sparkqos.errors.UnsupportedTransform` naming it.

``dropDuplicates([keys])`` (all columns without keys) and ``dropDuplicatesWithinWatermark(keys)``
reach the analyzer as ``Deduplicate`` / ``DeduplicateWithinWatermark`` over key attributes; the
watermark's delay comes from the plan context (:mod:`sparkqos.spark.transforms`), found by the
expression id of a watermarked column of the input. On a stream the seen keys are state, which
the watermark lets the operator forget when the keys include the watermarked column. Without a
watermark, or with ``dropDuplicates`` keys that leave out the watermarked column, Spark keeps every
key for good, and so does sparkqos: the query runs, with a
:class:`~sparkqos.errors.GrowingStateWarning` naming the growing state (the operator's
``state_rows()``: the keys held). ``dropDuplicatesWithinWatermark`` needs a watermark, as in Spark.
"""

from __future__ import annotations

import warnings
from typing import Any

import pyarrow as pa

from sparkqos.compile.nodes import Node, Rel, parse_expr
from sparkqos.errors import GrowingStateWarning
from sparkqos.executor.expressions import Col, evaluate_array
from sparkqos.executor.operators import Deduplicate, KeyedLag, Lag

#: Spark's window functions by class name, as users write them.
_WINDOW_FUNCTIONS = {
    "RowNumber": "row_number",
    "Rank": "rank",
    "DenseRank": "dense_rank",
    "PercentRank": "percent_rank",
    "CumeDist": "cume_dist",
    "NTile": "ntile",
    "Lead": "lead",
    "NthValue": "nth_value",
}
_LAG_ONLY = "only lag(col[, n[, default]]).over(Window.partitionBy(...).orderBy(...)) runs on a stream"


def _column(qc: Any, node: Node, rel: Rel, what: str) -> str:
    """The column of ``rel`` that ``node`` (an attribute) names."""
    e = qc.expr(node, rel) if node.cls == "AttributeReference" else None
    if not isinstance(e, Col):
        raise qc.unsupported(f"{what} that is an expression", "add it with withColumn first and use its name")
    return e.column


def _constant(qc: Any, node: Node, rel: Rel, to: pa.DataType) -> Any:
    """The value of the constant expression ``node`` (a lag's default) as a Python value of type ``to``."""
    if node.cls == "Literal" and node.fields.get("value") is None:
        return None
    expr = qc.expr(node, rel)
    if expr.columns():
        raise qc.unsupported("a lag default that reads a column", "give a literal")
    row = pa.RecordBatch.from_arrays([pa.nulls(1, f.type) for f in rel.schema], schema=rel.schema)
    value = evaluate_array(expr, row)
    if value.type != to:
        raise qc.unsupported(f"a lag default of type {value.type}", f"the lagged column is {to}")
    return value[0].as_py()


def _function_name(fn: Node) -> str:
    if fn.cls == "AggregateExpression" and fn.children:
        return f"{fn.children[0].cls.lower()} over a window"
    return _WINDOW_FUNCTIONS.get(fn.cls, fn.cls)


def window(qc: Any, node: Node) -> Rel:
    if "windowExpressions" not in node.fields:  # a bare node of the Spark Connect reader
        raise qc.unsupported("Spark operation 'Window'", "window functions other than items of a select under Spark Connect")
    child = qc.relation(node.children[0])
    lags: list[Lag] = []
    new_attrs: list[tuple[int, str]] = []
    for item in node.fields["windowExpressions"]:
        tree = parse_expr(item)
        wexpr = tree.children[0] if tree.cls == "Alias" and tree.children else tree
        fn = wexpr.children[0] if wexpr.cls == "WindowExpression" else wexpr
        if fn.cls != "Lag":
            raise qc.unsupported(f"window function {_function_name(fn)!r}", _LAG_ONLY)
        if fn.fields.get("ignoreNulls"):
            raise qc.unsupported("lag with ignoreNulls", _LAG_ONLY)
        source, offset_node, default_node = fn.children
        offset = offset_node.fields.get("value") if offset_node.cls == "Literal" else None
        if offset is None or int(offset) < 1:
            raise qc.unsupported(f"lag with offset {offset}", "sparkqos runs lag with an offset of 1 or more, not lead")
        column = _column(qc, source, child, "a lag argument")
        default = _constant(qc, default_node, child, child.schema.field(column).type)
        name = tree.fields["name"]
        taken = {n for _, n in child.attrs} | {n for _, n in new_attrs}
        out = name
        while out in taken:  # withColumn("lat", lag("lat")): the Project above renames it back
            out += "_lag"
        lags.append(Lag(column, int(offset), out, default))
        new_attrs.append((tree.fields["exprId"]["id"], out))
    keys = [_column(qc, parse_expr(p), child, "a partitionBy key") for p in node.fields["partitionSpec"]]
    order: list[str] = []
    for item in node.fields["orderSpec"]:
        sort = parse_expr(item)
        direction = str(sort.fields.get("direction", {}).get("object", ""))
        nulls = str(sort.fields.get("nullOrdering", {}).get("object", ""))
        if not direction.endswith("Ascending$") or not nulls.endswith("NullsFirst$"):
            raise qc.unsupported(
                "a window ordered descending or with nulls last",
                "sparkqos follows a key's rows forward in time: orderBy(col) ascending, nulls first",
            )
        name = _column(qc, sort.children[0], child, "a window orderBy")
        t = child.schema.field(name).type
        if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_timestamp(t)):
            raise qc.unsupported(f"a window ordered by {name!r} of type {t}", "order by a numeric or timestamp column")
        order.append(name)
    if not order:
        raise qc.unsupported("a window without orderBy")
    return qc.add("lag", KeyedLag(keys, order, lags), [child], child.attrs + new_attrs)


def deduplicate(qc: Any, node: Node) -> Rel:
    within = node.cls == "DeduplicateWithinWatermark"
    operation = "dropDuplicatesWithinWatermark" if within else "dropDuplicates"
    if "keys" not in node.fields:  # a bare node (the Spark Connect reader writes its keys)
        raise qc.unsupported(f"Spark operation {node.cls!r}", f"{operation} without its keys, as no Spark Connect plan writes it")
    child = qc.relation(node.children[0])
    keys = [_column(qc, parse_expr(k), child, f"a {operation} key") for k in node.fields["keys"]]
    time_col = delay_us = None
    if within and not qc.context.get("streaming"):
        raise qc.unsupported(f"{operation} on a finite DataFrame", "Spark runs it on streams only")
    if qc.context.get("streaming"):
        watermarks = qc.context.get("watermarks") or {}
        marked = [(name, watermarks[eid]) for eid, name in child.attrs if eid in watermarks]
        if not marked and within:
            raise qc.unsupported(f"{operation} on a stream without withWatermark", "Spark needs the watermark too")
        if marked:
            time_col, delay_s = marked[0]
            delay_us = int(round(delay_s * 1e6))
        if not within and time_col not in keys:
            why = "without withWatermark" if time_col is None else f"with keys that leave out the watermarked column {time_col!r}"
            warnings.warn(
                GrowingStateWarning(
                    qc.query,
                    f"{operation}({keys}) on a stream {why}",
                    "keeps every key it has seen for good, as Spark does: its state (the keys held) grows with "
                    "every new key; add withWatermark(ts, delay) and include ts in the keys to bound it",
                ),
                stacklevel=2,
            )
    op = Deduplicate(keys, time_col, delay_us, within_watermark=within)
    return qc.add("dedup", op, [child], child.attrs)  # a key type it cannot compare: refused now
