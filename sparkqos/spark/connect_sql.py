"""SQL expression strings of a Spark Connect plan (``F.expr``, ``selectExpr``, ``where("...")``),
read as the Connect expressions PySpark's functions would have built.

Connect sends such a string unparsed, and offers no analyzed plan to read it from. :func:`parse`
reads the common subset of Spark SQL's expression grammar — columns (backquoted, dotted), number,
string, boolean and null literals, arithmetic, comparisons, ``AND``/``OR``/``NOT``, ``IS [NOT]
NULL``, ``[NOT] IN (...)``, ``[NOT] LIKE``, ``[NOT] BETWEEN``, ``CASE WHEN ... END``, ``CAST(x AS type)``, function
calls (``count(*)``) and a trailing ``[AS] name`` — into a ``spark.connect.Expression``. Nothing rests on the
parser being right: :mod:`sparkqos.spark.connect_plan` uses the result only when the server says
the two are the same (``sameSemantics`` of a select of each over the same input), so a string
read otherwise than Spark reads it stays unparsed (Spark evaluates it, or it is refused).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pyspark.sql.connect.proto as proto
from pyspark.sql.connect.dataframe import DataFrame as ConnectDataFrame
from pyspark.sql.connect.plan import CachedRelation

from sparkqos.spark.connect_relations import held_messages

__all__ = ["is_sql", "parse", "read_sql"]

_TOKEN = re.compile(
    r"\s*(?:(?P<num>\d+\.\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+|\d+[LlDd]?)"
    r"|(?P<str>'(?:[^'\\]|'')*'|\"(?:[^\"\\])*\")"
    r"|(?P<quoted>`(?:[^`]|``)+`)"
    r"|(?P<name>[A-Za-z_][A-Za-z_0-9]*)"
    r"|(?P<op><=>|==|!=|<>|<=|>=|[-+*/%=<>(),.]))"
)
_COMPARE = {"=": "==", "==": "==", "!=": "!=", "<>": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">=", "<=>": "<=>"}


class _Fail(Exception):
    """The string holds what this reader does not read."""


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if m is None:
            raise _Fail(text[pos:])
        kind = m.lastgroup or ""
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


def _fn(name: str, *args: proto.Expression) -> proto.Expression:
    e = proto.Expression()
    e.unresolved_function.function_name = name
    e.unresolved_function.arguments.extend(args)
    return e


def _number(text: str) -> proto.Expression:
    e = proto.Expression()
    lit = e.literal
    suffix = text[-1].upper() if text[-1].isalpha() and text[-1].upper() in "LD" else ""
    body = text[:-1] if suffix else text
    if suffix == "D" or "e" in body.lower():
        lit.double = float(body)
    elif suffix == "L":
        lit.long = int(body)
    elif "." in body:
        d = Decimal(body)
        digits, scale = d.as_tuple().digits, -int(d.as_tuple().exponent)
        lit.decimal.value = body
        lit.decimal.precision = max(len(digits), scale, 1)
        lit.decimal.scale = scale
    else:
        n = int(body)
        if -(2**31) <= n < 2**31:
            lit.integer = n
        elif -(2**63) <= n < 2**63:
            lit.long = n
        else:
            raise _Fail(text)
    return e


class _Parser:
    def __init__(self, text: str):
        self.toks = _tokens(text)
        self.i = 0

    def peek(self, k: int = 0) -> tuple[str, str]:
        return self.toks[self.i + k] if self.i + k < len(self.toks) else ("end", "")

    def word(self, *words: str) -> bool:
        kind, value = self.peek()
        if kind == "name" and value.upper() in words:
            self.i += 1
            return True
        return False

    def op(self, *ops: str) -> str | None:
        kind, value = self.peek()
        if kind == "op" and value in ops:
            self.i += 1
            return value
        return None

    def expect_op(self, op: str) -> None:
        if self.op(op) is None:
            raise _Fail(f"expected {op!r}")

    def top(self) -> proto.Expression:
        e = self.or_()
        if self.word("AS") or (self.peek()[0] in ("name", "quoted") and self.peek(1)[0] == "end"):
            kind, name = self.peek()
            if kind not in ("name", "quoted"):
                raise _Fail("alias")
            self.i += 1
            out = proto.Expression()
            out.alias.expr.CopyFrom(e)
            out.alias.name.append(name[1:-1].replace("``", "`") if kind == "quoted" else name)
            e = out
        if self.peek()[0] != "end":
            raise _Fail(f"unread {self.peek()[1]!r}")
        return e

    def or_(self) -> proto.Expression:
        e = self.and_()
        while self.word("OR"):
            e = _fn("or", e, self.and_())
        return e

    def and_(self) -> proto.Expression:
        e = self.not_()
        while self.word("AND"):
            e = _fn("and", e, self.not_())
        return e

    def not_(self) -> proto.Expression:
        if self.word("NOT"):
            return _fn("not", self.not_())
        return self.predicate()

    def predicate(self) -> proto.Expression:
        e = self.additive()
        while True:
            op = self.op(*_COMPARE)
            if op is not None:
                e = _fn(_COMPARE[op], e, self.additive())
                continue
            if self.word("IS"):
                negated = self.word("NOT")
                if not self.word("NULL"):
                    raise _Fail("IS without NULL")
                e = _fn("isnotnull" if negated else "isnull", e)
                continue
            negated = self.word("NOT")
            if self.word("IN"):
                self.expect_op("(")
                items = [self.or_()]
                while self.op(","):
                    items.append(self.or_())
                self.expect_op(")")
                e = _fn("in", e, *items)
            elif self.word("LIKE"):
                e = _fn("like", e, self.additive())
            elif self.word("BETWEEN"):
                low = self.additive()
                if not self.word("AND"):
                    raise _Fail("BETWEEN without AND")
                e = _fn("between", e, low, self.additive())
            elif negated:
                raise _Fail("NOT")
            else:
                return e
            if negated:
                e = _fn("not", e)

    def additive(self) -> proto.Expression:
        e = self.multiplicative()
        while (op := self.op("+", "-")) is not None:
            e = _fn(op, e, self.multiplicative())
        return e

    def multiplicative(self) -> proto.Expression:
        e = self.unary()
        while (op := self.op("*", "/", "%")) is not None:
            e = _fn(op, e, self.unary())
        return e

    def unary(self) -> proto.Expression:
        if self.op("-"):
            kind, value = self.peek()
            if kind == "num":  # Spark's grammar reads a signed number as one literal
                self.i += 1
                return _number("-" + value)
            return _fn("negative", self.unary())
        return self.primary()

    def primary(self) -> proto.Expression:
        kind, value = self.peek()
        self.i += 1
        if kind == "num":
            return _number(value)
        if kind == "str":
            if "\\" in value:
                raise _Fail("escapes")
            e = proto.Expression()
            e.literal.string = value[1:-1].replace("''", "'") if value[0] == "'" else value[1:-1]
            return e
        if kind == "op" and value == "(":
            e = self.or_()
            self.expect_op(")")
            return e
        if kind == "quoted":
            return self.column(value[1:-1].replace("``", "`"), quoted=True)
        if kind != "name":
            raise _Fail(value)
        upper = value.upper()
        if upper in ("TRUE", "FALSE"):
            e = proto.Expression()
            e.literal.boolean = upper == "TRUE"
            return e
        if upper == "NULL":
            e = proto.Expression()
            e.literal.null.null.SetInParent()
            return e
        if upper == "CASE":
            return self.case()
        if upper == "CAST" and self.op("("):
            inner = self.or_()
            if not self.word("AS"):
                raise _Fail("CAST")
            start = self.i
            depth = 0
            while self.peek()[0] != "end" and (depth or self.peek()[1] != ")"):
                depth += {"(": 1, ")": -1}.get(self.peek()[1], 0)
                self.i += 1
            type_str = " ".join(v for _, v in self.toks[start : self.i])
            self.expect_op(")")
            e = proto.Expression()
            e.cast.expr.CopyFrom(inner)
            e.cast.type_str = type_str
            return e
        if self.op("("):
            args: list[proto.Expression] = []
            if self.peek() == ("op", "*") and self.peek(1) == ("op", ")"):  # count(*): Spark's parser reads count(1)
                self.i += 2
                return _fn(value.lower(), _number("1"))
            if self.op(")") is None:
                args.append(self.or_())
                while self.op(","):
                    args.append(self.or_())
                self.expect_op(")")
            return _fn(value.lower(), *args)
        return self.column(value, quoted=False)

    def column(self, name: str, quoted: bool) -> proto.Expression:
        parts = [f"`{name.replace('`', '``')}`" if quoted else name]
        while self.peek() == ("op", ".") and self.peek(1)[0] in ("name", "quoted"):
            self.i += 1
            kind, value = self.peek()
            self.i += 1
            parts.append(value if kind == "quoted" else value)
        e = proto.Expression()
        e.unresolved_attribute.unparsed_identifier = ".".join(parts)
        return e

    def case(self) -> proto.Expression:
        args: list[proto.Expression] = []
        if self.peek()[1].upper() != "WHEN":
            raise _Fail("CASE x WHEN")
        while self.word("WHEN"):
            args.append(self.or_())
            if not self.word("THEN"):
                raise _Fail("THEN")
            args.append(self.or_())
        if self.word("ELSE"):
            args.append(self.or_())
        if not self.word("END"):
            raise _Fail("END")
        return _fn("when", *args)


def parse(text: str) -> proto.Expression | None:
    """``text`` as a Connect expression, or None where it holds what this reader does not read."""
    try:
        return _Parser(text).top()
    except (_Fail, ValueError, ArithmeticError):
        return None


def is_sql(e: proto.Expression) -> bool:
    return e.WhichOneof("expr_type") == "expression_string"


def _replace_sql(msg: Any, read: Callable[[str], proto.Expression | None]) -> None:
    """Replace, in ``msg`` (not in its input relations), each SQL expression string that ``read``
    reads (returns an expression for)."""
    for item, is_expression in held_messages(msg):
        if is_expression and is_sql(item):
            parsed = read(item.expression_string.expression)
            if parsed is not None:
                item.CopyFrom(parsed)
        else:
            _replace_sql(item, read)


def _select(body: Any, session: Any, e: proto.Expression, every_column: bool = False) -> ConnectDataFrame:
    """A select of ``e`` (and of every input column) over ``body.input``, as a DataFrame."""
    probe = proto.Relation()
    probe.project.input.CopyFrom(body.input)
    item = probe.project.expressions.add()
    item.alias.expr.CopyFrom(e)
    item.alias.name.append("_sparkqos")
    if every_column:
        probe.project.expressions.add().unresolved_star.SetInParent()
    return ConnectDataFrame(CachedRelation(probe), session)


def read_sql(body: Any, session: Any, refuse: Callable[[str, str], Exception]) -> Any:
    """A copy of the relation ``body`` with each SQL expression string that
    :func:`~sparkqos.spark.connect_sql.parse` reads as the server does (``sameSemantics`` of a
    select of each over ``body.input``) replaced by its parse; the others stay, but for one that
    aggregates (Spark evaluating it per micro-batch would be wrong): ``refuse(operation, detail)``
    is raised for it."""
    copy = type(body)()
    copy.CopyFrom(body)

    def confirmed(text: str) -> proto.Expression | None:
        given = proto.Expression()
        given.expression_string.expression = text
        parsed = parse(text)
        try:
            if parsed is not None and _select(body, session, given).sameSemantics(_select(body, session, parsed)):
                return parsed
        except Exception:  # noqa: BLE001 - a string the server cannot analyze here: left as it is
            return None
        try:  # beside every column, an aggregate is an error ("missing group by")
            _ = _select(body, session, given, every_column=True).schema
        except Exception:  # noqa: BLE001 - Spark's analysis error, named below
            raise refuse(
                "a SQL expression string under Spark Connect that sparkqos cannot read",
                f"{text!r}: write it with pyspark.sql.functions (F.col, F.max, ...)",
            ) from None
        return None

    _replace_sql(copy, confirmed)
    return copy
