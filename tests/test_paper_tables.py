"""The papers' worked examples, reproduced exactly by the simulator.

Each test compares the whole series step by step, so a failure names the first time that differs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkqos.testing import papers
from sparkqos.testing.papers import JIANG_TABLE_2

WORKLOADS = Path(__file__).resolve().parent.parent / "conf" / "workloads"


def run(name: str, strategy: str, until: float, **overrides):
    return papers.run_workload(WORKLOADS, name, strategy, until, **overrides)


def test_thesis_table_1_1_fifo_slotted():
    """Thesis Table 1.1, FIFO column: slotted dispatch, run rule `one` — queue sizes and
    cumulative throughput at t = 0..5 exactly as printed."""
    differences = papers.thesis_table_1_1(WORKLOADS, "fifo")
    assert differences == [], differences[0]


def test_thesis_table_1_1_mtiq_event_driven():
    """Thesis Table 1.1, MTIQ column: event-driven dispatch, run rule `one` — queue sizes and
    cumulative throughput at t = 0..5 exactly as printed."""
    differences = papers.thesis_table_1_1(WORKLOADS, "mtiq")
    assert differences == [], differences[0]


def test_thesis_fifo_outputs_every_two_units_and_mtiq_waits():
    """Thesis §1.2 text: FIFO outputs every 2 time units at 0.045 tuples per unit; MTIQ outputs
    nothing for a long time (its first output comes after t = 10)."""
    fifo = run("thesis_table_1_1.toml", "fifo", 9, slotted=True)
    assert [round(o.amount, 9) for o in fifo.outputs] == [0.09] * 4
    times = [o.time for o in fifo.outputs]
    assert [b - a for a, b in zip(times, times[1:])] == pytest.approx([2.0, 2.0, 2.0])
    assert fifo.cumulative_output(9) / 8 == pytest.approx(0.045)
    mtiq = run("thesis_table_1_1.toml", "mtiq", 9, slotted=False)
    assert mtiq.outputs == []


@pytest.mark.parametrize("strategy", ["fifo", "chain"])
def test_jiang_table_2(strategy):
    """Jiang Table 2 (plan of Figure 1, operators of Table 1): queue size, tuple latency and
    throughput per time unit under FIFO and Chain, run rule `quantum`, exactly as printed."""
    differences = papers.jiang_table_2(WORKLOADS, strategy)
    assert differences == [], differences[0]


def test_jiang_table_2_through_the_cli(capsys):
    """The same table through `python -m sparkqos simulate … --json` (the CLI contract)."""
    import json

    from sparkqos.cli import main

    assert main(["simulate", str(WORKLOADS / "jiang_table_2.toml"), "--scheduler", "chain", "--until", "10", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) == {"snapshots", "outputs"}
    assert list(doc["snapshots"]) == [str(t) for t in range(11)]
    assert [doc["snapshots"][str(t)] for t in range(1, 11)] == pytest.approx([row[1] for row in JIANG_TABLE_2.values()])
    assert doc["outputs"] == [
        {"time": 6.0, "amount": 0.16, "delay": 5.0, "query": "O3"},
        {"time": 7.0, "amount": 0.16, "delay": 5.0, "query": "O3"},
        {"time": 8.0, "amount": 0.16, "delay": 5.0, "query": "O3"},
        {"time": 9.0, "amount": 0.16, "delay": 6.0, "query": "O3"},
    ]
