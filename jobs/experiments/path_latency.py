"""Jiang & Chakravarthy §5 on Spark: tuple latency, throughput and memory under rising load for
pc, simplified_segment, chain and threshold.

    ./spark-submit.sh jobs/experiments/path_latency.py [--seconds 30] [--rate 2500] [--load-from 0.5 --load-to 1.5]
        [--side-by-side] [--overhead-share 0.05]

Three queries on the replayed bursty stream (synthetic operators) whose operator paths differ in
capacity and in where they filter. The trace's rate rises linearly from ``--load-from`` to
``--load-to`` × the base rate, with the base load on the executor set to ``--load`` of one core.
With ``--side-by-side`` the strategies run at once over the same micro-batches
(``_common.run_side_by_side``), so whatever else loads the machine loads them alike; ``--load``
is then the share of the machine that all their work takes together at the base rate, split
evenly between them: of the cores the process got when it asked for all it may use, measured
before the runs (``_common.spare_cores``: its CPU affinity, one under ``taskset -c 0``, less what
other jobs took) — the same load relative to the machine on two cores, on one, and on a shared
one. ``--overhead-share`` is the executor's cost-aware quantum (the largest share of a run its
fixed cost may take; the runner's 0.05 by default), the same for every strategy.
Claims (Jiang §5.2-5.3): pc gives the lowest tuple latency; chain and simplified_segment keep
less in memory than pc (simplified_segment close to chain); threshold sits between, trading
latency for memory once the queue passes its threshold; throughput is the same for all (same
work), so differences are in latency and memory only.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C  # noqa: E402

from sparkqos.model.plan import Plan  # noqa: E402
from sparkqos.runtime.assembly import usable_cores  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

#: (query, [(σ, cost)…] leaf → root): a slow path that filters late, a fast selective one, and
#: a long one in between.
PATHS = {
    "slow": [(0.9, 1.0), (0.1, 6.0)],
    "fast": [(0.3, 1.0), (0.8, 2.0)],
    "long": [(1.0, 0.5), (0.5, 1.0), (0.2, 3.0)],
}


def scheduling_plan() -> Plan:
    return C.chain_plan(PATHS)


def claim_verdicts(lat: dict[str, float], mem: dict[str, float], runs: dict[str, str] | None = None) -> list[str]:
    """The claims' verdicts (printed) from each strategy's mean delay (ms) and mean rows in the
    system; the simulator's run (jobs/experiments/claims.py) is judged by the same lines.
    ``runs`` (strategy → its operator runs, their fixed cost and the cores the job got, on Spark)
    goes into Fig. 2's detail: pc's lead rests on switching being cheap, which the papers assume
    and the executor's runs measure, and on every strategy getting the same processor."""
    verdicts: list[str] = []
    if "pc" in lat:
        verdicts.append(
            C.verdict(
                "pc has the lowest mean tuple latency",
                min(lat, key=lat.get) == "pc",
                ", ".join(f"{s} {v:.0f} ms" for s, v in lat.items()),
                measure=lat["pc"] / min((v for s, v in lat.items() if s != "pc"), default=math.nan),
                paper="pc lowest latency (Fig. 2)",
            )
        )
        # Figure 2 draws pc, simplified_segment and chain; threshold (§3.4) runs pc's schedule
        # until queued memory reaches its threshold, so below it threshold is pc, not a rival
        rivals = {s: lat[s] for s in ("simplified_segment", "chain") if s in lat}
        if rivals:
            verdicts.append(
                C.verdict(
                    "pc's mean tuple latency is below simplified_segment's and chain's",
                    lat["pc"] < min(rivals.values()),
                    ", ".join(f"{s} {lat[s]:.0f} ms" + (f" ({runs[s]})" if runs and s in runs else "") for s in ("pc", *rivals)),
                    measure=lat["pc"] / min(rivals.values()),
                    paper="pc below the other two of Fig. 2",
                )
            )
        for s in ("chain", "simplified_segment"):
            if s in mem:
                verdicts.append(
                    C.verdict(
                        f"{s} queues less than pc",
                        mem[s] < mem["pc"],
                        f"mean rows in the system {s} {mem[s]:.0f} vs pc {mem['pc']:.0f}",
                        measure=mem[s] / mem["pc"] if mem["pc"] > 0 else math.nan,
                        paper=f"{s} below pc (Fig. 4)",
                    )
                )
        if "threshold" in mem and "chain" in mem:
            lo, hi = sorted((mem["chain"], mem["pc"]))
            verdicts.append(
                C.verdict(
                    "threshold's memory lies between chain's and pc's",
                    lo * 0.95 <= mem["threshold"] <= hi * 1.05,
                    f"threshold {mem['threshold']:.0f}, chain {mem['chain']:.0f}, pc {mem['pc']:.0f} rows",
                    measure=(mem["threshold"] - lo) / (hi - lo) if hi > lo else math.nan,
                    paper="between chain and pc (§5.3)",
                )
            )
    return verdicts


