"""The README's Python snippets, run as written: each ```python block carries a ``<!-- snippet: NAME -->``
marker and is run here by NAME, so a snippet cannot drift from the library (a new block without
a runner fails the first test). Only scratch paths are moved into the test's temporary folder.

The own-script snippet runs as the user runs it: its own process on the venv's Python, with
neither PYSPARK_PYTHON nor PYSPARK_DRIVER_PYTHON set (``python3`` on the PATH is another Python,
without pyarrow), so sparkqos must point Spark's Python workers at the driver's Python itself.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from sparkqos.config import Key, load_config
from sparkqos.runtime.sinks import read_parquet_sink
from sparkqos.schedulers import available

ROOT = Path(__file__).resolve().parent.parent
MARKED = re.compile(r"<!-- snippet: ([\w-]+)[^>]*-->\n```python\n(.*?)```", re.S)


def snippets() -> dict[str, str]:
    return {name: code for name, code in MARKED.findall((ROOT / "README.md").read_text())}


def test_every_python_snippet_is_marked_and_has_a_runner():
    text = (ROOT / "README.md").read_text()
    found = snippets()
    assert len(found) == text.count("```python"), "a ```python block in README.md has no <!-- snippet: NAME --> marker"
    assert set(found) == {
        "own-script",
        "config",
        "builder",
        "databricks-install",
        "databricks",
        "strategies",
        "sharded",
        "nesting",
    }


def test_sharded_fragment_names_keywords_stream_takes():
    """A fragment (``...`` for what the script above gives), so it is parsed, not run: the
    keywords that switch lanes must be ``sparkqos.stream``'s."""
    import inspect

    from sparkqos.spark.runner import stream

    call = ast.parse(snippets()["sharded"]).body[0].value
    lane = {k.arg for k in call.keywords} & {"shards", "shard_by"}
    assert lane == {"shards", "shard_by"} and lane <= set(inspect.signature(stream).parameters)


@pytest.mark.slow  # the user's script in a process of its own: a JVM and a stream of its own
@pytest.mark.spark
def test_own_script_runs_with_the_venv_python_and_no_pyspark_python(tmp_path):
    """Each query has rows within the first seconds, no two queries' rows are the same, and the
    finite run gives what the snippet's comment says."""
    folder = tmp_path / "my_job"
    script = tmp_path / "my_job.py"
    script.write_text(snippets()["own-script"].replace("/tmp/my_job", str(folder)))
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    env["PYTHONPATH"] = str(ROOT)  # this checkout's sparkqos (a user's is installed in the venv)
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-4000:]
    lines = done.stdout.strip().splitlines()
    counts = {m[1]: int(m[2]) for line in lines if (m := re.fullmatch(r"(\w+): (\d+) rows", line))}
    assert set(counts) == {"fire", "anomaly", "extremes"} and min(counts.values()) > 0, lines
    assert ast.literal_eval(lines[-1]) == {"fire": 1, "anomaly": 1, "extremes": 3}
    outputs = read_parquet_sink(folder / "out" / "outputs")
    keys = {
        q: Counter(zip(t.column("sensor_id").to_pylist(), t.column("ts").to_pylist(), strict=True)) for q, t in outputs.items()
    }
    assert keys["fire"] != keys["anomaly"] and keys["fire"] != keys["extremes"] and keys["anomaly"] != keys["extremes"]


def test_config_snippet_continues_the_own_script(spark, tmp_path):
    """The named parts, on the own-script's stream and queries (its imports, functions and
    ``queries``; the stream read as there): the handle is built, not started."""
    script = ast.parse(snippets()["own-script"])
    keep = (ast.Import, ast.ImportFrom, ast.FunctionDef)
    defs = [n for n in script.body if isinstance(n, keep) or (isinstance(n, ast.Assign) and n.targets[0].id == "queries")]
    namespace = {"__name__": "readme", "spark": spark}
    exec(compile(ast.Module(body=defs, type_ignores=[]), "README own-script", "exec"), namespace)
    namespace["sources"].register(spark)
    namespace["df"] = spark.readStream.format("sparkqos.bursty").options(rate=4000, offScale=8, seed=7).load()
    exec(snippets()["config"].replace("/tmp/", f"{tmp_path}/"), namespace)
    handle = namespace["handle"]
    assert handle.query is None and set(handle.loop.compiled.roots) == {"fire", "anomaly", "extremes"}


