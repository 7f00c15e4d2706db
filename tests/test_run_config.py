"""The run configuration in named parts: each part checks itself, the trigger as PySpark spells it,
the stream keywords as shorthands for one field each, capabilities as types. Spark-free."""

from __future__ import annotations

import os

import pytest

from sparkqos import schedulers
from sparkqos.errors import ConfigError, ExecutorOptionError, RunnerError, TriggerError
from sparkqos.executor.loop import Executor
from sparkqos.executor.options import ExecutorOptions
from sparkqos.io.sinks import MemorySink, ParquetSink, PartedSink, Sink
from sparkqos.runtime.assembly import executor_options
from sparkqos.runtime.config import Continuous, Input, RunConfig, Storage, StrategyConfig, Trigger
from sparkqos.runtime.trigger import TriggerLoop
from sparkqos.schedulers import ClusterScheduler, Cos
from sparkqos.workloads.sensors import sensor_queries


@pytest.mark.parametrize(
    "kwargs, error_class",
    [
        ({}, "ONLY_ALLOW_SINGLE_TRIGGER"),
        ({"processingTime": 1.0, "availableNow": True}, "ONLY_ALLOW_SINGLE_TRIGGER"),
        ({"availableNow": True, "once": True}, "ONLY_ALLOW_SINGLE_TRIGGER"),
        ({"once": False}, "VALUE_NOT_TRUE"),
        ({"processingTime": 0}, "VALUE_NOT_POSITIVE"),
        ({"processingTime": "soon"}, "VALUE_NOT_POSITIVE"),
        ({"processingTime": True}, "VALUE_NOT_POSITIVE"),
    ],
)
def test_a_trigger_breaking_pysparks_rules_names_the_rule(kwargs, error_class):
    with pytest.raises(TriggerError, match=error_class) as exc:
        Trigger(**kwargs)
    assert exc.value.error_class == error_class and isinstance(exc.value, ConfigError)


def test_a_trigger_as_pyspark_spells_it():
    assert Trigger(processingTime="2 seconds").interval_s == 2.0
    assert Trigger(processingTime="250 milliseconds").interval_s == 0.25
    assert Trigger(processingTime="1 minute").interval_s == 60.0
    assert Trigger(processingTime=0.5).spark_kwargs() == {"processingTime": "0.5 seconds"}
    assert Trigger(once=True).spark_kwargs() == {"once": True} and Trigger(once=True).interval_s is None
    cfg = RunConfig(checkpoint="/tmp/c", trigger=Trigger(availableNow=True))
    assert cfg.interval_s is None and cfg.effective_budget_s == 1.0
    with pytest.raises(RunnerError, match="give trigger_s= or trigger=, not both"):
        RunConfig(checkpoint="/tmp/c", trigger=Trigger(once=True), trigger_s=1.0)


def test_shorthands_and_parts_build_the_same_config(tmp_path):
    short = RunConfig(
        checkpoint=tmp_path,
        output=tmp_path / "out",
        strategy="cqc",
        qos=None,
        trigger_s=1.0,
        budget_s=0.5,
        whole_batches=False,
        top_class_s=0.1,
        stream="sensors",
    )
    parts = RunConfig(
        storage=Storage(tmp_path, output=tmp_path / "out"),
        strategy=StrategyConfig("cqc"),
        trigger=Trigger(processingTime=1.0),
        executor=ExecutorOptions(budget_s=0.5, whole_batches=False),
        continuous=Continuous(top_class_s=0.1),
        input=Input(stream="sensors"),
    )
    assert short == parts
    assert repr(short.make_scheduler()) == repr(parts.make_scheduler()) == "Cqc(k=0.5, quantum=0.05)"
    assert short.replace(name="other").name == "other" and short.replace(name="other").storage == short.storage


@pytest.mark.parametrize(
    "options, error, parameter, message",
    [
        ({"chekpoint": "/tmp/c"}, RunnerError, "chekpoint", r"unknown run option 'chekpoint' \(did you mean 'checkpoint'\?\)"),
        ({}, RunnerError, "checkpoint", r"checkpoint is required"),
        (
            {"checkpoint": "/tmp/c", "storage": Storage("/tmp/d")},
            RunnerError,
            "checkpoint",
            r"give checkpoint= or storage=, not both",
        ),
        ({"checkpoint": "/tmp/c", "whole_batches": "yes"}, ExecutorOptionError, "whole_batches", r"whole_batches must be one of"),
        ({"checkpoint": "/tmp/c", "cluster_threads": -1}, ExecutorOptionError, "cluster_threads", r"cluster_threads must be"),
        ({"checkpoint": "/tmp/c", "trigger": 2.0}, RunnerError, "trigger", r"trigger must be a Trigger"),
        ({"checkpoint": "/tmp/c", "continuous": "yes"}, RunnerError, "continuous", r"continuous must be one of"),
        ({"checkpoint": "/tmp/c", "name": ""}, RunnerError, "name", r"name must be a non-empty string"),
        ({"checkpoint": "/tmp/c", "sink": "out/"}, RunnerError, "sink", r"sink must be a Sink"),
        ({"checkpoint": "/tmp/c", "stream": 3}, RunnerError, "stream", r"stream must be a name"),
    ],
)
def test_garbage_config_is_a_config_error_naming_the_key(options, error, parameter, message):
    with pytest.raises(error, match=message) as exc:
        RunConfig(**options)
    assert isinstance(exc.value, ConfigError) and exc.value.parameter == parameter


