"""Smoke tests of the Spark experiments' shared helpers (jobs/experiments/_common.py) and of the
plain-Spark side of benchmarks/vs_fair_pools.py. The experiments themselves are minutes long and
are run by hand (docs/experiments.md); here: the trace is reproducible, a simulator plan turns
into PySpark transforms of synthetic operators with the same shape that keep their declared share
of rows, the FAIR-pools benchmark measures every
variant's delay from its sink files alike, and one tiny replay through the runner reads and emits every
row."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "jobs" / "experiments"))
sys.path.insert(0, str(ROOT / "jobs"))

import _common as C  # noqa: E402


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # as an import does: dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def test_bursty_trace_is_reproducible_and_bursty(tmp_path):
    n1 = C.write_bursty_trace(tmp_path / "a.parquet", rate=500, seconds=20, seed=3)
    n2 = C.write_bursty_trace(tmp_path / "b.parquet", rate=500, seconds=20, seed=3)
    a, b = pq.read_table(tmp_path / "a.parquet"), pq.read_table(tmp_path / "b.parquet")
    assert n1 == n2 == a.num_rows > 0 and a.equals(b)
    assert a.column_names == ["sensor_id", "location", "temperature", "humidity", "ts"]
    ts = a.column("ts").cast(pa.int64()).to_numpy()
    assert np.all(np.diff(ts) >= 0) and ts[0] >= C.ORIGIN_US and ts[-1] < C.ORIGIN_US + 20 * C.US
    per_s = np.bincount((ts - C.ORIGIN_US) // C.US, minlength=20)
    assert per_s.std() / per_s.mean() > 0.3  # ON/OFF bursts, not a smooth stream


def test_rising_rate_profile_thins_the_early_trace(tmp_path):
    C.write_bursty_trace(
        tmp_path / "r.parquet", rate=2000, seconds=20, seed=5, off_scale=1.0, rate_profile=lambda t: 0.25 if t < 10 else 1.0
    )
    ts = pq.read_table(tmp_path / "r.parquet").column("ts").cast(pa.int64()).to_numpy() - C.ORIGIN_US
    early, late = (ts < 10 * C.US).sum(), (ts >= 10 * C.US).sum()
    assert 0.15 < early / late < 0.4


def test_synthetic_transforms_keep_the_cqc_workload_shape(spark, tmp_path):
    """CQC Table 2 workload B on Spark as PySpark transforms over the replayed, keyed stream: the
    simulator plan's queries, classes, priorities and paths; per query its operators, a union
    under each join and one select dropping the key."""
    from cqc_sim import cqc_plan

    from sparkqos.spark.transforms import compile_transforms

    plan = cqc_plan("B", 1)
    transforms, classes, priorities = C.synthetic_transforms(plan, 1e-6, classes={"H": 6, "C": 3, "N": 1})
    C.write_bursty_trace(tmp_path / "t.parquet", rate=100, seconds=1, seed=2)
    df = C.keyed(C.replay_df(spark, tmp_path / "t.parquet"))
    compiled = compile_transforms(df, transforms, classes, priorities)
    assert sorted(compiled.plan.queries) == sorted(plan.queries)
    assert {q: v.klass for q, v in compiled.plan.queries.items()} == {q: v.klass for q, v in plan.queries.items()}
    assert compiled.plan.classes == {"H": 6.0, "C": 3.0, "N": 1.0}
    for q, query in plan.queries.items():
        joins = sum(1 for n in query.operators if len(plan[n].inputs) > 1)
        ops = compiled.plan.queries[q].operators
        assert len(ops) == len(query.operators) + joins + 1, q
        kinds = [compiled.operators[n].__class__.__name__ for n in ops]
        assert kinds.count("Synthetic") == len(query.operators) and kinds.count("Union") == joins, q
        assert sum(p.query == q for p in compiled.plan.paths) == sum(p.query == q for p in plan.paths), q
    assert len(compiled.plan.paths) == len(plan.paths)
    unit = C.cost_unit_for(plan, rate=600, load=0.85)
    assert unit * 600 * sum(plan.service_time(p) for p in plan.paths) == pytest.approx(0.85)
    with pytest.raises(ValueError, match="seconds"):
        C.write_bursty_trace("/tmp/never.parquet", 100, 0)


def test_chain_memory_join_plan_compiles_as_one_interval_join(spark, tmp_path):
    cm = _load(ROOT / "jobs" / "experiments" / "chain_memory.py", "chain_memory")
    from sparkqos.spark.transforms import compile_transforms

    C.write_bursty_trace(tmp_path / "t.parquet", rate=100, seconds=1, seed=2)
    transforms, classes, priorities = cm.plans_for(["join"], rate=400, load=0.5)["join"]()
    compiled = compile_transforms(C.keyed(C.replay_df(spark, tmp_path / "t.parquet")), transforms, classes, priorities)
    kinds = [compiled.operators[n].__class__.__name__ for n in compiled.plan.queries["join"].operators]
    assert kinds.count("IntervalJoin") == 1 and kinds.count("Synthetic") == 3
    assert len(compiled.plan.paths) == 2


def test_synthetic_operators_keep_their_declared_share_of_trace_rows(spark, tmp_path):
    """Keyed by the event time in µs, a synthetic operator keeps its declared share of a recorded
    trace's rows, in Spark's own run and in the executor's alike."""
    import sparkqos

    rows = C.write_bursty_trace(tmp_path / "t.parquet", rate=1000, seconds=4, seed=4)
    assert rows > 2000
    df = C.keyed(spark.read.parquet(str(tmp_path / "t.parquet")))
    queries = {
        f"s{int(sigma * 10)}": (lambda d, sigma=sigma: sparkqos.synthetic(d, sigma, seed=17, key=C.KEY))
        for sigma in (0.1, 0.5, 0.9)
    }
    ours = sparkqos.run(df, queries)
    # From a replay's start the key is the row's offset in µs, whenever the replay started
    offsets = C.keyed(spark.read.parquet(str(tmp_path / "t.parquet")), C.ORIGIN_US / C.US).select(C.KEY).toArrow()
    ts = pq.read_table(tmp_path / "t.parquet").column("ts").cast(pa.int64()).to_numpy()
    assert offsets.column(C.KEY).to_numpy().tolist() == (ts - C.ORIGIN_US).tolist()
    for name, t in queries.items():
        sigma = int(name[1:]) / 10
        kept = t(df).count()  # Spark's count, asked once
        assert abs(kept / rows - sigma) < 0.05, name
        assert ours[name].num_rows == kept, name


