"""Jiang §3.4 threshold strategy on bursty input: peak queued memory and mean delay of pc,
threshold (at several memory limits) and simplified segment, side by side.

    .venv/bin/python jobs/threshold_demo.py [conf/workloads/jiang_threshold_bursty.toml]
"""

from __future__ import annotations

import sys
from pathlib import Path

from sparkqos import schedulers
from sparkqos.sim import load_workload

DEFAULT = Path(__file__).resolve().parent.parent / "conf" / "workloads" / "jiang_threshold_bursty.toml"


def main(path: str | Path = DEFAULT) -> None:
    workload = load_workload(path)
    pc = workload.simulator(schedulers.get("pc")).run()
    rows = [("pc", "-", pc)]
    for factor in (3.0, 0.9, 0.7, 0.5):
        limit = factor * pc.peak_queued()
        sim = workload.simulator(schedulers.get("threshold", memory_limit=limit))
        rows.append((f"threshold M={factor:g}×pc peak", f"{limit:.2f}", sim.run()))
    rows.append(("simplified_segment", "-", workload.simulator(schedulers.get("simplified_segment")).run()))
    print(f"{workload.source}: {workload.plan!r}, run={workload.run}")
    print(f"{'strategy':28} {'M':>8} {'peak queued':>12} {'mean delay':>11} {'same outputs as pc':>19}")
    for name, limit, result in rows:
        print(
            f"{name:28} {limit:>8} {result.peak_queued():12.2f} {result.mean_delay():11.3f} "
            f"{str(result.outputs == pc.outputs):>19}"
        )


if __name__ == "__main__":
    main(*sys.argv[1:])
