"""Starting a job: what ``spark-submit.sh`` hands to Spark's ``spark-submit`` (the JVM options a
job's header line asks for; a stand-in ``spark-submit`` in a stand-in virtualenv prints its
arguments, so no JVM starts), and the lock a job holds on its folders."""

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


HOLD = "from jobs import _jobkit as k; from pathlib import Path; k.hold(Path({!r})); print('held', flush=True); input()"


def test_a_second_run_on_the_same_folders_is_refused_and_deletes_nothing(tmp_path, capsys):
    """Two runs of a job on one output folder would each delete (``--fresh``) or overwrite the
    other's checkpoint: the second is refused before it touches anything, naming the process
    that holds the folder; once that process is gone the folder is free again."""
    output = tmp_path / "out"
    (output / "_checkpoint").mkdir(parents=True)
    (output / "_checkpoint" / "kept").write_text("the first run's")
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD.format(str(output))],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        from jobs import sensor_monitor

        code = sensor_monitor.main(["--fresh", "--set", f"job.output={output}", "--quiet"])
        assert code == 2
        assert f"is in use by another run of a job (process {holder.pid})" in capsys.readouterr().err
        assert (output / "_checkpoint" / "kept").read_text() == "the first run's"
    finally:
        holder.communicate("\n", timeout=30)
    from jobs import _jobkit

    _jobkit.hold(output)  # free again
    _jobkit.hold(output)  # and a process may take a folder it holds once more
    _jobkit.release()
