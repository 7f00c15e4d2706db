# sparkqos-extras: data
"""Every claim of the five papers that sparkqos reproduces, in one table: in the simulator, on
Spark with the bursty trace and on Spark with the recorded vessel trace, with a verdict.

    ./spark-submit.sh jobs/experiments/claims.py [--quick] [--reps 3] [--only path_latency,cos] [--no-spark] [--one-core]

Nothing is measured here that an experiment module does not measure itself: each Spark column
runs an experiment's own ``main`` (path_latency, chain_memory, classes, cos, adaptive in this
folder) ``--reps`` times per trace (seeds 7, 8, 9, …), and each simulator cell comes from the
simulator jobs (jobs/*_sim.py) judged by the same verdict functions as the Spark runs, or from the
library's checks of the papers' worked tables and theorems (``sparkqos.testing.papers``, the code
the tests assert on, run here without pytest; a theorem on a seeded sample of random plans). The
verdicts every run records (``_common.RECORDED``) become one row per claim:

* a cell is the median [min–max] of the number the verdict rests on (a ratio, e.g. hr/cqc's
  class-H delay for CQC, pc's latency over the best other strategy's for Jiang §5) and how many
  repetitions held;
* a trace's verdict is the majority of its repetitions (a tie or an inconclusive majority is
  inconclusive); the claim's verdict is held when both traces hold it, not held when both do not,
  inconclusive otherwise; a claim the simulator alone checks takes the simulator's verdict;
* a check that could not run (it raised) and an experiment run that failed say ``not run: <why>``,
  never a verdict on the claim; repetitions that did not run are left out of the majority.

It writes ``claims.md`` and ``claims.json`` under ``--out``, a claims section in the HTML report
(``python -m sparkqos report OUT``), and, with ``--docs``, the table into docs/experiments.md between
the markers ``<!-- claims:begin -->`` and ``<!-- claims:end -->``. The note above the table says
where it ran: the cores (all, and those this process may use), the CPU, a speed figure measured at
the start (best and median of five numpy sorts of the same 10⁶ doubles, one thread), the load
average before and after, and the CPUs the Spark experiments ran on; ``claims.json`` has the same
under ``machine``. ``--one-core`` runs every Spark experiment on CPU 0 only: before the first one
it pins this driver and, under spark-submit, Spark's JVM (all threads of each) with
``taskset -a -p -c 0``, and the Python workers Spark starts afterwards inherit the mask; without
taskset on PATH it stops before running anything, saying so.

``--quick`` (what the table in docs/experiments.md comes from unless it says otherwise): one
repetition per trace, 6-second traces (the experiments' defaults are 12-30 s), and fewer plans
and strategies: path_latency as it is (its strategies side by side, as in a full run:
``--side-by-side``); classes workload ``A``, hr and cqc; cos at 320 operators, fifo and cos;
chain_memory's ``mix``, chain and fifo; adaptive on ``filters``, the thesis' four single
strategies (fifo, rr, mtiq, chain: the singles' average the claim compares with is theirs, as in
Tables 6.3-6.5) and adaptive over them with the thirds setting; simulator horizons of 600 time
units instead of 2,000. The table is rewritten after every experiment, so a run stopped early
leaves the rows it measured (its note says which).
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import _common as C  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TRACES = ("bursty", "vessels")
BEGIN, END = "<!-- claims:begin -->", "<!-- claims:end -->"
#: The status of a check or an experiment run that could not run: its row says why.
NOT_RUN = "NOT RUN"
#: The page whose table ``--docs`` rewrites.
DOCS = ROOT / "docs" / "experiments.md"

#: Experiment module → (paper section, extra arguments of a full run, of a quick run).
SPARK = {
    "path_latency": ("Jiang §5", ["--side-by-side"], ["--seconds", "6", "--side-by-side"]),
    "classes": ("CQC §5", [], ["--seconds", "6", "--plans", "A", "--strategies", "hr,cqc"]),
    "cos": ("COS §5", [], ["--seconds", "6", "--plans", "40", "--strategies", "fifo,cos"]),
    "chain_memory": ("Chain §6", [], ["--seconds", "6", "--plans", "mix", "--strategies", "chain,fifo"]),
    "adaptive": ("Raindrop §6", [], ["--seconds", "6", "--strategies", "fifo,rr,mtiq,chain,adaptive:5"]),
}


# -- the simulator column ------------------------------------------------------------------------
#: The workload files of the papers' worked tables.
WORKLOADS = ROOT / "conf" / "workloads"


def paper_check(section: str, claim: str, paper: str, check: Callable[[], tuple[bool, str]]) -> None:
    """A table or theorem checked by the library (sparkqos.testing.papers, the code the tests
    assert on): ``check`` returns (held, detail). A check that raises did not run, and its verdict
    says so with the reason, never that the claim does not hold."""
    began = time.perf_counter()
    try:
        held, detail = check()
    except Exception as exc:  # noqa: BLE001 - the table says the check did not run, and why
        traceback.print_exc()
        detail = f"{type(exc).__name__}: {exc}"
        C.verdict_line(f"{section}: {claim}", False, detail, paper=paper, status="NOT RUN")
        print(f"  simulator: {section}: not run: {detail}", flush=True)
        return
    C.verdict_line(f"{section}: {claim}", held, detail, paper=paper)
    print(f"  simulator: {section}: {'held' if held else 'NOT HELD'}: {detail} ({time.perf_counter() - began:.1f} s)", flush=True)


def _tables(check: Callable[[Path, str], list[str]], strategies: tuple[str, ...], what: str) -> tuple[bool, str]:
    differences = [d for s in strategies for d in check(WORKLOADS, s)]
    if differences:
        return False, f"{len(differences)} difference(s) from the paper, first: {differences[0]}"
    return True, what


def _theorem(result) -> tuple[bool, str]:
    return result.held, result.detail


def paper_checks(fraction: float = 1.0) -> None:
    """The papers' worked tables and theorems, checked by the library's own code without pytest;
    ``fraction`` of each theorem's random sample (all of it unless a quick test asks for less)."""
    from sparkqos.testing import papers

    def share(n: int) -> int:
        return max(1, round(n * fraction))

    paper_check(
        "Raindrop §1.2",
        "Table 1.1 (FIFO and MTIQ queue sizes and throughput) comes out exactly",
        "Table 1.1",
        lambda: _tables(papers.thesis_table_1_1, ("fifo", "mtiq"), "FIFO (slotted) and MTIQ queue sizes and throughput, t = 0-5"),
    )
    paper_check(
        "Jiang Table 2",
        "FIFO's and Chain's queue size, tuple latency and throughput come out exactly",
        "Table 2",
        lambda: _tables(papers.jiang_table_2, ("fifo", "chain"), "FIFO and Chain queue size, latency and throughput, t = 1-10"),
    )
    paper_check(
        "Chain Th. 4.2",
        "chain's peak memory ≤ every other strategy's peak + n",
        "Theorem 4.2",
        lambda: _theorem(papers.chain_theorem_4_2(samples=share(150))),
    )
    paper_check(
        "Jiang Th. 1",
        "pc's total tuple latency ≤ any other order of serving the paths",
        "Theorem 1",
        lambda: _theorem(papers.jiang_theorem_1(samples=share(40))),
    )
    paper_check(
        "Jiang Th. 3",
        "segment's memory ≤ chain's at every instant (time units; segments on chain's envelope)",
        "Theorem 3",
        lambda: _theorem(papers.jiang_theorem_3(samples=share(200))),
    )


