"""The README's and docs/'s code blocks, run as written, and their links, followed.

Every fenced block says its language and is checked by it:

* ```python: each carries a ``<!-- snippet: NAME -->`` marker and is run here by NAME (the names
  are unique across the pages), so a snippet cannot drift from the library; a new block without a
  runner fails the first test. Only scratch paths are moved into the test's temporary folder,
  and the streams are cut short (the own-script's 10 s to 3, the README example's 20 micro-batches
  and the builder's 8 to 3): what is checked needs rows or a progress record, not a length.
  Blocks that need Spark share the session's ``spark`` fixture (``getOrCreate`` returns it). A
  block a snippet's output is compared with follows it as ``<!-- output: NAME -->`` ```text.
* ```bash: each line runs (``.venv/bin/python`` as this Python), unless the block is marked
  ``<!-- not run: REASON -->`` — a job or benchmark of minutes, or the test suite itself. The
  reason is required; of a command not run, the script must exist and take every ``--option``
  the command gives it.
* ```toml: a ``<!-- toml: NAME -->`` block is read as what it shows (a job's configuration, a
  simulator workload).
* ```text: a listing (the layout, an output), not code.

The own-script snippet runs as the user runs it: its own process on the venv's Python, with
neither PYSPARK_PYTHON nor PYSPARK_DRIVER_PYTHON set (``python3`` on the PATH is another Python,
without pyarrow), so sparkqos must point Spark's Python workers at the driver's Python itself.

Links: every relative link of every page resolves to a file, and every ``#anchor`` to a heading
of its page (GitHub's rule for heading anchors).
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from collections import Counter
from pathlib import Path

import pytest

from sparkqos.config import Key, load_config
from sparkqos.io.sinks import read_parquet_sink
from sparkqos.schedulers import available
from sparkqos.sim.workload import parse_workload

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: A fenced block and the HTML comment on the line before it, if any.
BLOCK = re.compile(r"(?:<!-- (?P<marker>[^\n]*?) -->\n)?```(?P<lang>[\w-]*)\n(?P<code>.*?)^```", re.S | re.M)
LANGUAGES = {"python", "bash", "toml", "text"}
#: Helper modules whose options the scripts beside them take (argument parsers shared by jobs).
SHARED_OPTIONS = [ROOT / "jobs" / "_jobkit.py", ROOT / "jobs" / "experiments" / "_common.py"]


def blocks() -> list[tuple[Path, str, str, str]]:
    """(page, marker, language, code) of every fenced block of every page."""
    return [(page, m["marker"] or "", m["lang"], m["code"]) for page in PAGES for m in BLOCK.finditer(page.read_text())]


def snippets() -> dict[str, str]:
    return {
        marker.removeprefix("snippet: ").split()[0]: code
        for _, marker, lang, code in blocks()
        if lang == "python" and marker.startswith("snippet: ")
    }


def marked(kind: str, name: str) -> str:
    """The code of the block marked ``<!-- KIND: NAME -->``."""
    found = [code for _, marker, _, code in blocks() if marker == f"{kind}: {name}"]
    assert len(found) == 1, f"{len(found)} blocks marked {kind}: {name}"
    return found[0]


def test_every_block_says_its_language_and_every_python_snippet_has_a_runner():
    found = blocks()
    assert {lang for *_, lang, _ in found} <= LANGUAGES, [(p.name, lang) for p, _, lang, _ in found if lang not in LANGUAGES]
    python = [(page.name, marker) for page, marker, lang, _ in found if lang == "python"]
    assert all(marker.startswith("snippet: ") for _, marker in python), f"a ```python block has no snippet marker: {python}"
    names = [m.removeprefix("snippet: ").split()[0] for _, m in python]
    assert len(names) == len(set(names)), f"snippet names repeat: {names}"
    assert set(names) == {
        "readme-example",
        "own-script",
        "config",
        "builder",
        "databricks-install",
        "databricks",
        "strategies",
        "sharded",
        "nesting",
        "explain",
        "slo",
        "session-settings",
    }
    for page, marker, lang, _ in found:
        if marker.startswith("not run"):
            assert lang == "bash" and marker.removeprefix("not run:").strip(), f"{page.name}: a not-run mark needs a reason"


def test_sharded_fragment_names_keywords_stream_takes():
    """A fragment (``...`` for what the script above gives), so it is parsed, not run: the
    keywords that switch lanes must be ``sparkqos.stream``'s."""
    import inspect

    from sparkqos.spark.runner import stream

    call = ast.parse(snippets()["sharded"]).body[0].value
    lane = {k.arg for k in call.keywords} & {"shards", "shard_by"}
    assert lane == {"shards", "shard_by"} and lane <= set(inspect.signature(stream).parameters)


