"""Structs, arrays and ``explode`` in a transform's plan → the executor's nested expressions
(:mod:`sparkqos.executor.expressions.nested`) and its :class:`~sparkqos.executor.operators.Generate`.

``F.col("window.start")`` after a windowed aggregation, ``F.col("s.a")`` and
``F.col("s").getField("a")`` reach the analyzer as ``GetStructField`` (an ordinal and a name);
``F.struct(...)`` as ``CreateNamedStruct`` (name literals and values); ``F.array(...)`` as
``CreateArray``; ``F.split(s, ",")`` as ``StringSplit`` with a literal pattern and limit.
``F.explode`` / ``explode_outer`` / ``posexplode`` / ``posexplode_outer`` in a select become a
``Generate`` node: the generator over an array, the child's columns it keeps and the new
attributes. Refused, naming them: a ``split`` whose pattern is a regular expression or not a
literal, generators over maps, and other generators (``inline``, ``stack``, ``json_tuple``, UDTFs).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from sparkqos.compile.nodes import Node, Rel, parse_expr
from sparkqos.executor.expressions.nested import REGEX_META, GetField, MakeArray, MakeStruct, Split
from sparkqos.executor.operators import Generate

#: Spark's generators sparkqos runs: class name → (with a position column, as the SQL name).
GENERATORS = {"Explode": (False, "explode"), "PosExplode": (True, "posexplode")}


def nullable(node: Node) -> bool:
    """Whether Spark's plan says ``node`` may be null (unsure: yes; the result-type check of the
    compiler refuses a struct or array type that differs from Spark's)."""
    while node.cls == "Alias" and node.children:
        node = node.children[0]
    if node.cls == "Literal":
        return node.fields.get("value") is None
    if node.cls == "AttributeReference":
        return bool(node.fields.get("nullable", True))
    return True


def get_struct_field(qc: Any, node: Node, rel: Rel) -> GetField:
    child = qc.expr(node.children[0], rel)
    t = child.check(rel.schema, qc.query)
    ordinal = int(node.fields["ordinal"])
    name = node.fields.get("name") or (t.field(ordinal).name if pa.types.is_struct(t) else None)
    return GetField(child, ordinal, name)


def create_named_struct(qc: Any, node: Node, rel: Rel) -> MakeStruct:
    kids = node.children
    names = []
    for k in kids[0::2]:
        if k.cls != "Literal" or k.fields.get("value") is None:
            raise qc.unsupported("Spark function 'named_struct' with a field name that is not a literal")
        names.append(k.fields["value"])
    values = kids[1::2]
    return MakeStruct(names, [qc.expr(v, rel) for v in values], [nullable(v) for v in values])


def create_array(qc: Any, node: Node, rel: Rel) -> MakeArray:
    if not node.children:
        raise qc.unsupported("Spark function 'array' without values")
    return MakeArray([qc.expr(k, rel) for k in node.children], any(nullable(k) for k in node.children))


def string_split(qc: Any, node: Node, rel: Rel) -> Split:
    text, pattern, limit = node.children
    value = pattern.fields.get("value") if pattern.cls == "Literal" else None
    if value is None or not value or REGEX_META & set(value):
        shown = "not a literal" if pattern.cls != "Literal" else repr(value)
        raise qc.unsupported(
            f"Spark function 'split' with pattern {shown}",
            "sparkqos splits natively on a plain, non-empty string (no regular-expression metacharacters "
            f"{''.join(sorted(REGEX_META))}); escape-free patterns only",
        )
    n = limit.fields.get("value") if limit.cls == "Literal" else None
    if n is None:
        raise qc.unsupported("Spark function 'split' with a limit that is not a literal")
    return Split(qc.expr(text, rel), value, int(n))


def generate(qc: Any, node: Node) -> Rel:
    """``Generate`` (``F.explode`` & co. in a select) → a Generate operator."""
    if "generator" not in node.fields:  # a bare node of the Spark Connect reader
        raise qc.unsupported("Spark operation 'Generate'", "a generator sparkqos does not read under Spark Connect")
    child = qc.relation(node.children[0])
    gen = parse_expr(node.fields["generator"])
    found = GENERATORS.get(gen.cls)
    if found is None:
        name = {"Inline": "inline", "Stack": "stack", "JsonTuple": "json_tuple"}.get(gen.cls, gen.cls)
        raise qc.unsupported(f"generator {name!r}", "sparkqos runs explode, explode_outer, posexplode and posexplode_outer")
    with_pos, sql = found
    outer = bool(node.fields.get("outer"))
    array = qc.expr(gen.children[0], child)
    t = array.check(child.schema, qc.query)
    if not pa.types.is_list(t):
        raise qc.unsupported(f"{sql} of a {t}", "sparkqos explodes arrays, not maps")
    outputs = [parse_expr(o) for o in node.fields["generatorOutput"]]
    names = [o.fields["name"] for o in outputs]
    dropped = set(node.fields.get("unrequiredChildIndex") or [])
    kept = [a for i, a in enumerate(child.attrs) if i not in dropped]
    taken = {n for _, n in kept}
    out_names = []
    for n in names:
        while n in taken:  # the child holds a column of that name: the select above renames it back
            n += "_gen"
        taken.add(n)
        out_names.append(n)
    op = Generate(array, [n for _, n in kept], out_names[-1], out_names[0] if with_pos else None, outer)
    attrs = kept + [(o.fields["exprId"]["id"], n) for o, n in zip(outputs, out_names, strict=True)]
    return qc.add(sql + ("_outer" if outer else ""), op, [child], attrs)
