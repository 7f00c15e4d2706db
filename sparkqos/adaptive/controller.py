"""The adaptive strategy selector: score candidate strategies against a QoS spec, spin a roulette wheel.

Thesis (raindrop, Sutherland 2004) ch. 5: eq 5.1–5.2 scoring with decay, §5.3 warm-up and roulette wheel.

Two pieces, kept apart so the Spark runner can drive the controller once per trigger:

* :class:`AdaptiveController` — pure bookkeeping. It is told what one evaluation window measured
  (a :class:`~sparkqos.adaptive.qos.Window`), folds it into the smoothed statistics of the strategy that ran
  and of the history H (eq 3.1), re-scores the candidates (eq 5.1–5.2) and chooses the next one
  (round-robin warm-up, then a seeded roulette wheel). Every decision is appended to ``decisions``.
* :class:`Adaptive` — the ``adaptive`` strategy. It measures windows from the scheduler state
  (output and delay totals, queued tuples sampled at each pick), asks the controller at the end of
  each window, and delegates ``pick`` to the chosen candidate.

Reading of eq 5.1 used here: μ_S and μ_H are the smoothed means of a statistic for strategy S and
for the history H; the spread max_H − min_H is taken over the union of the strategies' smoothed
means and μ_H (``spread="strategies"``: the history "is a union of the statistics of each
individual scheduling algorithm", §5.2) or over every window value H has seen
(``spread="windows"``). zᵢ is clipped to [0, 1] so roulette slices are never negative.

The delay of one window (``delay_signal``): ``"outputs"`` is the mean delay of the tuples delivered
in it. That signal is biased against the strategies that clear a backlog: a strategy that leaves
old tuples waiting delivers only young ones and looks fast, and its successor, delivering the old
ones, looks slow (the predecessor effect of §5.2). ``"little"`` charges each window with the delay
it lets accrue instead: the time-weighted mean of the outputs still pending in the queues (eq 3.8
weighted by the selectivities to the root, the population whose age eq 3.9 sums) divided by the
smoothed output rate — Little's law, L = λ·W, so the mean delay of outputs is L / λ.

The memory of one window (``memory_signal``, for a ``queued`` goal): ``"level"`` is the thesis's,
the time-weighted mean of the tuples queued. Measured on the windows one strategy happens to run,
it mostly tells the arrival burst and the queues inherited from the predecessor, not the strategy
(on ``jobs/adaptive_sim.py``'s chain-dominated plan a window's level varies ±15–26 tuples around
means that differ by 1–10 between the strategies). ``"release"`` (the default) scores what the
strategy does with the processor instead: the tuples it removed from memory per unit of operator
work, (queued at start + arrivals − queued at end) / busy time — the slope of Chain's progress
chart (Babcock et al. §4), which is what keeps memory low, and which a burst or a predecessor
changes far less. It is stored negated so that "minimize queued" still reads "lower is better".

Selection (``sharpness`` k, ``explore`` ε): the wheel gives each candidate (1 − ε)·scoreᵏ / Σ scoreᵏ
+ ε / n. k = 1, ε = 0 is the thesis's fitness-proportionate wheel. Eq 5.1 centres every z on 0.5,
so with four candidates even a clearly best strategy gets well under half of a proportional wheel;
k = 3 (the default) lets the controller exploit what it measured — the smallest k that met both the
§6.3–6.5 and the §1.3 bars over ten seeds of ``jobs/adaptive_sim.py`` (k = 1: the join plan won 3/6
settings and fell to 0.881 of the best single strategy; §1.3 reached only 60.2%). ε keeps every
candidate alive: a clipped z of 0 would otherwise never be spun again and never re-measured
(thesis §1.4: "no strategy can ever be completely eliminated").
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from sparkqos.adaptive.members import (
    class_shares_table,
    listed_candidates,
    read_candidates,
    read_class_shares,
    with_member_params,
)
from sparkqos.adaptive.qos import QosSpec, Window, measure, resolve
from sparkqos.adaptive.scoring import Scoring
from sparkqos.errors import QosSpecError, SchedulerError, check_choice, check_number
from sparkqos.model.state import SchedulerState, Unit
from sparkqos.model.stats import DEFAULT_WEIGHT, smooth
from sparkqos.schedulers import registry
from sparkqos.schedulers.base import NO_STRATEGY_YET, Scheduler

AGE_UNITS = ("seconds", "picks")
SPREADS = ("strategies", "windows")
DELAY_SIGNALS = ("outputs", "little")
MEMORY_SIGNALS = ("release", "level")
#: Statistics always written to the decision log, whatever the spec asks for.
LOGGED = ("output_rate", "delay", "queued")


def _release_signal(window: Window) -> float | None:
    """The memory signal ``"release"``: minus the tuples the window released from memory per unit of
    operator work, −(queued at start + inputs − queued at end) / work. None when nothing ran."""
    if window.inputs is None or window.work is None or window.queued_start is None or window.queued_end is None:
        return None
    if not window.work > 1e-12:
        return None
    value = -(window.queued_start + window.inputs - window.queued_end) / window.work
    return value if math.isfinite(value) else None


class AdaptiveController:
    """Scores and selects among ``candidates`` (names) for a QoS ``spec`` (thesis ch. 5).

    Call :meth:`begin` once for the first strategy, then :meth:`evaluate` at the end of every
    window with what it measured; it returns the strategy to run next.

    The thesis's controller (queue level as the memory signal, a plain proportional wheel):

    >>> from sparkqos.adaptive.qos import Window, template
    >>> c = AdaptiveController(["fifo", "chain"], template("low_memory"), seed=1,
    ...                        memory_signal="level", sharpness=1, explore=0)
    >>> c.begin(0.0)
    'fifo'
    >>> def window(t, queued, outputs):
    ...     return Window(t - 1, t, picks=4, outputs=outputs, delay_sum=outputs, queued_mean=queued,
    ...                   queued_bytes_mean=queued)
    >>> [c.evaluate(window(1, 50, 2), 1.0), c.evaluate(window(2, 40, 2), 2.0), c.evaluate(window(3, 10, 2), 3.0)]
    ['chain', 'fifo', 'fifo']

    The first window is start-up and not counted; chain then held 40 tuples, fifo 10, so fifo
    scores higher on the memory goal; chain's z is pulled toward 0.5 by decay^age (age 1 s):

    >>> {k: round(v, 3) for k, v in c.scores.items()}
    {'fifo': 0.875, 'chain': 0.416}
    """

    def __init__(
        self,
        candidates: Sequence[str],
        spec: QosSpec,
        seed: int | None = 0,
        decay: float = 0.9,
        age_unit: str = "seconds",
        w: float = DEFAULT_WEIGHT,
        spread: str = "strategies",
        delay_signal: str = "little",
        memory_signal: str = "release",
        sharpness: float = 3.0,
        explore: float = 0.05,
        log_limit: int | None = 10_000,
    ):
        candidates = list(candidates)
        if not candidates or len(set(candidates)) != len(candidates):
            raise SchedulerError(f"candidates must be distinct strategy names, at least one, got {candidates!r}")
        if not isinstance(spec, QosSpec):
            raise QosSpecError(f"spec must be a QosSpec, got {spec!r}")
        check_choice("age_unit", age_unit, AGE_UNITS, error=SchedulerError)
        check_choice("spread", spread, SPREADS, error=SchedulerError)
        check_choice("delay_signal", delay_signal, DELAY_SIGNALS, error=SchedulerError)
        check_choice("memory_signal", memory_signal, MEMORY_SIGNALS, error=SchedulerError)
        check_number("sharpness", sharpness, low=0, low_open=True, error=SchedulerError)
        check_number("explore", explore, low=0, high=1, error=SchedulerError)
        check_number("log_limit", log_limit, low=1, integer=True, none_ok=True, error=SchedulerError)
        self.delay_signal = delay_signal
        self.memory_signal = memory_signal
        self.sharpness = float(sharpness)
        self.explore = float(explore)
        self.log_limit = log_limit
        self.candidates = candidates
        self.spec = spec
        self.decay = float(check_number("decay", decay, low=0, high=1, low_open=True, error=SchedulerError))
        self.age_unit = age_unit
        # ArgumentError (a ValueError), as StatisticsGatherer raises for the same weight.
        self.w = float(check_number("w", w, low=0, high=1, high_open=True, where="smoothing weight "))
        self.spread = spread
        self._rng = np.random.default_rng(seed)
        # Warm-up (§5.3): each candidate once, round robin, the first once more at the end.
        self._order = candidates + candidates[:1] if len(candidates) > 1 else list(candidates)
        self._warm = 0
        self.current: str | None = None
        self._windows = 0
        self._decision = 0
        self._mean: dict[str, dict[str, float]] = {c: {} for c in candidates}
        self._history: dict[str, float] = {}
        self._low: dict[str, float] = {}
        self._high: dict[str, float] = {}
        self._rate: float | None = None  # smoothed output rate over all windows (Little's λ)
        self.scores: dict[str, float | None] = {c: None for c in candidates}
        self._scored: dict[str, float | None] = {c: None for c in candidates}
        self._ran: dict[str, float | None] = {c: None for c in candidates}
        self.decisions: list[dict[str, Any]] = []

    # -- clock of ages ------------------------------------------------------------------------
    def _clock(self, now: float) -> float:
        return float(now) if self.age_unit == "seconds" else float(self._decision)

    # -- scoring ------------------------------------------------------------------------------
    def _spread(self, stat: str) -> tuple[float, float] | None:
        if self.spread == "windows":
            if stat not in self._low:
                return None
            return self._low[stat], self._high[stat]
        values = [m[stat] for m in self._mean.values() if stat in m]
        if stat in self._history:
            values.append(self._history[stat])
        return (min(values), max(values)) if values else None

    def normalized(self, strategy: str, age: float = 0.0) -> dict[str, float]:
        """Eq 5.1 for every statistic of the spec: zᵢ = (μ_S − μ_H)/(max_H − min_H)·decay^age + 0.5,
        clipped to [0, 1] (the maximize orientation; :meth:`QosSpec.score` flips minimize goals)."""
        out = {}
        mean = self._mean[strategy]
        factor = self.decay ** max(age, 0.0)
        for stat in self.spec.statistics:
            mu_h = self._history.get(stat)
            bounds = self._spread(stat)
            if stat not in mean or mu_h is None or bounds is None:
                continue
            low, high = bounds
            width = high - low
            # Equal values everywhere carry no preference: neutral, never a division by zero.
            dev = 0.0 if not width > 1e-12 * max(1.0, abs(high), abs(low)) else (mean[stat] - mu_h) / width
            out[stat] = min(1.0, max(0.0, dev * factor + 0.5))
        return out

    def score(self, strategy: str, age: float = 0.0) -> float | None:
        """Eq 5.2: Σ wᵢ·zᵢ (None for a strategy that has never been measured)."""
        if not self._mean[strategy]:
            return None
        return self.spec.score(self.normalized(strategy, age))

    def _fold(self, strategy: str, values: Mapping[str, float | None]) -> None:
        mean = self._mean[strategy]
        for stat, v in values.items():
            if v is None:
                continue
            mean[stat] = smooth(mean.get(stat), v, self.w)
            self._history[stat] = smooth(self._history.get(stat), v, self.w)
            self._low[stat] = min(self._low.get(stat, v), v)
            self._high[stat] = max(self._high.get(stat, v), v)

    def _rescore(self, ran: str, clock: float) -> None:
        for c in self.candidates:
            if c == ran and self.scores[c] is not None:
                # The strategy that just ran keeps its last score, decayed (§5.2): compared
                # with a history it dominates, a fresh z would tell nothing.
                self.scores[c] *= self.decay ** max(clock - self._scored[c], 0.0)
            elif self._ran[c] is not None:
                self.scores[c] = self.score(c, 0.0 if c == ran else clock - self._ran[c])
            else:
                continue
            self._scored[c] = clock

    def measure(self, window: Window) -> dict[str, float | None]:
        """The spec's statistics over ``window``; ``delay`` per ``delay_signal``."""
        rate = measure("output_rate", window)
        if rate is not None:
            self._rate = smooth(self._rate, rate, self.w)
        values = {stat: measure(stat, window) for stat in self.spec.statistics}
        if "queued" in values and self.memory_signal == "release":
            values["queued"] = _release_signal(window)
        if "delay" in values and self.delay_signal == "little" and window.pending_mean is not None:
            values["delay"] = window.pending_mean / self._rate if self._rate else None
        return values

    # -- selection ----------------------------------------------------------------------------
    def begin(self, now: float) -> str:
        """The first strategy to run (the start of the warm-up)."""
        if self.current is None:
            self.current = self._order[0]
            self._warm = 1
        return self.current

    def roulette(self, exclude: str | None = None) -> str:
        """Fitness-proportionate selection (§5.3) on :meth:`wheel`: probability ∝ scoreᵏ plus an
        ``explore`` share spread evenly; unmeasured strategies count as neutral (0.5); all-zero
        scores make the wheel uniform. ``sharpness=1, explore=0`` is the thesis's wheel."""
        names = [c for c in self.candidates if c != exclude] or list(self.candidates)
        return names[self._spin(self.wheel(names))]

    def wheel(self, names: Sequence[str] | None = None) -> dict[str, float]:
        """The probability of each of ``names`` (default: every candidate) on the next spin:
        (1 − explore) · scoreᵏ / Σ scoreᵏ + explore / n, k = ``sharpness``."""
        names = list(self.candidates if names is None else names)
        slices = np.array([0.5 if self.scores[c] is None else max(self.scores[c], 0.0) for c in names])
        slices = slices**self.sharpness
        total = slices.sum()
        n = len(names)
        share = slices / total if total > 0 else np.full(n, 1.0 / n)
        return dict(zip(names, (1.0 - self.explore) * share + self.explore / n))

    def _spin(self, wheel: Mapping[str, float]) -> int:
        edges = np.cumsum(list(wheel.values()))
        spin = self._rng.random() * edges[-1]
        return min(int(np.searchsorted(edges, spin, side="right")), len(edges) - 1)

    def evaluate(self, window: Window, now: float, *, reason: str = "period", exclude: str | None = None) -> str:
        """The current strategy's window ended at ``now``: score, choose, log; returns the next one.

        The first window of a run is not counted (start-up, §5.3). ``exclude`` (a starving strategy)
        is never chosen unless it is the only candidate."""
        ran = self.begin(now)
        values = self.measure(window)
        counted = self._windows > 0
        self._windows += 1
        self._decision += 1
        clock = self._clock(now)
        if counted:
            self._fold(ran, values)
            self._ran[ran] = clock
            self._rescore(ran, clock)
        nxt = None
        while self._warm < len(self._order) and nxt is None:
            nxt = self._order[self._warm]
            self._warm += 1
            if nxt == exclude:
                nxt = None
        warmup = nxt is not None
        if nxt is None:
            nxt = self.roulette(exclude)
        logged = {stat: measure(stat, window) for stat in (*LOGGED, *self.spec.statistics)}
        self.decisions.append(
            {
                "decision": self._decision,
                "time": float(now),
                "ran": ran,
                "reason": reason,
                "counted": counted,
                "window": {"start": window.start, "end": window.end, "picks": window.picks, **logged},
                "signals": values,
                "scores": dict(self.scores),
                "chosen": nxt,
                "warmup": warmup,
            }
        )
        if self.log_limit is not None and len(self.decisions) >= 2 * self.log_limit:
            # Bounded in a long stream: keep the newest ``log_limit`` (the runner persists each
            # trigger's strategy and scores in the metrics table as it goes).
            del self.decisions[: len(self.decisions) - self.log_limit]
        self.current = nxt
        return nxt

    # -- persistence --------------------------------------------------------------------------
    def reseed(self, seed: int) -> None:
        """Restart the roulette wheel's generator from ``seed``."""
        self._rng = np.random.default_rng(seed)

    def state_dict(self) -> dict[str, Any]:
        """Scores, statistics, history, RNG state, warm-up position, current strategy (not the log)."""
        return {
            "current": self.current,
            "warm": self._warm,
            "windows": self._windows,
            "decision": self._decision,
            "mean": {k: dict(v) for k, v in self._mean.items()},
            "history": dict(self._history),
            "low": dict(self._low),
            "high": dict(self._high),
            "rate": self._rate,
            "scores": dict(self.scores),
            "scored": dict(self._scored),
            "ran": dict(self._ran),
            "rng": self._rng.bit_generator.state,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        keys = set(self.state_dict())
        # "rate" came with delay_signal; states written before it simply lack it.
        unknown, missing = sorted(set(state) - keys), sorted(keys - set(state) - {"rate"})
        if unknown or missing:
            raise SchedulerError(f"adaptive controller state: unknown keys {unknown}, missing keys {missing}")
        strangers = sorted(set(state["mean"]) - set(self.candidates))
        if strangers or (state["current"] is not None and state["current"] not in self.candidates):
            raise SchedulerError(
                f"adaptive controller state names strategies {strangers or [state['current']]} "
                f"that are not candidates {self.candidates}"
            )
        try:
            self.current = state["current"]
            self._warm = int(state["warm"])
            self._windows = int(state["windows"])
            self._decision = int(state["decision"])
            self._mean = {c: dict(state["mean"].get(c, {})) for c in self.candidates}
            self._history = dict(state["history"])
            self._low = dict(state["low"])
            self._high = dict(state["high"])
            self._rate = state.get("rate")
            self.scores = {c: state["scores"].get(c) for c in self.candidates}
            self._scored = {c: state["scored"].get(c) for c in self.candidates}
            self._ran = {c: state["ran"].get(c) for c in self.candidates}
            self._rng.bit_generator.state = state["rng"]
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise SchedulerError(f"adaptive controller state does not fit: {type(exc).__name__}: {exc}") from None


class Adaptive(Scheduler):
    """Runs one of ``candidates`` at a time and re-chooses it every evaluation window (thesis ch. 5).

    Parameters: ``candidates``, each a component — a Scheduler (``Cqc(k=3.0)``), a registry name
    (its defaults) or, as configuration files give it, ``{"name": "cqc", "params": {"k": 3.0}}``;
    ``qos`` (a :class:`~sparkqos.adaptive.qos.QosSpec`, a template name, a TOML path, …);
    ``seed`` of the roulette wheel (None: not reproducible); the evaluation window, every
    ``period`` time units of ``state.now`` and/or every ``period_picks`` picks; ``starvation``
    (consecutive picks of units with no work before a forced switch); ``scoring``
    (:class:`~sparkqos.adaptive.scoring.Scoring`, whose fields may also be given by name,
    ``Adaptive(decay=0.9)``); ``class_shares``: None, or the
    :class:`~sparkqos.schedulers.classes.ClassShares` (kept as ``inner=None``) each candidate runs
    under, so class shares hold whichever candidate is in force (``ClassShares(k=2.0)``, or
    ``"class_shares"``). ``member_params={"cqc": {...}}`` and ``class_shares={"k": ...}`` are
    the deprecated spellings (a DeprecationWarning).

    Window statistics come from the state: output rate from ``output_total`` deltas, mean delay
    from ``output_delay_total`` / ``output_total`` deltas, memory as the time-weighted mean of
    ``total_queued`` sampled at each pick. Decisions are in ``decisions`` (a list of dicts).

    >>> from sparkqos.sim import Simulator, chain_plan
    >>> plan = chain_plan([(0.5, 0.2), (0.2, 0.2), (1.0, 0.1)])
    >>> adaptive = Adaptive(["fifo", "mtiq", "chain"], qos="low_memory", seed=7, period=4)
    >>> _ = Simulator(plan, adaptive, {"S": [(t, 3.0) for t in range(40)]}).run(until=40)
    >>> [d["chosen"] for d in adaptive.decisions][:4]
    ['mtiq', 'chain', 'fifo', 'mtiq']
    """

    DEPRECATED = ("member_params",)
    TAKES_QOS = True

    def __init__(
        self,
        candidates: Sequence[registry.Component] | str = ("fifo", "rr", "mtiq", "chain"),
        qos: Any = "balanced",
        seed: int | None = 0,
        period: float | None = 1.0,
        period_picks: int | None = None,
        starvation: int = 3,
        scoring: Scoring | None = None,
        member_params: Mapping[str, Mapping[str, Any]] | None = None,
        class_shares: registry.Component | None = None,
        **scoring_values: Any,
    ):
        self.qos = qos
        self.seed = seed
        self.period = period
        self.period_picks = period_picks
        self.starvation = starvation
        if scoring is not None and not isinstance(scoring, Scoring):
            raise SchedulerError(f"scoring must be a Scoring, got {scoring!r}")
        self.scoring = Scoring.of(scoring, **scoring_values)
        self.candidates, given = read_candidates(candidates, member_params)
        if any(isinstance(m, Adaptive) for m in given):
            raise SchedulerError(
                f"candidates are names of non-adaptive strategies (or such strategies, or tables), got {candidates!r}"
            )
        names = [registry.label(m) for m in given]
        if period is None and period_picks is None:
            raise SchedulerError("adaptive needs an evaluation window: period and/or period_picks")
        check_number("period", period, low=0, low_open=True, none_ok=True, error=SchedulerError)
        check_number("period_picks", period_picks, low=1, integer=True, none_ok=True, error=SchedulerError)
        check_number("starvation", starvation, low=1, integer=True, error=SchedulerError)
        self.controller = AdaptiveController(names, resolve(qos), seed, **dataclasses.asdict(self.scoring))
        self.class_shares = read_class_shares(class_shares)
        self._members: dict[str, Scheduler] = {n: self._member(m) for n, m in zip(names, given)}
        self._starved = 0
        self._window: dict[str, float] | None = None
        self._yield: dict[str, float] = {}  # Π σ from each operator to its root
        self._yield_version: int | None = None

    @classmethod
    def sized_params(cls, budget_s: float, period_s: float | None = None, **params: Any) -> dict[str, Any]:
        """Left unset, the evaluation ``period`` becomes ``period_s`` (the trigger interval), so
        the controller scores and picks once per trigger; each candidate given by name or table
        is sized by that candidate's own rule (what is set is kept; a Scheduler is used as given),
        and so are the class shares' ``k`` and ``quantum``.

        >>> Adaptive.sized_for(0.5, 2.0, candidates=["fifo", {"name": "cqc", "params": {"k": 3.0}}]).candidates
        ['fifo', Cqc(k=3.0, quantum=0.05)]
        """
        params = super().sized_params(budget_s, period_s, **params)
        if period_s is not None:
            params.setdefault("period", period_s)
        listed = listed_candidates(params.get("candidates", inspect.signature(cls.__init__).parameters["candidates"].default))
        if params.get("member_params") is not None:
            listed = with_member_params(listed, params.pop("member_params"))
        params.pop("member_params", None)
        sized = [registry.sized_component(c, budget_s, where="adaptive: candidates") for c in listed]
        if any(s is not c for s, c in zip(sized, listed)):
            params["candidates"] = sized
        if params.get("class_shares") is not None:
            spec = class_shares_table(params["class_shares"])
            params["class_shares"] = registry.sized_component(spec, budget_s, where="adaptive: class_shares")
        return params

    def _member(self, candidate: str | Scheduler) -> Scheduler:
        """The strategy ``candidate`` stands for; under the class shares when they are on, unless
        the candidate shares time between classes itself (its ``class_shares_params`` says so: ``cqc``)."""
        member = candidate.clone() if isinstance(candidate, Scheduler) else registry.get(candidate)
        if self.class_shares is None or type(member).class_shares_params(registry.label(member), {})[0] != "class_shares":
            return member
        return self.class_shares.clone(inner=candidate)

    @classmethod
    def class_shares_params(cls, name: str, params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """Class shares go under each candidate (``class_shares="class_shares"``: ClassShares with
        its defaults), not around the controller: it keeps scoring whole-plan windows, and
        whichever candidate it runs honours the shares."""
        return name, {**params, "class_shares": params.get("class_shares") or "class_shares"}

    @property
    def decisions(self) -> list[dict[str, Any]]:
        return self.controller.decisions

    @property
    def current(self) -> str | None:
        return self.controller.current

    def in_force(self) -> tuple[str, dict[str, float]]:
        """The candidate in force and its last decision's scores (:data:`NO_STRATEGY_YET`
        before the first pick: no candidate has run yet)."""
        current = self.controller.current
        if current is None:
            return NO_STRATEGY_YET, {}
        decisions = self.controller.decisions
        return current, dict(decisions[-1]["scores"]) if decisions else {}

    # -- windows ------------------------------------------------------------------------------
    def _pending(self, state: SchedulerState) -> float:
        """Outputs the queued tuples will still produce: Σ queued(op) · Π σ from op to its root."""
        plan = state.plan
        if self._yield_version != state.stats_version or not self._yield:
            self._yield = {}
            for op in plan.names:
                chain, nxt = [], op
                while nxt is not None and nxt not in self._yield:
                    chain.append(nxt)
                    nxt = plan.consumer(nxt)
                above = 1.0 if nxt is None else self._yield[nxt]
                for name in reversed(chain):  # from the root down to op
                    above = self._yield[name] = state.selectivity(name) * above
            self._yield_version = state.stats_version
        return math.fsum(state.queued(op) * self._yield[op] for op in plan.names)

    def _open(self, state: SchedulerState, now: float) -> None:
        pending = self._pending(state) if self.scoring.delay_signal == "little" else 0.0
        self._window = {
            "start": now,
            "output": state.output_total,
            "delay": state.output_delay_total,
            "input": state.input_total,
            "work": state.work_total,
            "q0": state.total_queued,
            "area": 0.0,
            "area_bytes": 0.0,
            "sum": 0.0,
            "sum_bytes": 0.0,
            "samples": 0,
            "picks": 0,
            "last_t": now,
            "last_q": state.total_queued,
            "last_b": state.total_queued_bytes,
            "area_p": 0.0,
            "sum_p": 0.0,
            "last_p": pending,
        }

    def _advance(self, now: float) -> None:
        win = self._window
        dt = now - win["last_t"]
        if dt > 0:
            win["area"] += win["last_q"] * dt
            win["area_bytes"] += win["last_b"] * dt
            win["area_p"] = win.get("area_p", 0.0) + win.get("last_p", 0.0) * dt
        win["last_t"] = now

    def _close(self, state: SchedulerState, now: float) -> Window:
        win = self._window
        duration = now - win["start"]
        if duration > 0:
            queued, queued_bytes = win["area"] / duration, win["area_bytes"] / duration
            pending = win.get("area_p", 0.0) / duration
        elif win["samples"]:
            queued, queued_bytes = win["sum"] / win["samples"], win["sum_bytes"] / win["samples"]
            pending = win.get("sum_p", 0.0) / win["samples"]
        else:
            queued, queued_bytes = state.total_queued, state.total_queued_bytes
            pending = self._pending(state)
        return Window(
            start=win["start"],
            end=now,
            picks=int(win["picks"]),
            outputs=state.output_total - win["output"],
            delay_sum=state.output_delay_total - win["delay"],
            queued_mean=queued,
            queued_bytes_mean=queued_bytes,
            pending_mean=pending if self.scoring.delay_signal == "little" else None,
            # Windows restored from a state written before these counters existed lack them.
            inputs=state.input_total - win["input"] if "input" in win else None,
            work=state.work_total - win["work"] if "work" in win else None,
            queued_start=win.get("q0"),
            queued_end=state.total_queued,
        )

    def _due(self, now: float) -> bool:
        win = self._window
        if self.period is not None and now - win["start"] >= self.period - 1e-9:
            return True
        return self.period_picks is not None and win["picks"] >= self.period_picks

    def _switch(self, state: SchedulerState, now: float, reason: str, exclude: str | None = None) -> None:
        old = self.controller.current
        nxt = self.controller.evaluate(self._close(state, now), now, reason=reason, exclude=exclude)
        self._open(state, now)
        self._starved = 0
        if nxt != old:
            member = self._members[old]
            if member._state is None:
                # Restored but never picked since: attach once so it consumes its restored state
                # exactly as the uninterrupted run's member did before being parked.
                member.attach(state)
            # Parked: it rebuilds its priorities from the live state when chosen again.
            member.detach()

    # -- engine protocol ----------------------------------------------------------------------
    def attach(self, state: SchedulerState) -> None:
        self.detach()
        self._state = state
        now = state.now
        self.controller.begin(now)
        win = self._window
        # A restored window only makes sense on counters that kept running (same engine).
        if (
            win is None
            or state.output_total < win["output"]
            or now < win["last_t"]
            or state.input_total < win.get("input", 0.0)
            or state.work_total < win.get("work", 0.0)
        ):
            self._open(state, now)

    def detach(self) -> None:
        current = self.controller.current
        if current is not None:
            self._members[current].detach()
        self._state = None

    def pick(self, state: SchedulerState) -> Unit | None:
        if state is not self._state:
            self.attach(state)
        now = state.now
        self._advance(now)
        if self._due(now):
            self._switch(state, now, "period")
        win = self._window
        win["picks"] += 1
        win["samples"] += 1
        win["last_q"] = q = state.total_queued
        win["last_b"] = b = state.total_queued_bytes
        win["sum"] += q
        win["sum_bytes"] += b
        if self.scoring.delay_signal == "little":
            # Σ queued × yield is O(operators): sampled every ⌈n/16⌉ picks it costs O(1) per pick,
            # the value held in between (the window's mean is time-weighted anyway).
            every = max(1, -(-len(state.plan) // 16))
            if win["picks"] == 1 or win["picks"] % every == 0:
                win["last_p"] = self._pending(state)
            win["sum_p"] = win.get("sum_p", 0.0) + win.get("last_p", 0.0)
        return self._delegate(state, now)

    def _delegate(self, state: SchedulerState, now: float) -> Unit | None:
        switches = 0
        while True:
            unit = self._members[self.controller.current].pick(state)
            if unit is not None and state.runnable(unit.head):
                self._starved = 0
                return unit
            if unit is None and not any(True for _ in state.runnable_operators()):
                return None  # nothing can run: not starvation
            self._starved += 1
            if unit is None or self._starved >= self.starvation:
                if switches >= len(self._members):
                    return unit  # every candidate starves: let the engine report it
                switches += 1
                self._switch(state, now, "starvation", exclude=self.controller.current)

    def _rebuild(self, state: SchedulerState) -> None:  # pick() is overridden: nothing to rebuild
        pass

    def _on_enqueue(self, op: str, state: SchedulerState) -> None:
        pass

    def _choose(self, state: SchedulerState) -> Unit | None:
        return self._delegate(state, state.now)

    # -- state --------------------------------------------------------------------------------
    def reseed(self, seed: int) -> None:
        """The roulette wheel draws from ``seed`` on (the warm-up, scores and history are kept)."""
        self.controller.reseed(seed)

    def state_dict(self) -> dict[str, Any]:
        return {
            "controller": self.controller.state_dict(),
            "starved": self._starved,
            "window": None if self._window is None else dict(self._window),
            "members": {n: m.state_dict() for n, m in self._members.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        unknown = sorted(set(state) - {"controller", "starved", "window", "members"})
        if unknown:
            raise SchedulerError(f"Adaptive state has unknown keys {unknown}")
        members = state.get("members", {})
        strangers = sorted(set(members) - set(self._members))
        if strangers:
            raise SchedulerError(f"Adaptive state holds strategies {strangers} that are not candidates {list(self._members)}")
        if "controller" in state:
            self.controller.load_state_dict(state["controller"])
        try:
            self._starved = int(state.get("starved", 0))
            self._window = None if state.get("window") is None else dict(state["window"])
        except (TypeError, ValueError) as exc:
            raise SchedulerError(f"Adaptive state does not fit: {type(exc).__name__}: {exc}") from None
        for name, member_state in members.items():
            self._members[name].load_state_dict(member_state)
