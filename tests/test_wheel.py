"""The package as a user installs it: a wheel, in a fresh virtualenv, run outside the checkout.

Everything sparkqos reads at run time (the QoS templates) must be package data, or a wheel works
only from a source tree. The fresh virtualenv gets the wheel alone (``--no-deps``); its
dependencies (pyspark, pyarrow…) come from this environment through a ``.pth`` path entry, so
the test needs no download of Spark. The ``.pth`` entry does not run this environment's own
``.pth`` files, so the editable install of the checkout stays invisible there.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = textwrap.dedent(
    """
    import sys
    from pathlib import Path

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.sql import SparkSession

    import sparkqos
    from sparkqos import sources
    from sparkqos.adaptive.qos import CONF_DIR, TEMPLATES, load_qos
    from sparkqos.workloads.sensors import sensor_queries

    here = Path(sys.argv[1])
    checkout = Path(sys.argv[2])
    assert checkout not in Path(sparkqos.__file__).resolve().parents, sparkqos.__file__
    for name in TEMPLATES:  # package data: the templates travel with the wheel
        assert load_qos(CONF_DIR / f"{name}.toml") == TEMPLATES[name], name

    n = 600
    rng = np.random.default_rng(3)
    table = pa.table({
        "sensor_id": pa.array(rng.integers(0, 8, n), pa.int32()),
        "location": pa.array([f"z{i % 4}" for i in range(n)]),
        "temperature": pa.array(rng.normal(40, 20, n)),
        "humidity": pa.array(rng.uniform(5, 90, n)),
        "ts": pa.array(1_700_000_000_000_000 + np.sort(rng.integers(0, 10_000_000, n)), pa.timestamp("us", tz="UTC")),
    })
    pq.write_table(table, here / "trace.parquet")

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    sources.register(spark)
    df = (spark.readStream.format("sparkqos.replay").option("path", str(here / "trace.parquet"))
          .option("speed", "max").option("maxSecondsPerTrigger", "5").load())
    handle = sparkqos.stream(df, sensor_queries(work_us=0), strategy="adaptive", qos="balanced",
                             trigger=sparkqos.Trigger(availableNow=True), checkpoint=here / "ckpt", output=here / "out")
    handle.start().awaitTermination()
    handle.finish()
    archived = pq.read_table(here / "out" / "outputs" / "query=archive")
    assert archived.num_rows == n, archived.num_rows
    print("wheel stream ok", archived.num_rows, sparkqos.__file__)
    spark.stop()
    """
)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(ROOT)],
        check=True,
        capture_output=True,
        text=True,
    )
    (found,) = dist.glob("sparkqos-*.whl")
    return found


def test_wheel_carries_the_package_data(wheel):
    import zipfile

    names = zipfile.ZipFile(wheel).namelist()
    assert {f"sparkqos/adaptive/templates/{t}.toml" for t in ("balanced", "low_latency", "low_memory", "high_throughput")} <= set(
        names
    )
    assert not [n for n in names if n.startswith(("tests/", "jobs/", "benchmarks/"))]
    launcher = zipfile.ZipFile(wheel).getinfo("sparkqos/spark/spark-python")  # Spark's Python processes' launcher
    assert launcher.external_attr >> 16 & 0o111, "the launcher must stay executable"


@pytest.mark.slow
@pytest.mark.spark  # a Spark session in the fresh virtualenv
def test_wheel_runs_a_stream_from_a_fresh_virtualenv(wheel, tmp_path):
    env_dir = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(env_dir)], check=True)
    python = env_dir / "bin" / "python"
    # Not from the checkout (nor with it on PYTHONPATH): `python -m pip` looks in its working
    # directory too, where building the wheel left sparkqos.egg-info, and would call the wheel
    # "already installed" and install nothing.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    subprocess.run(
        [python, "-m", "pip", "install", "-q", "--no-deps", str(wheel)], cwd=tmp_path, env=env, check=True, capture_output=True
    )
    purelib = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            cwd=tmp_path,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    # This environment's packages (pyspark, pyarrow…) behind the wheel, without its .pth files.
    (purelib / "zz_test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    work = tmp_path / "elsewhere"
    work.mkdir()
    env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = str(python)
    (work / "run.py").write_text(SCRIPT)
    done = subprocess.run(
        [python, "run.py", str(work), str(ROOT)], cwd=work, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "wheel stream ok 600" in done.stdout
    assert str(purelib) in done.stdout
