"""Thesis ch. 6 in the simulator: single strategies against the adaptive selector.

    .venv/bin/python jobs/adaptive_sim.py [--until 1200] [--seeds 1,2,3] [--period 2] [--overhead 0.05]
                                          [--delay-signal little] [--table all]

Defaults: the thesis §6.1 setup — scores evaluated every 2 time units, w = 0.875 — and a start-up
time of ``OVERHEAD`` per operator run (see below); the adaptive selector measures a window's delay
with Little's law (``delay_signal="little"``, see :mod:`sparkqos.adaptive`). ``--overhead 0
--period 5 --delay-signal outputs`` gives the previous, overhead-free setting.

Workload (thesis §6.1): Poisson arrivals whose mean is redrawn every 5 time units, a quarter of the
periods bursting at 2× the mean (``sparkqos.sim.arrivals.poisson_shifting``), at ``--load`` × the
plan's capacity on average. Plans (thesis fig 6.1's shapes; its numbers are not in the text):

* ``filters`` — Query Plan 1, four filters in a chain;
* ``join`` — Query Plan 2, a filter on each of two streams feeding a windowed join (``kind="join"``:
  it blocks while one input is empty), then two filters.

Tables:

* ``6.2`` — every candidate's mean memory (queued tuples at integer times), mean delay of the
  tuples delivered and output rate (tuples delivered / run length) on both plans: no single
  strategy is best on both memory and delay.
* ``6.3`` — the six QoS settings of §6.3–6.5 (delay-vs-output-rate weights 100-0 … 0-100 and equal
  thirds on delay/rate/memory): each contender's weighted QoS score. For each statistic the
  contenders' run means are min–max normalised across the contenders (flipped for minimize) and
  weighted — one formula for all contenders, the adaptive selector included.
* ``1.3`` — a single goal ``minimize queued`` on a plan where chain dominates: the share of
  post-warm-up decisions that chose chain.

Every number is averaged over ``--seeds`` (one arrival trace and one roulette seed per seed).

Start-up cost (thesis §4.5: "operators typically have a start-up cost ... the batch scheduler can
amortize this cost"; the thesis gives no number). ``OVERHEAD = 0.05`` time units per operator run:
a quarter of the cheapest operator's per-tuple cost (0.2) and 5% of a one-unit quantum. The thesis
bounds it loosely from both sides: §4.1 (fig 4.1) never splits a workload below THRESHOLD = 50
tuples, so a start-up must be worth avoiding — not negligible next to a tuple's cost — while a
50-tuple batch must amortise it to a few percent, i.e. well below 50 tuples' cost. 0.05 sits in that
range and keeps every plan stable for every strategy at load 0.9 (at 0.1 FIFO and RR overload on
the filter plan: memory 188 tuples against 30 for MTIQ).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass

from sparkqos import Operator, Plan, schedulers
from sparkqos.adaptive.qos import QosSpec
from sparkqos.sim import Simulator
from sparkqos.sim.arrivals import poisson_shifting

CANDIDATES = ("fifo", "rr", "mtiq", "chain")
BURST_PROBABILITY = 0.25
BURST_FACTOR = 2.0
#: Start-up time per operator run (see the module docstring).
OVERHEAD = 0.05
#: Evaluation period of the adaptive selector: every two time units (thesis §6.1).
PERIOD = 2.0
#: The adaptive selector's settings this module runs with (its command line's defaults).
SELECTOR = {
    "decay": 0.98,
    "spread": "strategies",
    "age_unit": "picks",
    "delay_signal": "little",
    "memory_signal": "release",
    "sharpness": 3.0,
    "explore": 0.05,
}

#: The six QoS settings of thesis §6.3–6.5: (label, [(statistic, direction, weight), ...]).
SETTINGS = [
    ("delay 100 / rate 0", [("delay", "minimize", 1.0)]),
    ("delay 70 / rate 30", [("delay", "minimize", 0.7), ("output_rate", "maximize", 0.3)]),
    ("delay 50 / rate 50", [("delay", "minimize", 0.5), ("output_rate", "maximize", 0.5)]),
    ("delay 30 / rate 70", [("delay", "minimize", 0.3), ("output_rate", "maximize", 0.7)]),
    ("delay 0 / rate 100", [("output_rate", "maximize", 1.0)]),
    (
        "thirds delay/rate/memory",
        [("delay", "minimize", 1 / 3), ("output_rate", "maximize", 1 / 3), ("queued", "minimize", 1 / 3)],
    ),
]


def filters_plan() -> Plan:
    """Query Plan 1: S → O4 → O3 → O2 → O1 (O1 the root, σ = 1 as in the thesis). A cheap,
    selective leaf before expensive operators: the shape where Chain saves memory and FIFO delay."""
    return Plan(
        [
            Operator("O4", ("S",), 0.1, 0.2),
            Operator("O3", ("O4",), 1.0, 1.0),
            Operator("O2", ("O3",), 0.9, 0.5),
            Operator("O1", ("O2",), 1.0, 0.05),
        ],
        streams=["S"],
    )


def join_plan() -> Plan:
    """Query Plan 2: selective filters on R and T feed a windowed join, two filters above it."""
    return Plan(
        [
            Operator("R1", ("R",), 0.2, 0.2),
            Operator("T1", ("T",), 0.2, 0.2),
            Operator("J", ("R1", "T1"), 1.0, 1.0, kind="join"),
            Operator("O2", ("J",), 0.9, 0.5),
            Operator("O1", ("O2",), 1.0, 0.05),
        ],
        streams=["R", "T"],
    )


PLANS = {"filters": filters_plan, "join": join_plan}


def chain_dominated_plan() -> Plan:
    """Two queries on one stream where Chain keeps far less in memory than fifo, rr and mtiq
    (about 60% of the best of them): Q1 filters hard but slowly then very cheaply again; Q2 filters
    cheaply, then runs an expensive, unselective operator that Chain defers."""
    return Plan(
        [
            Operator("A1", ("S",), 0.1, 0.5),
            Operator("A2", ("A1",), 0.05, 0.02),
            Operator("B1", ("S",), 0.1, 0.02),
            Operator("B2", ("B1",), 0.9, 1.0),
        ],
        streams=["S"],
    )


def arrivals(plan: Plan, load: float, until: float, seed: int) -> dict[str, list[tuple[float, float]]]:
    """Poisson-shifting arrivals on every stream, scaled so the plan runs at ``load`` × capacity on
    average (bursts at about twice that)."""
    work_per_tuple = {s: sum(plan.service_time(p) for p in plan.paths if p.stream == s) for s in plan.streams}
    total = sum(work_per_tuple.values())
    # A period's mean is U(0.7, 1.3) × the base rate, ×2 in a quarter of them: 1.25 × on average.
    rate = load / total / (1 + BURST_PROBABILITY * (BURST_FACTOR - 1))
    return {
        s: poisson_shifting(
            rate, until, period=5.0, burst_probability=BURST_PROBABILITY, burst_factor=BURST_FACTOR, seed=seed * 100 + k
        )
        for k, s in enumerate(plan.streams)
    }


@dataclass
class RunStats:
    memory: float  # mean queued tuples at integer times 0..until
    delay: float  # mean delay of what was delivered by ``until``
    output_rate: float  # tuples delivered by ``until`` / until
    scheduler: object = None

    def value(self, statistic: str) -> float:
        return {"queued": self.memory, "delay": self.delay, "output_rate": self.output_rate}[statistic]


def run(plan: Plan, scheduler, arr, until: float, overhead: float = 0.0) -> RunStats:
    result = Simulator(plan, scheduler, arr, overhead=overhead).run(until=until)
    snaps = [q for t, q in result.snapshots.items() if t <= until]
    out = [o for o in result.outputs if o.time <= until]
    amount = math.fsum(o.amount for o in out)
    delay = math.fsum(o.amount * o.delay for o in out) / amount if amount > 0 else float("nan")
    return RunStats(sum(snaps) / len(snaps), delay, amount / until, scheduler)


def qos_scores(stats: dict[str, RunStats], goals) -> dict[str, float]:
    """The weighted QoS score of every contender: per statistic, run means min–max normalised
    across the contenders (1 = best), weighted and summed."""
    scores = {name: 0.0 for name in stats}
    for statistic, direction, weight in goals:
        values = {name: s.value(statistic) for name, s in stats.items()}
        low, high = min(values.values()), max(values.values())
        for name, v in values.items():
            z = 0.5 if high - low <= 1e-12 * max(1.0, abs(high)) else (v - low) / (high - low)
            scores[name] += weight * (z if direction == "maximize" else 1.0 - z)
    return scores


def adaptive(goals, seed: int, period: float, candidates=CANDIDATES, **kw):
    spec = QosSpec.of(*goals)
    return schedulers.get("adaptive", candidates=list(candidates), qos=spec, seed=seed, period=period, **kw)


def mean_stats(runs: list[RunStats]) -> RunStats:
    n = len(runs)
    return RunStats(sum(r.memory for r in runs) / n, sum(r.delay for r in runs) / n, sum(r.output_rate for r in runs) / n)


def table_6_2(plan_name: str, until: float, seeds, load: float, overhead: float = 0.0) -> dict[str, RunStats]:
    plan = PLANS[plan_name]()
    out = {}
    for name in CANDIDATES:
        out[name] = mean_stats([run(plan, schedulers.get(name), arrivals(plan, load, until, s), until, overhead) for s in seeds])
    return out


def table_6_3(plan_name: str, until: float, seeds, load: float, period: float, overhead: float = 0.0, **kw):
    """{setting label: {contender: QoS score}} with the scores averaged over seeds, and the raw
    per-contender statistics per setting."""
    plan = PLANS[plan_name]()
    traces = {s: arrivals(plan, load, until, s) for s in seeds}
    singles = {s: {name: run(plan, schedulers.get(name), traces[s], until, overhead) for name in CANDIDATES} for s in seeds}
    scores, stats = {}, {}
    for label, goals in SETTINGS:
        per_seed = []
        runs = {name: [] for name in (*CANDIDATES, "adaptive")}
        for s in seeds:
            contenders = dict(singles[s])
            contenders["adaptive"] = run(plan, adaptive(goals, s, period, **kw), traces[s], until, overhead)
            per_seed.append(qos_scores(contenders, goals))
            for name, r in contenders.items():
                runs[name].append(r)
        scores[label] = {name: sum(p[name] for p in per_seed) / len(per_seed) for name in runs}
        stats[label] = {name: mean_stats(r) for name, r in runs.items()}
    return scores, stats


def table_1_3(until: float, seeds, load: float, period: float, overhead: float = 0.0, **kw):
    """Share of post-warm-up decisions choosing chain, per seed, for a single `minimize queued` goal."""
    plan = chain_dominated_plan()
    goals = [("queued", "minimize", 1.0)]
    rows = []
    for s in seeds:
        arr = arrivals(plan, load, until, s)
        singles = {name: run(plan, schedulers.get(name), arr, until, overhead).memory for name in CANDIDATES}
        a = adaptive(goals, s, period, **kw)
        stats = run(plan, a, arr, until, overhead)
        after = [d for d in a.decisions if not d["warmup"]]
        share = sum(d["chosen"] == "chain" for d in after) / len(after) if after else float("nan")
        rows.append((s, singles, stats.memory, share, len(after)))
    return rows


def _print_table(header, rows, widths=None):
    widths = widths or [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(header)]
    print("  ".join(str(h).rjust(w) if i else str(h).ljust(w) for i, (h, w) in enumerate(zip(header, widths))))
    for r in rows:
        print("  ".join(str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(r, widths))))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--until", type=float, default=1200.0)
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--load", type=float, default=0.9)
    ap.add_argument("--period", type=float, default=PERIOD)
    ap.add_argument("--decay", type=float, default=SELECTOR["decay"])
    ap.add_argument("--spread", default=SELECTOR["spread"])
    ap.add_argument("--delay-signal", default=SELECTOR["delay_signal"], choices=["outputs", "little"])
    ap.add_argument("--memory-signal", default=SELECTOR["memory_signal"], choices=["release", "level"])
    ap.add_argument("--sharpness", type=float, default=SELECTOR["sharpness"], help="roulette slices ∝ score^k (1: the thesis)")
    ap.add_argument("--explore", type=float, default=SELECTOR["explore"], help="share of the wheel spread evenly (0: the thesis)")
    ap.add_argument("--overhead", type=float, default=OVERHEAD, help="start-up time per operator run")
    ap.add_argument("--age-unit", default=SELECTOR["age_unit"])
    ap.add_argument("--candidates", default=",".join(CANDIDATES), help="adaptive's candidates in table 1.3")
    ap.add_argument("--table", default="all", choices=["all", "6.2", "6.3", "1.3"])
    ap.add_argument("--plan", default="filters,join")
    args = ap.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    kw = {
        "decay": args.decay,
        "spread": args.spread,
        "age_unit": args.age_unit,
        "delay_signal": args.delay_signal,
        "memory_signal": args.memory_signal,
        "sharpness": args.sharpness,
        "explore": args.explore,
    }
    started = time.perf_counter()
    print(
        f"# until={args.until:g} seeds={seeds} load={args.load:g} period={args.period:g} "
        f"decay={args.decay:g} age_unit={args.age_unit} spread={args.spread} overhead={args.overhead:g} "
        f"delay_signal={args.delay_signal} memory_signal={args.memory_signal} sharpness={args.sharpness:g} "
        f"explore={args.explore:g}"
    )
    if args.table in ("all", "6.2"):
        for plan_name in args.plan.split(","):
            print(f"\n## thesis §6.2 — plan {plan_name}: run means per strategy")
            t = table_6_2(plan_name, args.until, seeds, args.load, args.overhead)
            _print_table(
                ["strategy", "memory", "delay", "output_rate"],
                [[n, f"{s.memory:.2f}", f"{s.delay:.3f}", f"{s.output_rate:.4f}"] for n, s in t.items()],
            )
            best_mem = min(t, key=lambda n: t[n].memory)
            best_delay = min(t, key=lambda n: t[n].delay)
            print(f"best memory: {best_mem}; best delay: {best_delay}; one strategy best on both: {best_mem == best_delay}")
    if args.table in ("all", "6.3"):
        for plan_name in args.plan.split(","):
            print(f"\n## thesis §6.3–6.5 — plan {plan_name}: weighted QoS score (1 = best on every goal)")
            scores, stats = table_6_3(plan_name, args.until, seeds, args.load, args.period, args.overhead, **kw)
            rows, wins = [], 0
            for label, sc in scores.items():
                best_single = max(sc[n] for n in CANDIDATES)
                ratio = sc["adaptive"] / best_single if best_single > 0 else float("inf")
                ok = sc["adaptive"] >= best_single - 1e-12
                wins += ok
                rows.append([label, *(f"{sc[n]:.3f}" for n in (*CANDIDATES, "adaptive")), f"{ratio:.3f}", "yes" if ok else "no"])
            _print_table(["setting", *CANDIDATES, "adaptive", "adaptive/best", ">= best"], rows)
            worst = min(float(r[-2]) for r in rows)
            print(f"adaptive >= best single in {wins}/6 settings; lowest adaptive/best = {worst:.3f}")
            print("raw run means (memory / delay / output_rate):")
            for label, st in stats.items():
                print(f"  {label}: " + "; ".join(f"{n} {s.memory:.1f}/{s.delay:.2f}/{s.output_rate:.3f}" for n, s in st.items()))
    if args.table in ("all", "1.3"):
        # Without start-up cost: with one, MTIQ's batches hold less than Chain on this plan.
        print("\n## thesis §1.3 — single goal `minimize queued`, chain-dominated plan (overhead 0)")
        rows = table_1_3(args.until, seeds, args.load, args.period, 0.0, candidates=args.candidates.split(","), **kw)
        _print_table(
            ["seed", *(f"{n} mem" for n in CANDIDATES), "adaptive mem", "chain share", "decisions"],
            [[s, *(f"{m[n]:.2f}" for n in CANDIDATES), f"{am:.2f}", f"{share:.2f}", k] for s, m, am, share, k in rows],
        )
    print(f"\n# {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
