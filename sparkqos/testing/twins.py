"""Equivalent simulator and executor set-ups from one spec, for tests and benchmarks.

The papers' experiments use chains of generic operators with a declared selectivity σ and cost c
per tuple. :func:`synthetic_plans` builds such a multi-query plan once, as a
:class:`~sparkqos.model.plan.Plan` for the simulator and a
:class:`~sparkqos.executor.CompiledPlan` of :meth:`~sparkqos.compile.Relation.synthetic` operators
for the executor; both carry the same operator names, queries, classes and declared σ / c (on
the executor c is per row, in seconds, at a chosen number of rows per simulated tuple and seconds
per time unit), so a strategy sees the same plan on either engine. :func:`feeds` turns the
simulator's arrivals (``{stream: [(time, amount), ...]}``) into the executor's
``[(arrival, stream, batch), ...]``; :class:`FakeClock` is a deterministic clock for the
executor; :func:`drive` ingests feeds with some units served after each; :func:`rows_by_query`
reads every query's output rows in a form that compares across runs.

>>> from sparkqos import schedulers
>>> from sparkqos.executor import Executor
>>> from sparkqos.sim import Simulator
>>> twins = synthetic_plans({"fast": SyntheticQuery([(0.5, 0.1)], klass="H"),
...                          "slow": SyntheticQuery([(0.9, 0.2), (0.5, 0.3)], klass="L")},
...                         classes={"H": 2, "L": 1}, rows_per_unit=100, seconds_per_unit=1e-3)
>>> [str(p) for p in twins.plan.paths]
['S→fast/1:synthetic', 'S→slow/1:synthetic→slow/2:synthetic']
>>> twins.plan["slow/2:synthetic"].cost, twins.compiled.plan["slow/2:synthetic"].cost  # per tuple, per row
(0.3, 3e-06)
>>> arrivals = {"S": [(0, 2.0), (1, 1.0)]}
>>> Simulator(twins.plan, schedulers.get("chain"), arrivals).run().total_output
2.85
>>> ex = Executor(twins.compiled.fresh(), schedulers.get("chain"), clock=FakeClock(step=1e-5))
>>> drive(ex, twins.feeds(arrivals), units_between=1)
300
>>> _ = ex.finish()
>>> {q: len(rows) for q, rows in rows_by_query(ex).items()}
{'fast': 147, 'slow': 137}
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from sparkqos.compile import QuerySet
from sparkqos.errors import PlanError, check_number
from sparkqos.executor import EMIT, CompiledPlan, Executor
from sparkqos.executor.expressions import INTERNAL
from sparkqos.model.plan import Operator, Plan

#: The columns of every synthetic stream: ``v`` numbers the stream's rows from 0 and ``k`` is
#: ``v mod KEYS``, a join key (synthetic operators key on the executor's sequence numbers).
SCHEMA = pa.schema([("v", pa.int64()), ("k", pa.int64())])
KEYS = 8

__all__ = [
    "KEYS",
    "SCHEMA",
    "FakeClock",
    "SyntheticQuery",
    "TwinPlans",
    "assert_same_rows",
    "drive",
    "feeds",
    "rows_by_query",
    "sorted_rows",
    "sensor_table",
    "synthetic_plans",
]


@dataclass(frozen=True)
class SyntheticQuery:
    """One continuous query: ``operators`` is ``[(σ, c), ...]`` from the leaf up, over ``stream``
    (several streams: the query starts with a union of them, σ = 1 and cost ``union_cost``),
    in query class ``klass``.

    >>> twins = synthetic_plans({"both": SyntheticQuery([(0.5, 0.2)], stream=("R", "T"))})
    >>> [(op.name, op.inputs, op.kind, op.selectivity, op.cost) for op in twins.plan]
    [('both/1:union', ('R', 'T'), 'union', 1.0, 0.05), ('both/2:synthetic', ('both/1:union',), 'filter', 0.5, 0.2)]
    """

    operators: Sequence[tuple[float, float]]
    stream: str | Sequence[str] = "S"
    klass: str | None = None
    union_cost: float = 0.05

    @property
    def streams(self) -> tuple[str, ...]:
        return (self.stream,) if isinstance(self.stream, str) else tuple(self.stream)


def _scaled(plan: Plan, factor: float) -> Plan:
    if factor == 1.0:
        return plan
    ops = [Operator(op.name, op.inputs, op.selectivity, op.cost * factor, op.query, op.klass, op.kind) for op in plan]
    return Plan(ops, streams=plan.streams, classes=plan.classes)


@dataclass(frozen=True)
class TwinPlans:
    """One plan for both engines: ``plan`` for the simulator and ``compiled`` for the executor,
    where a simulated tuple is ``rows_per_unit`` rows and a time unit ``seconds_per_unit``
    seconds (``compiled.plan`` declares c × seconds_per_unit / rows_per_unit seconds per row; it
    is ``plan`` when both are 1). Use ``compiled.fresh()`` for each executor run and
    :meth:`feeds` for its input."""

    plan: Plan
    compiled: CompiledPlan
    rows_per_unit: float = 1.0
    seconds_per_unit: float = 1.0

    def feeds(self, arrivals: Mapping[str, Iterable[Sequence[float]]]) -> list[tuple[float, str, pa.RecordBatch]]:
        """The simulator's ``arrivals`` as the executor's feeds at this scale (:func:`feeds`)."""
        return feeds(arrivals, self.rows_per_unit, self.seconds_per_unit)


def synthetic_plans(
    queries: Mapping[str, SyntheticQuery | Sequence[tuple[float, float]]],
    classes: Mapping[str, float] | None = None,
    seed: int = 0,
    rows_per_unit: float = 1.0,
    seconds_per_unit: float = 1.0,
    burn: bool = False,
) -> TwinPlans:
    """Build ``queries`` (name → :class:`SyntheticQuery`, or a bare ``[(σ, c), ...]`` over stream
    ``S``) for both engines. Every operator gets its own seed (``seed`` + its position), so the
    executor's keep/drop decisions are fixed by ``seed`` whatever the strategy. On the executor a
    simulated tuple is ``rows_per_unit`` rows and a time unit ``seconds_per_unit`` seconds, so its
    plan declares c × seconds_per_unit / rows_per_unit seconds per row and a strategy's time
    parameters (quanta, periods) cover the same work on both engines; with ``burn`` the operators
    also spend that CPU time on every row (default: the declared cost is only the strategies'
    initial estimate)."""
    if not queries:
        raise PlanError("synthetic_plans needs at least one query")
    check_number("rows_per_unit", rows_per_unit, low=0, low_open=True, error=PlanError)
    check_number("seconds_per_unit", seconds_per_unit, low=0, low_open=True, error=PlanError)
    per_row = float(seconds_per_unit) / float(rows_per_unit)
    qs = QuerySet(classes=classes)
    declared: dict[str, list[tuple[float, float]]] = {}
    k = 0
    for name, q in queries.items():
        if not isinstance(q, SyntheticQuery):
            q = SyntheticQuery(q)
        if not q.operators:
            raise PlanError(f"query {name!r} has no operators; give it [(σ, c), ...]")
        rels = [qs.stream(s, SCHEMA) for s in q.streams]
        rel = rels[0].union(*rels[1:]) if len(rels) > 1 else rels[0]
        specs = [(1.0, q.union_cost)] if len(rels) > 1 else []
        for sel, cost in q.operators:
            rel = rel.synthetic(sel, cost_s=cost * per_row if burn else 0.0, seed=seed + k)
            specs.append((sel, cost))
            k += 1
        rel.sink(name, klass=q.klass)
        declared[name] = specs
    compiled = qs.build()
    ops, position = [], dict.fromkeys(declared, 0)
    for op in compiled.plan:  # the builder emits each query's operators leaf first
        sel, cost = declared[op.query][position[op.query]]
        position[op.query] += 1
        ops.append(Operator(op.name, op.inputs, sel, cost, op.query, op.klass, op.kind))
    plan = Plan(ops, streams=compiled.plan.streams, classes=compiled.plan.classes)
    executor_plan = CompiledPlan(_scaled(plan, per_row), compiled.operators, compiled.sources, compiled.roots)
    return TwinPlans(plan, executor_plan, float(rows_per_unit), float(seconds_per_unit))


def feeds(
    arrivals: Mapping[str, Iterable[Sequence[float]]], rows_per_unit: float = 1.0, seconds_per_unit: float = 1.0
) -> list[tuple[float, str, pa.RecordBatch]]:
    """The simulator's ``{stream: [(time, amount), ...]}`` as the executor's feeds: one batch of
    ``round(amount × rows_per_unit)`` rows per parcel (none when that is 0) arriving at
    ``time × seconds_per_unit``, in time order (ties in the order of ``arrivals``), with the
    columns of :data:`SCHEMA`."""
    out, counter = [], {}
    for order, (stream, items) in enumerate(arrivals.items()):
        for t, amount in items:
            n = int(round(float(amount) * rows_per_unit))
            if n <= 0:
                continue
            start = counter.get(stream, 0)
            counter[stream] = start + n
            v = np.arange(start, start + n, dtype=np.int64)
            batch = pa.record_batch([pa.array(v), pa.array(v % KEYS)], schema=SCHEMA)
            out.append((float(t) * seconds_per_unit, order, stream, batch))
    out.sort(key=lambda f: (f[0], f[1]))
    return [(t, stream, batch) for t, _, stream, batch in out]


class FakeClock:
    """A deterministic clock for the executor: each reading is ``step`` seconds after the one
    before (the first is ``start + step``); :meth:`advance_to` jumps ahead to a time (an executor
    idle until input arrives). With ``step=0`` time stands still between jumps, so how often the
    engine or a strategy reads the clock changes nothing. :meth:`copy` carries on where a clock
    is (for a restored executor). Safe to read from several threads (an executor's cluster
    threads).

    >>> c = FakeClock(step=0.25)
    >>> c(), c()
    (0.25, 0.5)
    >>> c.advance_to(2.0)
    >>> c(), c.copy()(), c()
    (2.0, 2.25, 2.25)
    >>> still = FakeClock(step=0)
    >>> still(), still()
    (0.0, 0.0)
    >>> still.advance_to(3.5)
    >>> still()
    3.5
    """

    def __init__(self, step: float = 1e-3, start: float = 0.0):
        check_number("step", step, low=0)
        check_number("start", start)
        self.step = float(step)
        self._base = float(start)
        self._ticks = 0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            self._ticks += 1
            return self._base + self._ticks * self.step

    @property
    def last(self) -> float:
        """The latest reading (``start`` before the first)."""
        return self._base + self._ticks * self.step

    def advance_to(self, t: float) -> None:
        """The next reading is at least ``t`` (the clock never goes back)."""
        with self._lock:
            if self._base + (self._ticks + 1) * self.step < t:
                self._base, self._ticks = float(t), -1

    def copy(self) -> FakeClock:
        """A clock whose readings carry on exactly as this one's will."""
        with self._lock:
            c = FakeClock(self.step, self._base)
            c._ticks = self._ticks
        return c


