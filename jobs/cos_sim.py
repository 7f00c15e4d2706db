"""COS §5.2 in the simulator: average memory and latency of fifo, chain and cos on a 320-operator
plan with bursty arrivals.

    .venv/bin/python jobs/cos_sim.py [--queries 40] [--until 2000] [--load 0.9] [--seed 3] [--T 0.3]

The plan has COS §5.1's shape: ``--queries`` queries of eight operators each — two streams, two
successive selections on each, a sliding-window join, two more selections and a projection
(six selections, one join, one projection). Queries share the structure but not the
selectivities (drawn with ``--seed``); per-tuple costs are fixed per operator (drawn once).
Each query's two streams carry the same ON/OFF Pareto bursts (Jiang §5.1) so its join is fed
evenly; different queries burst independently. Memory is the mean of the queued-tuple snapshots
(one per time unit, arrivals until ``--until``, then drained); latency is the mean output delay.
The simulator has one processor, so cos's clusters share it quantum by quantum (no threads).
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np

from sparkqos import Operator, Plan, schedulers
from sparkqos.sim import Simulator
from sparkqos.sim.arrivals import on_off_pareto


def cos_plan(queries: int = 40, seed: int = 3) -> Plan:
    """``queries`` × 8 operators in the COS §5.1 shape (module docstring)."""
    if not isinstance(queries, int) or queries < 1:
        raise ValueError(f"queries must be an integer >= 1, got {queries!r}")
    rng = np.random.default_rng(seed)
    ops: list[Operator] = []
    streams: list[str] = []

    def select(name: str, below: str, q: str) -> str:
        ops.append(
            Operator(
                name,
                (below,),
                round(float(rng.uniform(0.3, 1.0)), 3),
                round(float(rng.uniform(0.005, 0.05)), 4),
                q,
                None,
                "filter",
            )
        )
        return name

    for i in range(queries):
        q = f"q{i}"
        sides = []
        for side in "LR":
            stream = f"{q}_{side}"
            streams.append(stream)
            sides.append(select(f"{q}_s2{side}", select(f"{q}_s1{side}", stream, q), q))
        ops.append(
            Operator(
                f"{q}_join",
                tuple(sides),
                round(float(rng.uniform(0.5, 1.5)), 3),
                round(float(rng.uniform(0.05, 0.2)), 4),
                q,
                None,
                "join",
            )
        )
        top = select(f"{q}_s4", select(f"{q}_s3", f"{q}_join", q), q)
        ops.append(Operator(f"{q}_project", (top,), 1.0, 0.005, q, None, "map"))
    return Plan(ops, streams=streams)


def cos_arrivals(plan: Plan, load: float, until: float, seed: int = 3) -> dict[str, list[tuple[float, float]]]:
    """Bursty arrivals, the same on both streams of a query, totalling ``load`` × capacity."""
    per_query: dict[str, float] = {}
    for p in plan.paths:
        per_query[p.query] = per_query.get(p.query, 0.0) + plan.service_time(p)
    rate = load / math.fsum(per_query.values())  # tuples per stream per time unit
    out = {}
    for k, q in enumerate(plan.queries):
        one = on_off_pareto(rate, until, flows=8, seed=seed * 10_000 + k)
        out[f"{q}_L"] = one
        out[f"{q}_R"] = list(one)
    return out


def measure(plan: Plan, arrivals, strategy) -> dict[str, float]:
    sim = Simulator(plan, strategy, arrivals, run="quantum", quantum=1.0)
    result = sim.run()
    snaps = list(result.snapshots.values())
    return {
        "memory": math.fsum(snaps) / len(snaps),
        "peak": max(snaps),
        "latency": result.mean_delay(),
        "output": result.total_output,
        "picks": result.picks,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=int, default=40)
    parser.add_argument("--until", type=float, default=2000.0)
    parser.add_argument("--load", type=float, default=0.9)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--T", type=float, default=0.3, help="cos similarity threshold")
    parser.add_argument("--strategies", default="fifo,chain,cos")
    args = parser.parse_args(argv)
    if not (0 < args.load < 2) or args.until <= 0:
        parser.error("--load must be in (0, 2) and --until > 0")
    plan = cos_plan(args.queries, args.seed)
    arrivals = cos_arrivals(plan, args.load, args.until, args.seed)
    names = [s.strip() for s in args.strategies.split(",") if s.strip()]
    print(f"{plan!r}; load {args.load}; arrivals until {args.until:g}, then drained; seed {args.seed}")
    header = (
        f"{'strategy':<8} {'avg memory':>11} {'peak memory':>12} {'avg latency':>12} {'output':>10} {'picks':>8} {'sim s':>6}"
    )
    print(header)
    print("-" * len(header))
    for name in names:
        strategy = schedulers.get(name, T=args.T) if name == "cos" else schedulers.get(name)
        started = time.perf_counter()
        m = measure(plan, arrivals, strategy)
        extra = f"  ({len(strategy.clusters)} clusters)" if name == "cos" else ""
        print(
            f"{name:<8} {m['memory']:>11.2f} {m['peak']:>12.1f} {m['latency']:>12.2f} {m['output']:>10.1f} "
            f"{m['picks']:>8} {time.perf_counter() - started:>6.1f}{extra}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
