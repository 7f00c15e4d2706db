"""sparkqos: QoS-aware operator scheduling for continuous queries on Spark Structured Streaming.

One import gives the common path: ``sparkqos.stream`` (a streaming DataFrame served by a
strategy), ``sparkqos.run`` (a finite one through the executor), the query API (``QuerySet``,
``col``, ... or plain PySpark transforms), ``QosSpec`` and the errors. The parts and how they
depend on each other: docs/ARCHITECTURE.md.
"""

import sys as _sys

try:  # the one clear message when this Python lacks what sparkqos runs on (not a traceback from deep inside)
    import numpy as _numpy  # noqa: F401
    import pyarrow as _pyarrow  # noqa: F401
except ImportError as _exc:
    _missing = (
        f"sparkqos needs numpy and pyarrow, which {_sys.executable} cannot import ({_exc}); run it with the Python "
        "sparkqos is installed in (e.g. .venv/bin/python -m sparkqos), or pip install sparkqos into this one"
    )
    if _sys.argv[:1] == ["-m"]:  # python -m sparkqos: one line on stderr, exit status 1
        raise SystemExit(f"sparkqos: {_missing}") from None
    raise ImportError(_missing) from None

from sparkqos import adaptive, schedulers
from sparkqos.adaptive import QosSpec
from sparkqos.errors import (
    CheckpointError,
    ConfigError,
    ExpressionError,
    GrowingStateWarning,
    NotShardable,
    PlacementError,
    PlanError,
    PythonWorkerError,
    QosSpecError,
    RunnerError,
    SchedulerError,
    SchemaMismatch,
    SinkError,
    SourceError,
    SparkPartError,
    SparkqosError,
    TriggerError,
    UdfError,
    UnknownStrategy,
    UnsupportedTransform,
    WorkloadError,
)
from sparkqos.model import Operator, OperatorPath, Plan, Query

__version__ = "0.1.0"

# The query API, the run configuration and the entry points load on first use (PEP 562), not with the package: every
# Python worker Spark starts for a sparkqos source, UDF or shard imports this package, and the
# runtime's part (pandas, through the report) would double that worker's start-up for nothing.
_LAZY = {
    **dict.fromkeys(("QuerySet", "avg", "col", "count", "lit", "max_", "min_", "sum_"), "sparkqos.compile"),
    **dict.fromkeys(
        ("Continuous", "ExecutorOptions", "Input", "Outputs", "Recovery", "RunConfig", "Storage", "StrategyConfig", "Trigger"),
        "sparkqos.runtime.config",
    ),
    **dict.fromkeys(("BacklogWarning", "Intake"), "sparkqos.runtime.intake"),
    # The two entry points share one keyword-only signature (help(sparkqos.stream) lists it); the
    # Spark-side code they live in loads when they are first looked up.
    "thread_safe": "sparkqos.executor.threadsafe",
    "stream": "sparkqos.spark.runner",
    "run": "sparkqos.spark.transforms",
}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'sparkqos' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once loaded, an ordinary attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


def explain(df, queries, **kwargs):
    """Where each operator of each query runs (native, Spark, or refused and why), printed like
    ``DataFrame.explain()`` and returned: :func:`sparkqos.spark.explain.explain`."""
    from sparkqos.spark.explain import explain as _explain

    return _explain(df, queries, **kwargs)


def synthetic(df, selectivity, cost_s=0.0, seed=0, key=""):
    """``df`` through the papers' synthetic operator (declared selectivity and CPU cost per row),
    for experiments written as PySpark transforms: :func:`sparkqos.spark.synthetic.synthetic`."""
    from sparkqos.spark.synthetic import synthetic as _synthetic

    return _synthetic(df, selectivity, cost_s, seed, key)


__all__ = [
    "BacklogWarning",
    "explain",
    "CheckpointError",
    "ConfigError",
    "Continuous",
    "ExecutorOptions",
    "Input",
    "Outputs",
    "Recovery",
    "RunConfig",
    "Storage",
    "StrategyConfig",
    "Trigger",
    "TriggerError",
    "ExpressionError",
    "Intake",
    "NotShardable",
    "Operator",
    "OperatorPath",
    "Plan",
    "PlacementError",
    "PlanError",
    "PythonWorkerError",
    "GrowingStateWarning",
    "QosSpec",
    "QosSpecError",
    "Query",
    "QuerySet",
    "RunnerError",
    "SchedulerError",
    "SchemaMismatch",
    "SinkError",
    "SourceError",
    "SparkPartError",
    "SparkqosError",
    "UdfError",
    "UnknownStrategy",
    "UnsupportedTransform",
    "WorkloadError",
    "__version__",
    "adaptive",
    "avg",
    "col",
    "count",
    "lit",
    "max_",
    "min_",
    "run",
    "schedulers",
    "stream",
    "sum_",
    "synthetic",
    "thread_safe",
]