def _bursty(plan, load: float, until: float, seed: int) -> dict[str, list[tuple[float, float]]]:
    from sparkqos.sim.arrivals import on_off_pareto

    rate = load / math.fsum(plan.service_time(p) for p in plan.paths)
    return {s: on_off_pareto(rate, until, seed=seed) for s in plan.streams}


def _means(plan, strategies, arrivals) -> tuple[dict[str, float], dict[str, float]]:
    """Mean delay (time units ×1000, as the Spark verdicts' ms) and mean queued per strategy."""
    from sparkqos import schedulers
    from sparkqos.sim import Simulator

    lat, mem = {}, {}
    for s in strategies:
        r = Simulator(plan, schedulers.get(s), arrivals, run="quantum").run()
        snaps = list(r.snapshots.values())
        lat[s], mem[s] = r.mean_delay() * 1000, math.fsum(snaps) / len(snaps)
    return lat, mem


def simulate(quick: bool) -> None:
    """Every simulator verdict, recorded in ``C.RECORDED``."""
    import adaptive_sim
    import chain_memory
    import classes
    import cos
    import cos_sim
    import cqc_sim
    import path_latency

    until = 600.0 if quick else 2000.0
    paper_checks()
    rows = adaptive_sim.table_1_3(until, [1, 2, 3], 0.9, adaptive_sim.PERIOD, 0.0, **adaptive_sim.SELECTOR)
    share = statistics.mean(r[3] for r in rows)
    C.verdict_line(
        "Raindrop §1.3: with memory the only goal, adaptive mostly runs chain",
        share > 0.5,
        f"chain chosen in {share:.0%} of decisions after warm-up (seeds 1-3)",
        measure=share,
        paper="chain chosen (§1.3)",
    )
    scores, _ = adaptive_sim.table_6_3(
        "filters", until, [1, 2, 3], 0.9, adaptive_sim.PERIOD, adaptive_sim.OVERHEAD, **adaptive_sim.SELECTOR
    )
    for label, sc in scores.items():
        avg = statistics.mean(sc[n] for n in adaptive_sim.CANDIDATES)
        best = max(adaptive_sim.CANDIDATES, key=sc.get)
        C.verdict_line(
            f"filters / {label}: adaptive scores at least the singles' average",
            sc["adaptive"] >= avg,
            f"adaptive {sc['adaptive']:.2f}, best single {best} {sc[best]:.2f}, singles' average {avg:.2f}",
            measure=sc["adaptive"] - avg,
            paper="adaptive near the best single (Tables 6.3-6.5)",
        )
    for name, queries in chain_memory.CHAINS.items():
        plan = C.chain_plan(queries)
        _, mem = _means(plan, ("chain", "fifo", "greedy", "rr"), _bursty(plan, 0.9, until, 7))
        chain_memory.memory_verdict(name, mem, list(mem.values()))
    plan = path_latency.scheduling_plan()
    lat, mem = _means(plan, ("pc", "simplified_segment", "chain", "threshold"), _bursty(plan, 0.9, until, 7))
    path_latency.claim_verdicts(lat, mem)
    resp = {}
    for w in ("A", "B"):  # the simulator's plans carry their priorities: C (B's queries at 6/3/1) is Spark's only
        for s in ("rr", "hr", "cqc"):
            resp[(w, s)] = {k: v * 1000 for k, v in cqc_sim.run(w, s, 0.85, 2 * until, 1)[0].items()}
        classes.claim_verdicts(w, resp)
    for n in (5, 40):
        plan = cos_sim.cos_plan(n, 3)
        arrivals = cos_sim.cos_arrivals(plan, 0.9, until, 3)
        from sparkqos import schedulers

        m = {
            s: cos_sim.measure(plan, arrivals, schedulers.get(s, **({"T": 0.3} if s == "cos" else {})))
            for s in ("fifo", "chain", "cos")
        }
        cos.memory_verdict(
            f"{len(plan)}ops", {s: v["memory"] for s, v in m.items()}, {s: v["latency"] * 1000 for s, v in m.items()}
        )


