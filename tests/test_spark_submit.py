"""What ``spark-submit.sh`` hands to Spark's ``spark-submit`` for a job: the JVM options and
extras a job's header lines ask for. A stand-in ``spark-submit`` in a stand-in virtualenv prints
its arguments, so no JVM starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _submitted(tmp_path: Path, *args: str) -> list[str]:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    fake = venv / "bin" / "spark-submit"
    fake.write_text('#!/usr/bin/env bash\nprintf "%s\\n" "$@"\n')
    fake.chmod(0o755)
    want = subprocess.run(["cksum"], stdin=(ROOT / "pyproject.toml").open("rb"), capture_output=True, text=True, check=True)
    (venv / ".sparkqos-installed").write_text(want.stdout)
    for extra in ("data", "delta"):  # installed already: nothing to pip-install
        (venv / f".sparkqos-extras-{extra}").write_text(want.stdout)
    env = {**os.environ, "SPARKQOS_VENV": str(venv)}
    done = subprocess.run([str(ROOT / "spark-submit.sh"), *args], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    return done.stdout.splitlines()


def _java_options(argv: list[str]) -> str:
    (conf,) = [a for a in argv if a.startswith("spark.driver.extraJavaOptions=")]
    return conf


def test_a_jobs_java_options_line_reaches_the_jvm_and_a_script_without_one_keeps_the_defaults(tmp_path):
    for job in ("jobs/sensor_monitor.py", "jobs/vessel_monitor.py"):
        argv = _submitted(tmp_path / job.replace("/", "_"), job, "--duration", "5")
        assert _java_options(argv).endswith("log4j2.properties -XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        assert argv[-3:] == [job, "--duration", "5"]
    argv = _submitted(tmp_path / "bench", "benchmarks/throughput.py")
    assert _java_options(argv).endswith("log4j2.properties")
