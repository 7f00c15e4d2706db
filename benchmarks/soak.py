"""Soak: the main job for 10 minutes at near-capacity load, driver RSS sampled every 10 s; after the
warm-up the resident memory must not trend upward by more than 10%. Not CI.

    .venv/bin/python benchmarks/soak.py [--minutes 10] [--rate 3000] [--warmup 120]

Starts ``jobs/sensor_monitor.py`` (bursty source, adaptive strategy, the shipped configuration
with ``--set source.rate=RATE``) in a subprocess and samples the RSS of the job's Python driver
(from /proc, every 10 s). Reports the samples, the least-squares slope after ``--warmup`` seconds
and the fitted growth over the post-warm-up window as a percentage of its start (target <= 10%).
Extra ``--set`` arguments are passed to the job.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except FileNotFoundError:
        return None
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=3000.0, help="mean rows/s (near the job's capacity)")
    parser.add_argument("--warmup", type=float, default=120.0, help="seconds ignored for the trend")
    parser.add_argument("--every", type=float, default=10.0, help="sampling period, seconds")
    parser.add_argument("--set", action="append", default=[], dest="overrides")
    args = parser.parse_args()
    out = Path(tempfile.mkdtemp(prefix="sparkqos-soak-"))
    cmd = [
        sys.executable,
        str(ROOT / "jobs" / "sensor_monitor.py"),
        "--output",
        str(out),
        "--quiet",
        "--duration",
        str(args.minutes * 60),
        "--set",
        f"source.rate={args.rate}",
        "--set",
        "job.report=false",
    ]
    for o in args.overrides:
        cmd += ["--set", o]
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable, PYTHONPATH=str(ROOT))
    log = open(out / "job.log", "wb")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=log, start_new_session=True)
    t0 = time.time()
    samples: list[tuple[float, float]] = []
    try:
        while proc.poll() is None:
            r = rss_mb(proc.pid)
            if r is not None:
                samples.append((time.time() - t0, r))
                print(f"[{samples[-1][0]:6.0f}s] driver RSS {r:8.1f} MB", flush=True)
            time.sleep(args.every)
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGTERM)
    finally:
        proc.wait()
        log.close()
    t = np.array([s[0] for s in samples])
    m = np.array([s[1] for s in samples])
    keep = t >= args.warmup
    if keep.sum() < 3:
        print(f"too few samples after the warm-up ({int(keep.sum())}); run longer")
        return 1
    slope, intercept = np.polyfit(t[keep], m[keep], 1)
    start, end = intercept + slope * t[keep][0], intercept + slope * t[keep][-1]
    growth = (end - start) / start * 100
    print(
        f"job exit {proc.returncode}; {len(samples)} samples; after {args.warmup:g}s warm-up: RSS "
        f"{m[keep].min():.1f}-{m[keep].max():.1f} MB, slope {slope * 60:+.2f} MB/min, fitted growth "
        f"{growth:+.1f}% over {t[keep][-1] - t[keep][0]:.0f}s -> {'PASS' if growth <= 10 else 'FAIL'} (target <= 10%)"
    )
    print(f"job output and log: {out}")
    return 0 if growth <= 10 and proc.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