def test_own_script_is_the_jobs_file():
    assert snippets()["own-script"] == (ROOT / "jobs" / "my_job.py").read_text()


def test_slo_fragment_gives_targets_and_ages_a_run_takes():
    """A fragment over the guide's own DataFrame and transforms: parsed, not run; its targets and
    ages are what RunConfig accepts, resolved by query and class."""
    from sparkqos.runtime.config import RunConfig
    from sparkqos.runtime.targets import per_query

    call = ast.parse(snippets()["slo"]).body[-1].value
    given = {k.arg: ast.literal_eval(k.value) for k in call.keywords if k.arg in ("slo", "shed", "classes")}
    config = RunConfig(checkpoint="/tmp/unused", slo=given["slo"], shed=given["shed"])
    assert per_query("slo", config.slo, given["classes"]) == {"fire": 0.5, "anomaly": 2.0}
    assert per_query("shed", config.shed, given["classes"]) == {"archive": 30.0}


#: The own-script's stream loop: 10 s from the first micro-batch.
LOOP_10_S = "time.time() - began < 10"


@pytest.mark.slow  # the user's script in a process of its own: a JVM and a stream of its own
@pytest.mark.spark
def test_own_script_runs_with_the_venv_python_and_no_pyspark_python(tmp_path):
    """Each query has rows within the first seconds, no two queries' rows are the same, and the
    finite run gives what the snippet's comment says."""
    folder = tmp_path / "my_job"
    script = tmp_path / "my_job.py"
    code = snippets()["own-script"]
    assert LOOP_10_S in code
    # 3 s of stream instead of 10: rows in every query's folder need seconds, not the full run
    script.write_text(code.replace("/tmp/my_job", str(folder)).replace(LOOP_10_S, LOOP_10_S.replace("< 10", "< 3")))
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
    exec(compile(ast.Module(body=defs, type_ignores=[]), "guide own-script", "exec"), namespace)
    namespace["sources"].register(spark)
    namespace["df"] = spark.readStream.format("sparkqos.bursty").options(rate=4000, offScale=8, seed=7).load()
    exec(snippets()["config"].replace("/tmp/", f"{tmp_path}/"), namespace)
    handle = namespace["handle"]
    assert handle.query is None and set(handle.loop.compiled.roots) == {"fire", "anomaly", "extremes"}


def shortened(code: str, batches: int) -> str:
    """``code`` with its loop over micro-batches ending after ``batches`` of them."""
    loop = re.search(r'\.get\("batchId", -1\) < (\d+):', code)
    assert loop and int(loop[1]) > batches, "the snippet's loop over micro-batches changed"
    return code.replace(loop[0], loop[0].replace(f"< {loop[1]}:", f"< {batches}:"))


def test_builder_snippet(spark, tmp_path, capsys):
    code = shortened(snippets()["builder"], 3)
    exec(code.replace("/tmp/builder_job", str(tmp_path)), {"__name__": "readme"})
    batch, queued, strategy = capsys.readouterr().out.split()
    # the adaptive controller may be running any registered member (rr included) or none yet
    assert int(batch) >= 0 and float(queued) >= 0 and (strategy == "-" or strategy in available())


def test_session_settings_snippet_builds_the_session_with_the_raw_local_file_system(spark):
    from sparkqos.spark.settings import LOCAL_CHECKPOINT

    ns: dict = {}
    exec(snippets()["session-settings"], ns)
    assert ns["spark"].sparkContext is spark.sparkContext  # getOrCreate: the running session
    options = ns["configure"](BuilderStub())._options
    assert options == LOCAL_CHECKPOINT and options["spark.hadoop.fs.AbstractFileSystem.file.impl"].endswith("RawLocalFs")


class BuilderStub:
    """Records what ``configure`` sets on a builder."""

    def __init__(self):
        self._options: dict[str, str] = {}

    def config(self, key: str, value: str):
        self._options[key] = value
        return self