def test_rss_tree_counts_this_process():
    assert C.rss_tree_bytes(os.getpid()) > 10_000_000


def test_vs_fair_pools_measures_every_variant_from_its_sink_files(tmp_path):
    """vs_fair_pools measures FAIR and sparkqos alike: a row's delay is the write time of the sink
    file that holds it minus its event time (a window's end for zone_stats), per class."""
    import datetime as dt

    bench = _load(ROOT / "benchmarks" / "vs_fair_pools.py", "vs_fair_pools")
    utc = dt.UTC
    fire = pa.table({"sensor_id": [1, 2], "ts": pa.array([dt.datetime(2026, 1, 1, 0, 0, 1, tzinfo=utc)] * 2)})
    window = pa.array(
        [{"start": dt.datetime(2026, 1, 1, tzinfo=utc), "end": dt.datetime(2026, 1, 1, 0, 0, 10, tzinfo=utc)}],
        pa.struct([("start", pa.timestamp("us", tz="UTC")), ("end", pa.timestamp("us", tz="UTC"))]),
    )
    zones = pa.table({"window": window, "location": ["zone-1"], "count": [3]})
    bench._write_batch(tmp_path, "fire", 0, fire)
    bench._write_batch(tmp_path, "zone_stats", 3, zones)
    written = dt.datetime(2026, 1, 1, 0, 0, 12, tzinfo=utc).timestamp()
    for f in tmp_path.glob("query=*/batch=*.parquet"):
        os.utime(f, (written, written))
    assert not list(tmp_path.glob("query=*/.*tmp"))  # temp file + rename, as the ParquetSink does
    delays, rows = bench.delays_of(tmp_path)
    assert delays["fire"].tolist() == pytest.approx([11.0, 11.0])
    assert delays["zone_stats"].tolist() == pytest.approx([2.0])
    summary = bench.summarise({"variant": "x"}, tmp_path)
    assert summary["H_mean_ms"] == pytest.approx(11_000.0)
    assert summary["N_p99_ms"] == pytest.approx(2_000.0)
    assert summary["rows_out"] == {"fire": 2, "zone_stats": 1}
    assert set(summary["digest"]) == {"fire"}