def test_builder_snippet(spark, tmp_path, capsys):
    exec(snippets()["builder"].replace("/tmp/builder_job", str(tmp_path)), {"__name__": "readme"})
    batch, queued, strategy = capsys.readouterr().out.split()
    # the adaptive controller may be running any registered member (rr included) or none yet
    assert int(batch) >= 0 and float(queued) >= 0 and (strategy == "-" or strategy in available())


def test_databricks_snippets(spark, tmp_path):
    install = snippets()["databricks-install"].strip()
    assert install.startswith("%pip install ") and "\n" not in install
    namespace = {"spark": spark, "__name__": "readme"}
    exec(snippets()["databricks"].replace("/Volumes/main/default/sparkqos", str(tmp_path)), namespace)
    namespace["handle"].stop()
    assert namespace["handle"].query is not None


def test_nesting_snippet_and_its_configuration_build_the_same_strategies(capsys):
    """The Python spelling of nested strategies and the README's TOML for the same candidates
    (through the jobs' configuration loader) give the same strategies."""
    namespace = {"__name__": "readme"}
    exec(snippets()["nesting"], namespace)
    assert "PathCapacity(quantum=0.05)" in capsys.readouterr().out
    assert namespace["shares"].inner.quantum == 0.2 and namespace["adaptive"].class_shares.k == 2.0
    toml = re.search(r"<!-- toml: nesting -->\n```toml\n(.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)
    schema = {"scheduler": {"strategy": Key(str, "fifo"), "candidates": Key(list, [], choices=available)}}
    cfg = load_config(schema, text=toml)["scheduler"]
    Adaptive = type(namespace["adaptive"])
    from_toml = Adaptive(candidates=cfg["candidates"])._members
    from_python = Adaptive(candidates=namespace["candidates"])._members
    assert {n: repr(m) for n, m in from_toml.items()} == {n: repr(m) for n, m in from_python.items()}


def test_strategies_snippet(capsys):
    exec(snippets()["strategies"], {"__name__": "readme"})
    assert capsys.readouterr().out.strip()


def test_python_m_sparkqos_without_pyarrow_says_so_in_one_line(tmp_path):
    """A Python that lacks pyarrow (here: one whose pyarrow fails to import) gets one line, no traceback."""
    fake = tmp_path / "pyarrow"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError(\"No module named 'pyarrow'\")\n")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    done = subprocess.run([sys.executable, "-m", "sparkqos", "--help"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith("sparkqos: sparkqos needs numpy and pyarrow") and "No module named 'pyarrow'" in done.stderr


class _FakeContext:
    """What check_python_workers reads of a SparkContext: a master, an application id and one probe
    task, whose answer the test decides."""

    def __init__(self, master: str, answers: list):
        self.master, self.applicationId, self.pythonExec = master, f"app-{id(self)}", "python3"
        self.answers = answers
        self.conf: dict[str, str] = {}

    def parallelize(self, data, n):
        return self

    def mapPartitions(self, f):
        return self

    def collect(self):
        return [self.answers.pop(0)]

    @property
    def _jsc(self):
        conf = self.conf

        class Jsc:
            def sc(self):
                return self

            def conf(self):
                return self

            def set(self, key, value):
                conf[key] = value

        return Jsc()


class _FakeSession:
    def __init__(self, sc):
        self.sparkContext = sc


def test_python_workers_are_pointed_at_the_driver_python_locally_and_named_elsewhere(monkeypatch):
    from sparkqos.errors import PythonWorkerError
    from sparkqos.sources.pyenv import check_python_workers

    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    lacking = ("/usr/bin/python3", "3.11.7", {"pyarrow": "ModuleNotFoundError: No module named 'pyarrow'"})
    fine = (sys.executable, "3.11.7", {})
    local = _FakeContext("local[2]", [lacking, fine])
    assert check_python_workers(_FakeSession(local)) == sys.executable
    assert local.conf == {"spark.pyspark.python": sys.executable} and local.pythonExec == sys.executable
    assert os.environ["PYSPARK_PYTHON"] == sys.executable
    cluster = _FakeContext("spark://head:7077", [lacking])
    with pytest.raises(PythonWorkerError, match=r"run /usr/bin/python3 \(Python 3.11.7\) and cannot run sparkqos") as err:
        check_python_workers(_FakeSession(cluster))
    assert "spark.pyspark.python" in str(err.value) and "No module named 'pyarrow'" in str(err.value)
    assert err.value.parameter == "spark.pyspark.python" and err.value.value == "/usr/bin/python3"
    assert cluster.conf == {}  # nothing changed on a cluster: the user decides