def simulator_section(v: C.Verdict) -> str:
    """The paper section a simulator verdict belongs to (its claim's head, or the experiment's)."""
    head = v.claim.split(":", 1)[0]
    if head.startswith(("Raindrop", "Chain Th", "Jiang Th", "Jiang Table")):
        return head
    if "/" in head and "adaptive" in v.claim:
        return "Raindrop §6"
    if "chain has the least" in v.claim:
        return "Chain §6"
    if "cqc" in v.claim:
        return "CQC §5"
    if "cos" in v.claim:
        return "COS §5"
    return "Jiang §5"


def simulator_records(verdicts: list[C.Verdict]) -> list[tuple[str, str, C.Verdict]]:
    """(section, ``simulator``, verdict) records of the simulator's verdicts, the section taken
    off the claim it heads."""
    records = []
    for v in verdicts:
        section = simulator_section(v)
        claim = v.claim.split(": ", 1)[1] if v.claim.startswith(section + ":") else v.claim
        records.append((section, "simulator", C.Verdict(claim, v.status, v.detail, v.measure, v.paper)))
    return records


# -- the Spark columns ---------------------------------------------------------------------------
def run_spark(name: str, argv: list[str]) -> None:
    """One experiment's ``main``; a failure is recorded as its verdict rather than ending the table."""
    module = importlib.import_module(name)
    try:
        module.main(argv)
    except Exception as exc:  # noqa: BLE001 - the table says which run failed and why
        traceback.print_exc()
        C.verdict_line(f"{name} run", False, f"failed: {type(exc).__name__}: {exc}", status="NOT RUN")


