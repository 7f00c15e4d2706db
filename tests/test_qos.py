"""QoS specs (thesis §5.1): validation, templates, TOML files, user statistics."""

from __future__ import annotations

import math

import pytest

from sparkqos.adaptive.qos import (
    CONF_DIR,
    TEMPLATES,
    Goal,
    QosSpec,
    Window,
    load_qos,
    measure,
    register_statistic,
    resolve,
    statistics,
    template,
    unregister_statistic,
)
from sparkqos.errors import QosSpecError


def test_weights_must_sum_to_one_within_tolerance():
    third = 1 / 3
    assert (
        QosSpec.of(("delay", "minimize", third), ("output_rate", "maximize", third), ("queued", "minimize", third)).weights[
            "delay"
        ]
        == third
    )
    QosSpec.of(("delay", "minimize", 0.5 + 4e-10), ("queued", "minimize", 0.5))
    with pytest.raises(QosSpecError, match=r"sum to 1, got 1.000000002 \(delay=0.5, queued=0.500000002\)"):
        QosSpec.of(("delay", "minimize", 0.5), ("queued", "minimize", 0.500000002))
    with pytest.raises(QosSpecError, match="sum to 1, got 0.9"):
        QosSpec.of(("delay", "minimize", 0.6), ("queued", "minimize", 0.3))


@pytest.mark.parametrize(
    "goal, message",
    [
        (("latency", "minimize", 1.0), r"unknown statistic 'latency'; known statistics are \['delay'"),
        (("delay", "lower", 1.0), "goal 'delay': direction must be one of 'maximize', 'minimize', got 'lower'"),
        (("delay", "minimize", -0.1), "goal 'delay': weight must be a finite number >= 0, got -0.1"),
        (("delay", "minimize", float("nan")), "goal 'delay': weight must be a finite number >= 0, got nan"),
        (("delay", "minimize", float("inf")), "goal 'delay': weight must be a finite number >= 0, got inf"),
        (("delay", "minimize", True), "goal 'delay': weight must be a finite number"),
        (("delay", "minimize", "1"), "goal 'delay': weight must be a finite number"),
        (("delay", "minimize"), r"a goal is \(statistic, direction, weight\), got \('delay', 'minimize'\)"),
    ],
)
def test_bad_goals_name_the_offending_value(goal, message):
    with pytest.raises(QosSpecError, match=message):
        QosSpec.of(goal)


def test_duplicate_statistic_and_empty_spec_are_errors():
    with pytest.raises(QosSpecError, match=r"names statistic\(s\) \['delay'\] more than once"):
        QosSpec.of(("delay", "minimize", 0.5), ("delay", "maximize", 0.5))
    with pytest.raises(QosSpecError, match="has no goals"):
        QosSpec((), "empty")


def test_default_is_balanced_equal_thirds():
    spec = resolve(None)
    assert spec.name == "balanced"
    assert spec.weights == pytest.approx({"delay": 1 / 3, "output_rate": 1 / 3, "queued": 1 / 3})
    assert {g.statistic: g.direction for g in spec.goals} == {
        "delay": "minimize",
        "output_rate": "maximize",
        "queued": "minimize",
    }


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_toml_templates_match_the_built_in_ones(name):
    assert load_qos(CONF_DIR / f"{name}.toml") == TEMPLATES[name]
    assert resolve(str(CONF_DIR / f"{name}.toml")) == TEMPLATES[name]


def test_every_shipped_toml_is_a_template():
    assert sorted(p.stem for p in CONF_DIR.glob("*.toml")) == sorted(TEMPLATES)
    assert sorted(TEMPLATES) == ["balanced", "high_throughput", "low_latency", "low_memory"]


def test_toml_unknown_keys_name_the_key_and_the_allowed_keys(tmp_path):
    f = tmp_path / "bad.toml"
    f.write_text('name = "x"\nweights = 1\n[[goal]]\nstatistic = "delay"\ndirection = "minimize"\nweight = 1.0\n')
    with pytest.raises(QosSpecError, match=r"unknown key\(s\) \['weights'\]; allowed keys are \['name', 'description', 'goal'\]"):
        load_qos(f)
    f.write_text('[[goal]]\nstatistic = "delay"\ndirection = "minimize"\nweight = 1.0\nwieght = 2\n')
    with pytest.raises(
        QosSpecError, match=r"goal 0 has unknown key\(s\) \['wieght'\]; allowed keys are \['statistic', 'direction', 'weight'\]"
    ):
        load_qos(f)
    f.write_text('[[goal]]\nstatistic = "delay"\nweight = 1.0\n')
    with pytest.raises(QosSpecError, match=r"goal 0 is missing \['direction'\]"):
        load_qos(f)
    f.write_text('name = "x"\n')
    with pytest.raises(QosSpecError, match=r"needs at least one \[\[goal\]\] table"):
        load_qos(f)
    f.write_text("[[goal]\n")
    with pytest.raises(QosSpecError, match="not valid TOML"):
        load_qos(f)
    with pytest.raises(QosSpecError, match="does not exist"):
        load_qos(tmp_path / "missing.toml")