def test_a_strategy_with_garbage_params_names_them():
    with pytest.raises(RunnerError, match="params must be a mapping") as exc:
        StrategyConfig(params=[1])
    assert exc.value.parameter == "params"


def test_replaced_spellings_still_work_with_a_deprecation_warning(tmp_path):
    with pytest.warns(DeprecationWarning, match="executor=ExecutorOptions"):
        old = RunConfig(checkpoint=tmp_path, executor_args={"cluster_threads": 0, "ratio": 0.5})
    assert old.executor == ExecutorOptions(cluster_threads=0, ratio=0.5)
    with pytest.warns(DeprecationWarning, match="StrategyConfig"):
        old = RunConfig(checkpoint=tmp_path, strategy="adaptive", strategy_params={"seed": 3})
    assert old.strategy == StrategyConfig("adaptive", params={"seed": 3})
    with pytest.raises(ExecutorOptionError, match="unknown executor option 'ratoi'"):
        RunConfig(checkpoint=tmp_path, executor_args={"ratoi": 0.5})


def test_executor_options_as_keywords_or_one_object():
    compiled = sensor_queries().build()
    a = Executor(compiled.fresh(), "fifo", options=ExecutorOptions(ratio=0.5, whole_batches=False))
    b = Executor(compiled.fresh(), "fifo", ratio=0.5, whole_batches=False)
    assert a.options == b.options and (b.ratio, b.whole_batches) == (0.5, False)
    assert Executor(compiled.fresh(), "fifo").whole_batches  # the runner's default, for every engine
    with pytest.raises(ExecutorOptionError, match="unknown executor option 'ratoi' \\(did you mean 'ratio'\\?\\)"):
        Executor(compiled.fresh(), "fifo", ratoi=0.5)


def test_a_strategy_that_serves_clusters_is_a_type(tmp_path):
    assert isinstance(Cos(), ClusterScheduler) and not isinstance(schedulers.get("chain"), ClusterScheduler)
    config = RunConfig(checkpoint=tmp_path, strategy="cos", class_shares=False)
    threads = executor_options(config, config.make_scheduler()).cluster_threads
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    assert threads == (0 if usable == 1 else usable)
    assert executor_options(config, schedulers.get("chain")).cluster_threads == 0
    given = RunConfig(checkpoint=tmp_path, strategy="cos", class_shares=False, cluster_threads=1)
    assert executor_options(given, given.make_scheduler()).cluster_threads == 1
    with pytest.raises(RunnerError, match="cluster_threads needs a strategy with clusters"):
        Executor(sensor_queries().build().fresh(), "chain", cluster_threads=2)


