"""CQC §5 in the simulator: class H response time under HR and under CQC, workloads A and B.

    .venv/bin/python jobs/cqc_sim.py [--until 4000] [--load 0.95] [--seed 1] [--workload A,B]

Both workloads hold the paper's query mix (CQC §5.1, Table 1): 21 queries — nine aggregates,
six 2-way joins, six selections — each reading its own copies of the streams through its own
source operators (27 streams, no sharing across classes). Table 2's shapes:

* A — 7 queries per class, the same mix in each (3 aggregates, 2 joins, 2 selections),
  priorities H 6, C 3, N 1;
* B — H holds 2 joins, C 8 queries, N 11, priorities H 3, C 2, N 1.

Selection selectivities are drawn from [0.25, 1] (Table 1) with ``--seed``; every stream sends
bursty ON/OFF Pareto traffic at the same mean rate, chosen so the whole plan runs at ``--load``
× its capacity ("a highly loaded state without overloading it"). The table gives each class's
mean response time (amount-weighted delay of its outputs) and the H ratio HR / CQC the paper
reports as 9.4× (A) and 19.8× (B).
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np

from sparkqos import Operator, Plan, schedulers
from sparkqos.sim import SimResult, Simulator
from sparkqos.sim.arrivals import poisson_shifting

#: Per-tuple costs (time units) of each operator type.
COST = {"source": 0.02, "select": 0.05, "aggregate": 0.10, "join": 0.15}
#: An aggregate emits one result per window of ~10 tuples (Table 1: window of 10 time units).
AGGREGATE_SELECTIVITY = 0.1
#: Join output per input tuple (each tuple matches about one tuple of the other window).
JOIN_SELECTIVITY = 1.0
#: Workload B's class H joins detect rare events (CQC §1: "fire conditions are rare"), so their
#: output rate — and their HR priority — is low.
RARE_JOIN_SELECTIVITY = 0.05

#: Queries of each type per class: (selections, aggregates, joins).
WORKLOADS = {
    "A": {"classes": {"H": 6, "C": 3, "N": 1}, "mix": {"H": (2, 3, 2), "C": (2, 3, 2), "N": (2, 3, 2)}},
    "B": {"classes": {"H": 3, "C": 2, "N": 1}, "mix": {"H": (0, 0, 2), "C": (3, 3, 2), "N": (3, 6, 2)}},
}


def cqc_plan(workload: str, seed: int = 1) -> Plan:
    """The 21-query plan of workload ``"A"`` or ``"B"`` (module docstring)."""
    if workload not in WORKLOADS:
        raise ValueError(f"workload must be one of {sorted(WORKLOADS)}, got {workload!r}")
    spec = WORKLOADS[workload]
    # One selectivity per (query type, number, branch): in workload A the classes are identical.
    rng = np.random.default_rng(seed)
    drawn: dict[str, float] = {}
    ops: list[Operator] = []
    streams: list[str] = []

    def branch(q: str, klass: str, tag: str) -> str:
        stream = f"{q}_{tag}" if tag else q
        streams.append(stream)
        ops.append(Operator(f"{q}_src{tag}", (stream,), 1.0, COST["source"], q, klass, "source"))
        shape = q.split("_", 1)[1] + tag
        if shape not in drawn:
            drawn[shape] = round(float(rng.uniform(0.25, 1.0)), 3)
        sel = drawn[shape]
        ops.append(Operator(f"{q}_sel{tag}", (f"{q}_src{tag}",), sel, COST["select"], q, klass, "filter"))
        return f"{q}_sel{tag}"

    for klass, (n_sel, n_agg, n_join) in spec["mix"].items():
        for i in range(n_sel):
            branch(f"{klass}_sel{i}", klass, "")
        for i in range(n_agg):
            q = f"{klass}_agg{i}"
            below = branch(q, klass, "")
            ops.append(Operator(f"{q}_agg", (below,), AGGREGATE_SELECTIVITY, COST["aggregate"], q, klass, "aggregate"))
        for i in range(n_join):
            q = f"{klass}_join{i}"
            left, right = branch(q, klass, "L"), branch(q, klass, "R")
            sel = RARE_JOIN_SELECTIVITY if workload == "B" and klass == "H" else JOIN_SELECTIVITY
            ops.append(Operator(f"{q}_join", (left, right), sel, COST["join"], q, klass, "join"))
    return Plan(ops, streams=streams, classes=spec["classes"])


def cqc_arrivals(plan: Plan, load: float, until: float, seed: int = 1) -> dict[str, list[tuple[float, float]]]:
    """The same arrivals on every stream (the sensors report together, as the paper replays its
    files in step): Poisson whose mean is redrawn every 200 time units, 30 % of periods bursts at
    1.5× — a base mean of ``load`` × capacity, so bursts overload the processor for a while."""
    work_per_tuple = math.fsum(plan.service_time(p) for p in plan.paths)  # one tuple on every stream
    one = poisson_shifting(load / work_per_tuple, until, period=200.0, burst_probability=0.3, burst_factor=1.5, seed=seed)
    return {s: list(one) for s in plan.streams}


def offered_load(plan: Plan, arrivals: dict[str, list[tuple[float, float]]], until: float) -> float:
    """Work brought per time unit / processing capacity (1)."""
    return math.fsum(plan.service_time(p) * math.fsum(a for _, a in arrivals[p.stream]) for p in plan.paths) / until


def class_response_times(plan: Plan, result: SimResult, per: str = "query") -> dict[str, float]:
    """Mean response time of each class: with ``per="query"`` the mean over the class's queries
    of each query's mean output delay (every query counts once, as the paper's "average
    response time of class H queries"); with ``per="tuple"`` the amount-weighted mean delay of
    all the class's outputs (high-volume queries dominate)."""
    if per not in ("query", "tuple"):
        raise ValueError(f"per must be 'query' or 'tuple', got {per!r}")
    sums: dict[str, list[float]] = {}
    for o in result.outputs:
        key = o.query if per == "query" else plan.queries[o.query].klass
        acc = sums.setdefault(key, [0.0, 0.0])
        acc[0] += o.amount * o.delay
        acc[1] += o.amount
    means = {key: s / w for key, (s, w) in sums.items() if w > 0}
    if per == "tuple":
        return {c: means.get(c, float("nan")) for c in plan.classes}
    out = {}
    for c in plan.classes:
        values = [v for q, v in means.items() if plan.queries[q].klass == c]
        out[c] = math.fsum(values) / len(values) if values else float("nan")
    return out


