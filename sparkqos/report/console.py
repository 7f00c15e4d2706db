"""What a job prints: one line per trigger and a table per query class at the end.

The jobs (jobs/sensor_monitor.py, jobs/vessel_monitor.py) hand :meth:`ClassMonitor.on_progress`
and :meth:`ClassMonitor.on_delays` to ``sparkqos.stream`` and print :meth:`ClassMonitor.summary`
when they stop. Delays are kept per class in bounded digests, so a job of any length uses constant
memory. Pure Python (numpy): no Spark.
"""

from __future__ import annotations

import math
import textwrap
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from sparkqos.report.metrics import DelayDigest

__all__ = ["LEGEND", "NO_STRATEGY_YET", "ClassMonitor", "catch_up_line", "ms"]

#: The ``strategy`` of a progress record taken before a selector (``adaptive``) picked its first
#: strategy: not a strategy, so not in the mix.
NO_STRATEGY_YET = "-"

#: What the words of a trigger line count (printed with a job's start-up lines and in its --help).
LEGEND = (
    "each trigger prints: in = rows its micro-batch read; out = rows written; queued = rows waiting in "
    "sparkqos's operator queues at its end, counted once per queue (a row that several queries read waits "
    "in each one's queue, so queued can exceed in)"
)


def ms(seconds: float, width: int = 0) -> str:
    """Seconds as milliseconds with one decimal, right-aligned in ``width``; a dash when there is
    no figure yet (NaN: no rows).

    >>> ms(0.0123, 8), ms(float("nan"), 8)
    ('    12.3', '       -')
    """
    text = "-" if math.isnan(seconds) else f"{seconds * 1000:.1f}"
    return text.rjust(width)


def _count(n: float) -> str:
    """``1.8 M``, ``42 k``, ``950``."""
    for scale, unit in ((1e9, " G"), (1e6, " M"), (1e3, " k")):
        if abs(n) >= scale:
            return f"{n / scale:.1f}{unit}"
    return f"{n:.0f}"


def catch_up_line(progress: dict[str, Any]) -> str | None:
    """``"catching up: 1.8 M rows behind, ETA 40 s"`` (or ``"falling behind: …"``) from a progress
    record, None when the stream is not behind.

    >>> catch_up_line({"backlogS": 300.0, "backlogRows": 1.8e6, "catchUpEtaS": 40.0})
    'catching up: 1.8 M rows behind (300 s of stream), ETA 40 s'
    >>> catch_up_line({"backlogS": 300.0, "backlogRows": 1.8e6, "catchUpEtaS": math.inf})
    'falling behind: 1.8 M rows behind (300 s of stream) and not catching up'
    >>> catch_up_line({"backlogS": 0.0, "backlogRows": 0.0, "catchUpEtaS": 0.0}) is None
    True
    """
    lag, eta = progress.get("backlogS", math.nan), progress.get("catchUpEtaS", math.nan)
    if not lag > 0 or math.isnan(eta):  # not behind, or event times merely old (a recorded trace)
        return None
    rows = progress.get("backlogRows", math.nan)
    behind = f"{_count(rows)} rows behind ({lag:.0f} s of stream)" if math.isfinite(rows) else f"{lag:.0f} s behind"
    if math.isinf(eta):
        return f"falling behind: {behind} and not catching up"
    return f"catching up: {behind}, ETA {eta:.0f} s"


def service_words(progress: Mapping[str, Any]) -> str:
    """What a trigger line says of latency targets and shedding (nothing without either): the
    queries that missed their target this trigger, and the rows shed.

    >>> service_words({"sloMet": 0.0, "shedRows": 12, "queries": [{"query": "anomaly", "sloMet": 0.0, "sloViolations": 3.0}]})
    '  SLO missed: anomaly 3 rows  shed 12'
    >>> service_words({"sloMet": 1.0, "shedRows": 0, "queries": []}), service_words({"queries": []})
    ('  SLO met', '')
    """
    words = ""
    met = progress.get("sloMet", math.nan)
    if met == 1.0:
        words += "  SLO met"
    elif met == 0.0:
        missed = [f"{q['query']} {q['sloViolations']:.0f} rows" for q in progress["queries"] if q.get("sloMet") == 0.0]
        words += "  SLO missed: " + ", ".join(missed)
    if progress.get("shedRows", 0):
        words += f"  shed {progress['shedRows']}"
    return words


