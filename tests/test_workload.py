"""Workload files and the simulate command: the contract, and errors that name the problem."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sparkqos.cli import main
from sparkqos.errors import PlanError, WorkloadError
from sparkqos.schedulers import get
from sparkqos.sim import Simulator, chain_plan, load_workload

ROOT = Path(__file__).resolve().parent.parent

GOOD = """
run = "quantum"
slotted = false
[[operator]]
name = "O1"
input = "S1"
selectivity = 0.2
cost = 1.0
[[operator]]
name = "O2"
input = ["O1"]
selectivity = 1.0
cost = 0.5
query = "Q"
class = "H"
[classes]
H = 6
[arrivals]
S1 = [[1, 1.0], [3, 1.0]]
"""


def write(tmp_path, text: str) -> Path:
    path = tmp_path / "w.toml"
    path.write_text(text)
    return path


def test_issue_example_loads(tmp_path):
    workload = load_workload(write(tmp_path, GOOD))
    assert workload.run == "quantum" and workload.slotted is False
    assert workload.plan.queries["Q"].klass == "H"
    assert workload.arrivals == {"S1": [(1.0, 1.0), (3.0, 1.0)]}


@pytest.mark.parametrize(
    "edit, error, message",
    [
        (
            lambda t: t.replace('run = "quantum"', 'run = "forever"'),
            WorkloadError,
            "run must be one of 'one', 'quantum', got 'forever'",
        ),
        (
            lambda t: t.replace("slotted = false", "slottd = false"),
            WorkloadError,
            r"unknown key\(s\) \['slottd'\]; allowed keys are",
        ),
        (
            lambda t: t.replace("selectivity = 0.2", "selectivty = 0.2"),
            WorkloadError,
            r"operator #1 \('O1'\): unknown key\(s\) \['selectivty'\]",
        ),
        (
            lambda t: t.replace("selectivity = 0.2", 'selectivity = "high"'),
            WorkloadError,
            r"operator #1 \('O1'\): selectivity must be a finite number, got 'high'",
        ),
        (
            lambda t: t.replace("selectivity = 0.2", "selectivity = nan"),
            WorkloadError,
            "selectivity must be a finite number, got nan",
        ),
        (
            lambda t: t.replace("selectivity = 0.2", "selectivity = -0.2"),
            PlanError,
            "selectivity must be a finite number >= 0, got -0.2",
        ),
        (lambda t: t.replace("cost = 1.0", "cost = 0"), PlanError, "cost must be a finite number > 0, got 0.0"),
        (lambda t: t.replace('input = "S1"', 'input = "S9"'), PlanError, "reads unknown input 'S9'"),
        (lambda t: t.replace('input = ["O1"]', 'input = ["O2"]'), PlanError, "cycle"),
        (
            lambda t: t.replace("[[1, 1.0], [3, 1.0]]", "[[1, 1.0], [3]]"),
            WorkloadError,
            r"arrivals.S1\[1\] must be \[time, amount\]",
        ),
        (
            lambda t: t.replace("[[1, 1.0], [3, 1.0]]", "[[1, 1.0], [3, -1.0]]"),
            WorkloadError,
            r"arrivals.S1\[1\] amount must be a finite number > 0, got -1.0",
        ),
        (lambda t: t + "\n[[", WorkloadError, "not valid TOML"),
        (lambda t: t.replace('name = "O2"', 'name = "O1"'), PlanError, "duplicate operator name 'O1'"),
    ],
)
def test_bad_workloads_name_the_problem(tmp_path, edit, error, message):
    path = write(tmp_path, edit(GOOD))
    with pytest.raises(error, match=message) as info:
        load_workload(path).simulator(get("fifo")).run(until=5)
    assert str(path) in str(info.value)


def test_missing_file():
    with pytest.raises(WorkloadError, match="cannot read workload 'nope.toml'"):
        load_workload("nope.toml")


def test_arrivals_for_an_unknown_stream():
    with pytest.raises(WorkloadError, match="arrivals for unknown stream 'T'"):
        Simulator(chain_plan([(0.5, 1.0)]), get("fifo"), {"T": [(0, 1.0)]})


def test_run_parameters_are_checked():
    plan = chain_plan([(0.5, 1.0)])
    with pytest.raises(WorkloadError, match="run must be one of 'one', 'quantum', got 'two'"):
        Simulator(plan, get("fifo"), {}, run="two")
    with pytest.raises(WorkloadError, match="quantum must be a finite number > 0"):
        Simulator(plan, get("fifo"), {}, quantum=0)
    with pytest.raises(WorkloadError, match="until must be a finite number >= 0 or None, got -1"):
        Simulator(plan, get("fifo"), {}).run(until=-1)


def test_cli_unknown_strategy_exits_2_with_the_list(capsys):
    code = main(["simulate", str(ROOT / "conf/workloads/jiang_table_2.toml"), "--scheduler", "chian"])
    err = capsys.readouterr().err
    assert code == 2
    assert "unknown strategy 'chian'" in err and "chain" in err


def test_cli_strategy_parameters(capsys):
    assert (
        main(
            [
                "simulate",
                str(ROOT / "conf/workloads/jiang_table_2.toml"),
                "-s",
                "rr",
                "-p",
                "quantum=0.5",
                "--until",
                "4",
                "--json",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["snapshots"]["4"] >= 0


def test_cli_table_output(capsys):
    assert main(["simulate", str(ROOT / "conf/workloads/thesis_table_1_1.toml"), "--until", "5"]) == 0
    out = capsys.readouterr().out
    assert "     2       2.0000               0.0900" in out


def test_python_dash_m_entry_point():
    """The documented command, as a user types it."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sparkqos",
            "simulate",
            "conf/workloads/jiang_table_2.toml",
            "--scheduler",
            "fifo",
            "--until",
            "10",
            "--json",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    doc = json.loads(proc.stdout)
    assert doc["snapshots"]["3"] == 3.0
    assert doc["outputs"][0] == {"time": 3.0, "amount": 0.16, "delay": 2.0, "query": "O3"}