def drive(ex: Executor, feeds: Iterable[tuple[float, str, pa.RecordBatch]], units_between: int | Iterable[int] = 0) -> int:
    """Ingest ``feeds`` into ``ex`` stamped with their arrival times, serving ``units_between``
    units (an int for every feed, or one count per feed) after each; returns the rows ingested.
    When ``ex.clock`` is a :class:`FakeClock` it first moves on to each feed's arrival time if it
    is behind (the executor waited for the input), so no row is emitted before it arrived. Unlike
    :func:`~sparkqos.executor.replay` it neither copies the plan nor finishes."""
    steps = iter(units_between) if not isinstance(units_between, int) else None
    rows = 0
    fake = ex.clock if isinstance(ex.clock, FakeClock) else None
    for arrival, stream, batch in feeds:
        if fake is not None:
            fake.advance_to(arrival)
        rows += ex.ingest(stream, batch, arrival=arrival)
        k = units_between if steps is None else next(steps, 0)
        if k:
            ex.run(max_units=k)
    return rows


def rows_by_query(ex: Executor, internal: bool = False) -> dict[str, list[tuple]]:
    """Every query's output rows so far, each a tuple of column values, sorted: equal across
    runs that delivered the same rows in any order. ``internal`` keeps the executor's arrival
    and sequence columns (not the emit time)."""
    out = {}
    for query in ex.compiled.roots:
        table = ex.result(query, internal=True)
        names = [n for n in table.column_names if n not in INTERNAL and n != EMIT]
        if internal:
            names += [n for n in table.column_names if n in INTERNAL]
        columns = [table.column(n).to_pylist() for n in names]
        out[query] = sorted(zip(*columns))
    return out


