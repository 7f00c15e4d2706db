"""Spark's ``Join`` in a transform's plan → the executor's StaticJoin or IntervalJoin.

Two shapes are mapped, one sparkqos operator per Spark Join:

* **A join with a stored relation** (Chain §5): ``stream_df.join(static_df, on=keys, how="inner"
  | "left" | "left_outer")`` or on an equality condition ``stream.k == static.k`` (several joined
  by ``&``); also ``static_df.join(stream_df, ..., "inner" | "right")``, whose output puts the
  static columns first. The static side is any finite DataFrame; its rows come from the plan context
  (:mod:`sparkqos.spark.static_tables`, read once now) and travel in the compiled plan inside a
  :class:`~sparkqos.executor.operators.StaticJoin`. A ``using`` join (``on="k"``) arrives as the
  Join under a Project keeping one copy of the keys: that Project stays a select.
* **A stream–stream join on an event-time range** (Chain §5): both sides derived from the input
  stream, joined ``inner`` on equal keys and a range of one side's event time around the
  other's, e.g. ``(a.id == b.id) & (b.t2 >= a.t - F.expr("INTERVAL 2 SECONDS")) & (b.t2 <= a.t +
  F.expr("INTERVAL 2 SECONDS"))`` or ``F.expr("id = id2 AND t2 BETWEEN t - INTERVAL 2 SECONDS
  AND t + INTERVAL 2 SECONDS")`` → :class:`~sparkqos.executor.operators.IntervalJoin`, whose
  watermark comes from the sides' ``withWatermark`` (on a stream; a finite DataFrame has none).

How Spark's analyzer writes these (what this module reads): the condition is a tree of ``And``
over ``EqualTo(left key, right key)`` and comparisons; ``b.t2 >= a.t - INTERVAL 2 SECONDS`` is
``GreaterThanOrEqual(t2, Cast(timestamp, DatetimeSub(t, 2000000 µs)))``, the DatetimeSub standing
for its child ``TimestampAddInterval(t, -(2000000))``, and ``a.t + INTERVAL ...`` a
``TimestampAddInterval``; ``BETWEEN`` (from ``F.expr``) stays a ``Between`` node with its
``input``/``lower``/``upper`` as fields. The right branch of a self-join reads the input under
new expression ids (found as a copy of the input, see spark_plan). On a finite DataFrame Spark
drops ``withWatermark`` from the plan; on a stream the ``EventTimeWatermark`` nodes stay, and
their delays come from the plan context. A ``using`` join (``on=["k"]``) is the Join under a
Project that keeps the stream's copy of the keys.

With a static side, the condition may also hold conditions on one side's columns alone (``(s.k ==
t.k) & (s.x > 1) & (t.active)``), as Spark's optimizer would push them down: the static side's
filter its table; the stream side's make a failing row's keys null, so it matches nothing (an
inner join drops it, a left join keeps it with nulls, as Spark does).

Everything else raises :class:`~sparkqos.errors.UnsupportedTransform` naming it: right and full
outer, semi and anti joins, cross joins, conditions across both sides other than equalities with a static side, a static
side that streams, outer stream–stream joins and stream–stream joins without a bounded
event-time range.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from sparkqos.compile.nodes import Node, Rel, parse_expr
from sparkqos.executor.expressions import CaseWhen, Col, Expr, Logical
from sparkqos.executor.operators import IntervalJoin, Project, StaticJoin

#: Spark's join types (the ``joinType`` object's class) as users write them in ``how=``.
_HOW = {
    "Inner": "inner",
    "LeftOuter": "left",
    "RightOuter": "right outer",
    "FullOuter": "full outer",
    "LeftSemi": "left semi",
    "LeftAnti": "left anti",
    "Cross": "cross",
}
_FLIP = {">=": "<=", ">": "<", "<=": ">=", "<": ">"}
_RANGE = {"GreaterThanOrEqual": ">=", "GreaterThan": ">", "LessThanOrEqual": "<=", "LessThan": "<"}


def condition_key(condition: Sequence[Mapping[str, Any]]) -> str:
    """The key a join's sides are filed under in the plan context (``join_sides``, see
    sparkqos.spark.static_tables): its condition's JSON, as the plan JSON has it."""
    return json.dumps(list(condition), sort_keys=True)


def _reads_input(node: Node) -> bool:
    return node.cls == "__source__" or any(_reads_input(c) for c in node.children)


