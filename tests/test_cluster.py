"""The sharded lane on a standalone cluster (a master and two workers in JVMs of their own) that
loses a worker mid-run: benchmarks/cluster.py, small. Opt-in like the other cluster tests
(tests/test_sharded.py): SPARKQOS_CLUSTER_TESTS=1."""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(
        os.environ.get("SPARKQOS_CLUSTER_TESTS") != "1",
        reason="starts a master, two workers and a driver (minutes on 2 loaded cores): SPARKQOS_CLUSTER_TESTS=1",
    ),
]


def _benchmark():
    spec = importlib.util.spec_from_file_location("cluster_benchmark", ROOT / "benchmarks" / "cluster.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_standalone_cluster_that_loses_a_worker_loses_and_duplicates_nothing(tmp_path):
    """Worker 1's JVM and its executor are SIGKILLed after micro-batch 2: Spark runs the shards on
    the other executor from the state store's checkpoint, and after draining every query's rows
    are Spark's batch answer, each once; the recovery time is measured."""
    cluster = _benchmark()
    args = argparse.Namespace(rows=12_000, files=6, kill_at=2, trigger=1.0, timeout=400.0, out=str(tmp_path / "run"))
    summary = cluster.run(args)
    assert summary["killed"] and summary["killed"]["executors"], summary["killed"]
    assert (summary["lost"], summary["duplicated"], summary["equal"]) == (0, 0, 3), summary["mismatches"]
    at = summary["killed"]["at"]
    before = {e for b in summary["batches"] if b["timestamp"] <= at for e in b["executors"]}
    assert len(before) == 2, summary["batches"]
    took, _ = cluster.recovery(summary)
    assert math.isfinite(took) and took > 0