def sensor_table(n: int, seed: int, start: float = 1_700_000_000.0) -> pa.Table:
    """``n`` sensor readings in the plan's view (``sparkqos.workloads.sensors.SENSOR_SCHEMA``: event time as
    float seconds), spread over the 4 s after ``start`` in time order, reproducible from ``seed``.

    >>> sensor_table(3, seed=1).column_names
    ['sensor_id', 'location', 'temperature', 'humidity', 'ts']
    """
    rng = np.random.default_rng(seed)
    return pa.table(
        {
            "sensor_id": pa.array(rng.integers(0, 32, n), pa.int32()),
            "location": pa.array([f"z{i}" for i in rng.integers(0, 4, n)]),
            "temperature": pa.array(np.round(rng.uniform(10, 80, n), 1)),
            "humidity": pa.array(np.round(rng.uniform(5, 95, n), 1)),
            "ts": pa.array(start + np.sort(rng.uniform(0, 4, n))),
        }
    )


def _cell(v: Any) -> Any:
    if isinstance(v, dict):  # a struct (a window's: (start, end)), its fields compared as cells
        return tuple(_cell(x) for x in v.values())
    if isinstance(v, list):  # an array
        return tuple(_cell(x) for x in v)
    if isinstance(v, float):
        return "NaN" if math.isnan(v) else v + 0.0  # -0.0 and 0.0 sort as one value
    return v


