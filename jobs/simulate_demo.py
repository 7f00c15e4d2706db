"""Simulator demo: three sensor queries over one bursty stream, under each built-in strategy.

    ./spark-submit.sh jobs/simulate_demo.py [--until 3000] [--load 0.85] [--seed 7]

A fire-detection query (class H), an anomaly query (class C) and a statistics query (class N)
each get their own copy of the sensor stream (Chain §2). Arrivals are self-similar ON/OFF Pareto
traffic (Jiang §5.1) at ``--load`` × the plan's capacity. The table shows the trade-off the
papers describe: chain keeps queues smallest, fifo keeps delay low, nobody wins everything.
"""

from __future__ import annotations

import argparse
import math
import sys
import time

from sparkqos import Operator, Plan, schedulers
from sparkqos.sim import Simulator
from sparkqos.sim.arrivals import on_off_pareto


def sensor_plan() -> Plan:
    ops = [
        # fire: cheap, very selective temperature filter, then a slower smoke check
        Operator("fire_temp", ("sensors",), 0.05, 0.02, query="fire", klass="H"),
        Operator("fire_smoke", ("fire_temp",), 0.5, 0.40, query="fire", klass="H"),
        # anomaly: Chain §6's four-operator shape: a fast selective operator between slow ones
        Operator("anom_parse", ("sensors",), 0.9, 0.10, query="anomaly", klass="C"),
        Operator("anom_enrich", ("anom_parse",), 0.9, 0.30, query="anomaly", klass="C"),
        Operator("anom_zscore", ("anom_enrich",), 0.1, 0.05, query="anomaly", klass="C"),
        Operator("anom_alert", ("anom_zscore",), 1.0, 0.50, query="anomaly", klass="C"),
        # statistics: a projection and a slow aggregate-like step
        Operator("stats_project", ("sensors",), 1.0, 0.05, query="stats", klass="N"),
        Operator("stats_rollup", ("stats_project",), 0.2, 0.20, query="stats", klass="N"),
    ]
    return Plan(ops, streams=["sensors"], classes={"H": 6, "C": 3, "N": 1})


def percentile(values: list[tuple[float, float]], q: float) -> float:
    """Amount-weighted percentile of (value, weight) pairs."""
    if not values:
        return float("nan")
    values = sorted(values)
    total = math.fsum(w for _, w in values)
    acc = 0.0
    for v, w in values:
        acc += w
        if acc >= q * total:
            return v
    return values[-1][0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--until", type=float, default=3000.0, help="virtual time to simulate")
    parser.add_argument("--load", type=float, default=0.85, help="mean input rate / capacity")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--strategies", default="fifo,rr,greedy,mtiq,chain")
    args = parser.parse_args(argv)
    if not (0 < args.load < 5) or args.until <= 0:
        parser.error("--load must be in (0, 5) and --until > 0")

    plan = sensor_plan()
    per_tuple = sum(plan.service_time(p) for p in plan.paths)
    rate = args.load / per_tuple
    arrivals = {"sensors": on_off_pareto(rate, args.until, flows=64, seed=args.seed)}
    names = [s.strip() for s in args.strategies.split(",") if s.strip()]
    for name in names:
        schedulers.get(name)  # fail fast on a typo, before any work
    total_in = sum(a for _, a in arrivals["sensors"])
    print(
        f"plan: {plan!r}; {per_tuple:.3f} time units of work per sensor tuple; "
        f"mean rate {rate:.2f}/unit (load {args.load}); {total_in:.0f} tuples over {args.until:g} units"
    )

    rows = []
    for k, name in enumerate(names, start=1):
        started = time.perf_counter()
        sim = Simulator(plan, schedulers.get(name), arrivals, run="quantum", quantum=1.0)
        result = sim.run(until=args.until)
        snaps = list(result.snapshots.values())
        by_class = {}
        for klass in ("H", "C", "N"):
            outs = [(o.delay, o.amount) for o in result.outputs if plan.queries[o.query].klass == klass]
            total = math.fsum(w for _, w in outs)
            by_class[klass] = math.fsum(d * w for d, w in outs) / total if total else float("nan")
        rows.append(
            (
                name,
                max(snaps),
                math.fsum(snaps) / len(snaps),
                result.mean_delay(),
                percentile([(o.delay, o.amount) for o in result.outputs], 0.99),
                by_class["H"],
                result.total_output,
                result.picks,
            )
        )
        print(f"[{k}/{len(names)}] {name}: simulated {args.until:g} units in {time.perf_counter() - started:.1f}s", flush=True)

    header = (
        f"{'strategy':<10} {'peak queued':>12} {'mean queued':>12} {'mean delay':>11} {'p99 delay':>10} "
        f"{'H delay':>8} {'output':>10} {'picks':>8}"
    )
    print(header)
    print("-" * len(header))
    for name, peak, mean_q, delay, p99, h, out, picks in rows:
        print(f"{name:<10} {peak:>12.1f} {mean_q:>12.1f} {delay:>11.2f} {p99:>10.2f} {h:>8.2f} {out:>10.1f} {picks:>8}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