def join_inputs(node: Node) -> list[Node]:
    """The sides of a join that the compiler maps (those reading the input stream)."""
    return [c for c in node.children if _reads_input(c)]


def _conjuncts(node: Node) -> list[Node]:
    if node.cls == "And":
        return _conjuncts(node.children[0]) + _conjuncts(node.children[1])
    return [node]


def _refs(node: Node) -> set[int]:
    out = set()
    todo = [node]
    while todo:
        n = todo.pop()
        if n.cls == "AttributeReference":
            out.add(n.fields["exprId"]["id"])
        todo.extend(n.children)
        for key in ("start", "interval", "input", "lower", "upper"):  # runtime-replaceable fields
            if isinstance(n.fields.get(key), list) and n.fields[key] and isinstance(n.fields[key][0], dict):
                todo.append(parse_expr(n.fields[key]))
    return out


def _side(node: Node, left: set[int], right: set[int]) -> int | None:
    """0 when ``node`` reads only left columns, 1 only right ones, None otherwise."""
    refs = _refs(node)
    if refs and refs <= left:
        return 0
    if refs and refs <= right:
        return 1
    return None


def _join_type(qc: Any, node: Node) -> str:
    jt = node.fields.get("joinType")
    name = jt.get("object", "") if isinstance(jt, dict) else str(jt)
    short = name.rsplit(".", 1)[-1].rstrip("$")
    how = _HOW.get(short)
    if how is None:
        raise qc.unsupported(f"a join of type {short!r}")
    return how


def _equalities(
    qc: Any, conjuncts: list[Node], left: set[int], right: set[int], what: str
) -> tuple[list[Node], list[Node], list[Node]]:
    """(left keys, right keys, the other conjuncts) of a join condition."""
    lkeys: list[Node] = []
    rkeys: list[Node] = []
    rest: list[Node] = []
    for c in conjuncts:
        if c.cls == "EqualNullSafe":
            raise qc.unsupported(f"{what} on a null-safe equality (<=>, eqNullSafe)")
        if c.cls == "EqualTo":
            a, b = (_side(k, left, right) for k in c.children)
            if (a, b) in ((0, 1), (1, 0)):
                lk, rk = c.children if a == 0 else c.children[::-1]
                lkeys.append(lk)
                rkeys.append(rk)
                continue
        rest.append(c)
    return lkeys, rkeys, rest


def join(qc: Any, node: Node) -> Rel:
    if "joinType" not in node.fields:  # Spark Connect writes the node without its fields
        raise qc.unsupported("Spark operation 'Join'", "join is not supported under Spark Connect yet")
    how = _join_type(qc, node)
    left, right = node.children
    streams = [_reads_input(left), _reads_input(right)]
    if streams == [True, True]:
        return _stream_join(qc, node, how)
    if streams == [False, False]:
        raise qc.unsupported("a join that does not read the input stream")
    return _static_join(qc, node, how, 0 if streams[0] else 1)


# -- a stream joined with a stored relation ------------------------------------------------------
def _unique(names: list[tuple[int, str]], taken: set[str]) -> list[str]:
    """Output names for ``names`` (expression id, name): their own, or ``name#id`` where another
    column already has it (Spark allows two; the executor's columns are found by name)."""
    out = []
    for eid, name in names:
        if name in taken:
            name = f"{name}#{eid}"
        taken.add(name)
        out.append(name)
    return out


