"""Strategies size their own time parameters to a trigger's budget (``Scheduler.sized_params``).

On Spark a time unit is a second of executor time: left unset, CQC's round ``k`` becomes the
budget, every non-None ``quantum`` a tenth of it, adaptive's evaluation period the trigger
interval and its candidates are sized by their own rules; whatever the caller sets is kept. The
runner builds its scheduler from these declarations only, and gets the parameters it got when it
named the strategies itself (checked against that rule, kept here as ``named_by_hand``).
"""

from __future__ import annotations

import pytest

from sparkqos import schedulers
from sparkqos.adaptive.controller import Adaptive
from sparkqos.errors import SchedulerError
from sparkqos.runtime.config import RunConfig
from sparkqos.schedulers import ClassShares, Cqc, Fifo, PathCapacity, RoundRobin


def test_cqc_round_is_the_budget_unless_given():
    cqc = Cqc.sized_for(0.4)
    assert cqc.k == pytest.approx(0.4) and cqc.quantum == pytest.approx(0.04)
    cqc = Cqc.sized_for(1.0, k=2.0)
    assert cqc.k == 2.0 and cqc.quantum == pytest.approx(0.1)
    assert Cqc.sized_for(1.0, quantum=0.5).quantum == 0.5


def test_quantum_is_a_tenth_of_the_budget_when_it_has_a_default():
    assert PathCapacity.sized_for(0.5).quantum == pytest.approx(0.05)
    assert PathCapacity.sized_params(0.5, quantum=None) == {"quantum": None}  # set: kept, even None
    assert RoundRobin.sized_params(0.5) == {}  # default None (no quantum): nothing to size
    assert Fifo.sized_params(0.5, 2.0) == {}  # no time parameter at all


def test_adaptive_period_is_the_trigger_and_members_are_sized():
    cqc = {"name": "cqc", "params": {"k": 3.0}}  # a candidate as configuration files give it
    params = Adaptive.sized_params(0.5, 2.0, candidates=["fifo", "pc", cqc])
    assert params["period"] == 2.0
    fifo, pc, sized_cqc = params["candidates"]
    assert fifo == "fifo" and pc.params() == {"quantum": 0.05} and sized_cqc.params() == {"k": 3.0, "quantum": 0.05}
    adaptive = Adaptive.sized_for(0.5, 2.0, candidates=["fifo", "pc", cqc])
    members = adaptive._members
    assert members["cqc"].k == 3.0 and members["cqc"].quantum == pytest.approx(0.05)
    assert members["pc"].quantum == pytest.approx(0.05) and adaptive.period == 2.0
    assert Adaptive.sized_params(0.5, 2.0, period=7.0)["period"] == 7.0
    assert "period" not in Adaptive.sized_params(0.5)  # no trigger interval (available_now): its default
    # default candidates (fifo, rr, mtiq, chain) have no time parameter set by default
    assert Adaptive.sized_params(0.5) == {}
    # a Scheduler is used as given: its parameters are all set
    given = Cqc(k=3.0)
    assert Adaptive.sized_params(0.5, candidates=["fifo", given])["candidates"][1] is given
    assert Adaptive.sized_for(0.5, candidates=["fifo", given])._members["cqc"].quantum == 1.0


def test_class_shares_size_their_inner_strategy():
    assert repr(ClassShares.sized_for(2.0, inner="pc")) == repr(ClassShares(PathCapacity(quantum=0.2), k=2.0, quantum=0.2))
    table = ClassShares.sized_for(2.0, inner={"name": "pc", "params": {"quantum": 0.5}})
    assert table.inner.quantum == 0.5 and table.k == 2.0 and table.quantum == pytest.approx(0.2)
    assert ClassShares.sized_for(2.0, inner=PathCapacity()).inner.quantum == 1.0  # given: kept


