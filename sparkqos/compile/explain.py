"""Where each operator of each query runs, as text (``sparkqos.explain``, ``handle.explain()``).

For each query, its operators from the root down, each with its engine: ``native`` (a sparkqos
operator the strategy schedules; a stateful one says when it emits its rows), ``spark`` (a part
Spark evaluates inside the micro-batch, with what it computes and why), or, from
:func:`sparkqos.explain`, ``refused`` with the reason. The layout follows ``DataFrame.explain()``:
a header per query, one indented line per operator. Everything is said in a PySpark user's words
(``select``, ``where``, ``from_json``), never in the names of Spark's plan nodes.
"""

from __future__ import annotations

from collections.abc import Mapping

from sparkqos.executor.operators import (
    Deduplicate,
    EventWindowAggregate,
    KeyedAggregate,
    PandasWithState,
    PhysicalOperator,
    SessionWindowAggregate,
    SparkAggregates,
    TransformWithState,
)
from sparkqos.executor.operators.spark_aggregates import BUFFER
from sparkqos.executor.plan import CompiledPlan

__all__ = ["aggregates", "duration", "emission", "explain_compiled", "explain_text"]


def duration(us: int) -> str:
    """Microseconds as a person reads a watermark delay or a gap.

    >>> duration(2_000_000), duration(1_500), duration(90_000_000), duration(7_200_000_000), duration(0)
    ('2 s', '1.5 ms', '1.5 min', '2 h', '0 s')
    """
    for unit, size in (("h", 3_600_000_000), ("min", 60_000_000), ("s", 1_000_000), ("ms", 1_000)):
        if us >= size:
            return f"{us / size:g} {unit}"
    return f"{us} µs" if us else "0 s"


def emission(op: PhysicalOperator) -> str:
    """When a stateful operator writes its rows ('' for a stateless one): a window or session
    when the watermark passes its end, an update-mode aggregate at every trigger, a user's
    stateful function (applyInPandasWithState, transformWithStateInPandas) at every trigger and when
    its keys time out or its timers fire.

    >>> from sparkqos.executor.operators import WindowAgg
    >>> n = [WindowAgg("count_all", None, "n")]
    >>> session = SessionWindowAggregate(["k"], n, "ts", gap_us=300_000_000, delay_us=2_000_000)
    >>> print(emission(session))  # doctest: +NORMALIZE_WHITESPACE
    a session is emitted when the watermark passes its end, 5 min after its last row; the
    watermark is the newest event time so far minus 2 s, and a row below it is dropped as late
    >>> emission(EventWindowAggregate(["k"], n, "ts", size_us=10_000_000))
    'every window is emitted when the input ends (no watermark)'
    """
    if isinstance(op, KeyedAggregate):
        if not op.update:
            return "the final table is emitted when the input ends"
        return "each trigger writes every key changed since the trigger before, with its aggregates so far (update mode)"
    if isinstance(op, EventWindowAggregate):
        what = "session" if isinstance(op, SessionWindowAggregate) else "window"
        end = f"its end, {duration(op.size_us)} after its last row" if what == "session" else "its end"
        if op.delay_us is None:
            return f"every {what} is emitted when the input ends (no watermark)"
        return (
            f"a {what} is emitted when the watermark passes {end}; the watermark is the newest event time so far "
            f"minus {duration(op.delay_us)}, and a row below it is dropped as late"
        )
    if isinstance(op, PandasWithState):
        timeout = {
            "NoTimeout": "no timeout",
            "ProcessingTimeTimeout": "a key times out when the trigger's clock passes its timeout",
            "EventTimeTimeout": (
                f"a key times out when the watermark (the newest event time of earlier triggers minus "
                f"{duration(op.delay_us or 0)}) passes its timeout; a row at or below the previous trigger's "
                "watermark is dropped as late"
            ),
        }[op.timeout]
        return (
            f"applyInPandasWithState's function {op.udf!r} runs natively, called at each trigger's end once per key "
            f"with the key's rows of that trigger, its state kept in sparkqos's checkpoint; {timeout}"
        )
    if isinstance(op, TransformWithState):
        timers = {
            "None": "no timers",
            "ProcessingTime": "a timer fires at the first trigger whose clock is at or past it",
            "EventTime": (
                f"a timer fires once the watermark (the newest event time of earlier triggers minus "
                f"{duration(op.delay_us or 0)}) is at or past it; a row at or below the previous trigger's "
                "watermark is dropped as late"
            ),
        }[op.time_mode]
        return (
            f"transformWithStateInPandas's processor {op.udf!r} runs natively, called at each trigger's end once per key "
            f"with the key's rows of that trigger, its state variables and timers kept in sparkqos's checkpoint; {timers}"
        )
    if isinstance(op, Deduplicate) and op.delay_us is not None:
        return (
            f"a key is forgotten when the watermark passes it (the newest event time so far minus "
            f"{duration(op.delay_us)}); a row below the watermark is dropped as late"
        )
    return ""


