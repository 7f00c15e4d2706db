"""The papers' worked examples, reproduced exactly by the simulator.

Each test compares the whole series step by step, so a failure names the first time that differs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkqos import schedulers
from sparkqos.sim import load_workload

WORKLOADS = Path(__file__).resolve().parent.parent / "conf" / "workloads"


def run(name: str, strategy: str, until: float, **overrides):
    workload = load_workload(WORKLOADS / name)
    for key, value in overrides.items():
        setattr(workload, key, value)
    return workload.simulator(schedulers.get(strategy)).run(until=until)


def assert_series(label: str, got: dict[int, float], expected: dict[int, float]) -> None:
    for t in sorted(expected):
        assert got.get(t) == pytest.approx(expected[t], abs=1e-9), (
            f"{label}: first difference at t={t}: got {got.get(t)!r}, the paper has {expected[t]!r}"
        )


# Thesis (Sutherland 2004) §1.2, Table 1.1: queue size and cumulative throughput after each time unit.
THESIS_TABLE_1_1 = {
    #    t: (FIFO queue, MTIQ queue, FIFO throughput, MTIQ throughput)
    0: (1.0, 1.0, 0.0, 0.0),
    1: (1.9, 1.9, 0.0, 0.0),
    2: (2.0, 2.8, 0.09, 0.0),
    3: (2.9, 1.9, 0.09, 0.0),
    4: (3.0, 1.9, 0.18, 0.0),
    5: (3.9, 1.9, 0.18, 0.0),
}


def test_thesis_table_1_1_fifo_slotted():
    """Thesis Table 1.1, FIFO column: slotted dispatch, run rule `one`."""
    result = run("thesis_table_1_1.toml", "fifo", 5, slotted=True)
    assert_series("FIFO queue", result.snapshots, {t: row[0] for t, row in THESIS_TABLE_1_1.items()})
    assert_series(
        "FIFO throughput", {t: result.cumulative_output(t) for t in range(6)}, {t: row[2] for t, row in THESIS_TABLE_1_1.items()}
    )


def test_thesis_table_1_1_mtiq_event_driven():
    """Thesis Table 1.1, MTIQ column: event-driven dispatch, run rule `one`."""
    result = run("thesis_table_1_1.toml", "mtiq", 5, slotted=False)
    assert_series("MTIQ queue", result.snapshots, {t: row[1] for t, row in THESIS_TABLE_1_1.items()})
    assert_series(
        "MTIQ throughput", {t: result.cumulative_output(t) for t in range(6)}, {t: row[3] for t, row in THESIS_TABLE_1_1.items()}
    )


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


# Jiang & Chakravarthy 2003, Table 2: queue size, tuple latency and throughput at t = 1..10.
JIANG_TABLE_2 = {
    #     t: (F queue, C queue, F latency, C latency, F throughput, C throughput)
    1: (1.0, 1.0, None, None, 0.0, 0.0),
    2: (1.2, 1.2, None, None, 0.0, 0.0),
    3: (3.0, 2.4, 2, None, 0.16, 0.0),
    4: (2.2, 1.6, None, None, 0.0, 0.0),
    5: (2.0, 0.8, 3, None, 0.16, 0.0),
    6: (1.2, 0.6, None, 5, 0.0, 0.16),
    7: (1.0, 0.4, 4, 5, 0.16, 0.16),
    8: (0.2, 0.2, None, 5, 0.0, 0.16),
    9: (0.0, 0.0, 6, 6, 0.16, 0.16),
    10: (1.0, 1.0, None, None, 0.0, 0.0),
}


@pytest.mark.parametrize("strategy, column", [("fifo", 0), ("chain", 1)])
def test_jiang_table_2(strategy, column):
    """Jiang Table 2 (plan of Figure 1, operators of Table 1): queue size, tuple latency and
    throughput per time unit under FIFO and Chain, run rule `quantum`."""
    result = run("jiang_table_2.toml", strategy, 10)
    assert_series(f"{strategy} queue", result.snapshots, {t: row[column] for t, row in JIANG_TABLE_2.items()})
    for t, row in JIANG_TABLE_2.items():
        at_t = [o for o in result.outputs if t - 1 < o.time <= t]
        latency = row[2 + column]
        throughput = row[4 + column]
        assert sum(o.amount for o in at_t) == pytest.approx(throughput, abs=1e-9), f"{strategy} throughput at t={t}"
        if latency is None:
            assert at_t == [], f"{strategy}: no output expected at t={t}, got {at_t}"
        else:
            assert [o.delay for o in at_t] == pytest.approx([latency]), f"{strategy} latency at t={t}"


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
