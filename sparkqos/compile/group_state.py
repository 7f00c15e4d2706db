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

import copy
from typing import Any

import pyarrow as pa

from sparkqos.compile.nodes import Node, Rel, parse_expr, spark_type
from sparkqos.errors import UdfError
from sparkqos.executor.expressions import Col
from sparkqos.executor.operators import PandasWithState, TransformWithState
from sparkqos.executor.operators.group_state import frame_type_supported, state_type_supported
from sparkqos.executor.operators.stateful_processor import TIME_MODES, StateVariable

_OPERATION = "applyInPandasWithState"
_TYPES = "integers, floats, strings, booleans and timestamps"


def _timeout(node: Node) -> str:
    """``NoTimeout`` / ``ProcessingTimeTimeout`` / ``EventTimeTimeout`` of the node's ``timeout``."""
    found = node.fields.get("timeout")
    name = str(found.get("object", "") if isinstance(found, dict) else found or "")
    return name.rsplit(".", 1)[-1].rstrip("$")


def _field_type(qc: Any, what: str, name: str, declared: Any, operation: str = _OPERATION) -> pa.DataType:
    t = spark_type(declared)
    if t is None or not state_type_supported(t):
        shown = declared if isinstance(declared, str) else (declared or {}).get("type", declared)
        raise qc.unsupported(f"{operation} with {what} field {name!r} of type {shown}", f"sparkqos runs it over {_TYPES}")
    return t


def _column(qc: Any, e: Any, operation: str) -> str:
    if not isinstance(e, Col):  # PySpark passes the DataFrame's columns, never expressions
        raise qc.unsupported(f"{operation} over an expression")
    return e.column


def _check_columns(qc: Any, child: Rel, keys: list[str], columns: list[str], operation: str) -> None:
    for column in keys:
        t = child.schema.field(column).type
        if not state_type_supported(t):
            raise qc.unsupported(f"{operation} grouped by {column!r} of type {t}", f"sparkqos groups it by {_TYPES}")
    for column in columns:
        t = child.schema.field(column).type
        if not frame_type_supported(t):
            raise qc.unsupported(
                f"{operation} over column {column!r} of type {t}",
                "sparkqos gives the function integers, floats, strings, booleans, timestamps, decimals, dates, binary, "
                "and arrays and structs of them without timestamps; select the columns it needs first",
            )


def _watermark(qc: Any, child: Rel, name: str, operation: str) -> tuple[str | None, int | None]:
    """The watermarked column among the DataFrame's columns and its delay (µs), (None, None) without one."""
    watermarks = qc.context.get("watermarks") or {}
    marked = [(col, watermarks[eid]) for eid, col in child.attrs if eid in watermarks]
    if marked:
        time_col, delay_s = marked[0]
        return time_col, int(round(delay_s * 1e6))
    if watermarks:
        raise qc.unsupported(
            f"{operation} {name!r} over a DataFrame without its watermarked column",
            "keep the column withWatermark names among the DataFrame's columns",
        )
    return None, None


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
    columns = [_column(qc, qc.expr(k, child), f"{_OPERATION} {name!r}") for k in udf.children]
    _check_columns(qc, child, keys, columns, _OPERATION)
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
    time_col, delay_us = _watermark(qc, child, name, _OPERATION)
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


# -- transformWithStateInPandas ------------------------------------------------------------------------
_TWS = "transformWithStateInPandas"
#: Spark's PythonEvalType of the function PySpark wraps a processor in, by how it was called.
_TWS_EVAL_TYPES = {
    211: None,
    212: "transformWithStateInPandas with initialState",
    213: "transformWithState (PySpark's Row API)",
    214: "transformWithState (PySpark's Row API) with initialState",
}


class ProcessorSource:
    """The user's ``StatefulProcessor`` inside the function PySpark wraps it in
    (``TransformWithStateInPandasUdfUtils.transformWithStateUDF``, read from the plan as any UDF's
    function): each call gives a fresh copy, as Spark's worker loads one per task. Pickles as that
    function does (:class:`~sparkqos.spark.udfs.PickledFunction`: its command's bytes)."""

    def __init__(self, function: Any):
        self.function = function
        owner = getattr(getattr(function, "fn", function), "__self__", None)
        self.template = getattr(owner, "_stateful_processor", None)
        if self.template is None:
            raise TypeError(f"{function!r} is not the function PySpark wraps a StatefulProcessor in")

    def __call__(self) -> Any:
        return copy.deepcopy(self.template)

    def __reduce__(self) -> tuple[Any, tuple[Any]]:
        return ProcessorSource, (self.function,)