def aggregates(op: PhysicalOperator) -> str:
    """What an aggregate operator computes, as a PySpark user writes it ('' for other operators).

    >>> from sparkqos.executor.operators import WindowAgg
    >>> aggs = [WindowAgg("count_all", None, "n"), WindowAgg("avg", "t", "a"), WindowAgg("max_by", "id", "m", by="t")]
    >>> aggregates(KeyedAggregate(["k"], aggs))
    'computes count(*), avg(t), max_by(id, t) natively'
    >>> rows = WindowAgg("collect_list", "agg_rows", BUFFER, True)
    >>> aggregates(KeyedAggregate(["k"], [aggs[0], rows]))
    "computes count(*) natively and keeps each group's rows for the aggregates Spark computes"
    >>> import pyarrow as pa
    >>> print(aggregates(SparkAggregates(BUFFER, pa.schema([("d", pa.int64())]), ["approx_count_distinct(x)"])))
    ... # doctest: +NORMALIZE_WHITESPACE
    sparkqos has no native version of approx_count_distinct(x); Spark computes it over each group's
    rows when the group is emitted, in the micro-batch
    """
    if isinstance(op, SparkAggregates):
        it = "it" if len(op.functions) == 1 else "them"
        return (
            f"sparkqos has no native version of {', '.join(op.functions)}; Spark computes {it} over each "
            "group's rows when the group is emitted, in the micro-batch"
        )
    if not isinstance(op, EventWindowAggregate):
        return ""
    words = [
        "count(*)" if a.fn == "count_all" else f"{a.fn}({a.column}{', ' + a.by if a.by else ''})"
        for a in op.aggs
        if a.name != BUFFER
    ]
    native = f"computes {', '.join(words)} natively" if words else ""
    if len(words) == len(op.aggs):
        return native
    keeps = "keeps each group's rows for the aggregates Spark computes"
    return f"{native} and {keeps}" if native else keeps


def _lines(compiled: CompiledPlan, query: str) -> list[str]:
    plan, parts = compiled.plan, compiled.spark_parts
    out: list[str] = []

    def walk(name: str, depth: int) -> None:
        pad = "  " * depth
        if name in parts:
            out.append(f"{pad}+- spark   {name}: {parts[name].describe()}")
            return
        if name in compiled.sources:
            out.append(f"{pad}+- input   {name}")
            return
        op = plan[name]
        physical = compiled.operators.get(name)
        when = "; ".join(w for w in (aggregates(physical), emission(physical)) if w) if physical is not None else ""
        out.append(f"{pad}+- native  {name} ({op.kind})" + (f": {when}" if when else ""))
        for i in op.inputs:
            walk(i, depth + 1)

    walk(compiled.root(query), 0)
    return out


def explain_text(
    compiled: Mapping[str, CompiledPlan | str], placement: str = "auto", classes: Mapping[str, str] | None = None
) -> str:
    """The text for queries each compiled alone (query → its plan) or refused (query → the reason)."""
    lines = [f"== sparkqos plan (placement={placement!r}) =="]
    for query, c in compiled.items():
        klass = (classes or {}).get(query)
        lines.append(f"query {query!r}" + (f" (class {klass})" if klass else "") + ":")
        if isinstance(c, str):
            lines.append(f"+- refused  {c}")
        else:
            lines.extend(_lines(c, query))
    return "\n".join(lines)


def explain_compiled(compiled: CompiledPlan) -> str:
    """The text for every query of one compiled plan."""
    lines = ["== sparkqos plan =="]
    for query in compiled.roots:
        klass = compiled.plan.queries[query].klass
        lines.append(f"query {query!r}" + (f" (class {klass})" if klass else "") + ":")
        lines.extend(_lines(compiled, query))
    return "\n".join(lines)
