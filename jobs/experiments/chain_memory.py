"""Chain paper §6 on Spark: queued memory against time for chain, fifo, greedy and rr.

    ./spark-submit.sh jobs/experiments/chain_memory.py [--seconds 15] [--rate 3000] [--load 0.6] [--budget 0.8] \
        [--plans two,four,join,mix]

Plans on the replayed bursty trace (synthetic operators, costs scaled so the mean rate loads the
executor to ``--load`` of one core; bursts overload it):
``two`` and ``four`` — single-stream chains whose early operators are cheap but barely filter and
whose later ones filter hard (where Chain departs from FIFO/greedy), ``join`` — a real stream–
stream join of two filtered branches of the stream (same sensor, event times ≤ 50 ms apart), then a
filter, and ``mix`` — three such
queries side by side. Claim (Chain §6, Theorem 4.2): chain keeps the least queued memory, fifo
and rr the most. Memory is the rows in the system at the end of each trigger: sparkqos's queues
plus the rows the source had released that Spark had not read yet (× the operators reading the
stream) — a strategy whose trigger overruns its budget (fifo pushes whole batches through their
paths) leaves its backlog unread in the source, and the Chain paper counts it all the same.
The executor gets 0.8 s of each 1 s trigger (``--budget``): enough for the mean load, not for a
burst, so a burst's work waits in sparkqos's queues in the order the strategy leaves it.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

import sparkqos  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
#: Mean memories within this factor of the least are a tie: the verdict holds for chain when it
#: ties the least, and is inconclusive when every strategy does.
TIE = 1.05

#: Single-stream chains (σ, cost) leaf → root, per query: where chain departs from fifo/greedy.
CHAINS = {
    "two": {"two": [(0.9, 2.0), (0.1, 8.0)]},
    "four": {"four": [(1.0, 1.0), (0.9, 3.0), (0.2, 3.0), (0.5, 2.0)]},
    "mix": {"q1": [(0.9, 2.0), (0.1, 4.0)], "q2": [(1.0, 1.0), (0.5, 2.0), (0.3, 2.0)], "q3": [(0.2, 1.5), (0.8, 3.0)]},
}


def join(unit_s: float):
    """A quarter of the sensors (sensor_id < 16), split into two filtered branches with costly
    selective steps, joined on sensor_id and event times at most 50 ms apart, then a hard filter.
    The join is real work on top of the declared costs, so the declared units are sized to the rest
    of ``--load`` (see plans_for). Returns (transforms, classes, priorities) as
    :func:`_common.synthetic_transforms` does."""

    def query(df):
        if C.KEY not in df.columns:
            df = C.keyed(df)
        left = (
            sparkqos.synthetic(
                df.where((F.col("sensor_id") < 16) & (F.col("temperature") > 22.0)), 0.5, cost_s=2 * unit_s, seed=3, key=C.KEY
            )
            .select("sensor_id", "temperature", "ts", C.KEY)
            .withWatermark("ts", "1 second")
        )
        right = (
            sparkqos.synthetic(
                df.where((F.col("sensor_id") < 16) & (F.col("humidity") > 55.0)), 0.5, cost_s=2 * unit_s, seed=4, key=C.KEY
            )
            .select(F.col("sensor_id").alias("r_sensor_id"), F.col("humidity").alias("r_humidity"), F.col("ts").alias("r_ts"))
            .withWatermark("r_ts", "1 second")
        )
        near = (
            (left.sensor_id == right.r_sensor_id)
            & (right.r_ts >= left.ts - F.expr("INTERVAL 50 MILLISECONDS"))
            & (right.r_ts <= left.ts + F.expr("INTERVAL 50 MILLISECONDS"))
        )
        joined = left.join(right, near, "inner")
        hard = sparkqos.synthetic(joined, 0.1, cost_s=unit_s, seed=5, key=C.KEY)
        return hard.select("sensor_id", "temperature", "ts", "r_humidity")

    return {"join": query}, {}, {}


def plans_for(names, rate: float, load: float) -> dict:
    """Plan name → factory of its queries (transforms, classes, priorities), declared costs scaled
    to ``load`` of one core at ``rate``."""
    out = {}
    for name in names:
        if name == "join":
            # Measured on the default trace with the executor alone: the branches see ≈ 0.83 cost
            # units per input row, and the join itself takes ≈ 0.07 of a core at 3000 rows/s.
            unit = max(load - 0.07 * rate / 3000.0, 0.05) / (rate * 0.83)
            out[name] = lambda unit=unit: join(unit)
        elif name in CHAINS:
            plan = C.chain_plan(CHAINS[name])
            unit = C.cost_unit_for(plan, rate, load)
            out[name] = lambda plan=plan, unit=unit: C.synthetic_transforms(plan, unit, classes={})
        else:
            raise SystemExit(f"unknown plan {name!r}; choose from two, four, join, mix")
    return out


PLANS = ("two", "four", "join", "mix")


def memory_verdict(plan: str, mean_q: dict[str, float], queued: list[float]) -> str:
    """The verdict line on "chain has the least mean memory" for one plan, from each strategy's
    mean rows in the system (``mean_q``) and mean rows queued at trigger ends (``queued``).

    >>> memory_verdict("mix", {"chain": 7698, "fifo": 9621, "greedy": 7849}, [6000, 7800, 6100])[:6]
    '[HELD]'
    >>> memory_verdict("two", {"chain": 3251, "fifo": 3170, "rr": 3116}, [2537, 2492, 2514])[:14]
    '[INCONCLUSIVE]'
    >>> memory_verdict("x", {"chain": 3600, "fifo": 3000}, [3000, 2500])[:10]
    '[NOT HELD]'
    """
    best = min(mean_q, key=mean_q.get)
    others = ", ".join(f"{s} {v:.0f}" for s, v in mean_q.items())
    claim = f"{plan}: chain has the least mean memory (rows in the system)"
    others_least = min(v for s, v in mean_q.items() if s != "chain") if len(mean_q) > 1 else math.nan
    ratio = mean_q["chain"] / others_least if others_least > 0 else math.nan
    paper = "chain least memory (§6)"
    if max(mean_q.values()) == 0 or max(queued) - min(queued) <= 0.01 * max(queued):
        # Every strategy left the same rows queued at each trigger's end: only the batch just
        # read, so the order of work never showed in memory.
        return C.verdict_line(
            claim,
            False,
            f"every strategy served its queues down to the batch just read at each trigger (raise --load): {others}",
            measure=ratio,
            paper=paper,
            status="INCONCLUSIVE",
        )
    if max(mean_q.values()) <= TIE * mean_q[best]:
        # All within the margin: chain may be last and still "within 5% of the best"; calling that
        # a win for chain (as this verdict once did, on chain's 3251 against rr's 3116) says more
        # than the run showed.
        return C.verdict_line(
            claim,
            False,
            f"every strategy is within {TIE - 1:.0%} of the least (raise --load): {others}",
            measure=ratio,
            paper=paper,
            status="INCONCLUSIVE",
        )
    held = best == "chain" or mean_q["chain"] <= TIE * mean_q[best]
    return C.verdict_line(claim, held, f"mean rows in the system {others}", measure=ratio, paper=paper)


def main(argv=None) -> int:
    ap = C.experiment_args(
        __doc__,
        {
            "seconds": 15.0,
            "rate": 3000.0,
            "trigger": 1.0,
            "budget": 0.8,
            "strategies": ["chain", "fifo", "greedy", "rr"],
            "plans": list(PLANS),
            "out": str(ROOT / "output" / "experiments" / "chain_memory"),
        },
    )
    ap.add_argument(
        "--load",
        type=float,
        default=0.6,
        help="executor load at the mean rate (share of one core; Spark's per-trigger work comes on top)",
    )
    args = ap.parse_args(argv)
    plans = plans_for(args.plans.split(","), args.rate, args.load)
    strategies = args.strategies.split(",")
    results, rows = C.run_experiment("chain_memory", args, plans, strategies)
    table = C.print_table(
        f"\nchain_memory (Chain §6): {rows} rows, {args.seconds:g}s trace, {args.rate:g} rows/s",
        C.SUMMARY_HEADER,
        C.summary_rows(results, rows),
    )
    verdicts = []
    for p in plans:
        runs = {s: st for pp, s, st in results if pp == p}
        if "chain" in runs and len(runs) >= 2:
            line = memory_verdict(p, {s: st.mean_in_system for s, st in runs.items()}, [st.mean_queued for st in runs.values()])
            print(line, flush=True)
            verdicts.append(line)
    C.finish_experiment(args, "chain_memory", table, verdicts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