def test_old_nesting_spellings_warn_and_build_the_same_strategy():
    """``member_params=``, ``inner_params=`` and adaptive's ``class_shares={...}`` stay one release."""
    new = Adaptive.sized_for(0.5, 2.0, candidates=["fifo", "pc", {"name": "cqc", "params": {"k": 3.0}}])
    with pytest.warns(DeprecationWarning, match=r"member_params= is deprecated: give the candidates themselves"):
        old = Adaptive.sized_for(0.5, 2.0, candidates=["fifo", "pc", "cqc"], member_params={"cqc": {"k": 3.0}})
    assert repr(old) == repr(new)
    with pytest.warns(DeprecationWarning, match=r"inner_params= is deprecated: give the inner strategy itself"):
        old = ClassShares.sized_for(2.0, inner="pc", inner_params={"quantum": 0.5})
    assert repr(old) == repr(ClassShares(PathCapacity(quantum=0.5), k=2.0, quantum=0.2))
    with pytest.warns(DeprecationWarning, match=r"class_shares=\{\.\.\.\}= is deprecated: give class_shares=ClassShares"):
        old = Adaptive.sized_for(0.5, candidates=["fifo"], class_shares={"k": 3.0})
    assert repr(old) == repr(
        Adaptive.sized_for(0.5, candidates=["fifo"], class_shares={"name": "class_shares", "params": {"k": 3.0}})
    )
    assert repr(old.class_shares) == repr(ClassShares(None, k=3.0, quantum=0.05))
    with pytest.raises(SchedulerError, match=r"member_params names \['pc'\], which are not candidates \['fifo'\]"):
        with pytest.warns(DeprecationWarning):
            Adaptive(["fifo"], member_params={"pc": {}})


def test_sizing_rejects_a_budget_that_is_not_a_time():
    with pytest.raises(SchedulerError, match="Cqc: budget_s must be a finite number > 0, got 0"):
        Cqc.sized_for(0)
    with pytest.raises(SchedulerError, match="period_s must be"):
        PathCapacity.sized_params(1.0, float("nan"))


def named_by_hand(name: str, params: dict, qos, trigger_s, budget_s: float) -> dict:
    """The runner's rule before strategies declared it (QosStream._make_scheduler/_time_params)."""

    def time_params(n: str, p: dict) -> dict:
        instance = schedulers.get(n)
        defaults = instance.params()
        out = dict(p)
        if isinstance(instance, (Cqc, ClassShares)) and "k" not in out:  # a round of class shares
            out["k"] = budget_s
        if "quantum" in defaults and defaults["quantum"] is not None and "quantum" not in out:
            out["quantum"] = budget_s / 10
        return out

    params = dict(params)
    if name == "adaptive":
        if qos is not None:
            params.setdefault("qos", qos)
        if trigger_s is not None:
            params.setdefault("period", trigger_s)
        candidates = params.get("candidates", schedulers.get("adaptive").candidates)
        names = [candidates] if isinstance(candidates, str) else list(candidates)
        members = {n: dict(v) for n, v in dict(params.get("member_params") or {}).items()}
        for n in names:
            if isinstance(n, str) and n in schedulers.available():
                sized = time_params(n, members.get(n, {}))
                if sized:
                    members[n] = sized
        if members:
            params["member_params"] = members
        return params
    return time_params(name, params)


@pytest.mark.parametrize("trigger_s, budget_s", [(2.0, None), (0.5, 0.2), ("available_now", None), ("available_now", 3.0)])
@pytest.mark.parametrize(
    "name, params, qos",
    [
        *[(n, {}, None) for n in schedulers.available()],
        ("cqc", {"k": 2.0}, None),
        ("pc", {"quantum": 0.3}, None),
        ("adaptive", {"candidates": ["fifo", "pc", "cqc", "segment"], "member_params": {"cqc": {"k": 3.0}}}, "low_latency"),
        ("adaptive", {"candidates": "cqc", "period": 5.0}, None),
    ],
)
def test_the_runner_builds_the_same_schedulers_as_before(tmp_path, name, params, qos, trigger_s, budget_s):
    config = RunConfig(
        checkpoint=tmp_path,
        strategy=name,
        strategy_params=params,
        qos=qos,
        trigger_s=trigger_s,
        budget_s=budget_s,
        class_shares=False,  # the strategy alone, as the runner built it before class shares
    )
    interval = None if trigger_s == "available_now" else trigger_s
    want = schedulers.get(name, **named_by_hand(name, params, qos, interval, config.effective_budget_s))
    assert repr(config.make_scheduler()) == repr(want)
