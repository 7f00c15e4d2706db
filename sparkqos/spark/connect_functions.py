"""Spark functions in a Connect expression, as the analyzer writes them: the function table of
:mod:`sparkqos.spark.connect_plan`, whose translator each function here takes as ``tr``.

:data:`FUNCTIONS` maps each Connect function name sparkqos places to the function writing its
analyzed-plan JSON nodes from its translated arguments, with the analyzer's implicit casts made
explicit (numbers to the wider type, ``/`` on doubles) and the result type checked against the
server's. A function whose arguments do not fit (their number, their types) returns None: the
call is written as a node of its own name, which :mod:`sparkqos.compile.spark_plan` rejects
naming it. The type rules (:func:`common`, :func:`operand_type`, :func:`check`) are the
translator's too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import pyspark.sql.connect.proto as proto

from sparkqos.executor.expressions.hashes import SPARK_SEED
from sparkqos.spark.connect_relations import PKG
from sparkqos.spark.connect_relations import literal as _literal

__all__ = ["FUNCTIONS", "NUMERIC", "check", "common", "literal_node", "operand_type", "to"]

NUMERIC = ("byte", "short", "integer", "long", "float", "double")

#: Connect function names → (Spark expression class, how operands are made one type).
_BINARY = {
    "==": ("EqualTo", "common"),
    "<": ("LessThan", "common"),
    "<=": ("LessThanOrEqual", "common"),
    ">": ("GreaterThan", "common"),
    ">=": ("GreaterThanOrEqual", "common"),
    "<=>": ("EqualNullSafe", "common"),
    "+": ("Add", "common"),
    "-": ("Subtract", "common"),
    "*": ("Multiply", "common"),
    "%": ("Remainder", "common"),
    "/": ("Divide", "double"),
    "and": ("And", "boolean"),
    "or": ("Or", "boolean"),
}
_UNARY = {
    "not": ("Not", "boolean"),
    "negative": ("UnaryMinus", None),
    "isNull": ("IsNull", None),
    "isNotNull": ("IsNotNull", None),
    "isnull": ("IsNull", None),
    "isnotnull": ("IsNotNull", None),
    "abs": ("Abs", None),
    "isnan": ("IsNaN", "double"),
    "lower": ("Lower", None),
    "upper": ("Upper", None),
}
_MATCHES = {
    "contains": "Contains",
    "startsWith": "StartsWith",
    "startswith": "StartsWith",
    "endsWith": "EndsWith",
    "endswith": "EndsWith",
    "like": "Like",
}
_VARIADIC = {"coalesce": "Coalesce", "greatest": "Greatest", "least": "Least"}

#: A translated argument: (JSON nodes, type).
Arg = tuple[list[Any], Any]
#: What a function of the table returns: (JSON nodes, type), or None when its arguments do not fit.
Written = tuple[list[Any], Any] | None


# -- the type rules ----------------------------------------------------------------------------------
def operand_type(tr: Any, fn: str, rule: str, at: str, bt: str) -> str:
    """The type both operands of ``fn`` are cast to under ``rule`` (``double``, ``boolean`` or
    ``common``)."""
    if rule == "double":
        if at not in (*NUMERIC, "void") or bt not in (*NUMERIC, "void"):
            raise tr.unsupported(f"Spark operator {fn!r} on {at} and {bt}")
        return "double"
    if rule == "boolean":
        return "boolean"
    return common(tr, [at, bt], fn)


def common(tr: Any, types: list[str], fn: str) -> str:
    """The type Spark's analyzer casts ``types`` to: the wider number, or the one type."""
    if any(not isinstance(t, str) for t in types):
        raise tr.unsupported(f"{fn!r} on a struct")
    known = sorted({t for t in types if t != "void"}, key=lambda t: NUMERIC.index(t) if t in NUMERIC else -1)
    if not known:
        return "void"
    if len(known) == 1:
        return known[0]
    if any(t.startswith("decimal") for t in known) and all(t in ("float", "double") or t.startswith("decimal") for t in known):
        if any(t in ("float", "double") for t in known):
            return "double"  # Spark's rule: a decimal beside a float or double becomes a double
    if all(t in NUMERIC for t in known):
        return known[-1]
    raise tr.unsupported(f"Spark's implicit casts between {' and '.join(known)} (in {fn!r})", "cast explicitly")


def to(nodes: list[Any], have: str, want: str) -> list[Any]:
    """``nodes`` of type ``have`` cast to ``want`` (as they are when nothing changes)."""
    if have == want or want == "void":
        return nodes
    return [{"class": "Cast", "num-children": 1, "dataType": want}, *nodes]