def sorted_rows(table: pa.Table) -> list[tuple]:
    """``table``'s rows as tuples in a canonical order (NaN as "NaN", a struct or an array as a tuple)."""
    return sorted((tuple(_cell(v) for v in r.values()) for r in table.to_pylist()), key=repr)


def assert_same_rows(got: pa.Table, want: pa.Table, name: str = "", rel: float = 0.0) -> None:
    """``got`` holds the rows of ``want`` in any order, with the same column names and types (NaN
    equals NaN). ``rel`` > 0 lets finite floats differ by that relative amount: a float sum or
    mean depends on the order its terms were added in, which Spark's partitioning decides.
    Raises AssertionError naming ``name`` and the first rows that differ.

    >>> t = pa.table({"k": ["a", "b"], "x": [0.1 + 0.2, float("nan")]})
    >>> assert_same_rows(t, pa.table({"k": ["b", "a"], "x": [float("nan"), 0.3]}), "q", rel=1e-12)
    """
    if got.schema.names != want.schema.names or got.schema.types != want.schema.types:
        raise AssertionError(f"{name}: schema {got.schema} differs from {want.schema}")
    g, w = sorted_rows(got), sorted_rows(want)
    if len(g) != len(w):
        raise AssertionError(f"{name}: {len(g)} rows, want {len(w)}")
    for a, b in zip(g, w, strict=True):
        for x, y in zip(a, b, strict=True):
            close = (
                rel > 0
                and isinstance(x, float)
                and isinstance(y, float)
                and math.isfinite(x)
                and math.isfinite(y)
                and math.isclose(x, y, rel_tol=rel, abs_tol=1e-300)
            )
            if not (close or x == y):
                raise AssertionError(f"{name}: row {a} differs from {b}")