def _static_join(qc: Any, node: Node, how: str, stream_side: int) -> Rel:
    """``stream_side``: 0 for ``stream.join(static)``, 1 for ``static.join(stream)`` (inner, or
    right outer: the stream's rows are kept, the static columns come first)."""
    kept = ("inner", "left") if stream_side == 0 else ("inner", "right outer")
    if how not in kept:
        side = "the stream on the left" if stream_side == 0 else "the stream on the right"
        raise qc.unsupported(
            f"a {how} join with a static DataFrame",
            f"with {side}, a join with a static DataFrame is {kept[0]} or {kept[1]}: only the stream's rows can be kept",
        )
    cond = node.fields.get("condition")
    if not cond:
        raise qc.unsupported("a join with a static DataFrame without a condition (a cross join)")
    sides = (qc.context.get("join_sides") or {}).get(condition_key(cond))
    if sides is None:
        raise qc.unsupported("a join with a static DataFrame", "its rows are read through classic pyspark only")
    static = sides[1 - stream_side]
    if static.streaming:
        raise qc.unsupported(
            "a join with a static DataFrame that is itself streaming",
            "the other side of a join is a finite DataFrame, or a branch of the same input stream",
        )
    stream_rel = qc.relation(node.children[stream_side])
    left_ids, static_ids = {a for a, _ in stream_rel.attrs}, set(static.ids)
    lkeys, rkeys, rest = _equalities(qc, _conjuncts(parse_expr(cond)), left_ids, static_ids, "a join with a static DataFrame")
    own = [c for c in rest if _side(c, left_ids, static_ids) == 0]
    theirs = [c for c in rest if _side(c, left_ids, static_ids) == 1]
    if len(own) + len(theirs) < len(rest) or not lkeys:
        raise qc.unsupported(
            "a join with a static DataFrame on a non-equality condition",
            "join on equal keys: on=['k', ...] or stream.k == static.k, combined with & and with conditions "
            "on one side's columns alone",
        )
    table = static.read()
    if table is None:
        raise qc.unsupported(
            f"a join with a static DataFrame of more than {static.max_rows} rows",
            f"filter or aggregate it first, or raise {static.limit_setting}",
        )
    names = _unique(list(zip(static.ids, static.names, strict=True)), {n for _, n in stream_rel.attrs})
    table = table.rename_columns(names)
    static_rel = Rel("__static__", table.schema, list(zip(static.ids, names, strict=True)))
    if theirs:  # a condition on the static side alone: its rows that fail it match nothing
        table = table.filter(_all(qc, theirs, static_rel).evaluate(table), null_selection_behavior="drop")
    stream_keys = [qc.expr(k, stream_rel) for k in lkeys]
    if own:  # on the stream's side alone: a row that fails it matches nothing (a null key), kept by a left join
        where = _all(qc, own, stream_rel)
        stream_keys = [CaseWhen([(where, k)], None, k.check(stream_rel.schema, "join")) for k in stream_keys]
    op = StaticJoin(
        table,
        stream_keys,
        [qc.expr(k, static_rel) for k in rkeys],
        "inner" if how == "inner" else "left",
        max_rows=static.max_rows,
        static_first=stream_side == 1,
    )
    attrs = static_rel.attrs + stream_rel.attrs if stream_side == 1 else stream_rel.attrs + static_rel.attrs
    return qc.add("join", op, [stream_rel], attrs)


def _all(qc: Any, conditions: list[Node], rel: Rel) -> Expr:
    """The executor's expression of ``conditions`` joined by AND, over ``rel``."""
    out = qc.expr(conditions[0], rel)
    for c in conditions[1:]:
        out = Logical("and", out, qc.expr(c, rel))
    return out


# -- two branches of the stream joined on an event-time range --------------------------------------
def _interval(node: Node) -> int | None:
    """A day-time interval literal in µs (``INTERVAL 2 SECONDS``), possibly negated."""
    if node.cls == "UnaryMinus":
        inner = _interval(node.children[0])
        return None if inner is None else -inner
    t = str(node.fields.get("dataType", ""))
    if node.cls == "Literal" and t.startswith("interval ") and "year" not in t and "month" not in t:
        value = node.fields.get("value")
        return None if value is None else int(value)
    return None


def _time_term(node: Node) -> tuple[int, int] | None:
    """(expression id of an event-time column, offset in µs) of ``ts``, ``ts + INTERVAL ...`` or
    ``ts - INTERVAL ...``; None for anything else."""
    if node.cls == "AttributeReference":
        if node.fields.get("dataType") in ("timestamp", "timestamp_ntz"):
            return node.fields["exprId"]["id"], 0
        return None
    if node.cls == "Cast" and node.fields.get("dataType") in ("timestamp", "timestamp_ntz"):
        return _time_term(node.children[0])
    if node.cls == "DatetimeSub" and node.children:  # its child is the TimestampAddInterval it stands for
        return _time_term(node.children[0])
    if node.cls == "TimestampAddInterval" and len(node.children) == 2:
        base, offset = _time_term(node.children[0]), _interval(node.children[1])
        if base is not None and offset is not None:
            return base[0], base[1] + offset
    return None


