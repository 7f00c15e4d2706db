"""Smoke tests of the Spark experiments' shared helpers (jobs/experiments/_common.py) and of the
plain-Spark side of benchmarks/vs_fair_pools.py. The experiments themselves are minutes long and
are run by hand (README "Experiments"); here: the trace is reproducible, a simulator plan turns
into a runnable synthetic query set with the same shape, the FAIR-pool query code gives the
same rows as sparkqos's operators, and one tiny replay through the runner reads and emits every
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


def test_synthetic_queries_keep_the_cqc_workload_shape():
    """CQC Table 2 workload B on Spark: same queries, classes and priorities as the simulator plan."""
    from cqc_sim import cqc_plan

    plan = cqc_plan("B", 1)
    compiled = C.synthetic_queries(plan, 1e-6, classes={"H": 6, "C": 3, "N": 1}).build()
    assert sorted(compiled.plan.queries) == sorted(plan.queries)
    assert {q: v.klass for q, v in compiled.plan.queries.items()} == {q: v.klass for q, v in plan.queries.items()}
    assert len(compiled.plan.paths) == len(plan.paths)
    unit = C.cost_unit_for(plan, rate=600, load=0.85)
    assert unit * 600 * sum(plan.service_time(p) for p in plan.paths) == pytest.approx(0.85)
    with pytest.raises(ValueError, match="seconds"):
        C.write_bursty_trace("/tmp/never.parquet", 100, 0)


def test_rss_tree_counts_this_process():
    assert C.rss_tree_bytes(os.getpid()) > 10_000_000


def test_fair_pool_query_code_matches_sparkqos_operators(tmp_path):
    """The plain-Spark side runs the same operators: fire (no synthetic step) gives exactly the
    rows sparkqos's executor gives on the same trace."""
    from sparkqos.examples import sensor_queries

    bench = _load(ROOT / "benchmarks" / "vs_fair_pools.py", "vs_fair_pools")
    C.write_bursty_trace(tmp_path / "t.parquet", rate=3000, seconds=10, seed=7)
    table = pq.read_table(tmp_path / "t.parquet")
    compiled = sensor_queries(work_us=0).build().fresh()
    path = next(p for p in compiled.plan.paths if p.query == "fire")
    fn = bench._chain_fn([compiled.operators[n] for n in path.operators])
    got = pa.Table.from_batches(list(fn(iter(table.to_batches(max_chunksize=4096)))))
    assert got.num_rows > 0 and "emit" in got.column_names
    assert np.all(got.column("emit").to_numpy() >= got.column("ts").to_numpy())
    assert got.num_rows == int(((table["temperature"].to_numpy() > 55) & (table["humidity"].to_numpy() < 25)).sum())


def test_one_tiny_experiment_run_reads_and_emits_every_row(spark, tmp_path):
    """chain_memory's 'two' plan under chain on a 3 s trace: every row read, the queues drained,
    outputs and metrics written, delays measured."""
    cm = _load(ROOT / "jobs" / "experiments" / "chain_memory.py", "chain_memory")
    two = cm.plans_for(["two"], rate=400, load=0.5)["two"]
    rows = C.write_bursty_trace(tmp_path / "t.parquet", rate=400, seconds=3, seed=2, off_scale=1.0)
    st = C.run_sparkqos(
        spark,
        tmp_path / "t.parquet",
        two().build(),
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
    assert 0 < st.rows_out() < rows  # σ 0.9 then 0.1
    assert np.all(st.all_delays() >= 0)
    assert (tmp_path / "out" / "metrics").is_dir()
    table = C.print_table("t", C.SUMMARY_HEADER, C.summary_rows([("two", "chain", st)], rows))
    assert "chain" in table
