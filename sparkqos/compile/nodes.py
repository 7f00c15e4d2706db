"""The nodes of Spark's analyzed plans as the compiler reads them (parsed JSON, no pyspark):
:class:`Node` trees of plans and expressions, :class:`Rel` for a compiled relation, the parsers,
and the Spark type names sparkqos computes on. Every handler of :mod:`sparkqos.compile.tables`
works on these."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from sparkqos.errors import PlanError

#: Name of the stream the input DataFrame feeds.
DEFAULT_STREAM = "input"

#: Field of an expression node the session side could not translate (Spark Connect): the
#: operation and detail :class:`~sparkqos.errors.UnsupportedTransform` names when it must run natively.
UNMAPPED = "sparkqosUnsupported"

#: Start of the marker literal :func:`sparkqos.spark.synthetic.synthetic` puts in a ``where``
#: (followed by the operator's parameters as JSON): that Filter runs as the executor's Synthetic.
SYNTHETIC_MARKER = "sparkqos.synthetic:"

SPARK_TYPES = {
    "byte": pa.int8(),
    "short": pa.int16(),
    "integer": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "binary": pa.binary(),
    "boolean": pa.bool_(),
    "void": pa.null(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us"),
}


_DECIMAL = re.compile(r"decimal\((\d+),\s*(\d+)\)")


def spark_type(name: Any) -> pa.DataType | None:
    """The Arrow type of a Spark type name of the plan JSON (None: not one sparkqos computes on)."""
    if not isinstance(name, str):
        return None
    found = _DECIMAL.fullmatch(name)
    if found:
        return pa.decimal128(int(found.group(1)), int(found.group(2)))
    return SPARK_TYPES.get(name)


@dataclass
class Node:
    """One node of a plan or expression tree: its short class name, its JSON fields and children."""

    cls: str
    fields: dict[str, Any]
    children: list[Node] = field(default_factory=list)
    #: Position of a plan node in its query's JSON (pre-order), -1 for expressions and the input:
    #: how the session side finds the same node in Spark's own plan.
    pos: int = -1


def short_class(cls: str) -> str:
    return cls.rsplit(".", 1)[-1]


def canonical(nodes: Sequence[dict[str, Any]]) -> tuple[str, list[int]]:
    """``nodes`` as text with expression ids numbered by first appearance, and those ids in
    that order: two copies of one plan give the same text even when Spark renumbered one."""
    order: dict[int, int] = {}

    def walk(x: Any) -> Any:
        if isinstance(x, dict):
            if short_class(str(x.get("product-class", ""))) == "ExprId":
                return {"exprId": order.setdefault(x["id"], len(order))}
            return {k: walk(v) for k, v in x.items()}
        if isinstance(x, list):
            return [walk(v) for v in x]
        return x

    text = json.dumps(walk(list(nodes)), sort_keys=True)
    return text, list(order)


@dataclass
class Source:
    """The input DataFrame's plan, as it appears in a query's plan; ``ids`` are its output
    attributes' expression ids in that copy."""

    ids: list[int]


def watermarks_through_aliases(watermarks: dict[int, float], plan: Sequence[dict[str, Any]]) -> dict[int, float]:
    """``watermarks`` (delay in seconds by the event-time column's expression id) with every alias
    of a watermarked column in ``plan`` (Spark's analyzed plan as JSON) added under the alias's
    id: Spark carries the watermark through ``select(col("ts").alias("t"))``, so an operator above
    reads it on ``t``.

    >>> attr = {"class": "x.AttributeReference", "num-children": 0, "name": "ts", "exprId": {"id": 3}}
    >>> alias = {"class": "x.Alias", "num-children": 1, "child": 0, "name": "t", "exprId": {"id": 9}}
    >>> watermarks_through_aliases({3: 2.0}, [{"class": "x.Project", "projectList": [[alias, attr]]}])
    {3: 2.0, 9: 2.0}
    """
    out = dict(watermarks)
    aliases = [
        (e[0]["exprId"]["id"], e[1]["exprId"]["id"])
        for node in plan
        for e in node.get("projectList") or ()
        if len(e) == 2
        and short_class(e[0].get("class", "")) == "Alias"
        and short_class(e[1].get("class", "")) == "AttributeReference"
    ]
    grew = bool(out)
    while grew:  # an alias of an alias: until nothing is added
        grew = False
        for alias, of in aliases:
            if of in out and alias not in out:
                out[alias] = out[of]
                grew = True
    return out


def parse_plan(nodes: Sequence[dict[str, Any]], source: Sequence[dict[str, Any]], source_ids: Sequence[int]) -> Node:
    """The plan tree of ``nodes``, with every copy of ``source`` replaced by a ``__source__`` node."""
    n = len(source)
    src_text, src_order = canonical(source)
    position = {eid: i for i, eid in enumerate(src_order)}
    try:
        out_positions = [position[i] for i in source_ids]
    except KeyError:  # the input's output ids do not appear in its plan: compare by position only
        out_positions = []
    pos = 0

    def build() -> Node:
        nonlocal pos
        if nodes[pos]["class"] == source[0]["class"] and pos + n <= len(nodes):
            text, order = canonical(nodes[pos : pos + n])
            if text == src_text:
                pos += n
                return Node("__source__", {"source": Source([order[p] for p in out_positions])}, [], pos - n)
        d = nodes[pos]
        at = pos
        pos += 1
        kids = [build() for _ in range(int(d.get("num-children", 0)))]
        return Node(short_class(d["class"]), d, kids, at)

    root = build()
    if pos != len(nodes):
        raise PlanError(f"malformed plan JSON: {len(nodes) - pos} node(s) after the root")
    return root


def parse_expr(nodes: Sequence[dict[str, Any]]) -> Node:
    pos = 0

    def build() -> Node:
        nonlocal pos
        d = nodes[pos]
        pos += 1
        kids = [build() for _ in range(int(d.get("num-children", 0)))]
        return Node(short_class(d["class"]), d, kids)

    return build()


@dataclass
class Rel:
    """A compiled relation: its operator (or the stream), Arrow schema with the executor's
    columns, and output attributes as (expression id, column name)."""

    name: str
    schema: pa.Schema
    attrs: list[tuple[int, str]]
