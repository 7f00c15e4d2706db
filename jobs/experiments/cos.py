"""COS §5 on Spark: memory and latency against the number of operators (40 → 320) for fifo,
chain and cos.

    ./spark-submit.sh jobs/experiments/cos.py [--seconds 12] [--rate 400] [--plans 5,10,20,40]

Plans (jobs/cos_sim.py, COS §5.1's shape): N queries of eight operators — two streams, two
selections on each, a join, two more selections and a projection — so N = 5, 10, 20, 40 gives
40 → 320 operators. Synthetic operators on the replayed bursty stream (each plan stream reads the
sensor stream; the join is a union of its inputs then its σ, capped at 1), costs scaled so the
mean rate loads the executor to ``--load`` of one core. Claim (COS §5.2, Figures 6-7): cos keeps
memory close to chain's and well below fifo's, with latency no worse than chain's, and its
advantage grows with the number of operators.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import _common as C  # noqa: E402
from cos_sim import cos_plan  # noqa: E402

from sparkqos.runtime.assembly import usable_cores  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def memory_verdict(p: str, mem: dict[str, float], lat: dict[str, float]) -> str:
    """Plan ``p``'s verdict (printed) on "cos queues less than fifo" from the mean rows in the
    system and mean delays (ms) per strategy; the simulator's run (jobs/experiments/claims.py)
    is judged by the same line."""
    return C.verdict(
        f"{p}: cos queues less than fifo",
        mem["cos"] < mem["fifo"],
        ", ".join(f"{s} {v:.0f} rows / {lat[s]:.0f} ms" for s, v in mem.items()),
        measure=mem["cos"] / mem["fifo"] if mem["fifo"] > 0 else float("nan"),
        paper="cos well below fifo (Fig. 6-7)",
    )


def main(argv=None) -> int:
    ap = C.experiment_args(
        __doc__,
        {
            "seconds": 12.0,
            "rate": 400.0,
            "strategies": ["fifo", "chain", "cos"],
            "plans": ["5", "10", "20", "40"],
            "out": str(ROOT / "output" / "experiments" / "cos"),
        },
    )
    ap.add_argument("--load", type=float, default=0.85, help="executor load at the mean rate (share of one core)")
    ap.add_argument("--plan-seed", type=int, default=3)
    ap.add_argument("--T", type=float, default=0.3, help="cos similarity threshold")
    args = ap.parse_args(argv)
    plans = {}
    for n in args.plans.split(","):
        plan = cos_plan(int(n), args.plan_seed)
        unit = C.cost_unit_for(plan, args.rate, args.load)
        plans[f"{len(plan)}ops"] = lambda plan=plan, unit=unit: C.synthetic_transforms(plan, unit, classes={})

    results, rows = C.run_experiment(
        "cos", args, plans, args.strategies.split(","), strategy_params=lambda p, s: {"T": args.T} if s == "cos" else {}
    )
    table = C.print_table(
        f"\ncos (COS §5): trace of {rows} rows (each feeds every query), {args.seconds:g}s, load {args.load:g}",
        C.SUMMARY_HEADER,
        C.summary_rows(results, rows),
    )
    verdicts = []
    for p in plans:
        runs = {s: st for pp, s, st in results if pp == p}
        if not {"cos", "fifo"} <= set(runs):
            continue
        mem = {s: st.mean_in_system for s, st in runs.items()}
        lat = {s: C.mean_ms(st.all_delays()) for s, st in runs.items()}
        verdicts.append(memory_verdict(p, mem, lat))
        # cos's cluster threads run side by side. Cores count the whole job (this
        # process, Spark's JVM, its Python workers); the executor's threads' share is shown beside,
        # and the cores the process may use (its CPU affinity: one under --one-core, where the
        # runner gives cos no cluster threads and the job cannot pass one core).
        verdicts.append(
            C.verdict(
                f"{p}: the job uses more than 1.5 cores while cos runs",
                runs["cos"].cores > 1.5,
                ", ".join(f"{s} {st.cores:.2f} (executor {st.executor_cores:.2f})" for s, st in runs.items())
                + f"; {usable_cores()} usable core(s), load average {os.getloadavg()[0]:.1f}",
                measure=runs["cos"].cores,
                paper="clusters run in parallel threads (§4.2)",
            )
        )
    C.finish_experiment(args, "cos", table, verdicts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