def test_toml_round_trip_and_name_from_file(tmp_path):
    f = tmp_path / "sensor_net.toml"
    f.write_text(
        '[[goal]]\nstatistic = "queued"\ndirection = "minimize"\nweight = 0.75\n'
        '[[goal]]\nstatistic = "output_rate"\ndirection = "maximize"\nweight = 0.25\n'
    )
    spec = load_qos(f)
    assert spec.name == "sensor_net"
    assert QosSpec.from_dict(spec.to_dict()) == spec


def test_resolve_accepts_every_form_and_rejects_others():
    assert resolve("low_latency") is TEMPLATES["low_latency"]
    assert resolve([("delay", "minimize", 1.0)]).weights == {"delay": 1.0}
    assert resolve({"goal": [{"statistic": "delay", "direction": "minimize", "weight": 1}]}).weights == {"delay": 1.0}
    with pytest.raises(QosSpecError, match=r"unknown QoS template 'fastest'; templates are \['balanced'"):
        template("fastest")
    with pytest.raises(QosSpecError, match="qos must be a QosSpec"):
        resolve(3)


def test_window_statistics_and_undefined_values():
    w = Window(start=10.0, end=14.0, picks=8, outputs=6.0, delay_sum=9.0, queued_mean=3.5, queued_bytes_mean=7.0)
    assert measure("output_rate", w) == 1.5
    assert measure("delay", w) == 1.5
    assert measure("queued", w) == 3.5
    assert measure("queued_bytes", w) == 7.0
    empty = Window(start=10.0, end=10.0, picks=1, outputs=0.0, delay_sum=0.0, queued_mean=2.0, queued_bytes_mean=2.0)
    assert measure("output_rate", empty) is None  # no duration: no rate
    assert measure("delay", empty) is None  # nothing delivered: no delay
    with pytest.raises(QosSpecError, match="unknown statistic 'nope'"):
        measure("nope", w)


def test_user_statistics_register_and_unregister():
    register_statistic("outputs_per_pick", lambda w: w.outputs / w.picks if w.picks else None)
    try:
        assert "outputs_per_pick" in statistics()
        spec = QosSpec.of(("outputs_per_pick", "maximize", 0.5), ("delay", "minimize", 0.5))
        w = Window(0.0, 2.0, picks=4, outputs=2.0, delay_sum=1.0, queued_mean=1.0, queued_bytes_mean=1.0)
        assert measure("outputs_per_pick", w) == 0.5
        assert spec.score({"outputs_per_pick": 1.0, "delay": 0.0}) == 1.0  # minimize flips z
        with pytest.raises(QosSpecError, match="already registered"):
            register_statistic("outputs_per_pick", lambda w: 0.0)
        register_statistic("outputs_per_pick", lambda w: float("nan"), replace=True)
        assert measure("outputs_per_pick", w) is None  # non-finite values say nothing
    finally:
        unregister_statistic("outputs_per_pick")
    assert "outputs_per_pick" not in statistics()
    with pytest.raises(QosSpecError, match="built in"):
        register_statistic("delay", lambda w: 0.0, replace=True)
    with pytest.raises(QosSpecError, match="identifiers"):
        register_statistic("p99 delay", lambda w: 0.0)
    with pytest.raises(QosSpecError, match="unknown statistic 'outputs_per_pick'"):
        Goal("outputs_per_pick", "maximize", 1.0)


def test_eq_5_2_score_is_the_weighted_sum_with_minimize_flipped():
    spec = QosSpec.of(("queued", "minimize", 0.75), ("output_rate", "maximize", 0.25))  # thesis table 5.1
    assert spec.score({"queued": 0.2, "output_rate": 0.6}) == pytest.approx(0.75 * 0.8 + 0.25 * 0.6)
    assert spec.score({}) == pytest.approx(0.5)  # nothing known: neutral
    assert math.isclose(spec.score({"queued": 0.0, "output_rate": 1.0}), 1.0)
