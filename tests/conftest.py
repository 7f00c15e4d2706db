"""Shared fixtures: one SparkSession for every Spark test of the session; the launcher of the
Spark Connect jobs, which run in a process of their own; and the scaffolding of the tests that
serve a replayed trace with ``sparkqos.stream`` and compare it with Spark's own streaming run of
the same transforms (:func:`replay`, :func:`stream_to_end`, :func:`spark_streams`,
:func:`closed_by`). These live here, not in ``sparkqos.testing``, because they need Spark and
``sparkqos.stream``, which the import contracts keep out of that module."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from tests import class_sharing

ROOT = Path(__file__).resolve().parent.parent

# Every JVM the tests start (the shared session, the Spark Connect server, the subprocess jobs and
# notebook kernels, which inherit the environment) compiles with the JIT's first tier only and
# collects with the serial collector: a test's JVM lives for seconds to minutes, where the
# optimising tier and the parallel collector's threads cost more CPU than they return. It halves
# the JVM's CPU time (59 s -> 29 s over test_transforms_keyed + test_transforms_stateful) and
# changes nothing of what Spark computes. The bytecode verifier is off for classes outside the JDK
# (Spark's jars and the classes its code generator compiles, all made by compilers; verifying
# guards against malformed bytecode and computes nothing): a session's start and a short stream
# cost the JVM 12.1 CPU-seconds against 16.2, tests/test_transforms.py 68.8 against 72.2. Each JVM
# maps the virtualenv's class-data sharing archive when there is one (tests/class_sharing.py). A
# user's own SPARK_SUBMIT_OPTS wins.
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:+UnlockDiagnosticVMOptions -XX:-BytecodeVerificationRemote"
_archive = class_sharing.archive_path(JVM_OPTIONS)
_ours = JVM_OPTIONS if _archive is None else f"{JVM_OPTIONS} {class_sharing.sharing_options(_archive)}"
os.environ.setdefault("SPARK_SUBMIT_OPTS", _ours)
#: The class-data sharing archive the tests' JVMs map (None: none, or the user's SPARK_SUBMIT_OPTS).
SHARED_CLASSES = _archive if os.environ["SPARK_SUBMIT_OPTS"] == _ours else None

#: The Python of Spark's Python processes in the tests (UDF workers, Python sources' runners, the
#: Connect server's): this one, through the launcher spark-submit.sh uses, which imports pyspark from
#: this Python's installation instead of compiling it from Spark's pyspark.zip in every process.
SPARK_PYTHON = str(ROOT / "sparkqos" / "spark" / "spark-python")
os.environ.setdefault("SPARKQOS_PYTHON", sys.executable)

#: Each test file's seconds on one xdist worker: (its default set, its slow set), from one run of
#: .ci/run's command with ``--durations=0`` on the 2-core development VM under load (5 to 8: a
#: file's seconds follow the load while it runs; only the ratios matter). The default set's figures
#: leave out the tests of :data:`SPARK_SMOKE`, weighed apart (:data:`SPARK_SMOKE_S`). The files are
#: handed to the workers longest first, as units of :func:`xdist_scope`, each unit weighed by what
#: the run's selection takes of it (the slow set's share only when slow tests are selected), so that
#: with ``-n 2`` the long units start first, the short ones fill the gaps and both workers end at
#: about the same time. A file not listed counts :data:`UNLISTED_S` a test; a worker's first Spark
#: test also pays its Spark session's start.
SECONDS = {
    "test_every_type.py": (11, 407),
    "test_connect.py": (0, 317),
    "test_sharded.py": (5, 215),
    "test_conformance.py": (0, 170),
    "test_aggregates.py": (2, 163),
    "test_spark_aggregates.py": (0, 160),
    "test_transforms.py": (0, 133),
    "test_notebooks.py": (0, 104),
    "test_readme.py": (3, 100),
    "test_transforms_keyed.py": (0, 94),
    "test_vessels.py": (0, 59),
    "test_contract.py": (55, 0),
    "test_spark_part.py": (0, 54),
    "test_wheel.py": (8, 45),
    "test_runner.py": (0, 53),
    "test_adaptive.py": (23, 28),
    "test_transforms_joins.py": (0, 51),
    "test_transform_with_state.py": (0, 44),
    "test_transforms_native.py": (1, 43),
    "test_experiments.py": (12, 27),
    "test_session_window.py": (0, 37),
    "test_pandas_state.py": (0, 36),
    "test_transforms_udfs.py": (0, 34),
    "test_sources.py": (19, 15),
    "test_transforms_examples.py": (0, 27),
    "test_class_shares.py": (5, 22),
    "test_continuous.py": (24, 0),
    "test_transforms_strategies.py": (0, 22),
    "test_ais.py": (15, 3),
    "test_operators.py": (0, 16),
    "test_transforms_strictmath.py": (0, 16),
    "test_executor.py": (5, 9),
    "test_transforms_stateful.py": (0, 14),
    "test_report.py": (10, 0),
    "test_update_mode.py": (0, 9),
    "test_service.py": (8, 0),
    "test_hashes.py": (0, 8),
    "test_trigger.py": (8, 0),
    "test_sinks.py": (0, 6),
    "test_connect_transforms.py": (0, 6),
    "test_delta.py": (6, 0),
    "test_reliability.py": (5, 0),
    "test_intake.py": (5, 0),
    "test_startup.py": (3, 1),
    "test_spark_submit.py": (4, 0),
    "test_properties.py": (4, 0),
    "test_path_strategies.py": (4, 0),
    "test_class_strategies.py": (4, 0),
    "test_class_sharing.py": (2, 0),
    "test_workload.py": (1, 0),
}
UNLISTED_S = 0.02

#: The tests taking the ``spark`` fixture that the default set (the README's test command) runs,
#: by file: for each part of sparkqos that meets Spark, its plan read through Spark and its
#: refusals, which only read a plan, and a few cheap runs against Spark's own answer. Every
#: other test taking the fixture is marked slow (:func:`pytest_collection_modifyitems`), so CI
#: (``SPARKQOS_SLOW=1``, as .ci/run runs) still takes it: the other equal-to-Spark runs, streams
#: end to end, restarts and crashes, every strategy and every hypothesis example. The tests that
#: need no JVM all stay in the default set, with the unit tests of the operators these stand for.
#: With only the default set selected these form one xdist unit (:func:`xdist_scope`), so one
#: worker starts a Spark session.
SPARK_SMOKE: dict[str, frozenset[str]] = {
    name: frozenset(tests)
    for name, tests in {
        # sparkqos.stream end to end against Spark's engine: its chain run, progress, bad arguments
        "test_runner.py": (
            "test_outputs_equal_sparks_engine",
            "test_progress_and_metrics",
            "test_bad_configuration_fails_at_construction",
        ),
        # the compiler of each family of constructs: its plan, its refusals, a run where cheap
        "test_transforms.py": (
            "test_unsupported_raises_before_any_data_moves",
            "test_wrong_arguments_fail_before_any_work",
            "test_operators_are_spark_operators",
        ),
        "test_transforms_examples.py": (
            "test_sensor_transforms_compile_with_their_classes",
            "test_synthetic_checks_its_arguments",
        ),
        "test_transforms_joins.py": (
            "test_join_plans_are_one_operator_per_spark_operator",
            "test_refused_static_joins_name_the_operation",
            "test_refused_stream_joins_name_the_operation",
        ),
        "test_transforms_keyed.py": ("test_lag_plan", "test_unsupported_windows_name_what"),
        "test_transforms_native.py": ("test_hard_rounding_cases_equal_spark", "test_unsupported_native_constructs_name_what"),
        "test_transforms_stateful.py": ("test_aggregate_plan_is_one_operator", "test_unsupported_aggregations_name_what"),
        "test_transforms_udfs.py": (
            "test_a_udf_is_one_expression_in_the_operator_of_its_clause",
            "test_refused_kinds_name_themselves",
        ),
        "test_aggregates.py": ("test_min_and_max_of_a_struct_run_natively",),
        "test_spark_aggregates.py": ("test_explain_says_which_aggregates_spark_computes",),
        "test_hashes.py": ("test_what_is_not_native_is_refused_naming_it",),
        "test_session_window.py": ("test_the_plan_is_one_operator_with_the_gap", "test_gaps_sparkqos_cannot_run_are_named"),
        "test_pandas_state.py": ("test_the_plan_runs_it_natively", "test_what_sparkqos_does_not_run_is_refused_naming_it"),
        "test_transform_with_state.py": (
            "test_the_plan_runs_it_natively",
            "test_what_sparkqos_does_not_run_is_refused_naming_it",
        ),
        "test_spark_part.py": ("test_explain_says_where_each_operator_runs", "test_a_bad_placement_is_a_placement_error"),
        "test_sharded.py": ("test_shardability_follows_the_shard_key",),
        # the executor's plans and operators against Spark's answer
        "test_executor.py": ("test_filter_chain_plan_matches_spark_under_every_strategy",),
        "test_operators.py": ("test_tumbling_window_aggregate_matches_spark",),
        # the sources as Spark reads them, the sinks as Spark reads them, Spark's Python workers
        "test_sources.py": ("test_bursty_readstream_matches_the_generator",),
        "test_sinks.py": ("test_spark_reads_the_sink_as_a_partitioned_table", "test_a_sink_without_parts_says_so"),
        "test_startup.py": ("test_sparks_python_workers_import_pyspark_from_its_installation",),
        # what Spark Connect, the docs and the vessel job need of a session
        "test_connect_transforms.py": ("test_compiled_aggregates_and_udfs_pickle",),
        "test_readme.py": (
            "test_explain_snippet_prints_what_the_page_shows",
            "test_session_settings_snippet_builds_the_session_with_the_raw_local_file_system",
        ),
        "test_vessels.py": ("test_every_query_has_a_class_and_the_transforms_check_their_arguments",),
    }.items()
}
#: The seconds of the tests of :data:`SPARK_SMOKE` on one worker, in the run :data:`SECONDS` comes
#: from (58 s), and of a Spark session's start and first jobs (44 s in a run of these tests alone
#: at that load): in a run of the default set alone they are one unit of :func:`xdist_scope`,
#: named :data:`SPARK_UNIT`.
SPARK_SMOKE_S = 102.0
SPARK_UNIT = "spark"

#: The tests that start a local Spark Connect server (``remote("local[2]")``): it always listens
#: on port 15002, so two of them at once fail to bind. They run one after another on one worker,
#: where the two files share one run of the :func:`connect_jobs` fixture (one server for both);
#: :class:`LongestFirst` weighs them as one unit.
CONNECT = (
    "tests/test_connect.py",
    "tests/test_connect_transforms.py",
    "tests/test_notebooks.py::test_quickstart_runs_top_to_bottom[connect]",
)


def in_spark_smoke(nodeid: str) -> bool:
    """Whether the test ``nodeid`` is one of :data:`SPARK_SMOKE`."""
    path, _, name = nodeid.partition("::")
    return name.split("[")[0] in SPARK_SMOKE.get(path.rpartition("/")[2], ())


def xdist_scope(nodeid: str, smoke_unit: bool = False) -> str:
    """The unit of work one xdist worker takes whole: the test's file (its module-scoped fixtures
    are built once), or ``spark-connect`` for the tests of :data:`CONNECT`, or for the notebooks
    each test alone (each starts its own kernel). With ``smoke_unit`` (a run of the default set
    only) the tests of :data:`SPARK_SMOKE` are one unit, ``spark``: one worker starts a Spark
    session and runs them all while the other runs the tests that need no JVM."""
    if smoke_unit and in_spark_smoke(nodeid):
        return SPARK_UNIT
    if nodeid.startswith(CONNECT):
        return "spark-connect"
    path = nodeid.split("::")[0]
    return nodeid if path == "tests/test_notebooks.py" else path


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """pytest-xdist's scope scheduling with the units of :func:`xdist_scope`, handed out in
    collection order (``--no-loadscope-reorder`` in pyproject.toml's addopts)."""
    from xdist.scheduler import LoadScopeScheduling

    smoke_unit = default_set_only(config)

    class ScopeScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_scope(nodeid, smoke_unit)

    return ScopeScheduling(config, log)


#: Set to 1, the default selection (addopts' ``-m 'not slow'``) takes the slow set too: one pytest
#: run, so that .ci/run pays one start-up (the workers' imports and Spark sessions) for both sets
#: and the scheduler balances their files together. An explicit ``-m`` is kept as given.
WITH_SLOW = "SPARKQOS_SLOW"


def default_set_only(config: pytest.Config) -> bool:
    """Whether the run selects the default set alone (addopts' ``-m 'not slow'``, no
    ``SPARKQOS_SLOW=1``): then the tests of :data:`SPARK_SMOKE` are one xdist unit."""
    return config.option.markexpr == "not slow"


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(LongestFirst(), "sparkqos-longest-first")
    if os.environ.get(WITH_SLOW) == "1" and config.option.markexpr == "not slow":
        config.option.markexpr = ""
    if SHARED_CLASSES is not None and not hasattr(config, "workerinput"):  # once per run, before any JVM
        class_sharing.check(SHARED_CLASSES, JVM_OPTIONS)


#: Per test file, how many of its collected tests are in the default set and in the slow set.
COLLECTED = pytest.StashKey[dict[str, list[int]]]()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test that takes the ``spark`` fixture ``spark`` (``-m "not spark"`` is the quick
    subset), and ``slow`` too unless :data:`SPARK_SMOKE` names it; count each file's default and
    slow tests before ``-m`` deselects any (:class:`LongestFirst` orders what is left)."""
    counts: dict[str, list[int]] = {SPARK_UNIT: [0, 0]}
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.spark)
            if not in_spark_smoke(item.nodeid):
                item.add_marker(pytest.mark.slow)
        name = SPARK_UNIT if in_spark_smoke(item.nodeid) else item.path.name
        counts.setdefault(name, [0, 0])[item.get_closest_marker("slow") is not None] += 1
    config.stash[COLLECTED] = counts


class LongestFirst:
    """Orders the selected tests by unit of :func:`xdist_scope`, the longest unit first (its
    seconds from :data:`SECONDS`: each test a share of its file's default or slow seconds), the
    tests of a unit together and in collection order; the Spark Connect unit first of all, so that
    the first worker, which makes the class-data sharing archive before its first test
    (:func:`_shared_classes_first`), takes it and its Connect server's JVM maps the archive. It
    runs after ``-m`` has deselected."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        counts = config.stash.get(COLLECTED, {})
        smoke_unit = default_set_only(config)

        def seconds(item: pytest.Item) -> float:
            if in_spark_smoke(item.nodeid):
                return SPARK_SMOKE_S / max(counts[SPARK_UNIT][0], 1)
            name, slow = item.path.name, item.get_closest_marker("slow") is not None
            if name not in SECONDS:
                return UNLISTED_S
            return SECONDS[name][slow] / max(counts.get(name, [1, 1])[slow], 1)

        units: dict[str, float] = {}
        for item in items:
            scope = xdist_scope(item.nodeid, smoke_unit)
            units[scope] = units.get(scope, 0.0) + seconds(item)
        if "spark-connect" in units:  # first: the worker making the class-data archive takes it
            units["spark-connect"] = float("inf")
        first_seen = {scope: rank for rank, scope in enumerate(units)}
        scopes = {item.nodeid: xdist_scope(item.nodeid, smoke_unit) for item in items}
        items.sort(key=lambda item: (-units[scopes[item.nodeid]], first_seen[scopes[item.nodeid]]))


def run_connect_job(script: str, *args: str, cwd: Path, timeout: float) -> dict:
    """Run ``tests/<script>`` (one ``remote("local[2]")`` session) in its own process, its Spark
    workers on this Python, and return the JSON summary its last line prints."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARK_CONNECT")}
    env["PYSPARK_PYTHON"], env["PYSPARK_DRIVER_PYTHON"] = SPARK_PYTHON, sys.executable
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run(
        [sys.executable, str(ROOT / "tests" / script), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def connect_trace(tmp_path_factory) -> Path:
    """A sensor trace for the Spark Connect tests (tests/test_connect.py): 3,000 readings over
    30 s, every 120th broken (a NaN temperature: a dead letter with its reason)."""
    import numpy as np
    import pyarrow.parquet as pq

    n = 3000
    rng = np.random.default_rng(5)
    table = pa.table(
        {
            "sensor_id": pa.array(rng.integers(0, 16, n), pa.int32()),
            "location": pa.array([f"z{i % 4}" for i in range(n)]),
            "temperature": pa.array(np.where(np.arange(n) % 120 == 7, np.nan, np.round(rng.normal(40, 15, n) * 2) / 2)),
            "humidity": pa.array(np.round(rng.uniform(10, 90, n) * 2) / 2),
            "ts": pa.array(1_700_000_000_000_000 + np.sort(rng.integers(0, 30_000_000, n)), pa.timestamp("us", tz="UTC")),
        }
    )
    path = tmp_path_factory.mktemp("trace") / "sensors.parquet"
    pq.write_table(table, path)
    return path


@pytest.fixture(scope="session")
def connect_jobs(connect_trace, tmp_path_factory) -> dict[str, tuple[Path, dict]]:
    """The Spark Connect jobs (tests/connect_jobs.py: the restart run over :func:`connect_trace`,
    then the transforms), once, in one process of their own with one local Connect server: each
    job's output folder and summary, by job (``restart``, ``transforms``)."""
    restart, transforms = tmp_path_factory.mktemp("connect_restart"), tmp_path_factory.mktemp("connect_transforms")
    # the jobs' time is bounded by the timeout only: how long they take is the suite's figure (a
    # timed assertion failed at 128 s on a loaded machine where the jobs were otherwise correct)
    summary = run_connect_job("connect_jobs.py", str(connect_trace), str(restart), str(transforms), cwd=restart, timeout=900)
    return {"restart": (restart, summary["restart"]), "transforms": (transforms, summary["transforms"])}


def examples(n: int) -> int:
    """Hypothesis examples for a test that asks Spark for each example's answer: ``n`` when the
    run takes the slow set too (``SPARKQOS_SLOW=1``, as .ci/run runs), else a third of ``n``, at
    least one. The README's test command, the inner loop, draws fewer inputs per run; CI draws
    every one. Each example costs Spark jobs (its batch answer, its DataFrame's rows read)."""
    return n if os.environ.get(WITH_SLOW) == "1" else max(1, -(-n // 3))


#: The strategies a test run over every registered strategy takes when the run leaves out the
#: slow set: the ones the jobs and the per-construct files run (fifo, chain, cqc, class_shares,
#: adaptive) and one of each other file of ``sparkqos/schedulers`` (cos; guards.py's oldest_guard;
#: path.py's pc; rate.py's hr). The rest of a file shares its family's code (basic.py's greedy,
#: mtiq and rr, like chain operator units under fig 4.1's rule; path.py's segment,
#: simplified_segment and threshold, pc's path units; rate.py's hnr; guards.py's dynamic_priority).
REPRESENTATIVE = frozenset({"fifo", "chain", "cqc", "class_shares", "adaptive", "cos", "oldest_guard", "pc", "hr"})


def strategies() -> list[str]:
    """The strategies of a test that runs every registered one: all of them when the run takes
    the slow set too (``SPARKQOS_SLOW=1``, as .ci/run runs), else :data:`REPRESENTATIVE` and any
    registered strategy that is not built in (a user's, registered by the time of the call). As
    :func:`examples`: the README's test command, the inner loop, runs one strategy of each family;
    CI runs every one."""
    from sparkqos import schedulers
    from sparkqos.schedulers.builtin import BUILT_IN

    names = schedulers.available()
    if os.environ.get(WITH_SLOW) == "1":
        return names
    return [name for name in names if name in REPRESENTATIVE or name not in BUILT_IN]


#: Whether the run's selection holds slow tests that need Spark (set once collected).
SLOW_SELECTED = pytest.StashKey[bool]()


def pytest_collection_finish(session: pytest.Session) -> None:
    session.config.stash[SLOW_SELECTED] = any(
        item.get_closest_marker("slow") and item.get_closest_marker("spark") for item in session.items
    )


def makes_shared_classes(config: pytest.Config) -> bool:
    """Whether this process's session makes the class-data sharing archive: when there is none
    yet and the run takes slow Spark tests, whose processes start JVMs of their own after the
    sessions (dumping costs about what the archive saves one JVM). One process makes it: the first xdist
    worker, or pytest without xdist."""
    return (
        SHARED_CLASSES is not None
        and not SHARED_CLASSES.exists()
        and config.stash.get(SLOW_SELECTED, False)
        and os.environ.get("PYTEST_XDIST_WORKER", "gw0") == "gw0"
    )


@pytest.fixture(scope="session", autouse=True)
def _shared_classes_first(request):
    """On the process that makes the archive, its session starts (and the archive is made) before
    the first test, whatever that test needs: the Spark Connect tests, which that worker takes
    first, then start their JVMs with it."""
    if makes_shared_classes(request.config):
        request.getfixturevalue("spark")


@pytest.fixture(scope="session")
def spark(request):
    os.environ.setdefault("PYSPARK_PYTHON", SPARK_PYTHON)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from sparkqos.spark.settings import configure

    dump = makes_shared_classes(request.config)
    options = os.environ["SPARK_SUBMIT_OPTS"]
    if dump:  # this JVM only; the processes started later keep the archive's options
        os.environ["SPARK_SUBMIT_OPTS"] = f"{JVM_OPTIONS} -XX:+RecordDynamicDumpInfo"
    try:
        s = configure(  # as the jobs' sessions: Spark's checkpoint logs without .crc files
            SparkSession.builder.master("local[2]")
            .appName("sparkqos-tests")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        ).getOrCreate()
    finally:
        os.environ["SPARK_SUBMIT_OPTS"] = options
    if dump:  # a shuffle and an Arrow collect load the classes most sessions load next
        s.range(8).groupBy((F.col("id") % 2).alias("k")).count().toArrow()
        class_sharing.dump(s._jvm.java.lang.ProcessHandle.current().pid(), SHARED_CLASSES, JVM_OPTIONS)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def spark_sql(spark):
    """The shared session with Spark's non-ANSI semantics (what sparkqos reproduces), for a module."""
    before = spark.conf.get("spark.sql.ansi.enabled")
    spark.conf.set("spark.sql.ansi.enabled", "false")
    yield spark
    spark.conf.set("spark.sql.ansi.enabled", before)


def run_under_each(df, queries: Mapping[str, Callable], strategies, **run_options: Any) -> dict[str, dict[str, pa.Table]]:
    """``sparkqos.run(df, queries, strategy=s, **run_options)`` for each of ``strategies`` (by
    name), with the transforms compiled and ``df`` read once: the steps of ``sparkqos.run``
    (compile, read the input, the strategy sized to the default budget, the executor over a fresh
    copy of the compiled plan), so that a test comparing every strategy with one answer of Spark's
    asks Spark for that answer once."""
    from sparkqos.executor.options import ExecutorOptions
    from sparkqos.runtime.config import StrategyConfig
    from sparkqos.spark.transforms import compile_transforms, input_tables, run_compiled

    batch_rows, units_between = run_options.pop("batch_rows", 256), run_options.pop("units_between", 3)
    compiled = compile_transforms(df, queries, **run_options)
    tables = input_tables(compiled, df)
    options = ExecutorOptions.of(None)
    budget_s = options.budget_s or 1.0
    schedulers = {name: StrategyConfig(name).make(compiled.plan, budget_s) for name in strategies}
    return {name: run_compiled(compiled, tables, s, batch_rows, units_between, options) for name, s in schedulers.items()}


# -- replayed streams ------------------------------------------------------------------------------


def replay(spark, path: str | os.PathLike, seconds_per_trigger: float | None = None):
    """The trace at ``path`` as a streaming DataFrame: ``sparkqos.replay`` as fast as it reads
    (``speed=max``, recorded timestamps kept), at most ``seconds_per_trigger`` recorded seconds in
    one micro-batch (None: the whole trace at once)."""
    from sparkqos import sources

    sources.register(spark)
    reader = spark.readStream.format("sparkqos.replay").option("path", str(path)).option("speed", "max")
    if seconds_per_trigger is not None:
        reader = reader.option("maxSecondsPerTrigger", str(seconds_per_trigger))
    return reader.load()


def _await_end(query, timeout_s: float, what: str, stop: Callable[[], None] | None = None) -> None:
    """Wait for a streaming query that runs its input to the end; stop it (``stop``, default the
    query's own) and fail when it has not ended in ``timeout_s``."""
    if not query.awaitTermination(timeout_s):
        (stop or query.stop)()
        raise AssertionError(f"{what} did not end within {timeout_s:g} s")


def stream_to_end(df, queries: Mapping[str, Any], checkpoint: Path, timeout_s: float = 180.0, **options: Any):
    """Serve ``queries`` with ``sparkqos.stream(df, queries, **options)`` until ``df``, a finite
    replay, ends (``trigger=Trigger(availableNow=True)``), then drain with ``finish()``; returns the
    :class:`~sparkqos.io.sinks.MemorySink` holding every query's rows."""
    import sparkqos
    from sparkqos.io.sinks import MemorySink

    sink = MemorySink()
    handle = sparkqos.stream(
        df, queries, trigger=sparkqos.Trigger(availableNow=True), checkpoint=checkpoint, sink=sink, **options
    )
    _await_end(handle.start(), timeout_s, "sparkqos.stream", stop=handle.stop)
    handle.finish()
    return sink


def stream_through_a_crash(monkeypatch, make: Callable[..., Any], fault: str, timeout_s: float = 300.0) -> tuple[Any, int]:
    """An available-now stream over a finite input that dies once and resumes: ``make(**options)``
    builds it (on one checkpoint and sink each time). The first attempt, with ``fault=fault``,
    dies at that point (``TriggerLoop._kill`` raises, where a real fault SIGKILLs the process);
    the second resumes from the checkpoint to the end of the input, then ``finish()``. Returns
    the second handle and the batch its checkpoint restored."""
    from pyspark.errors import StreamingQueryException

    from sparkqos.runtime.trigger import TriggerLoop

    class Crash(RuntimeError):
        pass

    def crash(self, where, batch_id):
        raise Crash(f"{where} of batch {batch_id}")

    point, batch = fault.split(":")
    with monkeypatch.context() as m:
        m.setattr(TriggerLoop, "_kill", crash)
        first = make(fault=fault)
        with pytest.raises(StreamingQueryException, match=f"{point} of batch {batch}"):
            first.start().awaitTermination(timeout_s)
        first.stop()
    second = make()
    restored = second.restore()
    if not second.start().awaitTermination(timeout_s):
        second.stop()
        raise AssertionError(f"the resumed stream did not end within {timeout_s:g} s")
    second.finish()
    return second, restored


@dataclass(frozen=True)
class Streamed:
    """One transform run by Spark's own streaming engine to the end of its input: every row its
    micro-batches gave (append mode), and the watermark its last batch ran with (None without one)."""

    rows: pa.Table
    watermark: dt.datetime | None


def spark_streams(
    transforms: Mapping[str, Callable],
    stream: Callable[[], Any],
    checkpoint: Path,
    timeout_s: float = 180.0,
    output_modes: Mapping[str, str] | None = None,
) -> dict[str, Streamed]:
    """Spark's own streaming run of each transform over a fresh ``stream()`` (e.g. ``lambda:
    replay(spark, path, 5)``): ``foreachBatch`` with ``availableNow``, each batch's rows taken as
    Arrow. The queries run side by side in the session, as any set of streaming queries does
    (the vessel job's four: 19 s, against 28 s one after another, on 2 busy cores). Windows Spark's append
    mode has not closed when the input ends (their end is after ``watermark``) are not among the
    rows: see :func:`closed_by`. ``output_modes``: a query's output mode other than append, by name."""
    batches: dict[str, list[pa.Table]] = {name: [] for name in transforms}
    queries = {}
    try:
        for name, transform in transforms.items():
            queries[name] = (
                transform(stream())
                .writeStream.foreachBatch(lambda batch_df, _batch_id, got=batches[name]: got.append(batch_df.toArrow()))
                .trigger(availableNow=True)
                .outputMode((output_modes or {}).get(name, "append"))
                .option("checkpointLocation", str(Path(checkpoint) / name))
                .start()
            )
        ends = time.monotonic() + timeout_s
        for name, query in queries.items():
            _await_end(query, max(ends - time.monotonic(), 0.001), f"Spark's streaming run of {name}")
    finally:
        for query in queries.values():
            if query.isActive:
                query.stop()
    out = {}
    for name, query in queries.items():
        if not batches[name]:
            raise AssertionError(f"Spark's streaming run of {name} ran no micro-batch (a used checkpoint {checkpoint}?)")
        nonempty = [t for t in batches[name] if t.num_rows]
        mark = (query.lastProgress or {}).get("eventTime", {}).get("watermark")
        out[name] = Streamed(
            pa.concat_tables(nonempty) if nonempty else batches[name][0],
            None if mark is None else dt.datetime.fromisoformat(mark.replace("Z", "+00:00")),
        )
    return out


def closed_by(table: pa.Table, watermark: dt.datetime, column: str = "window") -> pa.Table:
    """The rows of ``table`` whose event-time window (a struct column with ``end``) ends at or
    before ``watermark``: the windows Spark's append mode has emitted by then."""
    ends = table.column(column).combine_chunks().field("end")
    return table.filter(pc.less_equal(ends, pa.scalar(watermark, ends.type)))