def check(tr: Any, ours: str, spark_t: str, what: str) -> str:
    """``ours``, the type sparkqos gives ``what``, when it is the server's ``spark_t``; else refused."""
    if ours != spark_t:
        raise tr.unsupported("a result type sparkqos does not reproduce", f"{what!r}: Spark gives {spark_t}, sparkqos {ours}")
    return ours


def literal_node(tr: Any, lit: proto.Expression.Literal, spark_t: str) -> dict[str, Any]:
    """A Connect literal as the analyzer's ``Literal`` of type ``spark_t`` (a timestamp in the
    session's time zone, ``tr.time_zone``)."""
    kind = lit.WhichOneof("literal_type")
    node: dict[str, Any] = {"class": f"{PKG}.expressions.Literal", "num-children": 0, "dataType": spark_t}
    if kind == "null":
        node["value"] = None
    elif kind in ("byte", "short", "integer", "long", "string"):
        node["value"] = str(getattr(lit, kind))
    elif kind in ("float", "double"):
        node["value"] = repr(float(getattr(lit, kind)))
    elif kind == "boolean":
        node["value"] = "true" if lit.boolean else "false"
    elif kind == "decimal":
        node["value"] = lit.decimal.value
    elif kind in ("timestamp", "timestamp_ntz"):
        at = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=getattr(lit, kind))
        if kind == "timestamp":
            try:
                at = at.astimezone(ZoneInfo(tr.time_zone))
            except (ValueError, KeyError, ZoneInfoNotFoundError):
                raise tr.unsupported(f"a timestamp literal in session time zone {tr.time_zone!r}") from None
        node["value"] = at.replace(tzinfo=None).isoformat()
    else:
        raise tr.unsupported(f"a {spark_t} literal")
    return node


# -- the functions --------------------------------------------------------------------------------------
def _binary(tr: Any, fn: str, args: list[Arg], spark_t: Any) -> Written:
    if len(args) != 2:
        return None
    cls, rule = _BINARY[fn]
    (a, at), (b, bt) = args
    t = operand_type(tr, fn, rule, at, bt)
    out = t if cls in ("Add", "Subtract", "Multiply", "Remainder", "Divide") else "boolean"
    node = {"class": cls, "num-children": 2}
    return [node, *to(a, at, t), *to(b, bt, t)], check(tr, out, spark_t, fn)


def _not_equal(tr: Any, fn: str, args: list[Arg], spark_t: Any) -> Written:
    if len(args) != 2:
        return None
    (a, at), (b, bt) = args
    t = operand_type(tr, fn, "common", at, bt)
    eq = [{"class": "EqualTo", "num-children": 2}, *to(a, at, t), *to(b, bt, t)]
    return [{"class": "Not", "num-children": 1}, *eq], check(tr, "boolean", spark_t, fn)


def _unary(tr: Any, fn: str, args: list[Arg], spark_t: Any) -> Written:
    if len(args) != 1:
        return None
    cls, rule = _UNARY[fn]
    (a, at) = args[0]
    t = at if rule is None or (rule == "double" and at in ("float", "double")) else rule
    if rule == "double" and at not in (*NUMERIC, "void"):
        raise tr.unsupported(f"Spark function {fn!r} on a {at}")
    out = "boolean" if cls in ("Not", "IsNull", "IsNotNull", "IsNaN") else t
    return [{"class": cls, "num-children": 1}, *to(a, at, t)], check(tr, out, spark_t, fn)


def _round(tr: Any, fn: str, args: list[Arg], spark_t: Any) -> Written:
    if len(args) not in (1, 2):
        return None
    (a, at), *scale = args
    scale_nodes = scale[0][0] if scale else [_literal("0", "integer")]
    node = {"class": "BRound" if fn == "bround" else "Round", "num-children": 2}
    return [node, *a, *scale_nodes], check(tr, at, spark_t, fn)


def _struct(tr: Any, fn: str, args: list[Arg], spark_t: Any) -> Written:
    if not args or not isinstance(spark_t, dict):
        return None
    nodes = [{"class": "CreateNamedStruct", "num-children": 2 * len(args)}]
    for f, (a, _) in zip(spark_t["fields"], args, strict=True):
        nodes.extend([_literal(f["name"], "string"), *a])
    return nodes, spark_t


def _between(tr: Any, fn: str, args: list[Arg], spark_t: Any) -> Written:
    """Spark's replacement: x >= low AND x <= high."""
    if len(args) != 3:
        return None
    (x, xt), (lo, lt), (hi, ht) = args
    sides = []
    for cls, (b, bt) in (("GreaterThanOrEqual", (lo, lt)), ("LessThanOrEqual", (hi, ht))):
        t = common(tr, [xt, bt], fn)
        sides += [{"class": cls, "num-children": 2}, *to(x, xt, t), *to(b, bt, t)]
    return [{"class": "And", "num-children": 2}, *sides], check(tr, "boolean", spark_t, fn)