def _tiny(tmp_path, load: float):
    """chain_memory's 'two' plan at ``load`` and a 3 s bursty trace of it at 400 rows/s in
    ``tmp_path / "t.parquet"``: the plan's builder and the trace's rows."""
    cm = _load(ROOT / "jobs" / "experiments" / "chain_memory.py", "chain_memory")
    two = cm.plans_for(["two"], rate=400, load=load)["two"]
    return two, C.write_bursty_trace(tmp_path / "t.parquet", rate=400, seconds=3, seed=2, off_scale=1.0)


@pytest.mark.slow  # an experiment's harness end to end: a replayed trace streamed in real time
def test_one_tiny_experiment_run_reads_and_emits_every_row(spark, tmp_path):
    """chain_memory's 'two' plan under chain on a 3 s trace: every row read, the queues drained,
    outputs and metrics written, delays measured."""
    two, rows = _tiny(tmp_path, load=0.5)
    st = C.run_sparkqos(
        spark,
        tmp_path / "t.parquet",
        two(),
        "chain",
        out=tmp_path / "out",
        name="two-chain",
        input_rows=rows,
        trace_s=3,
        trigger_s=0.5,
        quiet=True,
        lead_s=1.0,
    )
    assert st.read_all and st.rows_in == rows
    assert abs(st.rows_out() / rows - 0.09) < 0.05  # σ 0.9 then 0.1, keyed by the replayed event times
    assert st.klass_of == {"two": "default"} and st.readers == 1
    assert np.all(st.all_delays() >= 0)
    assert (tmp_path / "out" / "metrics").is_dir()
    assert st.cores >= 0 and st.first_progress is not None
    # The executor's share of the job's cores (the JVM's are counted in st.cores, not in it).
    assert 0 <= st.executor_cores <= st.cores + 0.1
    # The executor's operator runs, the time inside them and its fixed cost per run (the runner
    # sizes runs to it: overhead_share), which path_latency's Fig. 2 verdict names.
    assert st.operator_runs > 0 and st.run_seconds > 0 and 0 < st.fixed_cost_ms < 50
    assert 0 < st.fixed_cost_share < 1
    table = C.print_table("t", C.SUMMARY_HEADER, C.summary_rows([("two", "chain", st)], rows))
    assert "chain" in table and "executor cores" in table
    assert C.jvm_pid(spark) not in (None, os.getpid())