def _comparisons(node: Node) -> list[tuple[str, Node, Node]] | None:
    if node.cls in _RANGE:
        return [(_RANGE[node.cls], node.children[0], node.children[1])]
    if node.cls == "Between" and all(isinstance(node.fields.get(k), list) for k in ("input", "lower", "upper")):
        x = parse_expr(node.fields["input"])
        return [(">=", x, parse_expr(node.fields["lower"])), ("<=", x, parse_expr(node.fields["upper"]))]
    return None


def _stream_join(qc: Any, node: Node, how: str) -> Rel:
    what = "a stream–stream join"
    if how != "inner":
        raise qc.unsupported(f"a {how} stream–stream join", "a join of two branches of the input stream is inner only")
    cond = node.fields.get("condition")
    if not cond:
        raise qc.unsupported(f"{what} without a condition (a cross join)")
    lrel, rrel = qc.relation(node.children[0]), qc.relation(node.children[1])
    if rrel.name == lrel.name:  # an operator cannot read one input twice
        rrel = qc.add("select", Project([Col(n) for _, n in rrel.attrs]), [rrel], rrel.attrs)
    lids, rids = {a for a, _ in lrel.attrs}, {a for a, _ in rrel.attrs}
    lkeys, rkeys, rest = _equalities(qc, _conjuncts(parse_expr(cond)), lids, rids, what)
    lower: tuple[int, bool] | None = None
    upper: tuple[int, bool] | None = None
    times: set[tuple[int, int]] = set()
    for c in rest:
        comps = _comparisons(c)
        if comps is None:
            raise qc.unsupported(
                f"{what} on a condition other than equal keys and an event-time range", f"Spark expression {c.cls!r}"
            )
        for op, x, y in comps:
            tx, ty = _time_term(x), _time_term(y)
            sides = None if tx is None or ty is None else (tx[0] in lids, ty[0] in lids, tx[0] in rids, ty[0] in rids)
            if sides == (False, True, True, False):  # tr + ox OP tl + oy: tr - tl OP oy - ox
                bound = ty[1] - tx[1]
                times.add((ty[0], tx[0]))
            elif sides == (True, False, False, True):  # tl + ox OP tr + oy: tr - tl FLIP(OP) ox - oy
                op, bound = _FLIP[op], tx[1] - ty[1]
                times.add((tx[0], ty[0]))
            else:
                raise qc.unsupported(
                    f"{what} on a comparison that is not an event-time range",
                    "compare one side's timestamp column with the other's, plus or minus an INTERVAL",
                )
            strict = op in (">", "<")
            if op in (">=", ">"):
                if lower is None or bound > lower[0] or (bound == lower[0] and strict):
                    lower = (bound, strict)
            elif upper is None or bound < upper[0] or (bound == upper[0] and strict):
                upper = (bound, strict)
    if not lkeys:
        raise qc.unsupported(f"{what} without equal keys", "join on a.key == b.key and an event-time range")
    if lower is None or upper is None:
        raise qc.unsupported(
            f"{what} without a range condition on event time",
            "bound the other side's event time from both sides: b.t >= a.t - INTERVAL ... and b.t <= a.t + INTERVAL ...",
        )
    if len(times) != 1:
        raise qc.unsupported(f"{what} on ranges over more than one event-time column per side")
    ((lt, rt),) = times
    lnames, rnames = dict(lrel.attrs), dict(rrel.attrs)
    delays: list[int | None] = [None, None]
    if qc.context.get("streaming"):
        marks = qc.context.get("watermarks") or {}
        delays = [None if marks.get(t) is None else int(round(marks[t] * 1e6)) for t in (lt, rt)]
        if delays == [None, None]:
            raise qc.unsupported(
                f"{what} on a stream without withWatermark",
                f"set a watermark on {lnames[lt]!r} or {rnames[rt]!r}, so the join's state can be dropped",
            )
    out = _unique(rrel.attrs, {n for _, n in lrel.attrs})
    op = IntervalJoin(
        [qc.expr(k, lrel) for k in lkeys],
        [qc.expr(k, rrel) for k in rkeys],
        (lnames[lt], rnames[rt]),
        lower[0],
        upper[0],
        lower[1],
        upper[1],
        (delays[0], delays[1]),
        right_names=out,
    )
    return qc.add("join", op, [lrel, rrel], lrel.attrs + list(zip([a for a, _ in rrel.attrs], out, strict=True)))
