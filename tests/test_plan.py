"""The plan model: valid plans expose paths/queries/classes, invalid ones say what is wrong."""

from __future__ import annotations

import math

import pytest

from sparkqos import Operator, Plan, PlanError


def op(name, inputs, sel=0.5, cost=1.0, **kw):
    return Operator(name, tuple([inputs] if isinstance(inputs, str) else inputs), sel, cost, **kw)


def test_paths_queries_and_classes():
    plan = Plan(
        [
            op("a1", "S1", query="alerts", klass="H"),
            op("a2", "S2"),
            op("join", ["a1", "a2"], kind="join"),
            op("b1", "S1", klass="N"),
        ],
        streams=["S1", "S2"],
        classes={"H": 6},
    )
    assert [str(p) for p in plan.paths] == ["S1→a1→join", "S2→a2→join", "S1→b1"]
    assert plan.queries["alerts"].root == "join"
    assert plan.query_of("a2") == "alerts" and plan.class_of("a2") == "H"
    assert plan.query_of("b1") == "b1"
    assert plan.classes == {"H": 6.0, "N": 1.0}
    assert plan.paths_of("join") == (0, 1)
    assert plan["join"].blocking and not plan["a1"].blocking
    assert plan.consumer("a1") == "join" and plan.consumer("join") is None
    assert plan.is_leaf("a1") and not plan.is_leaf("join")


def test_service_time_is_jiang_eq_2_2_denominator():
    """Jiang eq 2.2: C_P = 1 / (c1 + σ1·c2 + σ1σ2·c3)."""
    plan = Plan([op("o1", "S", 0.2, 1.0), op("o2", "o1", 0.5, 5.0), op("o3", "o2", 1.0, 2.0)], ["S"])
    assert plan.service_time(plan.paths[0]) == pytest.approx(1.0 + 0.2 * 5.0 + 0.1 * 2.0)


@pytest.mark.parametrize(
    "operators, streams, message",
    [
        ([op("a", "b"), op("b", "a")], ["S"], "cycle"),
        ([op("a", "S"), op("b", "nope")], ["S"], "unknown input 'nope'"),
        ([op("a", "S"), op("a", "S")], ["S"], "duplicate operator name 'a'"),
        ([op("a", "S", sel=-0.1)], ["S"], "operator 'a': selectivity must be a finite number >= 0, got -0.1"),
        ([op("a", "S", sel=math.nan)], ["S"], "selectivity"),
        ([op("a", "S", cost=0.0)], ["S"], "cost must be a finite number > 0, got 0.0"),
        ([op("a", "S", cost=-2)], ["S"], "cost must be a finite number > 0, got -2"),
        ([op("a", "S", cost=math.inf)], ["S"], "cost"),
        ([op("a", "S"), op("b", "a"), op("c", "a")], ["S"], "feeds both 'b' and 'c'"),
        ([op("S", "S")], ["S"], "same name as a stream"),
        ([op("a", ["S", "S"])], ["S"], "same input twice"),
        ([op("a", "S", kind="teleport")], ["S"], "kind must be one of .*, got 'teleport'"),
        ([op("a", "S", query="q1"), op("b", "a", query="q2")], ["S"], "different queries"),
        ([op("a", "S", klass="H"), op("b", "a", klass="N")], ["S"], "different classes"),
        ([], ["S"], "at least one operator"),
    ],
)
def test_invalid_plans_name_the_problem(operators, streams, message):
    with pytest.raises(PlanError, match=message):
        Plan(operators, streams)


def test_cycle_message_lists_the_cycle():
    with pytest.raises(PlanError, match=r"x → y → z → x"):
        Plan([op("x", "z"), op("y", "x"), op("z", "y"), op("w", "S")], ["S"])


def test_bad_class_priority():
    with pytest.raises(PlanError, match="class 'H': priority"):
        Plan([op("a", "S", klass="H")], ["S"], classes={"H": 0})


def test_unknown_operator_lookup():
    plan = Plan([op("a", "S")], ["S"])
    with pytest.raises(PlanError, match="no operator named 'zz'"):
        plan["zz"]


def test_selectivity_above_one_is_allowed():
    """Joins with stored relations have σ > 1 (Chain §3)."""
    plan = Plan([op("j", "S", sel=3.0)], ["S"])
    assert plan["j"].selectivity == 3.0
