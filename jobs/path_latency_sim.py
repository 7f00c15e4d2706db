"""Jiang §5, Figure 2 in the simulator: how large pc's latency lead is on path_latency's plan, and
how much of it an operator run's fixed cost takes.

    .venv/bin/python jobs/path_latency_sim.py [--loads 0.5,0.7,0.9] [--seeds 7,8,9] [--until 600]
        [--shares 0/0,0.01/0.01,0.03/0.01,0.05/0.01,0.05/0.02]

The plan is jobs/experiments/path_latency.py's (three queries whose paths differ in capacity and
in where they filter) under the ``quantum`` run rule, fed bursty ON/OFF Pareto arrivals (Jiang
§5.1) at ``--loads`` of the processor. Each ``--shares`` entry ``PC/OTHERS`` gives every operator
run a fixed start-up cost (``Simulator(overhead=…)``) sized so that it takes ``PC`` of pc's busy
time and ``OTHERS`` of simplified_segment's and chain's: the papers take switching to be free (0/0);
sparkqos's executor measures what a run costs as it runs, and its runner sizes runs so that the
cost is at most 5 % of each (pc, which makes the most runs, comes closest to it). Printed per load
and shares: pc's mean delay over the better of simplified_segment's and chain's, median [min-max]
over the seeds (below 1: pc ahead, as Figure 2 draws it), and the operator runs each made.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "experiments"))

import path_latency  # noqa: E402

from sparkqos import schedulers  # noqa: E402
from sparkqos.sim import Simulator  # noqa: E402
from sparkqos.sim.arrivals import on_off_pareto  # noqa: E402

STRATEGIES = ("pc", "simplified_segment", "chain")


def run(plan, strategy: str, arrivals, overhead: float) -> tuple[float, int]:
    """Mean delay and operator runs of ``strategy`` with ``overhead`` time units per run."""
    sim = Simulator(plan, schedulers.get(strategy), arrivals, run="quantum", overhead=overhead, record_dispatches=True)
    result = sim.run()
    return result.mean_delay(), len(sim.steps)


def with_share(plan, strategy: str, arrivals, work: float, share: float) -> tuple[float, int]:
    """:func:`run` with the per-run cost that takes ``share`` of the strategy's busy time (``work``
    + runs × cost): the runs' count depends a little on the cost, so three rounds settle it."""
    delay, runs = run(plan, strategy, arrivals, 0.0)
    for _ in range(3 if share > 0 else 0):
        delay, runs = run(plan, strategy, arrivals, share * work / (runs * (1 - share)))
    return delay, runs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loads", default="0.5,0.7,0.9")
    ap.add_argument("--seeds", default="7,8,9")
    ap.add_argument("--until", type=float, default=600.0)
    ap.add_argument("--shares", default="0/0,0.01/0.01,0.02/0.01,0.03/0.01,0.05/0.01,0.05/0.02")
    args = ap.parse_args(argv)
    plan = path_latency.scheduling_plan()
    per_row = math.fsum(plan.service_time(p) for p in plan.paths)
    print("load  pc/others share  pc over the better of simplified_segment and chain  runs (first seed)")
    for load in map(float, args.loads.split(",")):
        for entry in args.shares.split(","):
            pc_share, others = map(float, entry.split("/"))
            ratios, runs = [], {}
            for seed in map(int, args.seeds.split(",")):
                arrivals = {s: on_off_pareto(load / per_row, args.until, seed=seed) for s in plan.streams}
                work = math.fsum(a for _, a in arrivals[plan.streams[0]]) * per_row
                got = {s: with_share(plan, s, arrivals, work, pc_share if s == "pc" else others) for s in STRATEGIES}
                ratios.append(got["pc"][0] / min(got["simplified_segment"][0], got["chain"][0]))
                runs = runs or {s: n for s, (_, n) in got.items()}
            print(
                f"{load:4.2f}  {pc_share:4.0%} / {others:3.0%}     {statistics.median(ratios):.3f} "
                f"[{min(ratios):.3f}-{max(ratios):.3f}]  " + ", ".join(f"{s} {n}" for s, n in runs.items()),
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
