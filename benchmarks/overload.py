"""Overload: input at 2x the executor's capacity for a bounded time, queued memory bounded by a
limit (spill to Arrow IPC), nothing lost, delay back to its pre-burst level after.

    .venv/bin/python benchmarks/overload.py [--limit-mb 4] [--work-us 60] [--shed]

The sensor query set (sparkqos.workloads.sensors) runs in the executor on the wall clock, trigger by
trigger (0.25 s budget each), fed readings at 0.5x capacity (warm), then 2x capacity (burst),
then 0.5x again (drain). Capacity is measured first: rows/s for draining one big batch. Runs
side by side: no memory limit, and ``memory_limit_bytes`` (spill), optionally ``--shed``.
Prints per phase the mean output delay and per run the peak resident memory (VmHWM; each run is
a fresh subprocess so the peak is its own), peak queued bytes, peak in-memory queued bytes, spilled bytes, shed rows
per query and lost rows (rows in - rows the archive query delivered - shed).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TRIGGER_S = 0.25


def rss_mb(field: str = "VmRSS") -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def readings(rng, n: int, first: int) -> pa.RecordBatch:
    return pa.record_batch(
        {
            "sensor_id": pa.array(rng.integers(0, 64, n), pa.int32()),
            "location": pa.array(np.array([f"zone-{i}" for i in range(8)])[rng.integers(0, 8, n)]),
            "temperature": pa.array(rng.uniform(15, 70, n).round(2)),
            "humidity": pa.array(rng.uniform(5, 90, n).round(2)),
            "ts": pa.array(np.full(n, time.time())),
        }
    )


def one_run(work_us: float, capacity: float, limit: int | None, shed: bool, phases) -> dict:
    from sparkqos import schedulers
    from sparkqos.executor.expressions import ARRIVAL
    from sparkqos.executor.loop import EMIT, Executor
    from sparkqos.workloads.sensors import sensor_queries

    compiled = sensor_queries(work_us=work_us, window_s=10.0).build()
    ex = Executor(
        compiled.fresh(), schedulers.get("chain"), clock=time.time, whole_batches=True, memory_limit_bytes=limit, shed=shed
    )
    rng = np.random.default_rng(1)
    rows_in = archived = 0
    peak_queued = peak_mem = 0
    delays: dict[str, list[float]] = {}
    for phase, factor, triggers in phases:
        for _ in range(triggers):
            t0 = time.time()
            n = int(capacity * factor * TRIGGER_S)
            ex.ingest("sensors", readings(rng, n, rows_in), arrival=t0)
            rows_in += n
            ex.run(TRIGGER_S)
            outs = ex.take_outputs()
            archived += outs["archive"].num_rows
            for t in outs.values():
                if t.num_rows:
                    d = np.asarray(t.column(EMIT)) - np.asarray(t.column(ARRIVAL))
                    delays.setdefault(phase, []).extend(d.tolist())
            peak_queued = max(peak_queued, ex.state.total_queued_bytes)
            peak_mem = max(peak_mem, ex.state.memory_bytes)
            left = TRIGGER_S - (time.time() - t0)
            if left > 0:
                time.sleep(left)
    tail = delays.get(phases[-1][0], [])
    ex.finish()
    archived += ex.take_outputs()["archive"].num_rows
    shed_rows = dict(ex.state.shed_rows)
    result = {
        "limit_mb": None if limit is None else limit / 1e6,
        "shed": shed,
        "rows_in": rows_in,
        "peak_rss_mb": rss_mb("VmHWM"),
        "peak_queued_mb": peak_queued / 1e6,
        "peak_in_memory_queued_mb": max(peak_mem, ex.state.peak_memory_bytes) / 1e6,
        "spilled_mb": ex.state.spilled_bytes_total / 1e6,
        "shed_rows": shed_rows,
        "lost_rows": rows_in - archived - shed_rows.get("archive", 0),
        "delay_s": {p: float(np.mean(v)) if v else float("nan") for p, v in delays.items()},
        "delay_last_5_triggers_s": float(np.mean(tail[-int(capacity * 0.5 * TRIGGER_S * 5) :])) if tail else float("nan"),
    }
    ex.close()
    return result


def capacity_rows_per_s(work_us: float) -> float:
    from sparkqos import schedulers
    from sparkqos.executor.loop import Executor
    from sparkqos.workloads.sensors import sensor_queries

    ex = Executor(sensor_queries(work_us=work_us).build().fresh(), schedulers.get("chain"), clock=time.time, whole_batches=True)
    rng = np.random.default_rng(0)
    ex.ingest("sensors", readings(rng, 2000, 0))
    ex.run()  # warm-up
    n = 20_000
    ex.ingest("sensors", readings(rng, n, 2000))
    t0 = time.time()
    ex.run()
    return n / (time.time() - t0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit-mb", type=float, default=4.0)
    parser.add_argument("--work-us", type=float, default=60.0)
    parser.add_argument("--warm", type=int, default=16, help="triggers at 0.5x capacity before the burst")
    parser.add_argument("--burst", type=int, default=24, help="triggers at 2x capacity")
    parser.add_argument("--drain", type=int, default=60, help="triggers at 0.5x capacity after it")
    parser.add_argument("--shed", action="store_true", help="also a run with load shedding")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    phases = [("warm", 0.5, args.warm), ("burst", 2.0, args.burst), ("drain", 0.5, args.drain)]
    if args.child:
        spec = json.loads(args.child)
        print(json.dumps(one_run(args.work_us, spec["capacity"], spec["limit"], spec["shed"], phases)))
        return 0
    capacity = capacity_rows_per_s(args.work_us)
    print(
        f"capacity: {capacity:,.0f} rows/s (sensor queries, work_us={args.work_us:g}); trigger {TRIGGER_S}s; "
        f"phases: " + ", ".join(f"{p} {f:g}x for {n} triggers" for p, f, n in phases)
    )
    limit = int(args.limit_mb * 1e6)
    runs = [(None, False), (limit, False)] + ([(limit, True)] if args.shed else [])
    results = []
    for lim, shed in runs:  # each run in a fresh process, so peak RSS is its own
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--work-us",
                str(args.work_us),
                "--warm",
                str(args.warm),
                "--burst",
                str(args.burst),
                "--drain",
                str(args.drain),
                "--child",
                json.dumps({"capacity": capacity, "limit": lim, "shed": shed}),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print()
    print(
        f"{'run':<18} {'rows in':>8} {'peak RSS MB':>11} {'peak queued MB':>14} {'peak in-mem MB':>14} "
        f"{'spilled MB':>10} {'lost':>5} {'delay warm s':>12} {'burst s':>8} {'drain s':>8} {'last 5 trig s':>13}  shed rows"
    )
    for r in results:
        name = "no limit" if r["limit_mb"] is None else f"limit {r['limit_mb']:g} MB" + (" shed" if r["shed"] else "")
        d = r["delay_s"]
        print(
            f"{name:<18} {r['rows_in']:>8} {r['peak_rss_mb']:>11.0f} {r['peak_queued_mb']:>14.2f} "
            f"{r['peak_in_memory_queued_mb']:>14.2f} {r['spilled_mb']:>10.2f} {r['lost_rows']:>5} "
            f"{d.get('warm', float('nan')):>12.3f} {d.get('burst', float('nan')):>8.3f} {d.get('drain', float('nan')):>8.3f} "
            f"{r['delay_last_5_triggers_s']:>13.3f}  {r['shed_rows'] or '-'}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
