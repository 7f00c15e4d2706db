"""Spark's Python workers: can they run sparkqos? Checked before any data moves.

A script run as ``.venv/bin/python my_job.py`` starts Spark's Python workers with ``python3`` from
the PATH unless ``PYSPARK_PYTHON`` or ``spark.pyspark.python`` says otherwise: another Python,
often without pyarrow or sparkqos, and the first read of a sparkqos source dies in a worker with a
long py4j traceback. :func:`check_python_workers` runs one task that moves no data — it reports its
interpreter and whether it imports sparkqos, pyarrow and numpy — once per Spark application:

* the workers can: nothing to do;
* they cannot and the master is local (the workers run on this machine): the driver's own Python
  becomes the workers' — ``spark.pyspark.python`` in the live Spark configuration (what the JVM
  starts Python data sources with) and the context's ``pythonExec`` (UDFs, RDDs), and
  ``PYSPARK_PYTHON`` for sessions started later in this process — and the task runs again;
* otherwise :class:`~sparkqos.errors.PythonWorkerError` says what the workers run, what they lack
  and what to set.

Under Spark Connect the client has no SparkContext and the server's Python is the server's
business: nothing is checked.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from sparkqos.errors import PythonWorkerError

__all__ = ["check_python_workers"]

#: Spark application id → the workers' interpreter once it was found able to run sparkqos.
_CHECKED: dict[str, str] = {}
#: The modules a worker needs (the sources' readers and the executor's Spark-side stages).
NEEDED = ("sparkqos", "pyarrow", "numpy")


def _probe(sc: Any) -> tuple[str, str, dict[str, str]]:
    """(interpreter, version, {module: error}) of one Python worker; a task that fails to start
    reports its error under ``"pyspark"``."""

    needed = NEEDED

    def probe(_):  # nested, so cloudpickle ships it by value: unpickling needs no sparkqos
        import importlib
        import sys as worker_sys

        missing = {}
        for name in needed:
            try:
                importlib.import_module(name)
            except Exception as exc:  # noqa: BLE001 - every import failure is the answer
                missing[name] = f"{type(exc).__name__}: {exc}"
        yield worker_sys.executable, ".".join(map(str, worker_sys.version_info[:3])), missing

    try:
        return sc.parallelize([0], 1).mapPartitions(probe).collect()[0]
    except Exception as exc:  # noqa: BLE001 - a worker that cannot even start (e.g. another Python version)
        first = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        return sc.pythonExec, "?", {"pyspark": first[:300]}


def _use_driver_python(sc: Any) -> None:
    sc._jsc.sc().conf().set("spark.pyspark.python", sys.executable)
    sc.pythonExec = sys.executable
    os.environ["PYSPARK_PYTHON"] = sys.executable


def check_python_workers(spark: Any) -> str | None:
    """Make sure Spark's Python workers can run sparkqos (module docstring); returns their
    interpreter (None under Spark Connect). Raises :class:`~sparkqos.errors.PythonWorkerError`
    when they cannot and sparkqos cannot fix it."""
    try:
        sc = spark.sparkContext
    except Exception:  # noqa: BLE001 - Spark Connect: no SparkContext on the client
        return None
    app = sc.applicationId
    if app in _CHECKED:
        return _CHECKED[app]
    exe, version, missing = _probe(sc)
    local = str(sc.master).startswith("local")
    if missing and local and exe != sys.executable:
        _use_driver_python(sc)
        exe, version, missing = _probe(sc)
    if missing:
        lacks = "; ".join(f"{name}: {err}" for name, err in missing.items())
        driver = f"{sys.executable} (Python {sys.version.split()[0]})"
        if local:
            advice = (
                f"install sparkqos, pyarrow and numpy for {exe}, or make sparkqos importable there (PYTHONPATH)"
                if exe == sys.executable
                else f"set PYSPARK_PYTHON={sys.executable} before starting Python"
            )
        else:
            advice = (
                "set spark.pyspark.python (or PYSPARK_PYTHON on every node) to a Python that has sparkqos, pyarrow and "
                "numpy installed on every executor — e.g. spark-submit --conf spark.pyspark.python=/path/to/python — "
                "or ship sparkqos with --py-files / spark.submit.pyFiles"
            )
        raise PythonWorkerError(
            f"Spark's Python workers run {exe} (Python {version}) and cannot run sparkqos ({lacks}); "
            f"the driver runs {driver}. {advice[0].upper()}{advice[1:]}.",
            parameter="spark.pyspark.python",
            value=exe,
            expected="a Python that imports " + ", ".join(NEEDED),
        )
    _CHECKED[app] = exe
    return exe
