"""Where each part of a query runs: natively (sparkqos's operators, scheduled) or in Spark.

A query's stateless, row-wise part directly over the input — its Projects, Filters, Generates
(``explode``) and pass-through nodes up to the first other operator — may hold functions sparkqos
has no operator for (``from_json``, regular expressions, dates, UDFs…). Under placement
``"auto"`` such a part, whole, is evaluated **by Spark inside the micro-batch** and its rows enter
the queue of the first native operator above it; a part sparkqos compiles runs natively.
``"native"`` never hands a part to Spark (what cannot compile is refused); ``"spark"`` hands
every such part to Spark. Above a stateful operator nothing goes to Spark: an unsupported
function there is refused by the compiler, naming the query and the function.

The compiler finds the parts (:func:`row_wise_chains`), decides (:func:`place`), and asks the
session side (a ``stager``, :mod:`sparkqos.spark.spark_part`) for the Arrow schema of each part's
output; the node at the part's top becomes a ``__spark_part__`` node whose relation is a stream of
its own (:class:`SparkPart`), fed by the session side each trigger.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from sparkqos.compile.nodes import Node, parse_expr
from sparkqos.compile.words import STEP_WORDS, in_user_words
from sparkqos.errors import PlacementError, UnsupportedTransform, check_choice

__all__ = ["PLACEMENTS", "SPARK_PART", "SparkPart", "check_placement", "row_wise_chains"]

#: The placements a user may ask for.
PLACEMENTS = ("auto", "native", "spark")
#: Class of the node that stands for a part Spark evaluates.
SPARK_PART = "__spark_part__"
#: Row-wise nodes only Spark runs: a Python function over each partition's batches of rows
#: (``mapInPandas``, ``mapInArrow``), stateless, so Spark runs it on each micro-batch as a
#: streaming query would. Their output columns are new: none carries an input column on.
MAP_IN = ("MapInPandas", "MapInArrow")
#: Plan nodes that keep rows one by one (or multiply them) without state.
ROW_WISE = {
    "Project",
    "Filter",
    "Generate",
    "SubqueryAlias",
    "Repartition",
    "RepartitionByExpression",
    "EventTimeWatermark",
    *MAP_IN,
}
#: Expression fields of the row-wise nodes.
_EXPRESSION_FIELDS = ("condition", "projectList", "generator")

#: ``stager(query, pos, source_pos) -> (schema, recipe)``: the Arrow schema of the output of the
#: node at JSON position ``pos`` of ``query``'s plan when Spark evaluates it over the input whose
#: plan starts at ``source_pos``, and the recipe the session side evaluates it by each trigger.
Stager = Callable[[str, int, int], tuple[pa.Schema, Any]]


def check_placement(placement: Any) -> str:
    """``placement`` if it is one of :data:`PLACEMENTS`, else :class:`PlacementError`."""
    return check_choice("placement", placement, PLACEMENTS, error=PlacementError)


@dataclass(frozen=True)
class SparkPart:
    """A query's part that Spark evaluates: the stream its rows enter, where it sits in the
    query's plan JSON, what it computes (``steps`` top down, ``functions`` Spark computes that
    sparkqos has no operator for) and why it runs in Spark, its output schema (unique names, the
    user's columns) and ``carried``: input column → the part's column passing it on unchanged
    (how a trigger finds each row's event time)."""

    query: str
    stream: str
    pos: int
    source_pos: int
    steps: tuple[str, ...]
    functions: tuple[str, ...]
    reason: str
    schema: pa.Schema
    carried: tuple[tuple[str, str], ...]
    klass: str | None = None
    #: How the session side evaluates it (opaque here; :mod:`sparkqos.spark.spark_part`).
    recipe: Any = field(default=None, compare=False, repr=False)

    def describe(self) -> str:
        """One line for explain(): the steps in the order the query applies them, as PySpark
        names them, the functions Spark computes and why the part is Spark's."""
        flow = " → ".join(["input", *(STEP_WORDS.get(s, s) for s in reversed(self.steps))])
        fns = f", computing {', '.join(self.functions)}" if self.functions else ""
        return f"{flow}, evaluated by Spark in the micro-batch{fns} ({self.reason})"


def _synthetic(node: Node, marker: str) -> bool:
    cond = node.fields.get("condition")
    return bool(cond) and marker in str(cond)


def _row_wise(node: Node, marker: str) -> bool:
    return node.cls in ROW_WISE and len(node.children) == 1 and not (node.cls == "Filter" and _synthetic(node, marker))


def _chain(node: Node, marker: str) -> list[Node] | None:
    """``node`` and the row-wise nodes under it, top down, when they reach the input; else None."""
    out: list[Node] = []
    n = node
    while _row_wise(n, marker):
        out.append(n)
        n = n.children[0]
    return out if out and n.cls == "__source__" else None


def row_wise_chains(root: Node, inputs: dict[str, Callable[[Node], list[Node]]], marker: str) -> Iterator[list[Node]]:
    """Every maximal chain of row-wise nodes directly over the input, top down (each ends just
    above a ``__source__`` node). ``inputs`` is the compiler's INPUTS table: below a node it names,
    only the nodes it returns are relations."""
    todo = [root]
    while todo:
        n = todo.pop()
        chain = _chain(n, marker)
        if chain is not None:
            yield chain
            continue
        below = inputs.get(n.cls)
        todo.extend(n.children if below is None else below(n))


def _expressions(node: Node) -> Iterator[Node]:
    for key in _EXPRESSION_FIELDS:
        value = node.fields.get(key)
        if not value:
            continue
        trees = value if isinstance(value[0], list) else [value]
        for t in trees:
            todo = [parse_expr(t)]
            while todo:
                e = todo.pop()
                yield e
                todo.extend(e.children)


def spark_functions(chain: list[Node], native: set[str], names: dict[str, str]) -> tuple[str, ...]:
    """The functions of ``chain`` without a native mapping, as users write them (UDFs by name)."""
    found: list[str] = []
    for node in reversed(chain):
        if node.cls in MAP_IN:
            fn = (node.fields.get("functionExpr") or [{}])[0].get("name")
            found.append(f"{STEP_WORDS[node.cls]}({fn})" if fn else STEP_WORDS[node.cls])
        for e in _expressions(node):
            if e.cls in native and e.cls != "PythonUDF":  # a UDF is named: it is what may raise
                continue
            name = f"udf {e.fields.get('name')!r}" if e.cls == "PythonUDF" else names.get(e.cls, e.cls)
            if name not in found:
                found.append(name)
    return tuple(found)


def output_attrs(node: Node, source: list[tuple[int | None, str]]) -> list[tuple[int | None, str]]:
    """(expression id, name) of each output column of a row-wise node (``source``: the input's)."""
    if node.cls == "__source__":
        return source
    if node.cls == "Project":
        out = []
        for item in node.fields["projectList"]:
            top = parse_expr(item)
            out.append((top.fields["exprId"]["id"], top.fields["name"]))
        return out
    if node.cls in MAP_IN:
        return [(a[0]["exprId"]["id"], a[0]["name"]) for a in node.fields["output"]]
    below = output_attrs(node.children[0], source)
    if node.cls == "Generate":
        dropped = set(node.fields.get("unrequiredChildIndex") or [])
        kept = [a for i, a in enumerate(below) if i not in dropped]
        return kept + [
            (parse_expr(g).fields["exprId"]["id"], parse_expr(g).fields["name"]) for g in node.fields["generatorOutput"]
        ]
    return below


def unique_names(names: list[str], ids: list[int | None]) -> list[str]:
    """Column names made unique as the compiler does inside a plan (``name_<exprId>``)."""
    out: list[str] = []
    for n, eid in zip(names, ids, strict=True):
        while n in out:
            n = f"{n}_{eid}"
        out.append(n)
    return out


def place(
    query: str,
    chain: list[Node],
    placement: str,
    native_error: Callable[[Node], UnsupportedTransform | None],
) -> str | None:
    """Why ``chain`` goes to Spark under ``placement`` (None: it runs natively).
    ``native_error(top)`` compiles the chain natively on a scratch compiler: the error, or None."""
    if placement == "native":
        return None
    error = native_error(chain[0])
    if error is not None:
        return in_user_words(error)
    if placement == "spark":
        return 'placement="spark" hands it to Spark'
    return None