def test_databricks_snippets(spark, tmp_path):
    install = snippets()["databricks-install"].strip()
    assert install.startswith("%pip install ") and "\n" not in install
    namespace = {"spark": spark, "__name__": "readme"}
    exec(snippets()["databricks"].replace("/Volumes/main/default/sparkqos", str(tmp_path)), namespace)
    namespace["handle"].stop()
    assert namespace["handle"].query is not None


def test_nesting_snippet_and_its_configuration_build_the_same_strategies(capsys):
    """The Python spelling of nested strategies and the guide's TOML for the same candidates
    (through the jobs' configuration loader) give the same strategies."""
    namespace = {"__name__": "readme"}
    exec(snippets()["nesting"], namespace)
    assert "PathCapacity(quantum=0.05)" in capsys.readouterr().out
    assert namespace["shares"].inner.quantum == 0.2 and namespace["adaptive"].class_shares.k == 2.0
    toml = marked("toml", "nesting")
    schema = {"scheduler": {"strategy": Key(str, "fifo"), "candidates": Key(list, [], choices=available)}}
    cfg = load_config(schema, text=toml)["scheduler"]
    Adaptive = type(namespace["adaptive"])
    from_toml = Adaptive(candidates=cfg["candidates"])._members
    from_python = Adaptive(candidates=namespace["candidates"])._members
    assert {n: repr(m) for n, m in from_toml.items()} == {n: repr(m) for n, m in from_python.items()}


def test_strategies_snippet(capsys):
    exec(snippets()["strategies"], {"__name__": "readme"})
    assert capsys.readouterr().out.strip()


def test_readme_example_streams_two_classes(spark, tmp_path, capsys):
    """The README's first example, on the session's Spark: after 3 micro-batches (20 in the
    README) each query has written rows, and the counts printed are the rows in its folder."""
    code = shortened(snippets()["readme-example"], 3)
    exec(code.replace("/tmp/quickstart", str(tmp_path)), {"__name__": "readme"})
    printed = {m[1]: int(m[2]) for m in re.finditer(r"^(\w+) (\d+) rows$", capsys.readouterr().out, re.M)}
    outputs = read_parquet_sink(tmp_path / "out" / "outputs")
    assert printed == {q: t.num_rows for q, t in outputs.items()} and set(printed) == {"hot", "humid"}
    assert min(printed.values()) > 0


def test_explain_snippet_prints_what_the_page_shows(spark, capsys):
    exec(snippets()["explain"], {"__name__": "readme"})
    assert capsys.readouterr().out == marked("output", "explain")


def _commands(code: str) -> list[str]:
    return [line for line in code.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_shell_blocks_run():
    """Every bash block not marked not-run runs as written from the checkout, and says what the
    page says it prints (the simulator's --json: snapshots and outputs)."""
    ran = 0
    for page, marker, lang, code in blocks():
        if lang != "bash" or marker.startswith("not run"):
            continue
        for line in _commands(code):
            argv = shlex.split(line)
            assert argv[0] == ".venv/bin/python", f"{page.name}: a shell line to run starts with .venv/bin/python: {line}"
            done = subprocess.run([sys.executable, *argv[1:]], cwd=ROOT, capture_output=True, text=True, timeout=120)
            assert done.returncode == 0 and done.stdout.strip(), f"{page.name}: {line}\n{done.stderr[-2000:]}"
            if "--json" in argv:
                assert set(json.loads(done.stdout)) == {"snapshots", "outputs"}
            ran += 1
    assert ran >= 2


def test_commands_not_run_name_scripts_that_take_their_options():
    """A job or benchmark the tests do not run (minutes long) must still exist and accept every
    --option its command gives (its own argument parser, or the jobs' shared one)."""
    shared = "".join(p.read_text() for p in SHARED_OPTIONS)
    checked = 0
    for page, marker, lang, code in blocks():
        if lang != "bash" or not marker.startswith("not run"):
            continue
        for line in _commands(code):
            argv = shlex.split(line.split(" # ")[0])
            scripts = [a for a in argv if a.endswith(".py") or a == "./spark-submit.sh"]
            for script in scripts:
                assert (ROOT / script).is_file(), f"{page.name}: {script} does not exist"
            source = "".join((ROOT / s).read_text() for s in scripts if s.endswith(".py")) + shared
            if source != shared:
                for option in (a.split("=")[0] for a in argv if a.startswith("--")):
                    assert f'"{option}"' in source, f"{page.name}: {line!r}: no script takes {option}"
                checked += 1
    assert checked >= 10


def test_readme_test_command_is_the_one_ci_runs():
    """The README's test command is a contract: .ci/run runs exactly it."""
    readme = [code.strip() for page, _, lang, code in blocks() if page.name == "README.md" and lang == "bash"]
    command = next(c for c in readme if "pytest" in c)
    assert command in (ROOT / ".ci" / "run").read_text().splitlines()
    assert "./spark-submit.sh jobs/sensor_monitor.py" in readme


def test_toml_blocks_read_as_what_they_show():
    workload = parse_workload(tomllib.loads(marked("toml", "workload")), "guide")
    assert [op.name for op in workload.plan.operators] == ["O1"]
    for page, marker, lang, code in blocks():
        if lang == "toml":
            assert marker.startswith("toml: "), f"{page.name}: a ```toml block without a toml: NAME marker"
            tomllib.loads(code)


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = BLOCK.sub("", page.read_text())
    seen: Counter[str] = Counter()
    out = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, re.M):
        slug = _slug(heading)
        out.add(slug if not seen[slug] else f"{slug}-{seen[slug]}")
        seen[slug] += 1
    return out


