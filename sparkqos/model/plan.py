"""The plan model every strategy and both engines share.

A plan is a forest of operators over named input streams. Each operator has a declared (or
measured) selectivity σ and cost c (time per input tuple); the operators of one tree form one
continuous query, which belongs to one query class. Following the Chain paper (§2), a stream used
by several queries is copied into each of them, so every operator feeds at most one consumer and
every tuple follows a unique *operator path* from the operator that reads it off a stream up to
the root of its query (Jiang §2).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from sparkqos.errors import PlanError, check_choice, check_number

DEFAULT_CLASS = "default"

#: Kinds the simulator knows how to run. ``join`` blocks while any input queue is empty
#: (Chain §5); every other kind consumes whatever input is oldest.
OPERATOR_KINDS = ("filter", "map", "union", "join", "aggregate", "source")


@dataclass(frozen=True)
class Operator:
    """One operator of a plan.

    ``inputs`` names streams or other operators. ``selectivity`` is output tuples per input
    tuple (it may exceed 1 for joins); ``cost`` is processing time per input tuple.
    ``tuple_size`` is the size of one output tuple in memory units (Jiang eq 2.1); inputs read
    off a stream have size 1.
    """

    name: str
    inputs: tuple[str, ...]
    selectivity: float
    cost: float
    query: str | None = None
    klass: str | None = None
    kind: str = "filter"
    tuple_size: float = 1.0

    @property
    def blocking(self) -> bool:
        """A sliding-window join waits until every input has a tuple (Chain §5)."""
        return self.kind == "join" and len(self.inputs) > 1


@dataclass(frozen=True)
class OperatorPath:
    """Operators a tuple read from ``stream`` passes through, leaf first, root last."""

    index: int
    stream: str
    operators: tuple[str, ...]
    query: str

    @property
    def leaf(self) -> str:
        return self.operators[0]

    @property
    def root(self) -> str:
        return self.operators[-1]

    def __str__(self) -> str:
        return "→".join((self.stream, *self.operators))


@dataclass(frozen=True)
class Query:
    name: str
    root: str
    klass: str
    operators: tuple[str, ...]


class Plan:
    """A validated, immutable operator plan.

    >>> plan = Plan([Operator("O1", ("S",), 0.5, 1.0), Operator("O2", ("O1",), 0.1, 2.0)],
    ...             streams=["S"])
    >>> [str(p) for p in plan.paths]
    ['S→O1→O2']
    >>> plan.consumer("O1"), plan.consumer("O2")
    ('O2', None)
    """

    def __init__(
        self,
        operators: Sequence[Operator],
        streams: Iterable[str],
        classes: Mapping[str, float] | None = None,
    ):
        self.streams: tuple[str, ...] = tuple(dict.fromkeys(streams))
        self.operators: tuple[Operator, ...] = tuple(operators)
        self._names: tuple[str, ...] = tuple(op.name for op in self.operators)
        self._by_name: dict[str, Operator] = {}
        self._validate_operators()
        self._consumer = self._consumers()
        self._check_acyclic()
        self.queries: dict[str, Query] = {}
        self._query_of: dict[str, str] = {}
        self._class_of_query: dict[str, str] = {}
        self._assign_queries()
        self.classes: dict[str, float] = self._class_priorities(classes or {})
        self.paths: tuple[OperatorPath, ...] = self._build_paths()
        self._paths_of: dict[str, tuple[int, ...]] = {
            op.name: tuple(p.index for p in self.paths if op.name in p.operators) for op in self.operators
        }
        self.index: dict[str, int] = {op.name: i for i, op in enumerate(self.operators)}

    # -- lookups ---------------------------------------------------------------------------
    def __getitem__(self, name: str) -> Operator:
        try:
            return self._by_name[name]
        except KeyError:
            raise PlanError(f"no operator named {name!r} in the plan") from None

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __iter__(self):
        return iter(self.operators)

    def __len__(self) -> int:
        return len(self.operators)

    @property
    def names(self) -> tuple[str, ...]:
        return self._names

    def consumer(self, name: str) -> str | None:
        """The operator fed by ``name``, or None when ``name`` is a query root."""
        return self._consumer[name]

    def query_of(self, name: str) -> str:
        return self._query_of[name]

    def class_of(self, name: str) -> str:
        """Class of the query that operator ``name`` belongs to."""
        return self._class_of_query[self._query_of[name]]

    def paths_of(self, name: str) -> tuple[int, ...]:
        """Indices into :attr:`paths` of the operator paths through ``name``."""
        return self._paths_of[name]

    def is_leaf(self, name: str) -> bool:
        return any(i in self.streams for i in self[name].inputs)

    def roots(self) -> list[str]:
        return [q.root for q in self.queries.values()]

    def upstream_path(self, name: str) -> tuple[str, ...]:
        """``name`` and the operators above it up to its root."""
        out = [name]
        nxt = self._consumer[name]
        while nxt is not None:
            out.append(nxt)
            nxt = self._consumer[nxt]
        return tuple(out)

    def service_time(self, path: OperatorPath) -> float:
        """Processing time one input tuple needs along ``path`` with the declared statistics:
        Σₖ (Πⱼ<ₖ σⱼ)·cₖ, the denominator of Jiang eq 2.2 (path capacity = 1 / this)."""
        total, surviving = 0.0, 1.0
        for name in path.operators:
            op = self._by_name[name]
            total += surviving * op.cost
            surviving *= op.selectivity
        return total

    def __repr__(self) -> str:
        return f"Plan({len(self.operators)} operators, {len(self.queries)} queries, {len(self.paths)} paths)"

    # -- validation -----------------------------------------------------------------------
    def _validate_operators(self) -> None:
        if not self.operators:
            raise PlanError("a plan needs at least one operator")
        stream_set = set(self.streams)
        for op in self.operators:
            if not isinstance(op.name, str) or not op.name:
                raise PlanError(f"operator names must be non-empty strings, got {op.name!r}")
            if op.name in self._by_name:
                raise PlanError(f"duplicate operator name {op.name!r}")
            if op.name in stream_set:
                raise PlanError(f"operator {op.name!r} has the same name as a stream")
            self._by_name[op.name] = op
        for op in self.operators:
            if not op.inputs:
                raise PlanError(f"operator {op.name!r} has no inputs")
            if len(set(op.inputs)) != len(op.inputs):
                raise PlanError(f"operator {op.name!r} lists the same input twice: {list(op.inputs)}")
            for src in op.inputs:
                if src not in stream_set and src not in self._by_name:
                    raise PlanError(
                        f"operator {op.name!r} reads unknown input {src!r}: not a stream ({sorted(stream_set)}) nor an operator"
                    )
            where = f"operator {op.name!r}: "
            check_number("selectivity", op.selectivity, low=0, error=PlanError, where=where)
            check_number("cost", op.cost, low=0, low_open=True, error=PlanError, where=where)
            check_number("tuple_size", op.tuple_size, low=0, low_open=True, error=PlanError, where=where)
            check_choice("kind", op.kind, OPERATOR_KINDS, error=PlanError, where=where)

    def _consumers(self) -> dict[str, str | None]:
        consumer: dict[str, str | None] = {op.name: None for op in self.operators}
        for op in self.operators:
            for src in op.inputs:
                if src in consumer:
                    if consumer[src] is not None:
                        raise PlanError(
                            f"operator {src!r} feeds both {consumer[src]!r} and {op.name!r}; "
                            "each query must get its own copy of a shared operator"
                        )
                    consumer[src] = op.name
        return consumer

    def _check_acyclic(self) -> None:
        # Every operator has at most one consumer, so a cycle shows up as a walk that revisits.
        for op in self.operators:
            seen = [op.name]
            nxt = self._consumer[op.name]
            while nxt is not None:
                if nxt in seen:
                    cycle = seen[seen.index(nxt) :] + [nxt]
                    raise PlanError(f"the plan has a cycle: {' → '.join(cycle)}")
                seen.append(nxt)
                nxt = self._consumer[nxt]

    def _assign_queries(self) -> None:
        members: dict[str, list[str]] = {}
        for op in self.operators:
            root = self.upstream_path(op.name)[-1]
            members.setdefault(root, []).append(op.name)
        for root, names in members.items():
            declared = {self[n].query for n in names if self[n].query is not None}
            if len(declared) > 1:
                raise PlanError(f"operators of the tree rooted at {root!r} name different queries: {sorted(declared)}")
            qname = declared.pop() if declared else root
            if qname in self.queries:
                raise PlanError(f"query name {qname!r} is used by two separate operator trees")
            klasses = {self[n].klass for n in names if self[n].klass is not None}
            if len(klasses) > 1:
                raise PlanError(f"operators of query {qname!r} name different classes: {sorted(klasses)}")
            klass = klasses.pop() if klasses else DEFAULT_CLASS
            self.queries[qname] = Query(qname, root, klass, tuple(names))
            self._class_of_query[qname] = klass
            for n in names:
                self._query_of[n] = qname

    def _class_priorities(self, classes: Mapping[str, float]) -> dict[str, float]:
        used = {q.klass for q in self.queries.values()}
        out: dict[str, float] = {}
        for name, prio in classes.items():
            out[name] = float(check_number("priority", prio, low=0, low_open=True, error=PlanError, where=f"class {name!r}: "))
        for klass in sorted(used):
            out.setdefault(klass, 1.0)
        return out

    def _build_paths(self) -> tuple[OperatorPath, ...]:
        paths = []
        for op in self.operators:
            for src in op.inputs:
                if src in self.streams:
                    ops = self.upstream_path(op.name)
                    paths.append(OperatorPath(len(paths), src, ops, self._query_of[op.name]))
        return tuple(paths)