def run(
    workload: str, strategy: str, load: float, until: float, seed: int, per: str = "query"
) -> tuple[dict[str, float], SimResult]:
    """One strategy on one workload; arrivals stop at ``until`` and the plan then drains, so
    tuples a strategy leaves waiting count too (no censoring at the horizon)."""
    plan = cqc_plan(workload, seed)
    arrivals = cqc_arrivals(plan, load, until, seed)
    result = Simulator(plan, schedulers.get(strategy), arrivals, run="quantum", quantum=1.0).run()
    return class_response_times(plan, result, per), result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--until", type=float, default=4000.0, help="arrivals stop here; then the plan drains")
    parser.add_argument("--load", type=float, default=0.85, help="base mean input work / capacity (bursts add to it)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workload", default="A,B")
    parser.add_argument("--strategies", default="rr,hr,hnr,cqc")
    args = parser.parse_args(argv)
    if not (0 < args.load < 2) or args.until <= 0:
        parser.error("--load must be in (0, 2) and --until > 0")
    names = [s.strip() for s in args.strategies.split(",") if s.strip()]
    for name in names:
        schedulers.get(name)
    for workload in [w.strip() for w in args.workload.split(",") if w.strip()]:
        plan = cqc_plan(workload, args.seed)
        arrivals = cqc_arrivals(plan, args.load, args.until, args.seed)
        print(
            f"workload {workload}: {plan!r}, classes {plan.classes}, offered load "
            f"{offered_load(plan, arrivals, args.until):.3f}, arrivals until {args.until:g}, drained"
        )
        header = (
            f"{'strategy':<9} | {'per query: H':>12} {'C':>8} {'N':>8} | {'per tuple: H':>12} {'C':>8} {'N':>8} "
            f"| {'output':>9} {'sim s':>6}"
        )
        print(header)
        print("-" * len(header))
        got: dict[str, tuple[dict[str, float], dict[str, float]]] = {}
        for name in names:
            started = time.perf_counter()
            result = Simulator(plan, schedulers.get(name), arrivals, run="quantum", quantum=1.0).run()
            q, t = class_response_times(plan, result, "query"), class_response_times(plan, result, "tuple")
            got[name] = (q, t)
            print(
                f"{name:<9} | {q['H']:>12.2f} {q['C']:>8.2f} {q['N']:>8.2f} | {t['H']:>12.2f} {t['C']:>8.2f} "
                f"{t['N']:>8.2f} | {result.total_output:>9.1f} {time.perf_counter() - started:>6.1f}",
                flush=True,
            )
        if "hr" in got and "cqc" in got:
            (hq, ht), (cq, ct) = got["hr"], got["cqc"]
            print(
                f"class H mean response time HR / CQC: {hq['H'] / cq['H']:.1f}x per query, "
                f"{ht['H'] / ct['H']:.1f}x per tuple (paper: {'9.4' if workload == 'A' else '19.8'}x)\n"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