# -- where it ran --------------------------------------------------------------------------------
#: The CPU speed figure: numpy sorting the same 10⁶ random doubles (one thread) this many times.
SPEED_ROWS, SPEED_REPEATS = 1_000_000, 5
ONE_CORE_NEEDS_TASKSET = (
    "--one-core runs every Spark experiment under `taskset -c 0`, but taskset is not on PATH "
    "(it comes with util-linux: apt-get install util-linux); install it or run without --one-core"
)


def cpu_speed_ms() -> tuple[float, float]:
    """Best and median time (ms) of :data:`SPEED_REPEATS` numpy sorts of the same
    :data:`SPEED_ROWS` random doubles: the best says how fast one core is, the median how much of
    it this process got."""
    import numpy as np

    data = np.random.default_rng(0).random(SPEED_ROWS)
    times = []
    for _ in range(SPEED_REPEATS):
        began = time.perf_counter()
        np.sort(data)
        times.append((time.perf_counter() - began) * 1000)
    return min(times), statistics.median(times)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def spark_jvm_pid() -> int | None:
    """The JVM that spark-submit started this driver from (the nearest ancestor running
    ``org.apache.spark.deploy.SparkSubmit``), or ``None`` when Python came first: then pyspark
    starts the JVM as this process's child, which inherits its CPU mask."""
    pid = os.getppid()
    while pid > 1:
        try:
            if b"org.apache.spark.deploy.SparkSubmit" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return None
    return None


def pin_to_cpu_0() -> str:
    """Pin this driver and, under spark-submit, Spark's JVM — every thread of each, with
    ``taskset -a -p -c 0`` — to CPU 0, so that every Spark experiment runs on one core: the JVM's
    threads and the Python workers it starts later inherit the mask. Says what it pinned."""
    taskset = shutil.which("taskset")
    if taskset is None:
        raise SystemExit(ONE_CORE_NEEDS_TASKSET)
    pinned = []
    for label, pid in (("this driver", os.getpid()), ("Spark's JVM", spark_jvm_pid())):
        if pid is None:
            continue
        run = subprocess.run([taskset, "-a", "-p", "-c", "0", str(pid)], capture_output=True, text=True)
        if run.returncode != 0 or os.sched_getaffinity(pid) != {0}:
            raise SystemExit(f"--one-core: taskset -a -p -c 0 {pid} ({label}) did not pin it to CPU 0: {run.stderr.strip()}")
        pinned.append(label)
    return f"CPU 0 only (--one-core: taskset -a -p -c 0 on {' and '.join(pinned)})"