@pytest.mark.slow  # two runs side by side over one replayed trace, streamed in real time
def test_side_by_side_runs_serve_the_same_micro_batches_at_once(spark, tmp_path):
    """chain_memory's 'two' plan under chain and fifo at once: one replay, each micro-batch every
    run's trigger; both read every row at the same instants and emit the same rows, each on its
    own metrics and outputs, and both measured over the same span of the job's cores."""
    two, rows = _tiny(tmp_path, load=0.3)
    runs = C.run_side_by_side(
        spark,
        tmp_path / "t.parquet",
        {"two-chain": (two(), "chain"), "two-fifo": (two(), "fifo")},
        out=tmp_path / "out",
        input_rows=rows,
        trace_s=3,
        trigger_s=0.5,
        quiet=True,
        lead_s=1.0,
    )
    chain, fifo = runs["two-chain"], runs["two-fifo"]
    for st in (chain, fifo):
        assert st.read_all and st.rows_in == rows
        assert np.all(st.all_delays() >= 0) and st.operator_runs > 0
    assert chain.replay_start == fifo.replay_start and chain.cores == fifo.cores
    assert chain.rows_out() == fifo.rows_out() > 0
    written = {n: pq.read_table(tmp_path / "out" / "outputs" / n).column("ts") for n in runs}
    assert sorted(written["two-chain"].to_pylist()) == sorted(written["two-fifo"].to_pylist())
    assert not (tmp_path / "out" / "_checkpoint" / "side-by-side").exists()


def test_cpu_since_leaves_out_a_child_that_exited_instead_of_going_negative():
    """A child that burned CPU and exited between the two readings: the tree's sum falls, the
    difference by process does not."""
    import subprocess

    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\n"
            "print(flush=True)\nsys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    child.stdout.readline()  # it has burned its 0.3 s, however long a busy machine took to give them
    before = C.process_tree_cpu()
    assert before[child.pid] >= 0.2
    child.communicate(b"")
    assert C.process_tree_cpu_s() < sum(before.values())
    assert C.tree_cpu_since(before) >= 0


def test_process_tree_cpu_counts_this_process_and_draining_triggers_count_for_delay_only():
    before = C.process_tree_cpu_s()
    x = np.random.default_rng(0).random(1 << 20)
    for _ in range(40):
        np.sort(x)
    assert C.process_tree_cpu_s() > before
    # Several roots: each process is counted once, however many roots reach it.
    once = C.process_tree_cpu_s(os.getpid())
    assert C.process_tree_cpu_s(os.getpid(), os.getpid()) < once + 0.05
    st = C.RunStats({"q": "H"}, "t", expected_s=1, quiet=True)
    record = {"numInputRows": 5, "queuedRows": 7.0, "queuedBytes": 70.0, "strategy": "fifo"}
    st.on_progress(record)
    st.draining = True
    st.on_progress({**record, "numInputRows": 0, "queuedRows": 3.0})
    st.on_delays(1, {"q": np.array([0.5, 0.25])})
    assert st.queued_rows == [7.0] and st.last_queued == 3.0 and st.triggers == 2 and st.rows_in == 5
    assert st.query_delays("q").tolist() == [0.5, 0.25]  # rows written while draining count for delay


@pytest.mark.slow  # a benchmark's harness end to end: two measured runs of a plan
def test_cos_threads_benchmark_drains_under_every_run(spark, tmp_path):
    """benchmarks/cos_threads.py on one small plan: each run (one thread, cluster threads) drains
    the trace and reports the threads' CPU time."""
    from cos_sim import cos_plan

    from sparkqos.spark.transforms import compile_transforms

    bench = _load(ROOT / "benchmarks" / "cos_threads.py", "cos_threads")
    C.write_bursty_trace(tmp_path / "t.parquet", rate=bench.RATE, seconds=2, seed=7)
    df = C.keyed(spark.read.parquet(str(tmp_path / "t.parquet")))
    plan = cos_plan(1, 3)
    transforms, classes, priorities = C.synthetic_transforms(plan, C.cost_unit_for(plan, bench.RATE, 0.5), classes={})
    compiled = compile_transforms(df, transforms, classes, priorities)
    table = df.toArrow()
    serial = bench.measure(compiled, "cos", 0, table, {"T": 0.3})
    threads = bench.measure(compiled, "cos", 2, table, {"T": 0.3})
    for r in (serial, threads):
        assert r["queued"] == 0 and r["cpu"] > 0 and r["wall"] > 0
    assert serial["stolen"] == 0 and threads["cores"] <= 2.1