def test_cos_gets_a_thread_per_core_the_process_may_run_on(tmp_path, monkeypatch):
    """The cluster threads follow the process's CPU affinity, not the machine's cores: under
    ``taskset -c 0`` COS serves its clusters in one thread (two on one core only take turns)."""
    config = RunConfig(checkpoint=tmp_path, strategy="cos", class_shares=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert executor_options(config, config.make_scheduler()).cluster_threads == 0
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    assert executor_options(config, config.make_scheduler()).cluster_threads == 3


def test_runs_are_sized_to_their_fixed_cost_in_the_runner_only():
    """The runner sizes no operator run below what makes its fixed cost 5 % of it
    (``overhead_share``); a given share is kept, and an executor built directly sizes runs as the
    strategy and the workload rule say."""
    from sparkqos.executor.runcost import OVERHEAD_SHARE

    config = RunConfig(checkpoint="/tmp/c")
    assert executor_options(config, config.make_scheduler()).overhead_share == OVERHEAD_SHARE == 0.05
    given = RunConfig(checkpoint="/tmp/c", executor=ExecutorOptions(overhead_share=0))
    assert executor_options(given, given.make_scheduler()).overhead_share == 0
    assert Executor(sensor_queries().build().fresh(), "chain").dispatcher.run_cost is None


def test_a_row_wise_run_gets_a_thread_per_usable_core_unless_told(monkeypatch):
    """The runner gives a row-wise operator's run one thread per core the process may use (its
    affinity: one under ``taskset -c 0``) unless ``threads`` is given; a given number is kept, and
    an executor built directly serves on one thread. (Which operators are cut: the executor's
    tests, UDFs declared thread-safe only.)"""
    import os

    config = RunConfig(checkpoint="/tmp/c")
    assert executor_options(config, config.make_scheduler()).threads == len(os.sched_getaffinity(0))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert executor_options(config, config.make_scheduler()).threads == 1
    given = RunConfig(checkpoint="/tmp/c", threads=2)
    assert executor_options(given, given.make_scheduler()).threads == 2
    assert Executor(sensor_queries().build().fresh(), "chain").dispatcher.slices is None


def test_a_sink_that_takes_parts_is_a_type(tmp_path):
    class Whole(Sink):
        def write(self, batch_id, outputs):
            pass

    class Audited(MemorySink):  # overrides write alone: sees every row, so takes whole batches
        def write(self, batch_id, outputs):
            super().write(batch_id, outputs)

    class AuditedParts(MemorySink):  # says it takes parts: its write keeps them
        supports_parts = True

        def write(self, batch_id, outputs, keep_parts=False):
            super().write(batch_id, outputs, keep_parts=keep_parts)

    assert isinstance(ParquetSink(tmp_path), PartedSink) and MemorySink().supports_parts
    assert not Whole().supports_parts and not Audited().supports_parts and AuditedParts().supports_parts
    loop = TriggerLoop(sensor_queries(), RunConfig(checkpoint=tmp_path / "c", sink=Audited(), budget_s=1.0))
    assert loop.sink.supports_parts is False
    loop.close()


def test_stream_and_run_share_one_explicit_signature():
    """``help(sparkqos.stream)`` and ``help(sparkqos.run)`` list every keyword: no ``**kwargs``,
    the same keywords with the same defaults, each meaning the same in both or refused, with the
    reason, by the entry point it means nothing to."""
    import inspect

    import sparkqos
    from sparkqos.runtime.config import NOT_FOR_RUN, NOT_FOR_STREAM, SHORTHANDS

    stream, run = inspect.signature(sparkqos.stream), inspect.signature(sparkqos.run)
    for sig in (stream, run):
        assert all(p.kind is not p.VAR_KEYWORD and p.kind is not p.VAR_POSITIONAL for p in sig.parameters.values())
    shared = [(p.name, p.kind, p.default) for p in list(stream.parameters.values())[2:]]
    assert shared == [(p.name, p.kind, p.default) for p in list(run.parameters.values())[2:]]
    names = {name for name, _, _ in shared}
    assert set(SHORTHANDS) <= names and set(NOT_FOR_RUN) | set(NOT_FOR_STREAM) <= names
    with pytest.raises(RunnerError, match="sparkqos.run does not take checkpoint=: .*no sink, dead letter or checkpoint") as exc:
        sparkqos.run(None, {}, checkpoint="/tmp/c")
    assert exc.value.parameter == "checkpoint"
    with pytest.raises(RunnerError, match="sparkqos.run does not take trigger_s=: sparkqos.run has no trigger"):
        sparkqos.run(None, {}, trigger_s=1.0)
    with pytest.raises(RunnerError, match="sparkqos.stream does not take batch_rows=: a stream's batches are Spark's"):
        sparkqos.stream(None, {}, batch_rows=10)


def test_run_takes_the_strategy_keywords_stream_takes():
    """``qos=`` and ``class_shares=`` mean in :func:`sparkqos.run` what they mean in
    :func:`sparkqos.stream` (a strategy that takes no QoS spec refuses ``qos`` the same way)."""
    from sparkqos.runtime.config import strategy_and_executor

    strategy, options = strategy_and_executor("adaptive", None, qos="low_memory", class_shares=False, ratio=0.5)
    assert strategy == StrategyConfig("adaptive", qos="low_memory", class_shares=False)
    assert options == ExecutorOptions(ratio=0.5)
    with pytest.raises(RunnerError, match="qos applies to the 'adaptive' strategy, not to 'fifo'"):
        strategy_and_executor("fifo", None, qos="low_memory")
    with pytest.raises(RunnerError, match="give budget_s= or executor=, not both"):
        strategy_and_executor("fifo", ExecutorOptions(), budget_s=1.0)


def test_recovery_apart_from_outputs(tmp_path):
    """Recovery (the checkpoint) and outputs (folder, sink, dead letters) are parts of their own;
    ``storage=Storage(...)`` and the shorthands give the same run."""
    from sparkqos.runtime.config import Outputs, Recovery

    parts = RunConfig(recovery=Recovery(tmp_path, keep_checkpoints=2), outputs=Outputs(tmp_path / "out"))
    short = RunConfig(checkpoint=tmp_path, keep_checkpoints=2, output=tmp_path / "out")
    old = RunConfig(storage=Storage(tmp_path, output=tmp_path / "out", keep_checkpoints=2))
    assert parts == short == old
    assert parts.storage == Storage(tmp_path, output=tmp_path / "out", keep_checkpoints=2)
    assert (parts.recovery.checkpoint, parts.outputs.output) == (tmp_path, tmp_path / "out")
    assert isinstance(parts.outputs.make_sink(), ParquetSink)
    assert old.replace(outputs=Outputs()).storage.output is None
    with pytest.raises(RunnerError, match="give recovery= or storage=, not both"):
        RunConfig(storage=Storage(tmp_path), recovery=Recovery(tmp_path))
    with pytest.raises(RunnerError, match="give output= or outputs=, not both"):
        RunConfig(checkpoint=tmp_path, outputs=Outputs(), output=tmp_path)
    with pytest.raises(RunnerError, match="checkpoint is required"):
        RunConfig(outputs=Outputs(tmp_path))