def _array(tr: Any, fn: str, args: list[Arg], spark_t: Any) -> Written:
    if not args:
        return None
    t = common(tr, [at for _, at in args], fn)
    return [{"class": "CreateArray", "num-children": len(args)}, *(n for a, at in args for n in to(a, at, t))], spark_t


def _split(tr: Any, fn: str, args: list[Arg], spark_t: Any) -> Written:
    if len(args) not in (2, 3) or not all(at in ("string", "integer") for _, at in args):
        return None
    limit = args[2][0] if len(args) == 3 else [_literal("-1", "integer")]
    return [{"class": "StringSplit", "num-children": 3}, *args[0][0], *args[1][0], *limit], spark_t


def _matches(tr: Any, fn: str, args: list[Arg], spark_t: Any) -> Written:
    if len(args) != 2:
        return None
    (a, at), (b, bt) = args
    if at != "string" or bt != "string":
        raise tr.unsupported(f"Spark function {fn!r} on {at} and {bt}")
    return [{"class": _MATCHES[fn], "num-children": 2, "escapeChar": "\\"}, *a, *b], check(tr, "boolean", spark_t, fn)


#: Hashes: of binary (a string cast to its UTF-8 bytes, as the analyzer does) → (class, result type).
_DIGESTS = {"md5": ("Md5", "string"), "sha1": ("Sha1", "string"), "crc32": ("Crc32", "long"), "sha2": ("Sha2", "string")}
#: Hashes of any number of columns, with Spark's seed → (class, result type).
_ROW_HASHES = {"xxhash64": ("XxHash64", "long"), "hash": ("Murmur3Hash", "integer")}


def _digest(tr: Any, fn: str, args: list[Arg], spark_t: Any) -> Written:
    if len(args) != (2 if fn == "sha2" else 1):
        return None
    (a, at), *bits = args
    if at not in ("string", "binary", "void") or any(bt != "integer" for _, bt in bits):
        raise tr.unsupported(f"Spark function {fn!r} on {' and '.join(t for _, t in args)}")
    cls, out = _DIGESTS[fn]
    nodes = [{"class": cls, "num-children": len(args)}, *to(a, at, "binary"), *(n for b, _ in bits for n in b)]
    return nodes, check(tr, out, spark_t, fn)


def _row_hash(tr: Any, fn: str, args: list[Arg], spark_t: Any) -> Written:
    if not args:
        return None
    cls, out = _ROW_HASHES[fn]
    nodes = [{"class": cls, "num-children": len(args), "seed": SPARK_SEED}, *(n for a, _ in args for n in a)]
    return nodes, check(tr, out, spark_t, fn)


def _variadic(tr: Any, fn: str, args: list[Arg], spark_t: Any) -> Written:
    """``in``, ``when`` (conditions and values alternate, an odd last one the otherwise) and the
    functions of any number of values: the values are cast to their common type."""
    if not args:
        return None
    if fn == "when":
        values = [args[i] for i in range(1, len(args), 2)] + ([args[-1]] if len(args) % 2 else [])
        for i in range(0, len(args) - 1, 2):
            if args[i][1] not in ("boolean", "void"):
                raise tr.unsupported(f"a when() condition of type {args[i][1]}")
    else:
        values = args
    t = common(tr, [vt for _, vt in values], fn)
    nodes: list[Any] = [{"class": {"in": "In", "when": "CaseWhen"}.get(fn) or _VARIADIC[fn], "num-children": len(args)}]
    for i, (a, at) in enumerate(args):
        is_value = fn != "when" or i % 2 == 1 or (len(args) % 2 == 1 and i == len(args) - 1)
        nodes.extend(to(a, at, t if is_value else "boolean"))
    return nodes, check(tr, "boolean" if fn == "in" else t, spark_t, fn)


#: The Connect functions placed (their arguments are translated; others stay whole, unsupported)
#: → the function writing a call of it.
FUNCTIONS: Mapping[str, Callable[[Any, str, list[Arg], Any], Written]] = MappingProxyType(
    {
        **dict.fromkeys(_BINARY, _binary),
        "!=": _not_equal,
        **dict.fromkeys(_UNARY, _unary),
        **dict.fromkeys(_MATCHES, _matches),
        **dict.fromkeys(("in", "when", *_VARIADIC), _variadic),
        "round": _round,
        "bround": _round,
        "struct": _struct,
        "array": _array,
        "split": _split,
        "between": _between,
        **dict.fromkeys(_DIGESTS, _digest),
        **dict.fromkeys(_ROW_HASHES, _row_hash),
    }
)