def test_chain_memory_verdict_calls_a_tie_a_tie():
    """chain_memory's verdict: chain holds the claim when it has (or ties within 5%) the least
    mean memory; when every strategy is within 5% it is a tie, not a win for chain (the bursty
    'two' plan this session: chain 3251 the highest, rr 3116 the least, once printed HELD)."""
    import doctest

    cm = _load(ROOT / "jobs" / "experiments" / "chain_memory.py", "chain_memory")
    runner = doctest.DocTestRunner()
    for test in doctest.DocTestFinder().find(cm.memory_verdict, "memory_verdict", globs={"memory_verdict": cm.memory_verdict}):
        runner.run(test)
    assert runner.summarize(verbose=False).failed == 0
    verdict = cm.memory_verdict
    tie = verdict("two", {"chain": 3251, "fifo": 3170, "greedy": 3182, "rr": 3116}, [2537, 2492, 2542, 2514])
    assert tie.startswith("[INCONCLUSIVE] two: chain has the least mean memory"), tie
    assert "every strategy is within 5% of the least" in tie, tie
    assert verdict("join", {"chain": 1648, "fifo": 3508, "greedy": 1795}, [581, 2417, 675]).startswith("[HELD] join")
    assert verdict("mix", {"chain": 8000, "fifo": 9600, "greedy": 7700}, [6000, 7800, 6100]).startswith("[HELD] mix")
    assert verdict("mix", {"chain": 9000, "fifo": 9600, "greedy": 7700}, [6000, 7800, 6100]).startswith("[NOT HELD] mix")
    flat = verdict("flat", {"chain": 3000, "fifo": 3300}, [2000, 2005])
    assert flat.startswith("[INCONCLUSIVE] flat:") and "every strategy served its queues down to the batch" in flat, flat


def test_claims_table_takes_each_traces_majority_and_both_traces_for_held(tmp_path):
    """jobs/experiments/claims.py: a cell is median [min–max] of the verdicts' measures with the
    repetitions that held; a claim is held only when both traces' majorities hold it, not held
    when both do not, inconclusive otherwise; a simulator-only claim takes the simulator's."""
    claims = _load(ROOT / "jobs" / "experiments" / "claims.py", "claims_under_test")
    held = lambda m: C.Verdict("pc lowest", "HELD", f"ratio {m}", m, "Fig. 2")  # noqa: E731
    not_held = lambda m: C.Verdict("pc lowest", "NOT HELD", f"ratio {m}", m, "Fig. 2")  # noqa: E731
    records = [("Jiang §5", "bursty", v) for v in (held(0.9), held(0.95), not_held(1.1))]
    records += [("Jiang §5", "vessels", v) for v in (not_held(1.2), not_held(1.3), held(0.99))]
    records += [("Jiang Th. 3", "simulator", C.Verdict("segment ≤ chain", "HELD", "1 passed", None, "Theorem 3"))]
    rows = claims.build_rows(records)
    assert [(r["section"], r["verdict"]) for r in rows] == [("Jiang §5", "inconclusive"), ("Jiang Th. 3", "held")]
    assert rows[0]["bursty"] == "0.95 [0.90–1.10], held 2/3"
    assert rows[0]["vessels"] == "1.20 [0.99–1.30], held 1/3"
    assert rows[0]["reason"].startswith("bursty: ratio 0.95; vessels: ratio 1.2")
    both = claims.build_rows([("S", t, held(0.5)) for t in claims.TRACES])
    assert both[0]["verdict"] == "held"
    text = claims.markdown(rows, "note")
    page = tmp_path / "experiments.md"
    page.write_text(f"intro\n{claims.BEGIN}\nold\n{claims.END}\nrest\n")
    claims.write_table(page, text)
    assert page.read_text() == f"intro\n{claims.BEGIN}\n{text}{claims.END}\nrest\n"
    published = claims.DOCS.read_text()  # the page --docs writes holds the markers once each
    assert claims.DOCS == ROOT / "docs" / "experiments.md"
    assert published.count(claims.BEGIN) == 1 and published.count(claims.END) == 1


