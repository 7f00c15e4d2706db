"""One benchmark at two git revisions, side by side: did a change make anything slower?

    .venv/bin/python benchmarks/revisions.py --base REV [--head REV] [--rounds 2] [--match REGEX] \
        BENCHMARK.py [ARGS ...]

Each revision is checked out (``git worktree add --detach``) into a temporary folder; the
benchmark file *of that revision* runs there with that revision's ``sparkqos`` first on the path,
``--rounds`` times, base and head alternating (base, head, base, head, ...), so that a shared,
noisy machine loads both alike. Of each run it keeps the output lines matching ``--match``
(default: lines with a ratio or a per-unit figure: ``ratio``, ``µs``, ``ms``, ``/s``, ``×``) and
prints them by revision, in run order. The worktrees are removed at the end. Each gets a
``.venv`` that reuses this interpreter's packages, so benchmarks that start their variants through
``spark-submit.sh`` (vs_fair_pools) run the revision's code without installing anything.

Both revisions must accept ``ARGS``; benchmarks whose options changed between them take the
options both know.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MATCH = r"ratio|µs|ms\b|/s\b|×|whole batches"


def checkout(rev: str, where: Path) -> Path:
    """A detached worktree of ``rev`` at ``where``, with a ``.venv`` over this Python's packages."""
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", "--force", str(where), rev], check=True, capture_output=True
    )
    overlay(where)
    return where


def overlay(tree: Path) -> None:
    """``tree/.venv``: a virtualenv that sees this interpreter's packages (a ``.pth`` adding its
    site-packages as a site directory) and is stamped as installed for ``tree``'s pyproject.toml,
    so a benchmark that starts variants through ``tree/spark-submit.sh`` runs them at once, on
    the same packages, instead of installing the revision into a new or a shared virtualenv (which
    would re-point the shared one's editable ``sparkqos`` at the temporary tree)."""
    venv = tree / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    sites = [p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()]
    (pure,) = set(venv.glob("lib/python*/site-packages"))
    (pure / "_revisions_overlay.pth").write_text("".join(f"import site; site.addsitedir({s!r})\n" for s in sites))
    for tool in (Path(sys.prefix) / "bin").iterdir():  # spark-submit, find-spark-home, ... of pyspark
        if not (venv / "bin" / tool.name).exists():
            (venv / "bin" / tool.name).symlink_to(tool)
    stamp = subprocess.run("cksum < pyproject.toml", shell=True, cwd=tree, capture_output=True, text=True, check=True)
    (venv / ".sparkqos-installed").write_text(stamp.stdout)


def run_once(tree: Path, bench: str, args: list[str], match: re.Pattern[str]) -> tuple[float, list[str]]:
    """Run ``tree``'s copy of ``bench``; (seconds, the matching output lines)."""
    env = {**os.environ, "PYTHONPATH": str(tree), "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, str(tree / bench), *args], cwd=tree, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-8:])
        raise SystemExit(f"revisions: {bench} failed in {tree} (exit {done.returncode}):\n{tail}")
    return seconds, [line for line in done.stdout.splitlines() if match.search(line)]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True, help="the revision before the change")
    ap.add_argument("--head", default="HEAD", help="the revision after it (default HEAD)")
    ap.add_argument("--rounds", type=int, default=2, help="runs per revision, alternating")
    ap.add_argument("--match", default=DEFAULT_MATCH, help="regex of the output lines to keep")
    ap.add_argument("benchmark", help="path of the benchmark, relative to the repository")
    ap.add_argument("args", nargs=argparse.REMAINDER, help="the benchmark's own arguments")
    opts = ap.parse_args(argv)
    if opts.rounds < 1:
        ap.error(f"--rounds must be at least 1, got {opts.rounds}")
    match = re.compile(opts.match)
    with tempfile.TemporaryDirectory(prefix="sparkqos-revisions-") as tmp:
        trees = {}
        try:
            for label, rev in (("base", opts.base), ("head", opts.head)):
                trees[label] = checkout(rev, Path(tmp) / label)
                sha = subprocess.run(
                    ["git", "-C", str(trees[label]), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
                )
                print(f"{label}: {rev} ({sha.stdout.strip()})", flush=True)
            for r in range(opts.rounds):
                for label, tree in trees.items():
                    seconds, lines = run_once(tree, opts.benchmark, opts.args, match)
                    print(f"--- {label}, round {r + 1} ({seconds:.0f} s, load {os.getloadavg()[0]:.1f})", flush=True)
                    for line in lines:
                        print(f"  {line}", flush=True)
        finally:
            for tree in trees.values():
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], capture_output=True)


if __name__ == "__main__":
    main()
