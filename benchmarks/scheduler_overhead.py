"""Cost of one ``pick`` for every registered strategy, on plans of 10, 116 and 1,000 operators.

    .venv/bin/python benchmarks/scheduler_overhead.py [--sizes 10,116,1000] [--until 3000] [--seed 1]

The 116-operator plan has Jiang's shape (§5.1): 16 queries over 5 streams, select/project
chains and symmetric hash joins, selectivities spread over (0, 1] with a few joins above 1. The
others scale the same recipe. Each plan runs in the simulator under bursty ON/OFF arrivals near
capacity, so queues are busy and priorities compete; every pick is timed with perf_counter_ns.
Target: median ≤ 20 µs at 116 operators, and per-pick cost growing no faster than
log(n) from 116 to 1,000 operators (the column ``1000/116`` against log ratio 1.45).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time

import numpy as np

from sparkqos import Operator, Plan, schedulers
from sparkqos.sim import Simulator
from sparkqos.sim.arrivals import on_off_pareto


def jiang_like_plan(n_ops: int, seed: int = 1) -> Plan:
    """About ``n_ops`` operators in queries of 3–12 operators over 5 streams, a third of them
    with a symmetric hash join of two streams (Jiang §5.1's mix; 116 ops ≈ 16 queries)."""
    rng = np.random.default_rng(seed)
    streams = [f"S{i}" for i in range(1, 6)]
    ops: list[Operator] = []
    classes = ["H", "C", "N"]
    q = 0
    while len(ops) < n_ops:
        size = int(min(rng.integers(3, 13), n_ops - len(ops)))
        name = f"q{q}"
        klass = classes[q % 3]
        made = 0
        if size >= 4 and rng.random() < 0.35:
            a, b = rng.choice(len(streams), size=2, replace=False)
            ops.append(
                Operator(f"{name}_l", (streams[a],), float(rng.uniform(0.1, 1.0)), float(rng.uniform(0.02, 0.3)), klass=klass)
            )
            ops.append(
                Operator(f"{name}_r", (streams[b],), float(rng.uniform(0.1, 1.0)), float(rng.uniform(0.02, 0.3)), klass=klass)
            )
            ops.append(
                Operator(
                    f"{name}_j",
                    (f"{name}_l", f"{name}_r"),
                    float(rng.uniform(0.3, 1.6)),
                    float(rng.uniform(0.1, 1.0)),
                    kind="join",
                    klass=klass,
                )
            )
            prev, made = f"{name}_j", 3
        else:
            prev = streams[int(rng.integers(len(streams)))]
        for k in range(size - made):
            op = f"{name}_{k}"
            ops.append(Operator(op, (prev,), float(rng.uniform(0.05, 1.0)), float(rng.uniform(0.02, 1.0)), klass=klass))
            prev = op
        q += 1
    return Plan(ops, streams=streams, classes={"H": 6, "C": 3, "N": 1})


def bursty_arrivals(plan: Plan, until: float, load: float, seed: int) -> dict[str, list]:
    work = {s: 0.0 for s in plan.streams}
    for path in plan.paths:
        work[path.stream] += plan.service_time(path)
    used = [s for s in plan.streams if work[s] > 0]
    out = {}
    for i, stream in enumerate(used):
        # each used stream brings an equal share of the load: rate × work per tuple = load / streams
        rate = load / len(used) / work[stream]
        out[stream] = on_off_pareto(rate, until, flows=32, seed=seed + i)
    return out


def time_picks(strategy: str, plan: Plan, arrivals, until: float) -> tuple[list[int], Simulator]:
    scheduler = schedulers.get(strategy)
    durations: list[int] = []
    pick = scheduler.pick
    clock = time.perf_counter_ns

    def timed(state):
        t0 = clock()
        unit = pick(state)
        durations.append(clock() - t0)
        return unit

    scheduler.pick = timed  # instance attribute: the engine calls this one
    sim = Simulator(plan, scheduler, arrivals, run="quantum")
    sim.run(until=until)
    return durations, sim


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10,116,1000")
    parser.add_argument("--until", type=float, default=3000.0, help="virtual time per run")
    parser.add_argument("--load", type=float, default=0.95)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--strategies", default=",".join(schedulers.available()))
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    names = [s for s in args.strategies.split(",") if s]

    plans = {n: jiang_like_plan(n, args.seed) for n in sizes}
    arrivals = {n: bursty_arrivals(plans[n], args.until, args.load, args.seed) for n in sizes}
    for n, plan in plans.items():
        print(f"plan {n:>5}: {plan!r}", flush=True)
    medians: dict[tuple[str, int], float] = {}
    rows = []
    for name in names:
        row = [name]
        for n in sizes:
            try:
                durations, sim = time_picks(name, plans[n], arrivals[n], args.until)
            except Exception as exc:  # a strategy that cannot run this plan: say so, keep going
                print(f"  {name} on {n} operators failed: {type(exc).__name__}: {exc}", file=sys.stderr)
                row.append("failed")
                continue
            med = statistics.median(durations) / 1000
            p90 = statistics.quantiles(durations, n=10)[-1] / 1000 if len(durations) > 10 else med
            medians[(name, n)] = med
            row.append(f"{med:6.2f} ({p90:6.2f}) n={len(durations)}")
        rows.append(row)
        print(f"  measured {name}", file=sys.stderr, flush=True)

    print()
    print("median µs per pick (p90) and number of picks")
    header = f"{'strategy':<20}" + "".join(f"{f'{n} ops':>30}" for n in sizes)
    if 116 in sizes and 1000 in sizes:
        header += f"{'1000/116':>10}"
    print(header)
    print("-" * len(header))
    for row in rows:
        line = f"{row[0]:<20}" + "".join(f"{cell:>30}" for cell in row[1:])
        if (row[0], 116) in medians and (row[0], 1000) in medians:
            line += f"{medians[(row[0], 1000)] / medians[(row[0], 116)]:>10.2f}"
        print(line)
    if 116 in sizes and 1000 in sizes:
        print(f"(log growth from 116 to 1000 operators would be {math.log(1000) / math.log(116):.2f}×)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