def test_report_shows_the_claims_table_without_metrics(tmp_path):
    from sparkqos.report import render

    row = {"section": "CQC §5", "claim": "A: cqc < hr", "paper": "9.4x", "simulator": "13.2, held 1/1"}
    row |= {"bursty": "7.0 [6.1–8.0], held 3/3", "vessels": "not run", "verdict": "inconclusive", "reason": "bursty: H 7x"}
    (tmp_path / "claims.json").write_text(__import__("json").dumps({"note": "generated", "rows": [row]}))
    page = render(tmp_path, title="claims").read_text()
    assert "The papers' claims" in page and "CQC §5: A: cqc &lt; hr" in page and "7.0 [6.1–8.0], held 3/3" in page


#: A sitecustomize that makes pytest and hypothesis unimportable in every Python started with it
#: on its path, as in the virtualenv spark-submit.sh builds (the package, its plot and data extras).
WITHOUT_TEST_TOOLS = """
import importlib.abc
import sys


class NoTestTools(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("pytest", "_pytest", "hypothesis"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, NoTestTools())
"""


def test_claims_checks_the_papers_tables_and_theorems_without_pytest(tmp_path):
    """The claims command's checks of the papers' worked tables and theorems run on the library's
    code in a Python (and any Python it starts) where pytest and hypothesis cannot be imported, and
    hold: thesis Table 1.1, Jiang Table 2, Chain Th. 4.2, Jiang Th. 1 and 3 (a fifth of each
    theorem's random sample, to keep the test short)."""
    import json
    import subprocess

    (tmp_path / "sitecustomize.py").write_text(WITHOUT_TEST_TOOLS)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))}
    script = (
        "import json, sys\n"
        "try:\n"
        "    import pytest\n"
        "except ModuleNotFoundError:\n"
        "    pass\n"
        "else:\n"
        "    raise SystemExit('pytest is importable')\n"
        f"sys.path.insert(0, {str(ROOT / 'jobs' / 'experiments')!r})\n"
        "import _common as C\n"
        "import claims\n"
        "claims.paper_checks(fraction=0.2)\n"
        "print(json.dumps(claims.build_rows(claims.simulator_records(C.RECORDED))))\n"
    )
    run = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    rows = json.loads(run.stdout.strip().splitlines()[-1])
    assert [(r["section"], r["paper"], r["simulator"], r["verdict"]) for r in rows] == [
        ("Raindrop §1.2", "Table 1.1", "held", "held"),
        ("Jiang Table 2", "Table 2", "held", "held"),
        ("Chain Th. 4.2", "Theorem 4.2", "held", "held"),
        ("Jiang Th. 1", "Theorem 1", "held", "held"),
        ("Jiang Th. 3", "Theorem 3", "held", "held"),
    ], run.stdout
    assert "holds on all 30 random workloads" in rows[2]["reason"], rows[2]