class _Inert:
    """What the declaring handle gives for a state variable: state is used after init only."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"state used in init() ({name}); sparkqos reads init() before any data")


class _Declarations:
    """A handle that records what ``init`` declares (Spark's driver does the same before the
    query starts): per state variable its kind, name, schemas and TTL."""

    def __init__(self) -> None:
        self.declared: list[tuple[str, str, Any, Any, Any]] = []

    def getValueState(self, stateName: str, schema: Any, ttlDurationMs: Any = None) -> Any:  # noqa: N802,N803
        self.declared.append(("value", stateName, schema, None, ttlDurationMs))
        return _Inert()

    def getListState(self, stateName: str, schema: Any, ttlDurationMs: Any = None) -> Any:  # noqa: N802,N803
        self.declared.append(("list", stateName, schema, None, ttlDurationMs))
        return _Inert()

    def getMapState(self, stateName: str, userKeySchema: Any, valueSchema: Any, ttlDurationMs: Any = None) -> Any:  # noqa: N802,N803
        self.declared.append(("map", stateName, valueSchema, userKeySchema, ttlDurationMs))
        return _Inert()

    def registerTimer(self, expiryTimestampMs: int) -> None:  # noqa: N802,N803
        raise RuntimeError("registerTimer in init(): timers are registered for a key, in handleInputRows")

    def deleteTimer(self, expiryTimestampMs: int) -> None:  # noqa: N802,N803
        raise RuntimeError("deleteTimer in init(): timers are deleted for a key, in handleInputRows")

    def listTimers(self) -> Any:  # noqa: N802
        raise RuntimeError("listTimers in init(): timers are listed for a key, in handleInputRows")

    def deleteIfExists(self, stateName: str) -> None:  # noqa: N802,N803
        pass


def _object_name(node: Node, field: str) -> str:
    """``EventTime`` of ``{"object": "...logical.EventTime$"}``, ``Append`` of ``"...InternalOutputModes$Append$"``."""
    found = node.fields.get(field)
    name = str(found.get("object", "") if isinstance(found, dict) else found or "")
    return name.rstrip("$").replace("$", ".").rsplit(".", 1)[-1]


def _struct(qc: Any, name: str, what: str, schema: Any) -> pa.StructType:
    parse = qc.context.get("parse_schema")
    if parse is None:
        raise qc.unsupported(f"{_TWS} {name!r} whose state schemas sparkqos cannot read", "run it with classic pyspark")
    try:
        declared = parse(schema)
    except Exception as e:  # noqa: BLE001 - named in the error
        raise qc.unsupported(f"{_TWS} {name!r} with {what} schema {schema!r}", f"{type(e).__name__}: {e}") from None
    if not isinstance(declared, dict) or declared.get("type") != "struct":
        raise qc.unsupported(f"{_TWS} {name!r} with {what} schema {schema!r}", "Spark takes a struct type")
    return pa.struct(
        [pa.field(s["name"], _field_type(qc, what, s["name"], s.get("type"), _TWS)) for s in declared.get("fields", [])]
    )


def _variables(qc: Any, name: str, source: ProcessorSource, time_mode: str) -> list[StateVariable]:
    """The state variables the processor's ``init`` declares, read as Spark's driver reads them."""
    handle = _Declarations()
    processor = source()
    try:
        processor.init(handle)
        processor.close()
    except Exception as e:
        raise UdfError(qc.query, name, f"init() raised {type(e).__name__}: {e}") from e
    out = []
    for kind, state, schema, key_schema, ttl in handle.declared:
        if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, int) or ttl <= 0):
            raise qc.unsupported(f"{_TWS} {name!r} with state {state!r} of TTL {ttl!r}", "a TTL is a positive number of ms")
        if ttl is not None and time_mode != "ProcessingTime":
            raise qc.unsupported(
                f"{_TWS} {name!r} with a TTL on state {state!r} in timeMode {time_mode}",
                "Spark takes a TTL in timeMode ProcessingTime only",
            )
        value_type = _struct(qc, name, f"state {state!r}", schema)
        key_type = None if key_schema is None else _struct(qc, name, f"state {state!r} key", key_schema)
        if any(v.name == state for v in out):
            raise qc.unsupported(f"{_TWS} {name!r} declaring state {state!r} twice")
        out.append(StateVariable(state, kind, value_type, key_type, ttl))
    return out


def transform_with_state_in_pandas(qc: Any, node: Node) -> Rel:
    f = node.fields
    if "functionExpr" not in f:  # a bare node of the Spark Connect reader
        raise qc.unsupported(
            f"{_TWS} under Spark Connect", "run the query with classic pyspark, where sparkqos reads the processor"
        )
    udf = parse_expr(f["functionExpr"])
    refused = _TWS_EVAL_TYPES.get(int(udf.fields.get("evalType", 0)), "an unknown kind of transformWithState")
    if refused is None and f.get("hasInitialState"):
        refused = _TWS_EVAL_TYPES[212]
    if refused is not None:
        raise qc.unsupported(refused, f"sparkqos runs {_TWS} without initialState")
    if not qc.context.get("streaming"):
        raise qc.unsupported(f"{_TWS} on a finite DataFrame", "sparkqos runs it on streams")
    mode = _object_name(node, "outputMode")
    if mode not in ("Append", "Update"):
        raise qc.unsupported(f"{_TWS} in output mode {mode}", "sparkqos runs it in append and update modes")
    time_mode = {"NoTime": "None"}.get(_object_name(node, "timeMode"), _object_name(node, "timeMode"))
    if time_mode not in TIME_MODES:
        raise qc.unsupported(f"{_TWS} with timeMode {time_mode}")
    # PySpark groups by putting the keys in front of the DataFrame's columns: Project(keys ++ columns)
    grouped, n_keys = node.children[0], int(f.get("groupingAttributesLen", 0))
    if grouped.cls != "Project":
        raise qc.unsupported(f"{_TWS} over a plan sparkqos cannot read", f"a {grouped.cls} where the grouping keys are")
    items = [parse_expr(item) for item in grouped.fields["projectList"]]
    child = qc.relation(grouped.children[0])
    keys = []
    for item in items[:n_keys]:
        if item.cls != "AttributeReference":
            raise qc.unsupported(f"{_TWS} grouped by an expression", "add it with withColumn first and group by its name")
        keys.append(_column(qc, qc.expr(item, child), _TWS))
    columns = [_column(qc, qc.expr(k, child), _TWS) for k in udf.children]
    fn = qc.context.get("udfs", {}).get(int(udf.fields["resultId"]["id"]))
    if fn is None:
        raise qc.unsupported(f"{_TWS} whose processor sparkqos could not read from the plan")
    try:
        source = ProcessorSource(fn)
    except TypeError as e:
        raise qc.unsupported(f"{_TWS} whose processor sparkqos could not read from the plan", str(e)) from None
    name = type(source.template).__name__
    _check_columns(qc, child, keys, columns, _TWS)
    output = pa.schema(
        [
            pa.field(a.fields["name"], _field_type(qc, "output", a.fields["name"], a.fields.get("dataType"), _TWS))
            for a in (parse_expr(item) for item in f["outputAttrs"])
        ]
    )
    variables = _variables(qc, name, source, time_mode)
    time_col, delay_us = _watermark(qc, child, name, _TWS)
    if time_mode == "EventTime" and time_col is None:
        raise qc.unsupported(
            f"{_TWS} {name!r} with timeMode EventTime on a stream without withWatermark", "Spark needs the watermark too"
        )
    if time_mode != "EventTime":
        time_col = delay_us = None  # Spark drops late rows and gives the watermark in EventTime only
    op = TransformWithState(
        keys,
        columns,
        source,
        variables,
        output,
        time_mode,
        time_col,
        delay_us,
        query=qc.query,
        udf=name,
        time_zone=qc.time_zone,
    )
    attrs = [(parse_expr(item).fields["exprId"]["id"], n) for item, n in zip(f["outputAttrs"], output.names, strict=True)]
    return qc.add("processor", op, [child], attrs)


def transform_with_state_inputs(node: Node) -> list[Node]:
    """The relation below the node: under the Project PySpark adds (its initial state, a
    LocalRelation when there is none, is not read)."""
    grouped = node.children[0]
    return grouped.children[:1] if grouped.cls == "Project" else [grouped]
