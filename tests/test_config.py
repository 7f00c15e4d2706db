"""Job configuration: every mistake fails at start and names the key and what is allowed."""

from __future__ import annotations

import pytest

from sparkqos import schedulers
from sparkqos.config import ConfigError, Key, describe, load_config

SCHEMA = {
    "job": {
        "duration_s": Key(float, 60.0, "how long to run", low=0, low_open=True),
        "triggers": Key(int, 10, low=1),
        "verbose": Key(bool, False),
    },
    "scheduler": {
        "strategy": Key(str, "chain", choices=schedulers.available),
        "candidates": Key(list, ["fifo", "chain"], choices=schedulers.available),
        "budget_ms": Key(float, None, low=0, optional=True),
    },
}


def test_defaults_and_values():
    cfg = load_config(SCHEMA, text="[job]\nduration_s = 5\n[scheduler]\ncandidates = ['rr', 'mtiq']")
    assert cfg == {
        "job": {"duration_s": 5.0, "triggers": 10, "verbose": False},
        "scheduler": {"strategy": "chain", "candidates": ["rr", "mtiq"], "budget_ms": None},
    }


def test_overrides_from_the_command_line():
    cfg = load_config(
        SCHEMA, overrides=["job.triggers=3", "job.verbose=true", "scheduler.candidates=fifo,rr", "scheduler.budget_ms=250"]
    )
    assert cfg["job"]["triggers"] == 3 and cfg["job"]["verbose"] is True
    assert cfg["scheduler"]["candidates"] == ["fifo", "rr"] and cfg["scheduler"]["budget_ms"] == 250.0


def test_a_nested_strategy_is_a_name_or_a_name_params_table():
    """The shape of ``StrategyConfig(name, params=...)``: config maps 1:1 to the constructor tree."""
    text = "[scheduler]\ncandidates = ['fifo', {name = 'cqc', params = {k = 3.0}}]"
    cfg = load_config(SCHEMA, text=text)
    assert cfg["scheduler"]["candidates"] == ["fifo", {"name": "cqc", "params": {"k": 3.0}}]
    override = 'scheduler.candidates=["rr", {"name": "pc", "params": {"quantum": 0.05}}]'
    cfg = load_config(SCHEMA, overrides=[override])
    assert cfg["scheduler"]["candidates"] == ["rr", {"name": "pc", "params": {"quantum": 0.05}}]
    adaptive = schedulers.get("adaptive", candidates=cfg["scheduler"]["candidates"])
    assert repr(adaptive.candidates) == "['rr', PathCapacity(quantum=0.05)]"


@pytest.mark.parametrize(
    "text, overrides, message",
    [
        (
            "[jobs]\nduration_s = 1",
            [],
            r"unknown section \[jobs\] \(did you mean 'job'\?\); allowed sections are: job, scheduler",
        ),
        ("[job]\nduraton_s = 1", [], r"unknown key 'job.duraton_s' \(did you mean 'duration_s'\?\)"),
        ("[job]\nduration_s = -1", [], r"job.duration_s must be a finite number > 0, got -1"),
        ("[job]\nduration_s = 'long'", [], r"job.duration_s must be a number, got 'long'"),
        ("[job]\ntriggers = 2.5", [], r"job.triggers must be an integer >= 1, got 2.5"),
        ("[job]\nverbose = 1", [], r"job.verbose must be true or false"),
        (
            "[scheduler]\nstrategy = 'chian'",
            [],
            r"scheduler.strategy = 'chian' is not allowed \(did you mean 'chain'\?\); allowed values are: .*fifo",
        ),
        ("[scheduler]\ncandidates = ['fifo', 'lifo']", [], r"scheduler.candidates = 'lifo' is not allowed"),
        ("[scheduler]\ncandidates = ['fifo', {name = 'cqcc'}]", [], r"scheduler.candidates = 'cqcc' is not allowed"),
        ("[scheduler]\ncandidates = [{nme = 'cqc'}]", [], r"scheduler.candidates must be a list of names or \{name"),
        ("[scheduler]\nbudget_ms = -5", [], r"scheduler.budget_ms must be a finite number >= 0, got -5"),
        ("[job\n", [], r"not valid TOML"),
        ("", ["job.duration_s"], r"must look like section.key=value"),
        ("", ["jb.duration_s=3"], r"unknown section 'jb' \(did you mean 'job'\?\)"),
        ("", ["job.duration_s=nan"], r"job.duration_s must be a finite number > 0, got nan"),
    ],
)
def test_mistakes_name_the_key(text, overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(SCHEMA, text=text, overrides=overrides)


def test_file_errors_name_the_file(tmp_path):
    path = tmp_path / "job.toml"
    path.write_text("[job]\nduration_s = 0\n")
    with pytest.raises(ConfigError, match=f"{path}: job.duration_s must be a finite number > 0, got 0"):
        load_config(SCHEMA, path=path)
    with pytest.raises(ConfigError, match="cannot read configuration"):
        load_config(SCHEMA, path=tmp_path / "missing.toml")


def test_describe_lists_keys_and_choices():
    text = describe(SCHEMA)
    assert "[job]" in text and "duration_s = 60.0  how long to run" in text
    assert "one of:" in text and "chain" in text