def main(argv=None) -> int:
    ap = C.experiment_args(
        __doc__,
        {
            "seconds": 30.0,
            "rate": 2500.0,
            "strategies": ["pc", "simplified_segment", "chain", "threshold"],
            "plans": ["paths"],
            "out": str(ROOT / "output" / "experiments" / "path_latency"),
        },
    )
    ap.add_argument(
        "--load",
        type=float,
        default=None,
        help="executor load at the base rate: each run's share of one core (default 0.8), or side by side all runs' "
        "share of the cores the process gets, measured (default 0.4)",
    )
    ap.add_argument(
        "--overhead-share",
        type=float,
        default=None,
        help="the largest share of an operator run its fixed cost may take (default: the runner's, 0.05)",
    )
    ap.add_argument("--load-from", type=float, default=0.5)
    ap.add_argument("--load-to", type=float, default=1.5)
    ap.add_argument(
        "--quantum",
        type=float,
        default=None,
        help="quantum of pc, simplified_segment and threshold, s (default: the runner's, a tenth of the budget)",
    )
    args = ap.parse_args(argv)
    plan = scheduling_plan()
    strategies = args.strategies.split(",")
    if args.load is None:
        args.load = 0.4 if args.side_by_side else 0.8
    # side by side, each run's share of one core: the runs' share of the cores the process gets
    # now (measured), split evenly
    spare = C.spare_cores() if args.side_by_side else math.nan
    per_run = args.load * spare / len(strategies) if args.side_by_side else args.load
    unit = C.cost_unit_for(plan, args.rate, per_run)
    args.work_us = unit * 1e6

    def paths():
        return C.synthetic_transforms(plan, unit, classes={})

    def profile(t: float) -> float:
        return args.load_from + (args.load_to - args.load_from) * t / args.seconds

    results, rows = C.run_experiment(
        "path_latency",
        args,
        {"paths": paths},
        strategies,
        strategy_params=lambda p, s: {"quantum": args.quantum} if args.quantum and s != "chain" else {},
        rate_profile=profile,
        run_name=lambda p, s: s,
        executor_args=None if args.overhead_share is None else {"overhead_share": args.overhead_share},
    )
    header = [
        "strategy",
        "rows out",
        "throughput rows/s",
        "mean delay ms",
        "p99 ms",
        "mean queued",
        "peak queued",
        "peak MB",
        "mean in system",
        "peak in system",
    ]
    body = []
    for _, s, st in results:
        d = st.all_delays()
        body.append(
            [
                s,
                st.rows_out(),
                st.rows_out() / max(st.elapsed, 1e-9),
                C.mean_ms(d),
                C.p99_ms(d),
                st.mean_queued,
                st.peak_rows,
                st.peak_bytes / 1e6,
                st.mean_in_system,
                st.peak_system,
            ]
        )
    how = (
        f"side by side, {args.load:g} of the {spare:.2f} core(s) of {usable_cores()} the process got = {per_run:.3g} core each"
        if args.side_by_side
        else f"{args.load:g} core"
    )
    share = "" if args.overhead_share is None else f", overhead share {args.overhead_share:g}"
    table = C.print_table(
        f"\npath_latency (Jiang §5): {rows} rows, {args.seconds:g}s, load {args.load_from:g}→{args.load_to:g}"
        f" × {how} at {args.rate:g} rows/s{share}; load average {os.getloadavg()[0]:.1f}",
        header,
        body,
    )
    by = {s: st for _, s, st in results}
    lat = {s: C.mean_ms(st.all_delays()) for s, st in by.items()}
    # What each strategy's latency rests on besides its order: its runs' fixed cost, and the cores
    # the job got while the input arrived (on a shared machine each run gets a different share)
    runs = {
        s: f"{st.operator_runs:,} runs, fixed cost {st.fixed_cost_ms:.2f} ms a run = {st.fixed_cost_share:.1%}, "
        f"{st.cores:.2f} cores"
        for s, st in by.items()
    }
    verdicts = claim_verdicts(lat, {s: st.mean_in_system for s, st in by.items()}, runs)
    C.finish_experiment(args, "path_latency", table, verdicts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
