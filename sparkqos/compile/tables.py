"""The compiler's handler tables, built here in one place: which module maps which Spark plan
node and expression beyond the ones :mod:`sparkqos.compile.spark_plan` maps itself.

Every handler works on :mod:`sparkqos.compile.nodes`' public types and calls back into the
compiler it is given (``qc``), so these modules never import the compiler and it imports them
only through this table.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from sparkqos.compile import group_state, hashes, joins, keyed, nested, numeric, sessions, stateful, udf

#: Time windows a groupBy may group by, as users write them → the reader of the analyzer's
#: rewrite of each under an Aggregate (``reader(node) -> stateful.TimeWindow | None``).
WINDOWS: dict[str, stateful.WindowReader] = {
    "window": stateful.time_window,
    "session_window": sessions.session_window,
}
#: Further plan nodes: Spark class name → ``handler(compiler, node) -> Rel``.
RELATIONS: dict[str, Callable[[Any, Any], Any]] = {
    "Aggregate": functools.partial(stateful.aggregate, windows=WINDOWS),
    "Join": joins.join,
    "Window": keyed.window,
    "Deduplicate": keyed.deduplicate,
    "DeduplicateWithinWatermark": keyed.deduplicate,
    "Generate": nested.generate,
    "FlatMapGroupsInPandasWithState": group_state.apply_in_pandas_with_state,
    "TransformWithStateInPySpark": group_state.transform_with_state_in_pandas,
}
#: For a handler of RELATIONS that maps some nodes under its own as part of itself (an Aggregate
#: and the analyzer's rewrite of its time window): Spark class name → ``inputs(node)``, the nodes below
#: that are relations again, which the operation check visits instead of the node's children.
INPUTS: dict[str, Callable[[Any], list[Any]]] = {
    "Aggregate": functools.partial(stateful.aggregate_inputs, windows=WINDOWS),
    "Join": joins.join_inputs,
    "TransformWithStateInPySpark": group_state.transform_with_state_inputs,
}
#: Further expressions, looked up before the ones the compiler maps itself: Spark class name →
#: ``handler(compiler, node, rel) -> Expr``.
EXPRESSIONS: dict[str, Callable[[Any, Any, Any], Any]] = {
    "PythonUDF": udf.python_udf,
    "GetStructField": nested.get_struct_field,
    "CreateNamedStruct": nested.create_named_struct,
    "CreateArray": nested.create_array,
    "StringSplit": nested.string_split,
    "Round": numeric.round_,
    "BRound": numeric.round_,
    "Cast": numeric.cast,
    **dict.fromkeys(("Add", "Subtract", "Multiply", "Divide", "Remainder", "IntegralDivide"), numeric.arithmetic),
    **dict.fromkeys(("Md5", "Sha1", "Crc32"), hashes.digest),
    "Sha2": hashes.sha2,
    **dict.fromkeys(("XxHash64", "Murmur3Hash"), hashes.row_hash),
}
