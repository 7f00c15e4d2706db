"""The Python functions of a transform's UDFs, read from its analyzed JVM plan (classic pyspark).

Spark's plan JSON names each ``PythonUDF`` but leaves its function out (``func`` is null). The JVM
node keeps it as the bytes PySpark's ``CloudPickleSerializer`` wrote for ``(function,
return type)``, the command Spark's Python worker loads (``pyspark.worker.read_single_udf``); this
module loads it the same way and hands :mod:`sparkqos.compile.udf` the functions in the query's
context, by result expression id (``udfs``). Each is wrapped in :class:`PickledFunction`, which
pickles back to those bytes, so a compiled plan stays picklable (foreachBatch's function,
:mod:`sparkqos.spark.batch`) with the standard pickle as with cloudpickle, lambdas and closures
included. :mod:`sparkqos.spark.transforms` registers :func:`read_udfs` in its CONTEXT_READERS
(this module does not import it: no import cycle). Under Spark Connect there is no JVM plan:
:mod:`sparkqos.spark.connect_plan` loads the same command from the client's plan.
"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import DataFrame

from sparkqos.compile.nodes import SYNTHETIC_MARKER
from sparkqos.errors import UnsupportedTransform
from sparkqos.executor.threadsafe import is_thread_safe

__all__ = ["PickledFunction", "check_worker_settings", "read_udfs", "schema_parser"]


class PickledFunction:
    """A UDF's function, loaded from Spark's pickled command; pickles back to that command."""

    def __init__(self, command: bytes, name: str = "<udf>"):
        from pyspark.serializers import CloudPickleSerializer

        self.command, self.name = bytes(command), name
        loaded = CloudPickleSerializer().loads(self.command)
        fn = loaded[0] if isinstance(loaded, tuple) else loaded
        if not callable(fn):
            raise TypeError(f"the command of UDF {name!r} holds {type(fn).__name__}, not a function")
        self.fn = fn

    def __call__(self, *args: Any) -> Any:
        return self.fn(*args)

    @property
    def __sparkqos_thread_safe__(self) -> bool:  # threadsafe.THREAD_SAFE: the loaded function's mark
        return is_thread_safe(self.fn)

    def __reduce__(self) -> tuple[Any, tuple[bytes, str]]:
        return PickledFunction, (self.command, self.name)

    def __repr__(self) -> str:
        return f"PickledFunction({self.name!r})"


#: Session settings that change what Spark's Python worker does with a UDF's data, with the value
#: whose behaviour sparkqos reproduces (Spark's default).
_WORKER_SETTINGS = {
    "spark.sql.execution.pandas.convertToArrowArraySafely": "false",
    "spark.sql.execution.pythonUDF.pandas.preferIntExtensionDtype": "false",
    "spark.sql.legacy.execution.pythonUDF.pandas.conversion.enabled": "false",
}


def check_worker_settings(name: str, result: DataFrame) -> None:
    """Refuse UDFs of query ``name`` when the session converts their data otherwise than Spark's
    defaults, which sparkqos reproduces."""
    conf = result.sparkSession.conf
    for key, value in _WORKER_SETTINGS.items():
        got = str(conf.get(key, value)).lower()
        if got != value:
            raise UnsupportedTransform(name, f"UDFs with {key}={got}", f"sparkqos converts UDF data as Spark does with {value}")


def _command_bytes(func: Any) -> bytes:
    command = func.command()
    if isinstance(command, (bytes, bytearray)):  # Array[Byte] (Spark 3)
        return bytes(command)
    return bytes(command.unsafeArray())  # ArraySeq.ofByte (Spark 4)


def _subtree_end(exprs: list[dict[str, Any]], start: int) -> int:
    """Where the expression starting at ``start`` of a pre-order list ends."""
    need, i = 1, start
    while need and i < len(exprs):
        need += int(exprs[i].get("num-children", 0)) - 1
        i += 1
    return i


def _is_synthetic(entry: dict[str, Any]) -> bool:
    """Whether a plan entry is a ``sparkqos.synthetic`` filter (``hash AND marker IS NOT NULL``),
    which the compiler runs as its own operator: the UDF in its hash spends CPU for Spark's own
    run of the transform only, so sparkqos never calls it and need not read it."""
    cond = entry.get("condition")
    if not str(entry.get("class", "")).endswith(".Filter") or not isinstance(cond, list) or len(cond) < 4:
        return False
    if not str(cond[0].get("class", "")).endswith(".And") or _subtree_end(cond, 1) != len(cond) - 2:
        return False
    test, literal = cond[-2], cond[-1]
    return (
        str(test.get("class", "")).endswith(".IsNotNull")
        and str(literal.get("class", "")).endswith(".Literal")
        and str(literal.get("value", "")).startswith(SYNTHETIC_MARKER)
    )


def read_udfs(name: str, result: DataFrame, jvm_plan: Any, plan_json: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """``{"udfs": {result expression id: PickledFunction}}`` for every PythonUDF of ``jvm_plan``
    (nothing under Spark Connect, where ``jvm_plan`` is None); ``plan_json`` is that plan's JSON
    when the caller has already parsed it (else it is read here)."""
    if jvm_plan is None:
        return {}

    def items(seq: Any) -> list[Any]:
        return [seq.apply(i) for i in range(seq.size())]

    # Walking every expression over Py4J costs a round trip each (seconds per query on the
    # experiments' plans). The plan's JSON, one call, lists its nodes in pre-order, each with its
    # own expressions (children are separate entries): only the nodes whose entry names a
    # PythonUDF are walked, but for synthetic operators' filters. An entry that does not match its
    # node (class name) is walked anyway.
    entries = plan_json if plan_json is not None else json.loads(jvm_plan.toJSON())
    has_udf = ["PythonUDF" in json.dumps(e) and not _is_synthetic(e) for e in entries]
    if not any(has_udf):
        return {}
    found: dict[int, PickledFunction] = {}
    nodes = [jvm_plan]
    position = 0
    while nodes:
        node = nodes.pop()
        entry = entries[position] if position < len(entries) else None
        udf_here = has_udf[position] if position < len(entries) else True
        position += 1
        children = items(node.children())
        nodes.extend(reversed(children))  # pre-order, as the JSON lists them
        if (
            entry is not None
            and entry.get("class") == str(node.getClass().getName())
            and entry.get("num-children") == len(children)
            and not udf_here
        ):
            continue
        exprs = items(node.expressions())
        while exprs:
            e = exprs.pop()
            if e.getClass().getSimpleName() == "PythonUDF":
                udf = str(e.name())
                try:
                    found[int(e.resultId().id())] = PickledFunction(_command_bytes(e.func()), udf)
                except Exception as exc:  # noqa: BLE001 - named in the error below
                    raise UnsupportedTransform(
                        name, f"UDF {udf!r} whose function sparkqos cannot load", f"{type(exc).__name__}: {exc}"
                    ) from exc
            exprs.extend(items(e.children()))
    if not found:
        return {}
    check_worker_settings(name, result)
    return {"udfs": found}


def schema_parser(name: str, result: DataFrame, jvm_plan: Any, plan_json: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """``{"parse_schema": parse}`` when the plan holds a ``transformWithStateInPandas``: ``parse``
    reads a state schema as its processor's ``init`` declares it (a DDL string or a
    ``StructType``) into the plan JSON's form of the type, for the compiler, which reads ``init``
    as Spark's driver does (nothing under Spark Connect, where ``jvm_plan`` is None)."""
    if jvm_plan is None:
        return {}
    entries = plan_json if plan_json is not None else json.loads(jvm_plan.toJSON())
    if not any(str(e.get("class", "")).endswith(".TransformWithStateInPySpark") for e in entries):
        return {}
    session = result.sparkSession

    def parse(schema: Any) -> Any:
        if isinstance(schema, str):
            schema = session._parse_ddl(schema)
        return json.loads(schema.json())

    return {"parse_schema": parse}
