"""Chain paper §6 on Spark: queued memory against time for chain, fifo, greedy and rr.

    ./spark-submit.sh jobs/experiments/chain_memory.py [--seconds 20] [--rate 3000] [--plans two,four,join,mix]

Plans on the replayed bursty trace (synthetic operators, ``--work-us`` µs per unit of cost):
``two`` and ``four`` — single-stream chains whose early operators are cheap but barely filter and
whose later ones filter hard (where Chain departs from FIFO/greedy), ``join`` — a real sliding-
window join of two filtered branches of the stream, then a filter, and ``mix`` — three such
queries side by side. Claim (Chain §6, Theorem 4.2): chain keeps the least queued memory, fifo
and rr the most; reported as mean and peak queued rows per run.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C  # noqa: E402

from sparkqos.examples import SENSOR_SCHEMA  # noqa: E402
from sparkqos.expr import col  # noqa: E402
from sparkqos.query import QuerySet  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
W = {"work_us": 20.0}


def chain(s, ops, name, klass="N"):
    r = s
    for i, (sigma, cost) in enumerate(ops):
        r = r.synthetic(selectivity=sigma, cost_s=cost * W["work_us"] * 1e-6, seed=17 * i + len(name))
    r.sink(name, klass=klass)


def two() -> QuerySet:
    qs = QuerySet()
    chain(qs.stream("sensors", SENSOR_SCHEMA), [(0.9, 2.0), (0.1, 8.0)], "two")
    return qs


def four() -> QuerySet:
    qs = QuerySet()
    chain(qs.stream("sensors", SENSOR_SCHEMA), [(1.0, 1.0), (0.9, 3.0), (0.2, 3.0), (0.5, 2.0)], "four")
    return qs


def join() -> QuerySet:
    qs = QuerySet()
    s = qs.stream("sensors", SENSOR_SCHEMA)
    left = s.where(col("temperature") > 22.0).synthetic(selectivity=0.9, cost_s=2 * W["work_us"] * 1e-6, seed=3)
    right = s.where(col("humidity") > 55.0).synthetic(selectivity=0.9, cost_s=2 * W["work_us"] * 1e-6, seed=4)
    (left.join(right, on="sensor_id", seconds=0.05)
         .synthetic(selectivity=0.1, cost_s=4 * W["work_us"] * 1e-6, seed=5).sink("join"))
    return qs


def mix() -> QuerySet:
    qs = QuerySet()
    s = qs.stream("sensors", SENSOR_SCHEMA)
    chain(s, [(0.9, 2.0), (0.1, 4.0)], "q1")
    chain(s, [(1.0, 1.0), (0.5, 2.0), (0.3, 2.0)], "q2")
    chain(s, [(0.2, 1.5), (0.8, 3.0)], "q3")
    return qs


PLANS = {"two": two, "four": four, "join": join, "mix": mix}


def main(argv=None) -> int:
    ap = C.experiment_args(__doc__, {"seconds": 20.0, "rate": 3000.0, "work_us": 20.0,
                                     "strategies": ["chain", "fifo", "greedy", "rr"], "plans": list(PLANS),
                                     "out": str(ROOT / "output" / "experiments" / "chain_memory")})
    args = ap.parse_args(argv)
    W["work_us"] = args.work_us
    plans = {p: PLANS[p] for p in args.plans.split(",")}
    strategies = args.strategies.split(",")
    results, rows = C.run_experiment("chain_memory", args, plans, strategies)
    table = C.print_table(f"\nchain_memory (Chain §6): {rows} rows, {args.seconds:g}s trace, {args.rate:g} rows/s",
                          C.SUMMARY_HEADER, C.summary_rows(results, rows))
    verdicts = []
    for p in plans:
        runs = {s: st for pp, s, st in results if pp == p}
        if "chain" not in runs or len(runs) < 2:
            continue
        mean_q = {s: (sum(st.queued_rows) / max(len(st.queued_rows), 1)) for s, st in runs.items()}
        best = min(mean_q, key=mean_q.get)
        others = ", ".join(f"{s} {v:.0f}" for s, v in mean_q.items())
        verdicts.append(C.verdict(f"{p}: chain has the least mean queued memory", best == "chain" or mean_q["chain"] <= 1.05 * mean_q[best],
                                  f"mean queued rows {others}"))
    C.finish_experiment(args, "chain_memory", table, verdicts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