@dataclass
class Machine:
    """Where the table ran: the cores (all, and those this process may use), the CPU, the speed
    figure (:func:`cpu_speed_ms`) and the load average (1, 5, 15 min) at the start and at the last
    write, and the CPUs the Spark experiments ran on."""

    cores: int
    usable_cores: int
    cpu: str
    sort_ms_best: float
    sort_ms_median: float
    load_before: tuple[float, float, float]
    spark_cpus: str = ""
    load_after: tuple[float, float, float] | None = None

    @classmethod
    def measure(cls) -> Machine:
        """The figures at the start; the Spark experiments' CPUs: all this process may use."""
        best, median = cpu_speed_ms()
        usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        return cls(os.cpu_count() or 1, usable, cpu_model(), best, median, os.getloadavg(), f"all {usable} usable cores")

    def text(self, final: bool) -> str:
        """One paragraph for the table's note.

        >>> m = Machine(2, 2, "Xeon", 61.2, 70.4, (1.5, 1.25, 1.0), "all 2 cores", (2.0, 1.5, 1.25))
        >>> print(m.text(final=True))  # doctest: +NORMALIZE_WHITESPACE
        Ran on 2 cores (2 usable), Xeon. CPU speed at the start: numpy sort of 10⁶ doubles best 61 ms,
        median 70 ms of 5. Load average (1, 5, 15 min): 1.50 1.25 1.00 before, 2.00 1.50 1.25 after.
        Spark experiments: all 2 cores.
        """
        load = " ".join(f"{x:.2f}" for x in self.load_before) + " before"
        if self.load_after is not None:
            load += ", " + " ".join(f"{x:.2f}" for x in self.load_after) + (" after" if final else " at this writing")
        return (
            f"Ran on {self.cores} cores ({self.usable_cores} usable), {self.cpu}. CPU speed at the start: numpy sort of "
            f"10⁶ doubles best {self.sort_ms_best:.0f} ms, median {self.sort_ms_median:.0f} ms of {SPEED_REPEATS}. "
            f"Load average (1, 5, 15 min): {load}. Spark experiments: {self.spark_cpus}."
        )


# -- the table -----------------------------------------------------------------------------------
def _fmt(x: float) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.2f}" if abs(x) < 10 else f"{x:.1f}" if abs(x) < 100 else f"{x:,.0f}"


def cell(verdicts: list[C.Verdict]) -> str:
    """``median [min–max], held k/n`` of the verdicts' measures (or their statuses alone), over
    the repetitions that ran (and how many did not)."""
    ran = [v for v in verdicts if v.status != NOT_RUN]
    if not ran:
        return "not run"
    held = sum(v.status == "HELD" for v in ran)
    ms = [v.measure for v in ran if v.measure is not None and not math.isnan(v.measure)]
    tally = f"held {held}/{len(ran)}" + (f", {len(verdicts) - len(ran)} not run" if len(ran) < len(verdicts) else "")
    if not ms:
        return tally if len(verdicts) > 1 else ran[0].status.lower()
    if len(ms) == 1:
        return f"{_fmt(ms[0])}, {tally}"
    return f"{_fmt(statistics.median(ms))} [{_fmt(min(ms))}–{_fmt(max(ms))}], {tally}"


def majority(verdicts: list[C.Verdict]) -> str | None:
    """The majority status of the repetitions that ran; ``NOT RUN`` when none did, ``None``
    when there are none."""
    if not verdicts:
        return None
    ran = [v for v in verdicts if v.status != NOT_RUN]
    if not ran:
        return NOT_RUN
    for status in ("HELD", "NOT HELD"):
        if sum(v.status == status for v in ran) * 2 > len(ran):
            return status
    return "INCONCLUSIVE"