def test_internal_links_resolve():
    """Every relative link of README.md and docs/*.md names a file that exists, and every #anchor
    a heading of the page it points into."""
    checked = 0
    for page in PAGES:
        text = re.sub(r"`[^`\n]*`", "", BLOCK.sub("", page.read_text()))
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            assert dest.exists(), f"{page.name}: link {target!r}: {dest} does not exist"
            if anchor:
                assert anchor in _anchors(dest), f"{page.name}: link {target!r}: no heading #{anchor} in {dest.name}"
            checked += 1
    assert checked >= 30


def test_the_readme_is_a_guide_and_no_page_tells_history():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250
    for page in PAGES:
        told = re.findall(r"\b(?:issue|stop)s? #?[0-9]+", page.read_text(), re.I)
        assert not told, f"{page.name} names {told}: say what the code does, not which issue changed it"


def _load_job(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"doc_{name}", ROOT / "jobs" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(ROOT / "jobs"))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(ROOT / "jobs"))
    return module


def test_reference_names_every_key_field_and_error():
    """docs/reference.md lists exactly the jobs' configuration keys, and names every field of a
    run's parts, every shorthand, every progress field and metrics column, and every error class."""
    import dataclasses
    import inspect
    import math

    import sparkqos.errors as errors
    from sparkqos.executor.options import ExecutorOptions
    from sparkqos.report.metrics import SCHEMA
    from sparkqos.runtime.config import SHORTHANDS, Continuous, Input, Storage, StrategyConfig, Trigger
    from sparkqos.runtime.intake import Intake
    from sparkqos.runtime.progress import record

    text = (ROOT / "docs" / "reference.md").read_text()
    listed = set(re.findall(r"^\| `(\w+\.\w+)` \|", text, re.M))
    keys = {
        f"{section}.{key}"
        for job in ("sensor_monitor", "vessel_monitor")
        for section, ks in _load_job(job).SCHEMA.items()
        for key in ks
    }
    assert listed == keys, f"missing: {sorted(keys - listed)}, not keys: {sorted(listed - keys)}"
    named = set(re.findall(r"`(\w+)", text))
    for part in (Storage, StrategyConfig, Trigger, ExecutorOptions, Continuous, Input, Intake):
        fields = {f.name for f in dataclasses.fields(part) if f.init}
        assert fields <= named, f"{part.__name__}: {sorted(fields - named)} not in the reference"
    assert {f"{k}=" for k in SHORTHANDS} - {"strategy_params="} <= set(re.findall(r"`(\w+=)`", text))

    class Row(dict):
        def __missing__(self, key):
            return math.nan

    progress = record(Row(run="r", batchId=0, scores="{}"), [])
    assert set(progress) <= named, sorted(set(progress) - named)
    assert set(SCHEMA.names) <= named, sorted(set(SCHEMA.names) - named)
    classes = {n for n, c in vars(errors).items() if inspect.isclass(c) and issubclass(c, errors.SparkqosError)}
    assert classes <= named, sorted(classes - named)


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