class ClassMonitor:
    """Per-class delay and queue peaks of a running stream, and its console lines.

    ``klass_of`` maps each query to its class; ``watch`` is the query whose p99 each trigger line
    shows beside the overall one (the job's most critical query); ``classes`` orders the summary
    (default: the classes in sorted order); ``print_fn`` receives each line (None: silent).

    >>> m = ClassMonitor({"fire": "H", "archive": "N"}, watch="fire", print_fn=None, clock=lambda: 0.0)
    >>> m.on_delays(0, {"fire": np.array([0.1, 0.3]), "archive": np.array([1.0])})
    >>> print(m.summary(elapsed_s=10).splitlines()[3].split()[:3])
    ['H', '2', '200.0']
    """

    def __init__(
        self,
        klass_of: Mapping[str, str],
        watch: str | None = None,
        classes: Sequence[str] | None = None,
        print_fn: Any = print,
        clock: Any = time.time,
    ):
        self.klass_of = dict(klass_of)
        self.classes = list(classes) if classes is not None else sorted(set(self.klass_of.values()))
        self.watch = watch
        self.print_fn = print_fn
        self.clock = clock
        self.started = clock()
        #: When the first micro-batch was reported (``clock()``; None before): a job's duration and
        #: the summary's run length count from it, not from Spark's start-up.
        self.first_batch_at: float | None = None
        self.delays = {k: DelayDigest() for k in self.classes}
        self.peak_queued = {"rows": 0.0, "bytes": 0.0}
        self.peak_class = {k: [0.0, 0.0] for k in self.classes}  # rows, bytes queued for the class's queries
        self.strategies: dict[str, int] = {}
        #: Per class: rows shed, rows written later than their query's target, and whether any
        #: of its queries has a target (the summary shows these columns only when a run has them).
        self.shed = dict.fromkeys(self.classes, 0)
        self.late = dict.fromkeys(self.classes, 0)
        self.targeted: set[str] = set()
        #: Progress records seen: one per trigger, as many as the metrics table holds for the run.
        self.triggers = 0
        #: When the job decided to stop (:meth:`stopping`; None before): the summary's run length
        #: ends there, not after the last trigger finished and the outputs were drained.
        self.stopped_at: float | None = None

    def stopping(self) -> None:
        """Note the moment the job stops the stream (its duration is up, or Ctrl-C)."""
        if self.stopped_at is None:
            self.stopped_at = self.clock()

    def on_delays(self, batch_id: int, per_query: Mapping[str, np.ndarray]) -> None:
        for q, d in per_query.items():
            self.delays[self.klass_of[q]].add(d)

    def on_progress(self, p: Mapping[str, Any]) -> None:
        if self.first_batch_at is None:
            self.first_batch_at = self.clock()
            if self.print_fn is not None:
                self.print_fn(f"first micro-batch {self.first_batch_at - self.started:.1f}s after start-up began", flush=True)
        self.triggers += 1
        self.peak_queued["rows"] = max(self.peak_queued["rows"], p["queuedRows"])
        self.peak_queued["bytes"] = max(self.peak_queued["bytes"], p["queuedBytes"])
        if p["strategy"] != NO_STRATEGY_YET:
            self.strategies[p["strategy"]] = self.strategies.get(p["strategy"], 0) + 1
        by_class: dict[str, list[float]] = {}
        for q in p["queries"]:
            acc = by_class.setdefault(q["klass"], [0.0, 0.0])
            acc[0] += q["queuedRows"]
            acc[1] += q["queuedBytes"]
            k = q["klass"]
            if q.get("shedRows", 0) == q.get("shedRows", 0):  # not NaN
                self.shed[k] = self.shed.get(k, 0) + int(q.get("shedRows", 0))
            if q.get("sloTargetS", math.nan) == q.get("sloTargetS", math.nan):
                self.targeted.add(k)
                late = q.get("sloViolations", math.nan)
                self.late[k] = self.late.get(k, 0) + (int(late) if late == late else 0)
        for klass, (r, b) in by_class.items():
            peak = self.peak_class.setdefault(klass, [0.0, 0.0])
            peak[0] = max(peak[0], r)
            peak[1] = max(peak[1], b)
        if self.print_fn is None:
            return
        w = next((q for q in p["queries"] if q["query"] == self.watch), None)
        watched = f" ({self.watch} {ms(w['delayP99_s'] if w else math.nan, 7)} ms)" if self.watch else ""
        behind = catch_up_line(p)
        self.print_fn(
            f"[{self.clock() - self.started:6.1f}s] batch {p['batchId']:>4}  in {p['numInputRows']:>6}  "
            f"out {p['numOutputRows']:>6}  queued {p['queuedRows']:>8.0f} rows / {p['queuedBytes'] / 1e6:6.2f} MB  "
            f"delay p99 {ms(p['delayMsP99'] / 1000, 8)} ms{watched}  strategy {p['strategy']}"
            + service_words(p)
            + (f"  | {behind}" if behind else ""),
            flush=True,
        )

    def summary(self, elapsed_s: float | None = None) -> str:
        """The closing lines: run length (from the first micro-batch to :meth:`stopping`, or to
        now), triggers, peaks and strategy mix, then one row per class (rows out, mean / p99 /
        max delay in ms, peak rows and MB in its queries' queues at a trigger's end) and a
        note on what those peaks leave out."""
        since = self.first_batch_at if self.first_batch_at is not None else self.started
        until = self.stopped_at if self.stopped_at is not None else self.clock()
        elapsed = max(until - since, 0.0) if elapsed_s is None else elapsed_s
        picked = sum(self.strategies.values())
        mix = ", ".join(f"{k} {v / max(picked, 1):.0%}" for k, v in sorted(self.strategies.items(), key=lambda kv: -kv[1]))
        lines = [
            f"summary after {elapsed:.0f} s from the first micro-batch, {self.triggers} triggers; "
            f"peak queued {self.peak_queued['rows']:.0f} rows / {self.peak_queued['bytes'] / 1e6:.2f} MB; "
            f"strategy mix: {mix or '-'}"
        ]
        shedding, targets = any(self.shed.values()), bool(self.targeted)
        header = (
            f"{'class':<6} {'rows out':>10} {'mean delay ms':>14} {'p99 delay ms':>13} {'max delay ms':>13} "
            f"{'peak queued rows*':>18} {'peak queued MB*':>16}"
            + (f" {'rows shed':>10}" if shedding else "")
            + (f" {'over target':>12}" if targets else "")
        )
        lines += [header, "-" * len(header)]
        for klass in self.classes:
            d = self.delays[klass]
            peak = self.peak_class.get(klass, [0.0, 0.0])
            late = f"{self.late.get(klass, 0):>12}" if klass in self.targeted else f"{'-':>12}"
            lines.append(
                f"{klass:<6} {d.count:>10} {ms(d.mean, 14)} {ms(d.percentile(99), 13)} {ms(d.max, 13)} "
                f"{peak[0]:>18.0f} {peak[1] / 1e6:>16.2f}"
                + (f" {self.shed.get(klass, 0):>10}" if shedding else "")
                + (f" {late}" if targets else "")
            )
        note = (
            "* the class's rows in sparkqos's queues at a trigger's end (the top class is served first, so its peak "
            "is often 0); rows still in the source or in Spark's micro-batch are not counted there, but their wait "
            "is in the delays"
        )
        lines += textwrap.wrap(note, width=len(header), subsequent_indent="  ")
        return "\n".join(lines)