def test_claims_says_not_run_and_why_for_a_check_or_run_that_could_not_run():
    """A check that raises, and an experiment whose run fails, are ``not run: <why>`` in the
    table, never ``not held``; a claim whose repetitions partly ran counts only those that did."""
    claims = _load(ROOT / "jobs" / "experiments" / "claims.py", "claims_not_run")
    since = len(C.RECORDED)

    def missing() -> tuple[bool, str]:
        raise FileNotFoundError("conf/workloads/thesis_table_1_1.toml")

    claims.paper_check("Raindrop §1.2", "Table 1.1 comes out exactly", "Table 1.1", missing)
    claims.paper_check("Jiang Th. 1", "pc's latency is least", "Theorem 1", lambda: (True, "holds on all 2"))
    sys.modules["failing_experiment"] = type(sys)("failing_experiment")
    sys.modules["failing_experiment"].main = lambda argv: 1 / 0
    try:
        claims.run_spark("failing_experiment", [])
    finally:
        del sys.modules["failing_experiment"]
    table, spark = C.RECORDED[since : since + 2], C.RECORDED[since + 2]
    rows = claims.build_rows(claims.simulator_records(table) + [("COS §5", "bursty", spark)])
    assert [(r["section"], r["simulator"], r["bursty"], r["verdict"]) for r in rows] == [
        ("Raindrop §1.2", "not run", "not run", "not run: FileNotFoundError: conf/workloads/thesis_table_1_1.toml"),
        ("Jiang Th. 1", "held", "not run", "held"),
        ("COS §5", "—", "not run", "not run: failed: ZeroDivisionError: division by zero"),
    ]
    held = C.Verdict("c", "HELD", "ratio 0.9", 0.9)
    skipped = C.Verdict("c", "NOT RUN", "failed: timeout")
    assert claims.cell([held, skipped, held]) == "0.90 [0.90–0.90], held 2/2, 1 not run"
    assert claims.majority([skipped, held]) == "HELD" and claims.majority([skipped]) == "NOT RUN"


def test_claims_table_says_where_it_ran(tmp_path, monkeypatch):
    """claims.md, claims.json and the report's claims section give the cores, the CPU speed
    figure and the load average before and after; --one-core pins to CPU 0 what Spark runs in, and
    without taskset it stops before anything runs, saying so."""
    import json
    import shutil
    import subprocess

    from sparkqos.report import render

    claims = _load(ROOT / "jobs" / "experiments" / "claims.py", "claims_machine")
    machine = claims.Machine.measure()
    assert machine.cores >= machine.usable_cores >= 1 and 0 < machine.sort_ms_best <= machine.sort_ms_median
    assert machine.spark_cpus == f"all {machine.usable_cores} usable cores" and len(machine.load_before) == 3
    machine.load_after = (1.0, 2.0, 3.0)
    row = {"section": "S", "claim": "c", "paper": "p", "simulator": "held", "bursty": "—", "vessels": "—"}
    note = "Generated by the test.\n\n" + machine.text(final=True)
    text = claims.write_files(tmp_path, [row | {"verdict": "held", "reason": "r"}], note, machine)
    assert f"Ran on {machine.cores} cores ({machine.usable_cores} usable)" in text
    assert "numpy sort of 10⁶ doubles best" in text and "1.00 2.00 3.00 after" in text
    doc = json.loads((tmp_path / "claims.json").read_text())
    assert doc["machine"]["cores"] == machine.cores and doc["machine"]["load_after"] == [1.0, 2.0, 3.0]
    page = render(tmp_path, title="claims").read_text()
    assert "<p>Generated by the test.</p>" in page and "1.00 2.00 3.00 after. Spark experiments: all" in page
    if shutil.which("taskset"):  # --one-core's pinning, in a process of its own: a child inherits CPU 0
        script = (
            f"import os, subprocess, sys; sys.path.insert(0, {str(ROOT / 'jobs' / 'experiments')!r}); import claims\n"
            "print(claims.pin_to_cpu_0())\n"
            "print(subprocess.run([sys.executable, '-c', 'import os; print(sorted(os.sched_getaffinity(0)))'],"
            " capture_output=True, text=True).stdout)\n"
        )
        run = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr[-3000:]
        said, child = run.stdout.strip().splitlines()
        assert said == "CPU 0 only (--one-core: taskset -a -p -c 0 on this driver)" and child == "[0]", run.stdout
    monkeypatch.setattr(claims.shutil, "which", lambda name: None)
    with pytest.raises(SystemExit, match="taskset is not on PATH"):
        claims.main(["--quick", "--one-core", "--out", str(tmp_path / "one-core")])
    assert not (tmp_path / "one-core").exists()
