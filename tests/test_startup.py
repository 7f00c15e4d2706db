"""Start-up of Spark's Python processes: what a worker imports of sparkqos, and the launcher
(sparkqos/spark/spark-python) that has them import pyspark from its installation rather than from
Spark's pyspark.zip, which Python compiles anew in every process (docs/ARCHITECTURE.md, "Start-up")."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

import sparkqos

LAUNCHER = Path(sparkqos.__file__).parent / "spark" / "spark-python"


def test_a_worker_reading_a_source_imports_neither_pandas_nor_the_runtime():
    code = (
        "import sys, sparkqos.sources.datasources; "
        "print(sorted(m for m in sys.modules if m == 'pandas' or m.startswith(('sparkqos.runtime', 'sparkqos.compile', "
        "'sparkqos.report', 'sparkqos.spark'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_package_still_gives_its_whole_api():
    code = (
        "import sparkqos; from sparkqos import *; "
        "assert RunConfig is sparkqos.runtime.config.RunConfig and Intake is sparkqos.runtime.intake.Intake; "
        "assert QuerySet is sparkqos.compile.QuerySet and 'Trigger' in dir(sparkqos); "
        "print(sorted(set(sparkqos.__all__) - set(globals())))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    with pytest.raises(AttributeError, match="no attribute 'strem'"):
        sparkqos.strem  # noqa: B018


def _launched_pythonpath(tmp_path: Path, spark_home: Path, pythonpath: str) -> str | None:
    code = "import os; print(repr(os.environ.get('PYTHONPATH')))"
    env = {**os.environ, "SPARK_HOME": str(spark_home), "PYTHONPATH": pythonpath, "SPARKQOS_PYTHON": sys.executable}
    out = subprocess.run([str(LAUNCHER), "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True, check=True)
    return ast.literal_eval(out.stdout.strip())


def test_the_launcher_drops_the_zips_of_a_pip_installed_pyspark_only(tmp_path):
    pip_home = tmp_path / "site-packages" / "pyspark"
    (pip_home / "python" / "lib").mkdir(parents=True)
    (pip_home / "__init__.py").write_text("")
    zips = f"{pip_home}/python/lib/pyspark.zip:{pip_home}/python/lib/py4j-0.10.9.9-src.zip"
    assert _launched_pythonpath(tmp_path, pip_home, f"{zips}:/my/code::/more") == "/my/code::/more"
    assert _launched_pythonpath(tmp_path, pip_home, zips) is None
    egg = f"/a:{pip_home}/python/lib/other.egg"
    assert _launched_pythonpath(tmp_path, pip_home, egg) == egg
    distribution = tmp_path / "spark-4.3.0-bin"  # a Spark distribution: its zip is the only pyspark
    (distribution / "python" / "lib").mkdir(parents=True)
    dist_zips = f"{distribution}/python/lib/pyspark.zip:/my/code"
    assert _launched_pythonpath(tmp_path, distribution, dist_zips) == dist_zips


def test_the_launcher_runs_the_python_it_is_given(tmp_path):
    env = {**os.environ, "SPARKQOS_PYTHON": sys.executable}
    out = subprocess.run(
        [str(LAUNCHER), "-c", "import sys; print(sys.executable)"], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == sys.executable


def test_sparks_python_workers_import_pyspark_from_its_installation(spark):
    """The tests' session starts its workers through the launcher (tests/conftest.py), as
    spark-submit.sh does: a worker's pyspark is the installed package, not Spark's zip."""

    def where(_):
        import pyspark

        yield pyspark.__file__

    (path,) = spark.sparkContext.parallelize([0], 1).mapPartitions(where).collect()
    assert ".zip" not in path and Path(path).parent == Path(__import__("pyspark").__file__).parent


def test_synthetic_rows_have_values_of_every_atomic_type():
    import pyarrow as pa

    from sparkqos.spark.warmup import synthetic_rows

    schema = pa.schema(
        [
            ("ts", pa.timestamp("us", tz="UTC")),
            ("d", pa.date32()),
            ("i", pa.int32()),
            ("x", pa.float64()),
            ("m", pa.decimal128(10, 2)),
            ("b", pa.bool_()),
            ("s", pa.string()),
            ("raw", pa.binary()),
            ("tags", pa.list_(pa.string())),
        ]
    )
    table = synthetic_rows(schema, 50)
    assert table.schema == schema and table.num_rows == 50
    assert [table.column(n).null_count for n in schema.names] == [0] * 8 + [50]


def test_a_processing_time_stream_warms_sparks_read_path_up_once_per_application(spark, tmp_path, monkeypatch):
    """The first start in a Spark application runs toArrow() on synthetic rows (at most
    MAX_READS, within warm_up_s); a second start, and an available-now one, do not."""
    import sparkqos.spark.warmup as warmup
    from sparkqos import Trigger, stream

    monkeypatch.setattr(warmup, "_warmed", set())
    df = spark.readStream.format("rate").option("rowsPerSecond", 1).load()
    queries = {"all": lambda d: d.select("timestamp", "value")}
    first = stream(df, queries, checkpoint=tmp_path / "a", trigger_s=0.5, arrival_col="timestamp", warm_up_s=30)
    assert first._warm_up()[0] == warmup.MAX_READS
    again = stream(df, queries, checkpoint=tmp_path / "b", trigger_s=0.5, arrival_col="timestamp", warm_up_s=30)
    assert again._warm_up() == (0, 0.0)
    monkeypatch.setattr(warmup, "_warmed", set())
    now = stream(df, queries, checkpoint=tmp_path / "c", trigger=Trigger(availableNow=True), arrival_col="timestamp")
    assert now._warm_up() == (0, 0.0)
    off = stream(df, queries, checkpoint=tmp_path / "d", trigger_s=0.5, arrival_col="timestamp", warm_up_s=0)
    assert off._warm_up() == (0, 0.0)


def test_warm_up_s_must_be_a_number_of_seconds(tmp_path):
    from sparkqos import RunConfig
    from sparkqos.errors import RunnerError

    with pytest.raises(RunnerError, match="warm_up_s"):
        RunConfig(checkpoint=tmp_path, warm_up_s=-1)
    with pytest.raises(RunnerError, match="warm_up_s"):
        RunConfig(checkpoint=tmp_path, warm_up_s="soon")