def median_detail(verdicts: list[C.Verdict]) -> str:
    """The detail of the repetition whose measure is the median (the first one without measures)."""
    ranked = sorted(verdicts, key=lambda v: v.measure if v.measure is not None and not math.isnan(v.measure) else math.inf)
    return ranked[(len(ranked) - 1) // 2].detail if ranked else ""


def build_rows(records: list[tuple[str, str, C.Verdict]]) -> list[dict[str, str]]:
    """One row per (section, claim) from (section, source, verdict) records; source is
    ``simulator`` or a trace name."""
    order: list[tuple[str, str]] = []
    by: dict[tuple[str, str], dict[str, list[C.Verdict]]] = {}
    for section, source, v in records:
        key = (section, v.claim)
        if key not in by:
            order.append(key)
            by[key] = {}
        by[key].setdefault(source, []).append(v)
    rows = []
    for key in order:
        got = by[key]
        sim = got.get("simulator", [])
        traces = {t: majority(got.get(t, [])) for t in TRACES}
        ran = [s for s in traces.values() if s not in (None, NOT_RUN)]
        if not ran:
            status = majority(sim) or (NOT_RUN if any(traces.values()) else "INCONCLUSIVE")
        elif all(s == "HELD" for s in ran) and len(ran) == len(TRACES):
            status = "HELD"
        elif all(s == "NOT HELD" for s in ran) and len(ran) == len(TRACES):
            status = "NOT HELD"
        else:
            status = "INCONCLUSIVE"
        reason = "; ".join(f"{t}: {median_detail(got[t])}" for t in TRACES if got.get(t)) or median_detail(sim)
        verdict = status.lower()
        if status == NOT_RUN:  # why it did not run, never a verdict on the claim
            verdict += ": " + next(v.detail for vs in got.values() for v in vs if v.status == NOT_RUN)
        paper = next((v.paper for vs in got.values() for v in vs if v.paper), "")
        rows.append(
            {
                "section": key[0],
                "claim": key[1],
                "paper": paper,
                "simulator": cell(sim) if sim else "—",
                **{t: cell(got.get(t, [])) for t in TRACES},
                "verdict": verdict,
                "reason": reason,
            }
        )
    return rows


HEADER = ["claim", "paper", "simulator", "Spark bursty", "Spark vessels", "verdict", "measured reason"]


def markdown(rows: list[dict[str, str]], note: str) -> str:
    def esc(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    lines = [f"| {' | '.join(HEADER)} |", "|" + "---|" * len(HEADER)]
    for r in rows:
        cells = [
            f"{r['section']}: {r['claim']}",
            r["paper"],
            r["simulator"],
            r["bursty"],
            r["vessels"],
            f"**{r['verdict']}**",
            r["reason"],
        ]
        lines.append("| " + " | ".join(esc(c) for c in cells) + " |")
    return note + "\n\n" + "\n".join(lines) + "\n"


def write_table(path: Path, text: str) -> None:
    """Replace what stands between the markers in ``path`` (docs/experiments.md) with ``text``."""
    page = path.read_text()
    if BEGIN not in page or END not in page:
        raise SystemExit(f"{path} has no {BEGIN} … {END} markers to write the table between")
    head, rest = page.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    path.write_text(f"{head}{BEGIN}\n{text}{END}{tail}")


def write_files(out: Path, rows: list[dict[str, str]], note: str, machine: Machine, docs: bool = False) -> str:
    """``claims.md`` and ``claims.json`` (note, machine, rows) under ``out``, and with ``docs`` the
    table into docs/experiments.md; returns the markdown."""
    text = markdown(rows, note)
    (out / "claims.md").write_text(text)
    (out / "claims.json").write_text(json.dumps({"note": note, "machine": asdict(machine), "rows": rows}, indent=1))
    if docs:
        write_table(DOCS, text)
    return text


def command_args(args: argparse.Namespace, ap: argparse.ArgumentParser) -> str:
    """The arguments that reproduce a run, for the table's note (a table says the command it came
    from): those given that differ from the parser's defaults, without --out and --docs.

    >>> ap = argparse.ArgumentParser(); _ = ap.add_argument("--only", default="a,b")
    >>> command_args(argparse.Namespace(quick=True, reps=3, only="a,b", traces=None, no_spark=False, one_core=True), ap)
    ' --quick --reps 3 --one-core'
    """
    parts = [" --quick"] if args.quick else []
    if args.reps is not None:
        parts.append(f" --reps {args.reps}")
    parts += [f" --{name} {getattr(args, name)}" for name in ("only", "traces") if getattr(args, name) != ap.get_default(name)]
    if args.no_spark:
        parts.append(" --no-spark")
    if args.one_core:
        parts.append(" --one-core")
    return "".join(parts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="one repetition, 6 s traces, fewer plans (module docstring)")
    ap.add_argument("--reps", type=int, default=None, help="repetitions per trace (default 3; 1 with --quick)")
    ap.add_argument("--only", default=",".join(SPARK), help="experiments to run on Spark")
    ap.add_argument("--traces", default=",".join(TRACES))
    ap.add_argument("--no-spark", action="store_true", help="the simulator column only")
    ap.add_argument(
        "--one-core", action="store_true", help="run every Spark experiment on CPU 0 only (taskset -c 0; needs taskset)"
    )
    ap.add_argument("--out", default=str(ROOT / "output" / "experiments" / "claims"))
    ap.add_argument("--docs", action="store_true", help="write the table into docs/experiments.md between its markers")
    args = ap.parse_args(argv)
    reps = args.reps or (1 if args.quick else 3)
    if args.one_core and not args.no_spark and shutil.which("taskset") is None:
        raise SystemExit(ONE_CORE_NEEDS_TASKSET)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    began = time.time()
    machine = Machine.measure()
    if args.no_spark:
        machine.spark_cpus = "none (--no-spark)"
    print(machine.text(final=False), flush=True)
    records: list[tuple[str, str, C.Verdict]] = []

    def collect(section_of: Callable[[C.Verdict], str], source: str, since: int) -> None:
        for v in C.RECORDED[since:]:
            records.append((section_of(v), source, v))

    print("== simulator", flush=True)
    since = len(C.RECORDED)
    simulate(args.quick)

    records += simulator_records(C.RECORDED[since:])
    planned = (
        [] if args.no_spark else [(n, t, r) for n in args.only.split(",") for t in args.traces.split(",") for r in range(reps)]
    )
    done: list[str] = []

    def write(final: bool = False) -> None:
        """The table of what has been measured so far: files, docs/experiments.md (``--docs``), report."""
        rows = build_rows(records)
        if args.no_spark:
            spark_note = "not run (--no-spark)"
        else:
            spark_note = f"{reps} repetition(s) per trace, {len(done)} of {len(planned)} experiment runs done"
        machine.load_after = os.getloadavg()
        note = (
            f"Generated by `./spark-submit.sh jobs/experiments/claims.py{command_args(args, ap)}` on "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} after {(time.time() - began) / 60:.0f} min; "
            f"Spark: {spark_note}. Cells: median [min–max] of the number each verdict rests on (its measured reason "
            "names it; the simulator's delays are in time units × 1000 where they say ms), repetitions that held."
            f"\n\n{machine.text(final)}"
        )
        text = write_files(out, rows, note, machine, docs=args.docs)
        if final:
            from sparkqos.report import render

            print("\n" + text, flush=True)
            print(f"report: {render(out, title='sparkqos: the papers’ claims')}", flush=True)

    write()
    if not args.no_spark:
        if args.one_core:
            machine.spark_cpus = pin_to_cpu_0()
            print(f"Spark experiments: {machine.spark_cpus}", flush=True)
        for name in args.only.split(","):
            section, full, quick = SPARK[name]
            for trace in args.traces.split(","):
                for rep in range(reps):
                    print(
                        f"== {name} on Spark, {trace} trace, repetition {rep + 1}/{reps} ({time.time() - began:.0f} s)",
                        flush=True,
                    )
                    since = len(C.RECORDED)
                    run_dir = out / "runs" / f"{name}-{trace}-{rep + 1}"
                    run_spark(
                        name,
                        [
                            *(quick if args.quick else full),
                            "--trace",
                            trace,
                            "--seed",
                            str(7 + rep),
                            "--out",
                            str(run_dir),
                            "--quiet",
                            "--no-report",
                        ],
                    )
                    collect(lambda v, section=section: section, trace, since)
                    done.append(f"{name} {trace} {rep + 1}")
                    write()
    write(final=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
