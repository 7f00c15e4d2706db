"""Queries as ordinary PySpark code: transforms (DataFrame → DataFrame) read from Spark's plans.

:func:`compile_transforms` applies each transform to the input DataFrame, reads the analyzed
logical plan Spark built for it (classic pyspark: ``queryExecution().analyzed()``, every query's
and the input's as JSON in one ``toJSON`` call; Spark Connect: the client's plan typed by the
server, in the same JSON shape, see :mod:`sparkqos.spark.connect_plan`) and hands the parsed JSON to
:func:`sparkqos.compile.spark_plan.compile_plans`, which maps it to the executor's operators.
Nothing runs on Spark: the transform only builds a plan, so an unsupported operation is reported
(:class:`~sparkqos.errors.UnsupportedTransform`) before any data moves.
:func:`run` pushes a finite DataFrame through the executor under a strategy and returns every
query's output; :func:`sparkqos.stream` takes the same mapping of transforms for a stream.

For example (a Spark session is needed, so this is not a doctest)::

    def fire(df):
        return df.where(F.col("temperature") > 60).select("sensor_id", "temperature")

    sparkqos.run(sensors_df, {"fire": fire}, strategy="chain")["fire"]  # a pyarrow.Table
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.pandas.types import to_arrow_schema

from sparkqos.compile.nodes import watermarks_through_aliases
from sparkqos.compile.spark_part import check_placement
from sparkqos.compile.spark_plan import DEFAULT_STREAM, compile_plans
from sparkqos.errors import ArgumentError, RunnerError, UnsupportedTransform, check_number
from sparkqos.executor.loop import replay
from sparkqos.executor.options import ExecutorOptions
from sparkqos.executor.plan import CompiledPlan
from sparkqos.io.deadletter import DeadLetterSink, RowChecks
from sparkqos.io.sinks import Sink
from sparkqos.runtime.config import (
    NOT_FOR_RUN,
    SHORTHANDS,
    UNSET,
    Continuous,
    Input,
    Outputs,
    Recovery,
    Storage,
    StrategyConfig,
    Trigger,
    refuse,
    strategy_and_executor,
)
from sparkqos.runtime.intake import Intake
from sparkqos.schedulers.base import Scheduler
from sparkqos.sources.pyenv import check_python_workers
from sparkqos.spark import static_tables, udfs
from sparkqos.spark.spark_part import ClassicStager, ConnectStager, evaluate_parts, reads_input

__all__ = ["Transform", "compile_transforms", "input_tables", "is_transforms", "run", "run_compiled"]

#: A continuous query written as PySpark code.
Transform = Callable[[DataFrame], DataFrame]

#: Readers of what a query's plan JSON leaves out (a static table's rows, a UDF's function):
#: ``reader(query, result, jvm_plan, plan_json)`` with the transform's result DataFrame and, on
#: classic pyspark, its analyzed JVM plan and that plan's JSON as already parsed (both None under
#: Spark Connect) returns entries for the query's ``context`` in
#: :func:`~sparkqos.compile.spark_plan.compile_plans`.
CONTEXT_READERS: tuple[Callable[[str, DataFrame, Any, list[dict[str, Any]] | None], Mapping[str, Any]], ...] = (
    static_tables.join_sides,
    udfs.read_udfs,
    udfs.schema_parser,
)


@functools.lru_cache(maxsize=8)
def _java_version(session: Any) -> int | None:
    """The major version of the JDK Spark computes on (its ``Double.toString`` decides how
    ``round`` reads a double, see sparkqos.executor.expressions.numeric); None when it cannot be read."""
    try:
        jvm = getattr(session, "_jvm", None)
        if jvm is not None:
            text = str(jvm.java.lang.System.getProperty("java.specification.version"))
        else:  # Spark Connect: ask the server
            prop = "java_method('java.lang.System', 'getProperty', 'java.specification.version')"
            text = str(session.range(1).selectExpr(prop).first()[0])
    except Exception:  # noqa: BLE001 - a session that cannot say: the round handler assumes a current JDK
        return None
    major = text.split(".")[1] if text.startswith("1.") else text.split(".")[0]
    return int(major) if major.isdigit() else None


def _plan_facts(name: str, result: DataFrame, jvm_plan: Any, plan_json: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """What the analyzed JSON leaves out for stateful operators: whether the input streams, and
    each watermark's delay in seconds by its event-time column's expression id
    (``EventTimeWatermark.delay`` is a CalendarInterval the JSON writes as null); and the JDK
    version Spark computes on. The JVM plan is walked (a round trip per node) only when its JSON,
    ``plan_json`` if given, has an EventTimeWatermark."""
    facts: dict[str, Any] = {"streaming": bool(result.isStreaming), "java_version": _java_version(result.sparkSession)}
    if jvm_plan is None:
        return facts
    if plan_json is not None and not any(str(e.get("class", "")).endswith(".EventTimeWatermark") for e in plan_json):
        facts["watermarks"] = {}
        return facts
    from py4j.java_gateway import get_field

    def items(seq: Any) -> list[Any]:
        return [seq.apply(i) for i in range(seq.size())]

    watermarks: dict[int, float] = {}
    nodes = [jvm_plan]
    while nodes:
        node = nodes.pop()
        if node.getClass().getSimpleName() == "EventTimeWatermark":
            d = node.delay()
            months, days, micros = (int(get_field(d, f)) for f in ("months", "days", "microseconds"))
            # Spark's own conversion of the delay (EventTimeWatermark.getDelayMs): a month is 31 days
            watermarks[int(node.eventTime().exprId().id())] = ((months * 31 + days) * 86_400_000_000 + micros) / 1e6
        nodes.extend(items(node.children()))
    # Spark carries a watermark through an alias of its column (select(col("ts").alias("t")))
    facts["watermarks"] = watermarks_through_aliases(
        watermarks, plan_json if plan_json is not None else json.loads(jvm_plan.toJSON())
    )
    return facts


def _context(name: str, result: DataFrame, jvm_plan: Any, plan_json: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = _plan_facts(name, result, jvm_plan, plan_json)
    for reader in CONTEXT_READERS:
        out.update(reader(name, result, jvm_plan, plan_json))
    return out


def is_transforms(queries: Any) -> bool:
    """Whether ``queries`` is a mapping of query name → transform (not a QuerySet)."""
    return isinstance(queries, Mapping)


def _analyzed(df: DataFrame) -> Any:
    jdf = getattr(df, "_jdf", None)
    if jdf is None:
        raise RunnerError(
            "queries given as PySpark transforms need classic pyspark (a DataFrame with a JVM plan); "
            f"got {type(df).__module__}.{type(df).__name__}"
        )
    return jdf.queryExecution().analyzed()


def _arrow_schema(df: DataFrame) -> pa.Schema:
    """The Arrow schema ``df.toArrow()`` (and so ``foreachBatch``'s ``toArrow()``) gives: UTC
    timestamps, large strings when the session asks for them."""
    large = df.sparkSession.conf.get("spark.sql.execution.arrow.useLargeVarTypes", "false") == "true"
    return to_arrow_schema(df.schema, timezone="UTC", prefers_large_types=large)


def _cast_modes(plan: Any) -> set[str]:
    """Eval modes (LEGACY, ANSI, TRY) of the casts in a JVM plan. The JSON leaves ``evalMode``
    null, and a ``try_cast`` (null where a cast overflows) must not run as a plain one."""
    modes: set[str] = set()

    def items(seq: Any) -> list[Any]:
        return [seq.apply(i) for i in range(seq.size())]

    nodes = [plan]
    while nodes:
        node = nodes.pop()
        exprs = items(node.expressions())
        while exprs:
            e = exprs.pop()
            if e.getClass().getSimpleName() == "Cast":
                modes.add(str(e.evalMode().toString()))
            exprs.extend(items(e.children()))
        nodes.extend(items(node.children()))
    return modes


def _may_try_cast(result: DataFrame, plan: Any) -> bool:
    """Whether the JVM plan may hold a ``try_cast``, from its whole tree string in one call (Spark
    prints such a cast as ``try_cast(...)``; no field list cut short). Walking the plan node by
    node over Py4J (:func:`_cast_modes`) costs a round trip per expression — seconds per query for
    the experiments' plans, 40 s to start 320 operators — so only a plan that may hold one is walked.
    A string Spark had to cut at ``spark.sql.maxPlanStringLength`` is walked too."""
    text = plan.treeString(False, False, 2_147_483_647, False, False)
    if "try_cast(" in text:
        return True
    try:
        limit = int(str(result.sparkSession.conf.get("spark.sql.maxPlanStringLength", "2147483632")).strip())
    except ValueError:  # a size with a unit: walk rather than guess
        return True
    return len(text) >= limit - 64


def _subtrees(entries: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The children's subtrees of the first node of a pre-order plan JSON."""
    out, i = [], 1
    for _ in range(int(entries[0].get("num-children", 0))):
        need, start = 1, i
        while need:
            need += int(entries[i].get("num-children", 0)) - 1
            i += 1
        out.append(entries[start:i])
    return out


def _union(session: Any, plans: list[Any]) -> Any:
    """One JVM Union node over ``plans``, built for reading them in one call (never analysed or
    run); None where this Spark cannot build it."""
    try:
        jvm = session._jvm
        return jvm.org.apache.spark.sql.catalyst.plans.logical.Union(jvm.PythonUtils.toSeq(plans), False, False)
    except Exception:  # noqa: BLE001 - a Spark without this Union: the caller reads plan by plan
        return None


def _json_of(session: Any, plans: list[Any]) -> list[list[dict[str, Any]]]:
    """The JSON of each JVM plan of ``plans``, read in one call, as the children of one
    :func:`_union`: each ``toJSON`` call costs tens of milliseconds however small the plan,
    seconds for forty queries. One call per plan where the Union cannot be built."""
    union = _union(session, plans)
    if union is not None:
        parts = _subtrees(json.loads(union.toJSON()))
        if len(parts) == len(plans):
            return parts
    return [json.loads(p.toJSON()) for p in plans]


class _ClassicPlans:
    """Analyzed plans as JSON, straight from the JVM (classic pyspark), all read in one call
    once every query is known."""

    def __init__(self, df: DataFrame):
        self.df = df
        self.source = _analyzed(df)
        self.added: dict[str, tuple[DataFrame, Any]] = {}
        self.plans: dict[str, list[dict[str, Any]]] = {}
        self.context: dict[str, dict[str, Any]] = {}
        self.stager = ClassicStager(df)

    def add(self, name: str, result: DataFrame) -> None:
        self.added[name] = (result, _analyzed(result))

    def _read(self) -> None:
        names = list(self.added)
        jsons = _json_of(self.df.sparkSession, [self.source] + [self.added[n][1] for n in names])
        self.source_json = jsons[0]
        output = self.source.output()
        self.source_ids = [int(output.apply(i).exprId().id()) for i in range(output.size())]
        for name, plan_json in zip(names, jsons[1:], strict=True):
            result, analyzed = self.added[name]
            self.plans[name] = plan_json
            self.stager.add(name, analyzed, plan_json)
            self.context[name] = _context(name, result, analyzed, plan_json)
        # a try_cast is looked for in the tree string of every plan with a cast at once, then
        # in each such plan if that string may hold one
        casts = [n for n in names if '.Cast"' in json.dumps(self.plans[n])]
        union = _union(self.df.sparkSession, [self.added[n][1] for n in casts]) if len(casts) > 1 else None
        if casts and (union is None or _may_try_cast(self.df, union)):
            for name in casts:
                result, analyzed = self.added[name]
                if _may_try_cast(result, analyzed) and "TRY" in _cast_modes(analyzed):
                    raise UnsupportedTransform(name, "Spark function 'try_cast'")

    def read(self, time_zone: str) -> tuple[dict[str, list[dict[str, Any]]], list[dict[str, Any]], list[int]]:
        if len(self.plans) < len(self.added):
            self._read()
        return self.plans, self.source_json, self.source_ids

    def contexts(self) -> dict[str, dict[str, Any]]:
        if len(self.plans) < len(self.added):
            self._read()
        return self.context


class _ConnectPlans:
    """Spark Connect has no JVM plan on the client: the client's plans, typed by the server, in the
    same JSON shape (:mod:`sparkqos.spark.connect_plan`), read once every query is known."""

    def __init__(self, df: DataFrame):
        self.df = df
        self.results: dict[str, DataFrame] = {}
        self.context: dict[str, dict[str, Any]] = {}
        self.stager = ConnectStager(df)

    def add(self, name: str, result: DataFrame) -> None:
        self.results[name] = result
        self.context[name] = _context(name, result, None)

    def contexts(self) -> dict[str, dict[str, Any]]:
        return self.context

    def read(self, time_zone: str) -> tuple[dict[str, list[dict[str, Any]]], list[dict[str, Any]], list[int]]:
        from sparkqos.spark.connect_plan import connect_plans

        plans, source, ids, contexts = connect_plans(self.df, self.results, time_zone)
        for name, extra in contexts.items():
            self.context[name].update(extra)
        self.stager.plans = plans
        return plans, source, ids


def compile_transforms(
    df: DataFrame,
    queries: Mapping[str, Transform],
    classes: Mapping[str, str] | None = None,
    priorities: Mapping[str, float] | None = None,
    placement: str = "auto",
) -> CompiledPlan:
    """One :class:`CompiledPlan` for every transform of ``queries`` over ``df`` (the input's
    stream is ``"input"``; each part Spark evaluates feeds a stream of its own, see
    :mod:`sparkqos.compile.spark_part`); ``classes`` maps query → class, ``priorities`` class →
    priority, ``placement`` is ``"auto"``, ``"native"`` or ``"spark"``.
    Raises :class:`~sparkqos.errors.UnsupportedTransform` for what sparkqos cannot run."""
    if not isinstance(df, DataFrame):
        raise ArgumentError(f"expected a pyspark DataFrame, got {type(df).__name__}", parameter="df", value=df)
    if not is_transforms(queries) or not queries:
        raise ArgumentError(
            "queries must be a non-empty mapping of query name to a function DataFrame -> DataFrame",
            parameter="queries",
            value=queries,
            expected="{name: transform, ...}",
        )
    check_placement(placement)
    plans = (_ConnectPlans if type(df).__module__.startswith("pyspark.sql.connect") else _ClassicPlans)(df)
    outputs: dict[str, pa.Schema] = {}
    for name, transform in queries.items():
        if not callable(transform):
            raise ArgumentError(
                f"query {name!r} must be a function DataFrame -> DataFrame, got {transform!r}",
                parameter="queries",
                value=transform,
                expected="a callable",
            )
        result = transform(df)
        if not isinstance(result, DataFrame):
            raise ArgumentError(
                f"query {name!r}: the transform returned {type(result).__name__}, not a DataFrame",
                parameter="queries",
                value=result,
                expected="a DataFrame",
            )
        plans.add(name, result)
        outputs[name] = _arrow_schema(result)
    time_zone = df.sparkSession.conf.get("spark.sql.session.timeZone")
    query_plans, source_json, source_ids = plans.read(time_zone)
    return compile_plans(
        query_plans,
        source_json,
        source_ids,
        _arrow_schema(df),
        outputs=outputs,
        time_zone=time_zone,
        classes=classes,
        priorities=priorities,
        context=plans.contexts(),
        placement=placement,
        stager=plans.stager,
    )


def _feeds(tables: Mapping[str, pa.Table], batch_rows: int) -> Iterator[tuple[float, str, pa.RecordBatch]]:
    """Each stream's rows in batches of ``batch_rows``, the i-th batch of every stream at time i."""
    chunks = {s: t.combine_chunks().to_batches(max_chunksize=batch_rows) for s, t in tables.items()}
    for i in range(max((len(c) for c in chunks.values()), default=0)):
        for stream, batches in chunks.items():
            if i < len(batches) and batches[i].num_rows:
                yield float(i), stream, batches[i]


def run(
    df: DataFrame,
    queries: Mapping[str, Transform],
    strategy: StrategyConfig | str | Scheduler = "adaptive",
    *,
    # the queries (transforms given by name)
    classes: Mapping[str, str] | None = None,
    priorities: Mapping[str, float] | None = None,
    placement: str = "auto",
    # the strategy (StrategyConfig's fields)
    qos: Any = UNSET,
    class_shares: bool | None = UNSET,
    strategy_params: Mapping[str, Any] | None = UNSET,
    # the executor (ExecutorOptions, or its fields)
    executor: ExecutorOptions | None = None,
    budget_s: float | None = UNSET,
    whole_batches: bool = UNSET,
    cluster_threads: int | None = UNSET,
    threads: int | None = UNSET,
    overhead_share: float | None = UNSET,
    ratio: float = UNSET,
    threshold: int = UNSET,
    w: float = UNSET,
    tolerance: float = UNSET,
    stats_period: float = UNSET,
    starvation_limit: int = UNSET,
    memory_limit_bytes: int | None = UNSET,
    spill_dir: str | None = UNSET,
    executor_args: Mapping[str, Any] | None = UNSET,
    # sparkqos.run only: how the finite input arrives and is served
    batch_rows: int = 256,
    units_between: int = 3,
    # sparkqos.stream only: storage and recovery, trigger, worker, input, intake, reporting, lane
    storage: Storage | None = None,
    recovery: Recovery | None = None,
    outputs: Outputs | None = None,
    checkpoint: str | Path = UNSET,
    output: str | Path | None = UNSET,
    sink: Sink | None = UNSET,
    dead_letter: DeadLetterSink | str | Path | None = UNSET,
    keep_checkpoints: int = UNSET,
    fsync: bool = UNSET,
    trigger: Trigger | None = None,
    trigger_s: float | str = UNSET,
    continuous: Continuous | bool | None = True,
    slice_s: float | None = UNSET,
    top_class_s: float | None = UNSET,
    early_write_s: float | None = UNSET,
    worker_nice: int = UNSET,
    input: Input | None = None,  # noqa: A002 - the part's name
    stream: str | None = UNSET,
    arrival_col: str | None = UNSET,
    checks: RowChecks | None = UNSET,
    warm_up_s: float = UNSET,
    intake: Intake | None = None,
    name: str = "sparkqos",
    on_progress: Callable[[dict[str, Any]], None] | None = None,
    on_delays: Callable[[int, dict[str, Any]], None] | None = None,
    fault: str | None = None,
    slo: Mapping[str, str | float] | None = None,
    shed: Mapping[str, str | float] | None = None,
    shards: int | None = None,
    shard_by: str | None = None,
) -> dict[str, pa.Table]:
    """Every query's output (user columns only) on the finite DataFrame ``df``, computed by the
    executor under ``strategy``: the rows arrive in batches of ``batch_rows``, one a second of the
    executor's clock, and the strategy serves ``units_between`` units after each, so a backlog
    builds up before :meth:`~sparkqos.executor.Executor.finish` drains it. The other keywords are
    :func:`sparkqos.stream`'s and mean the same (the transforms', the strategy's, the executor's),
    with the same defaults; the strategy is sized as a stream's, to ``budget_s``, else the
    interval between batches (1 s here). Those that mean nothing for a finite DataFrame (storage,
    trigger, worker, input, reporting, shards) are refused, saying why
    (:data:`~sparkqos.runtime.config.NOT_FOR_RUN`)."""
    return _run(df, queries, {k: v for k, v in locals().items() if k not in ("df", "queries")})


def _run(df: DataFrame, queries: Mapping[str, Transform], keywords: dict[str, Any]) -> dict[str, pa.Table]:
    """:func:`run` on its ``keywords``; ``strategy_params`` is the deprecated spelling of
    ``StrategyConfig(params=...)``."""
    refuse("sparkqos.run", keywords, _DEFAULTS, NOT_FOR_RUN)
    batch_rows, units_between, placement = keywords["batch_rows"], keywords["units_between"], keywords["placement"]
    check_number("batch_rows", batch_rows, integer=True, low=1)
    check_number("units_between", units_between, integer=True, low=0)
    check_placement(placement)
    if df.isStreaming:
        raise RunnerError("sparkqos.run needs a finite DataFrame; give a streaming one to sparkqos.stream")
    check_python_workers(df.sparkSession)
    shorthands = {
        k: v
        for k, v in keywords.items()
        if v is not UNSET and (k == "executor_args" or SHORTHANDS.get(k, ("",))[0] in ("strategy", "executor"))
    }
    strategy, options = strategy_and_executor(keywords["strategy"], keywords["executor"], **shorthands)
    compiled = compile_transforms(df, queries, keywords["classes"], keywords["priorities"], placement)
    scheduler = strategy.make(compiled.plan, options.budget_s or BATCH_INTERVAL_S)
    return run_compiled(compiled, input_tables(compiled, df), scheduler, batch_rows, units_between, options)


#: Seconds between two of :func:`run`'s batches on the executor's clock: the interval its
#: strategy is sized to when ``budget_s`` is not given.
BATCH_INTERVAL_S = 1.0

#: :func:`run`'s keywords and their defaults (what "not given" is for each).
_DEFAULTS = {n: p.default for n, p in inspect.signature(run).parameters.items() if p.default is not p.empty}


def input_tables(compiled: CompiledPlan, df: DataFrame) -> dict[str, pa.Table]:
    """What each stream of ``compiled`` takes from the finite DataFrame ``df``: the rows of every
    part Spark evaluates, and ``df``'s own rows when a native operator reads them."""
    tables, _ = evaluate_parts(compiled.spark_parts, compiled.plan.classes, df)
    if reads_input(compiled):
        schema = compiled.sources[DEFAULT_STREAM]
        table = df.toArrow()
        tables = {DEFAULT_STREAM: table if table.schema.equals(schema) else table.cast(schema), **tables}
    return tables


def run_compiled(
    compiled: CompiledPlan,
    tables: Mapping[str, pa.Table],
    scheduler: Scheduler,
    batch_rows: int = 256,
    units_between: int = 3,
    options: ExecutorOptions | None = None,
) -> dict[str, pa.Table]:
    """:func:`run` after compiling: each stream's rows (:func:`input_tables`) through the executor
    under ``scheduler``, every query's output."""
    ex = replay(compiled, scheduler, _feeds(tables, batch_rows), units_between=_forever(units_between), options=options)
    return {q: ex.result(q) for q in compiled.roots}


def _forever(n: int) -> Iterator[int]:
    while True:
        yield n
