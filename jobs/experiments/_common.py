"""Shared pieces of the Spark experiments (jobs/experiments/*.py) and benchmarks/vs_fair_pools.py.

Every run replays one recorded bursty trace (``sparkqos.replay`` with ``retime``), so all
strategies of an experiment see exactly the same rows at the same relative times. A trace is
made once with the bursty source's own generator (Jiang §5.1 / Chain §6 ON/OFF Pareto flows).
"""

from __future__ import annotations

import math
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sparkqos.model.plan import Operator, Plan
from sparkqos.runtime.config import ExecutorOptions, StrategyConfig

US = 1_000_000
#: The experiments' micro-batch interval: the claims table in docs/experiments.md was measured at
#: it (sparkqos.stream's default was 0.25 s then; it is 0.1 s now, see docs/benchmarks.md).
TRIGGER_S = 0.25
#: Trace origin (epoch µs); replays retime it to the wall clock.
ORIGIN_US = 1_700_000_000 * US


def _profile_peak(rate_profile: Callable[[float], float] | None, seconds: float) -> float:
    """The largest factor of ``rate_profile`` over ``seconds`` (1 without one); checks both."""
    if not seconds > 0:
        raise ValueError(f"seconds must be > 0, got {seconds!r}")
    if rate_profile is None:
        return 1.0
    peak = max(rate_profile(float(s)) for s in range(int(math.ceil(seconds))))
    if not peak > 0:
        raise ValueError("rate_profile is zero everywhere")
    return peak


def _thin(flow: np.ndarray, ts: np.ndarray, rate_profile, peak: float, seconds: float, seed: int):
    """Arrivals drawn at ``peak`` times the rate, each of second t kept with probability
    rate_profile(t) / peak (so a rising load keeps the arrival pattern); unchanged without one."""
    if rate_profile is None:
        return flow, ts
    keep_p = np.array([rate_profile(float(s)) / peak for s in range(int(math.ceil(seconds)) + 1)])
    u = np.random.default_rng([seed, 99]).random(ts.size)
    keep = u < keep_p[(ts // US).astype(np.int64)]
    return flow[keep], ts[keep]


def write_bursty_trace(
    path: str | Path,
    rate: float,
    seconds: float,
    seed: int = 7,
    flows: int = 64,
    off_scale: float = 8.0,
    payload: str = "sensor",
    rate_profile: Callable[[float], float] | None = None,
    warmup_s: float = 0.0,
    warmup_rate: float = 4.0,
) -> int:
    """Record ``seconds`` of the bursty source (sensor or packet payload) into Parquet.

    ``rate_profile(t)`` (a factor ≥ 0 per stream second) shapes the load: the trace is drawn at
    ``rate · max factor`` and each arrival of second t is kept with probability factor / max
    factor (so rising load keeps the burst structure). ``warmup_s`` prepends that many seconds
    of a trickle (``warmup_rate`` rows/s of ordinary sensor readings: 20 °C, 50 %, never a fire
    or an anomaly) so every query has run its first, slow micro-batches before the bursts come.
    Returns the number of rows."""
    from sparkqos.sources.generators import BurstyGenerator, payload_table

    peak = _profile_peak(rate_profile, seconds)
    gen = BurstyGenerator(rate=rate * peak, flows=flows, off_scale=off_scale, seed=seed)
    flow, ts = gen.arrivals(0, int(seconds * US))
    flow, ts = _thin(flow, ts, rate_profile, peak, seconds, seed)
    table = payload_table(payload, seed, flow, ts + ORIGIN_US + int(warmup_s * US))
    if warmup_s > 0:
        if payload != "sensor":
            raise ValueError("warmup_s needs the sensor payload")
        n = int(warmup_s * warmup_rate)
        wts = ORIGIN_US + (np.arange(n) * (US / warmup_rate)).astype(np.int64)
        warm = payload_table(payload, seed, np.arange(n) % flows, wts)
        warm = warm.set_column(warm.schema.get_field_index("temperature"), "temperature", pa.array(np.full(n, 20.0)))
        warm = warm.set_column(warm.schema.get_field_index("humidity"), "humidity", pa.array(np.full(n, 50.0)))
        table = pa.concat_tables([warm.cast(table.schema), table])
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return table.num_rows


def replay_df(spark, path: str | Path, max_seconds_per_trigger: float | None = None, start: float | None = None):
    """A streaming DataFrame replaying ``path`` at its own pace, timestamps moved to the wall
    clock from ``start`` (epoch seconds; default: when the query starts)."""
    from sparkqos import sources

    sources.register(spark)
    r = spark.readStream.format("sparkqos.replay").option("path", str(path)).option("retime", "true").option("speed", "1")
    if start is not None:
        r = r.option("start", f"{start:.6f}")
    if max_seconds_per_trigger:
        r = r.option("maxSecondsPerTrigger", str(max_seconds_per_trigger))
    return r.load()


def session(app: str, warm_up: bool = True):
    """The job's SparkSession; ``warm_up`` runs a tiny Arrow job first so Python workers are up
    before any measured row arrives (otherwise the first batch pays their start-up)."""
    from pyspark.sql import SparkSession

    from sparkqos.spark.settings import configure

    spark = configure(SparkSession.builder.appName(app).config("spark.sql.session.timeZone", "UTC")).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if warm_up:
        spark.range(0, 64, numPartitions=2).mapInArrow(lambda it: it, "id bigint").toArrow()
    return spark


def process_tree_cpu_s(*roots: int) -> float:
    """CPU seconds (user + system) used so far by processes ``roots`` (default: this one) and every
    live descendant of theirs, each counted once. Read from /proc; NaN where there is none. (A
    descendant that already exited is not counted: take differences with :func:`tree_cpu_since`,
    which counts each process's own.) Pass :func:`jvm_pid` too to count Spark's JVM: under
    ``spark-submit`` the JVM is this process's parent, not its child."""
    per_pid = process_tree_cpu(*roots)
    return math.nan if per_pid is None else sum(per_pid.values())


def process_tree_cpu(*roots: int) -> dict[int, float] | None:
    """CPU seconds so far of ``roots`` and each live descendant, by process id (None where no
    root lives)."""
    roots = roots or (os.getpid(),)
    proc = Path("/proc")
    if not any((proc / str(r) / "stat").exists() for r in roots):
        return None
    children: dict[int, list[int]] = {}
    times: dict[int, float] = {}
    for d in proc.iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # After the command: state, ppid, ... utime and stime are the 12th and 13th fields.
        children.setdefault(int(fields[1]), []).append(int(d.name))
        times[int(d.name)] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    out: dict[int, float] = {}
    todo = list(roots)
    while todo:
        pid = todo.pop()
        if pid in out:
            continue
        out[pid] = times.get(pid, 0.0)
        todo.extend(children.get(pid, ()))
    return out


def tree_cpu_since(before: dict[int, float] | None, *roots: int) -> float:
    """CPU seconds the tree of ``roots`` used since ``before`` (:func:`process_tree_cpu`): each
    live process's own since then (all of it for one started meanwhile). A process that exited
    meanwhile is left out, so this is never negative but may fall short (Spark's Python workers
    come and go)."""
    after = process_tree_cpu(*roots)
    if before is None or after is None:
        return math.nan
    return sum(max(t - before.get(pid, 0.0), 0.0) for pid, t in after.items())


def jvm_pid(spark) -> int | None:
    """The process id of the classic session's JVM (None where there is none to ask)."""
    try:
        return int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    except Exception:  # noqa: BLE001 - Connect sessions have no JVM handle
        return None


class RunStats:
    """Per-class delays, outputs and peaks of one sparkqos run (fed by the runner's hooks)."""

    def __init__(self, klass_of: Mapping[str, str], label: str, expected_s: float, quiet: bool = False):
        self.klass_of = dict(klass_of)
        self.label = label
        self.expected_s = expected_s
        self.quiet = quiet
        self.delays: dict[str, list[np.ndarray]] = {}
        self.rows_in = 0
        self.peak_rows = 0.0
        self.peak_bytes = 0.0
        self.queued_rows: list[float] = []
        # Rows the source had released but Spark had not yet read (a trigger that overruns leaves
        # its backlog there): with ``arrivals`` (sorted replay offsets, s), ``replay_start`` and
        # ``readers`` (leaf operators reading the stream) each trigger also records the rows in
        # the system = queued + unread × readers — the Chain paper's memory.
        self.arrivals: np.ndarray | None = None
        self.replay_start: float | None = None
        self.readers = 1
        self.system_rows: list[float] = []
        self.peak_system = 0.0
        self.strategies: dict[str, int] = {}
        self.triggers = 0
        self.t0 = time.time()
        #: Cores the whole job used while the input arrived — this process, Spark's JVM and its
        #: Python workers: CPU seconds / wall seconds, from the replay's start until every row
        #: was read.
        self.cores = math.nan
        #: Of those, the executor's own threads (the continuous worker, or COS's cluster threads):
        #: the progress records' ``executorCpuS`` over the same span.
        self.executor_cpu_s = 0.0
        self.executor_cores = math.nan
        #: Set once every input row was read: the stream runs on until its queues are empty, and
        #: those triggers count for delay, not for memory.
        self.draining = False
        self.first_progress: float | None = None
        self.last_queued = 0.0
        #: The executor's operator runs over the whole run, the seconds inside them, and its
        #: estimate of a run's fixed cost at the end (ms; NaN without ``overhead_share``).
        self.operator_runs = 0
        self.run_seconds = 0.0
        self.fixed_cost_ms = math.nan

    def take_executor_counts(self, executor) -> None:
        """The executor's operator runs, time inside them and fixed cost per run, once it is done."""
        ops = executor.state.stats.operators().values()
        self.operator_runs = sum(s.runs for s in ops)
        self.run_seconds = sum(s.busy_time for s in ops)
        cost = executor.dispatcher.run_cost
        self.fixed_cost_ms = math.nan if cost is None else cost.overhead_s * 1000

    @property
    def fixed_cost_share(self) -> float:
        """The share of the executor's time the runs' fixed cost took: runs × fixed cost over
        that plus the time inside the runs (NaN without an estimate)."""
        fixed = self.operator_runs * self.fixed_cost_ms / 1000
        return fixed / (fixed + self.run_seconds) if fixed + self.run_seconds > 0 else math.nan

    def on_delays(self, batch_id: int, per_query: Mapping[str, np.ndarray]) -> None:
        for q, d in per_query.items():
            if d.size:
                self.delays.setdefault(q, []).append(np.asarray(d, dtype=np.float64))

    def on_progress(self, p: Mapping[str, Any]) -> None:
        if self.first_progress is None:
            self.first_progress = time.time()
        self.triggers += 1
        self.rows_in += int(p["numInputRows"])
        self.last_queued = p["queuedRows"]
        self.strategies[p["strategy"]] = self.strategies.get(p["strategy"], 0) + 1
        if self.draining:  # memory is measured while the input arrives; delays until the queues are empty
            return
        if self.replay_start is not None and time.time() >= self.replay_start:
            cpu = p.get("executorCpuS", math.nan)
            self.executor_cpu_s += 0.0 if cpu is None or math.isnan(cpu) else cpu
        self.peak_rows = max(self.peak_rows, p["queuedRows"])
        self.peak_bytes = max(self.peak_bytes, p["queuedBytes"])
        self.queued_rows.append(p["queuedRows"])
        unread = 0
        if self.arrivals is not None and self.replay_start is not None:
            released = int(np.searchsorted(self.arrivals, time.time() - self.replay_start, side="right"))
            unread = max(released - self.rows_in, 0)
        system = p["queuedRows"] + unread * self.readers
        self.system_rows.append(system)
        self.peak_system = max(self.peak_system, system)
        if not self.quiet:
            el = time.time() - self.t0
            print(
                f"  [{self.label} {el:5.1f}/{self.expected_s:.0f}s] batch {p['batchId']:>3} in {p['numInputRows']:>6} "
                f"out {p['numOutputRows']:>6} queued {p['queuedRows']:>8.0f} rows {p['queuedBytes'] / 1e6:6.2f} MB "
                f"p99 {p['delayMsP99']:8.0f} ms  {p['strategy']}",
                flush=True,
            )

    @property
    def mean_queued(self) -> float:
        """Mean rows in sparkqos's queues at the end of a trigger (0 without triggers)."""
        return float(np.mean(self.queued_rows)) if self.queued_rows else 0.0

    @property
    def mean_in_system(self) -> float:
        """Mean rows in the system (queued + unread × readers) at the end of a trigger."""
        return float(np.mean(self.system_rows)) if self.system_rows else 0.0

    def query_delays(self, query: str) -> np.ndarray:
        d = self.delays.get(query, [])
        return np.concatenate(d) if d else np.empty(0)

    def class_delays(self, klass: str) -> np.ndarray:
        parts = [self.query_delays(q) for q, k in self.klass_of.items() if k == klass]
        return np.concatenate(parts) if parts else np.empty(0)

    def all_delays(self) -> np.ndarray:
        parts = [self.query_delays(q) for q in self.klass_of]
        return np.concatenate(parts) if parts else np.empty(0)

    def rows_out(self, query: str | None = None) -> int:
        if query is not None:
            return int(self.query_delays(query).size)
        return int(sum(self.query_delays(q).size for q in self.klass_of))


def drop_metrics(out: str | Path, run: str) -> None:
    """Delete run ``run``'s metrics files under ``out/metrics`` (a rerun starts clean)."""
    import re

    from sparkqos.report import metrics

    safe = metrics._SAFE.sub("_", run)
    pattern = re.compile(re.escape(f"part-{safe}-") + r"\d{9}\.parquet")
    for f in (Path(out) / "metrics").glob(f"part-{safe}-*.parquet"):
        if pattern.fullmatch(f.name):
            f.unlink()


def mean_ms(d: np.ndarray) -> float:
    return float(d.mean() * 1000) if d.size else math.nan


def p99_ms(d: np.ndarray) -> float:
    return float(np.percentile(d, 99) * 1000) if d.size else math.nan


def run_sparkqos(
    spark,
    trace: str | Path,
    queries: tuple[Mapping[str, Callable[[Any], Any]], Mapping[str, str], Mapping[str, float]],
    strategy: str,
    *,
    out: str | Path,
    name: str,
    input_rows: int,
    trace_s: float,
    trigger_s: float = TRIGGER_S,
    budget_s: float | None = None,
    strategy_params: Mapping[str, Any] | None = None,
    qos: Any = None,
    max_seconds_per_trigger: float | None = None,
    drain: bool = True,
    quiet: bool = False,
    executor_args: Mapping[str, Any] | None = None,
    lead_s: float = 4.0,
    continuous: bool = True,
    serve_s: float | None = None,
) -> RunStats:
    """Replay ``trace`` through ``queries`` (transforms, query → class, class → priority, as
    :func:`synthetic_transforms` gives them) under ``strategy``; once every row was read, with
    ``drain`` the stream runs on until its queues are empty (then ``finish()`` flushes what windows
    and joins still hold), without it it stops there. The replay starts ``lead_s`` after the
    query, so start-up is not measured as delay. Metrics go to ``out/metrics`` (run ``name``),
    outputs to ``out/outputs/name``. The strategies run as the papers give them
    (``class_shares=False``): the strategy alone orders the work, also in the ``serve_s`` seconds
    each trigger serves at once so that its first picks are written by that trigger (the
    library's ``top_class_s``; None: its default, 0: none); ``continuous`` is the library's default
    executor mode."""
    replay_start = float(f"{time.time() + lead_s:.6f}")  # as replay_df passes it on
    df = keyed(replay_df(spark, trace, max_seconds_per_trigger, start=replay_start), origin_s=replay_start)
    run = _Run(
        df,
        trace,
        queries,
        strategy,
        out=out,
        name=name,
        trace_s=trace_s,
        replay_start=replay_start,
        lead_s=lead_s,
        trigger_s=trigger_s,
        budget_s=budget_s,
        strategy_params=strategy_params,
        qos=qos,
        quiet=quiet,
        executor_args=executor_args,
        continuous=continuous,
        serve_s=serve_s,
    )
    query = run.handle.start()
    try:
        _await_input(spark, query, [run.stats], input_rows, trace_s)
    finally:
        run.handle.stop()  # between triggers
    if query.exception() is not None:
        raise RuntimeError(f"run {name}: the streaming query failed: {query.exception()}")
    return run.end(drain)


class _Run:
    """One strategy's sparkqos stream over a replayed trace, not yet started, and its
    :class:`RunStats` (the arguments are :func:`run_sparkqos`'s, with its defaults; ``df`` the
    keyed replay)."""

    def __init__(
        self,
        df,
        trace,
        queries,
        strategy,
        *,
        out,
        name,
        trace_s,
        replay_start,
        lead_s,
        trigger_s,
        budget_s: float | None = None,
        strategy_params: Mapping[str, Any] | None = None,
        qos: Any = None,
        quiet: bool = False,
        executor_args: Mapping[str, Any] | None = None,
        continuous: bool = True,
        serve_s: float | None = None,
    ):
        import sparkqos
        from sparkqos.io.sinks import ParquetSink

        out = Path(out)
        self.ckpt = out / "_checkpoint" / name
        shutil.rmtree(self.ckpt, ignore_errors=True)
        shutil.rmtree(out / "outputs" / name, ignore_errors=True)
        drop_metrics(out, name)
        transforms, classes, priorities = queries
        self.trigger_s = trigger_s
        self.deadline = replay_start + 4 * trace_s + 60
        self.stats = stats = RunStats({}, name, expected_s=lead_s + trace_s + 2 * trigger_s, quiet=quiet)
        ts = pq.read_table(trace, columns=["ts"]).column("ts").cast(pa.int64()).to_numpy()
        stats.arrivals = np.sort(ts - ts.min()) / US if ts.size else np.empty(0)
        stats.replay_start = replay_start
        self.handle = sparkqos.stream(
            df,
            dict(transforms),
            classes=dict(classes),
            priorities=dict(priorities),
            strategy=StrategyConfig(strategy, params=dict(strategy_params or {}), qos=qos, class_shares=False),
            trigger_s=trigger_s,
            checkpoint=self.ckpt,
            output=out,
            sink=ParquetSink(out / "outputs" / name),
            name=name,
            on_progress=stats.on_progress,
            on_delays=stats.on_delays,
            executor=ExecutorOptions.of(budget_s=budget_s, **dict(executor_args or {})),
            continuous=continuous,
            top_class_s=serve_s,  # without class shares the strategy in force serves then too
        )
        plan = self.handle.loop.compiled.plan
        stats.klass_of = {q.name: q.klass for q in plan.queries.values()}
        stats.readers = max(1, sum(1 for op in plan for src in op.inputs if src in plan.streams))

    def end(self, drain: bool) -> RunStats:
        """After the streaming query stopped: serve what is still queued, trigger by trigger, then
        flush (with ``drain``); the executor's counts; the checkpoint removed."""
        stats, handle = self.stats, self.handle
        stats.draining = True
        if drain and stats.read_all and stats.last_queued > 0:
            # The rows still queued when the input ends are served on, written trigger by trigger
            # in the order the strategy serves them (finish() alone would write them all at once,
            # at the same late instant for every class: that end effect swamped the classes
            # experiment). Spark runs no micro-batch without new rows, so the run triggers the
            # loop itself, on empty batches every trigger_s, as Spark would over a source that
            # kept ticking.
            loop = handle.loop
            loop.reopen()
            try:
                while stats.last_queued > 0 and time.time() < self.deadline:
                    began = time.time()
                    loop.process(pa.table({}), loop.last_batch + 1)
                    time.sleep(max(0.0, self.trigger_s - (time.time() - began)))
            finally:
                loop.close()
        if drain:
            handle.finish()
        stats.take_executor_counts(handle.loop.executor)
        stats.elapsed = time.time() - stats.t0
        shutil.rmtree(self.ckpt, ignore_errors=True)
        return stats


def _await_input(spark, query, runs: list[RunStats], input_rows: int, trace_s: float) -> None:
    """Wait until every run read ``input_rows`` rows (or the query stopped, or ``4 × trace_s + 60``
    s passed since the replay began); meanwhile the cores the job used from the replay's start (the same instant in
    every run) until then."""
    start = runs[0].replay_start
    deadline = start + 4 * trace_s + 60
    cpu0, wall0 = None, None
    job = [os.getpid()] + [p for p in [jvm_pid(spark)] if p is not None]
    while query.isActive and time.time() < deadline and min(st.rows_in for st in runs) < input_rows:
        if cpu0 is None and time.time() >= start:  # cores while the input arrives
            cpu0, wall0 = process_tree_cpu(*job), time.perf_counter()
            for st in runs:
                st.executor_cpu_s = 0.0
        query.awaitTermination(0.25)
    if cpu0 is not None:
        wall = max(time.perf_counter() - wall0, 1e-9)
        cores = tree_cpu_since(cpu0, *job) / wall
    for st in runs:
        if cpu0 is not None:
            st.cores = cores
            st.executor_cores = st.executor_cpu_s / wall
        st.read_all = st.rows_in >= input_rows
        st.left_queued = st.last_queued


def run_side_by_side(
    spark,
    trace: str | Path,
    runs: Mapping[str, tuple[tuple[Mapping[str, Callable[[Any], Any]], Mapping[str, str], Mapping[str, float]], str]],
    *,
    out: str | Path,
    input_rows: int,
    trace_s: float,
    trigger_s: float = TRIGGER_S,
    lead_s: float = 4.0,
    strategy_params: Callable[[str], Mapping[str, Any] | None] = lambda name: None,
    qos: Callable[[str], Any] = lambda name: None,
    **kw: Any,
) -> dict[str, RunStats]:
    """:func:`run_sparkqos` for several runs at once (``runs``: name → (queries, strategy)): one
    streaming query replays ``trace``, and each micro-batch, read once with ``toArrow()``, is
    every run's trigger, all at once on threads (each run's ``process``, as its own foreachBatch
    would call it). So the runs get the same rows at the same instants and serve them at the same
    time on the same machine: what else loads the machine loads all of them alike, where runs one
    after another each meet a different share of it. ``strategy_params`` and ``qos`` give a run's
    by its name; the other keywords are run_sparkqos's (``drain``, and each run's options)."""
    from sparkqos.spark.batch import StopGate, stop_as_spark_reads_it, stop_between_triggers
    from sparkqos.spark.warmup import warm_up

    drain = kw.pop("drain", True)
    replay_start = float(f"{time.time() + lead_s:.6f}")
    df = keyed(replay_df(spark, trace, start=replay_start), origin_s=replay_start)
    mine = {
        name: _Run(
            df,
            trace,
            queries,
            strategy,
            out=out,
            name=name,
            trace_s=trace_s,
            replay_start=replay_start,
            lead_s=lead_s,
            trigger_s=trigger_s,
            strategy_params=strategy_params(name),
            qos=qos(name),
            **kw,
        )
        for name, (queries, strategy) in runs.items()
    }
    for r in mine.values():  # what QosStream.start does before Spark's query starts
        r.handle.restore()
        r.handle.loop.reopen()
    first = next(iter(mine.values())).handle
    loop = first.loop
    warm_up(spark, loop.compiled.sources[loop.ingest.stream], first.config.input.warm_up_s)

    gate = StopGate()

    def trigger(batch_df, batch_id: int) -> None:
        with stop_as_spark_reads_it(batch_id):
            gate.enter(batch_df)
            table = batch_df.toArrow()
            # started in turn, first one run then the next: the first thread started gets the
            # GIL first, and no run should get it first every time
            names = list(mine)
            names = names[batch_id % len(names) :] + names[: batch_id % len(names)]
            concurrently({n: lambda r=mine[n]: r.handle.process(table, batch_id) for n in names})

    ckpt = Path(out) / "_checkpoint" / "side-by-side"
    shutil.rmtree(ckpt, ignore_errors=True)
    query = (
        df.writeStream.foreachBatch(trigger)
        .option("checkpointLocation", str(ckpt))
        .queryName("side-by-side")
        .trigger(processingTime=f"{trigger_s} seconds")
        .start()
    )
    try:
        _await_input(spark, query, [r.stats for r in mine.values()], input_rows, trace_s)
    finally:
        stop_between_triggers(query, 60.0, gate)
        for r in mine.values():
            r.handle.loop.close()
    if query.exception() is not None:
        raise RuntimeError(f"side-by-side runs {', '.join(mine)}: the streaming query failed: {query.exception()}")
    shutil.rmtree(ckpt, ignore_errors=True)
    return concurrently({n: lambda r=r: r.end(drain) for n, r in mine.items()})


def print_table(title: str, header: list[str], rows: Iterable[list[Any]], file=None) -> str:
    """Print (and return) a fixed-width table; floats with one decimal."""

    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return "-" if math.isnan(v) else (f"{v:.1f}" if abs(v) < 1e6 else f"{v:.3g}")
        return str(v)

    body = [[fmt(v) for v in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in body)) if body else len(h) for i, h in enumerate(header)]
    lines = [title, "  ".join(h.rjust(w) for h, w in zip(header, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in body]
    text = "\n".join(lines)
    print(text, file=file or sys.stdout, flush=True)
    return text


def render_report(out: str | Path, title: str) -> Path | None:
    from sparkqos.report import render

    if (Path(out) / "metrics").is_dir():
        return render(out, title=title)
    return None


def rss_tree_bytes(pid: int) -> int:
    """Resident memory of ``pid`` and all its descendants (Linux /proc)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    page = os.sysconf("SC_PAGE_SIZE")
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                parts = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{d}/statm") as f:
                rss[int(d)] = int(f.read().split()[1]) * page
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(int(parts[1]), []).append(int(d))
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += rss.get(p, 0)
        todo.extend(children.get(p, []))
    return total


#: The per-row integer key the synthetic operators hash (see :func:`keyed`).
KEY = "rid"


def keyed(df, origin_s: float | None = None):
    """``df`` with :data:`KEY`, a per-row integer the synthetic operators keep or drop rows by:
    the event time in µs (``sensor_id`` has only 64 values, too few to keep a declared share of
    rows), counted from ``origin_s`` (epoch s) when given — a replay's ``start``, so every run of
    a retimed trace keeps the same rows whenever it starts. The runner adds it to the replayed
    stream, so Spark computes it before sparkqos sees the rows and it costs no operator in the
    queries."""
    from pyspark.sql import functions as F

    seconds = F.col("ts").cast("double")
    if origin_s is None:
        return df.withColumn(KEY, (seconds * 1e6).cast("long"))
    return df.withColumn(KEY, F.round((seconds - F.lit(float(origin_s))) * 1e6).cast("long"))


def synthetic_transforms(
    plan: Plan, cost_unit_s: float, classes: Mapping[str, float] | None = None
) -> tuple[dict[str, Callable[[Any], Any]], dict[str, str], dict[str, float]]:
    """PySpark transforms running a scheduling ``plan`` (the simulator's, e.g. jobs/cqc_sim.cqc_plan)
    on the one replayed sensor stream, for ``sparkqos.stream(df, transforms, classes=...,
    priorities=...)``; returns (query → transform, query → class, class → priority).

    Every operator becomes ``sparkqos.synthetic`` with its declared selectivity (at most 1) and
    ``cost × cost_unit_s`` seconds of CPU per row, keyed by :data:`KEY`; every plan stream is
    the sensor stream; a two-input operator (a join in the plan) is a ``unionByName`` of its
    inputs then a synthetic operator (same σ per input row: the row counts, not the matching, are
    what the strategies see). A query's result drops the key again (one select per query). The
    transforms expect the key on their input (:func:`keyed`) and add it themselves when it is
    missing (then each read of the stream costs one more select). ``classes`` (class →
    priority) defaults to the plan's."""
    import sparkqos

    seeds: dict[str, int] = {}

    def number(name: str) -> None:  # the seed of each operator, in the order the plan builds them
        if name not in plan or name in seeds:
            return
        for i in plan[name].inputs:
            number(i)
        seeds[name] = (sum(map(ord, name)) * 131 + len(seeds)) % 100_000

    for root in plan.roots():
        number(root)

    def transform(root: str) -> Callable[[Any], Any]:
        def run(df):
            columns = [c for c in df.columns if c != KEY]
            source = df if KEY in df.columns else keyed(df)

            def build(name: str):
                if name not in plan:
                    return source
                op = plan[name]
                ins = [build(i) for i in op.inputs]
                rel = ins[0]
                for other in ins[1:]:
                    rel = rel.unionByName(other)
                sigma = min(1.0, float(op.selectivity))
                return sparkqos.synthetic(rel, sigma, cost_s=float(op.cost) * cost_unit_s, seed=seeds[name], key=KEY)

            return build(root).select(*columns)

        return run

    transforms = {plan.query_of(root): transform(root) for root in plan.roots()}
    query_classes = {plan.query_of(root): plan.class_of(root) for root in plan.roots()}
    priorities = dict(classes if classes is not None else plan.classes)
    return transforms, query_classes, priorities


def summary_rows(runs: list[tuple[str, str, RunStats]], input_rows: int) -> list[list[Any]]:
    """[plan, strategy, rows out, mean delay ms, p99 ms, mean queued rows, peak queued rows, peak MB,
    mean rows in the system, peak rows in the system, cores the job and cores the executor's
    threads used while the input arrived] (in the system = queued + unread by Spark; cores = CPU
    seconds per wall second: the job's counts this process, Spark's JVM and its Python workers)."""
    rows = []
    for plan_name, strategy, st in runs:
        d = st.all_delays()
        rows.append(
            [
                plan_name,
                strategy,
                st.rows_out(),
                mean_ms(d),
                p99_ms(d),
                st.mean_queued,
                st.peak_rows,
                st.peak_bytes / 1e6,
                st.mean_in_system,
                st.peak_system,
                f"{st.cores:.2f}",
                f"{st.executor_cores:.2f}",
            ]
        )
    return rows


SUMMARY_HEADER = [
    "plan",
    "strategy",
    "rows out",
    "mean delay ms",
    "p99 ms",
    "mean queued",
    "peak queued",
    "peak MB",
    "mean in system",
    "peak in system",
    "cores",
    "executor cores",
]


def write_vessel_trace(
    path: str | Path,
    rate: float,
    seconds: float,
    seed: int = 7,
    flows: int = 64,
    rate_profile: Callable[[float], float] | None = None,
) -> int:
    """Record ``seconds`` of real arrivals into Parquet: the instants of consecutive recorded AIS
    position reports (sparkqos.workloads.ais; the ``data`` extra), the recorded pace compressed so
    the mean is ``rate`` rows/s (the real inter-arrival pattern, bursts included), carrying the
    sensor payload the experiments' plans read (vessel MMSI mod ``flows`` as the flow).
    ``rate_profile`` thins it as in :func:`write_bursty_trace`."""
    from sparkqos.sources.generators import payload_table
    from sparkqos.workloads.ais import vessel_trace

    peak = _profile_peak(rate_profile, seconds)
    source, _ = vessel_trace(cache_dir=Path(__file__).resolve().parents[2] / "output" / "traces")
    recorded = pq.read_table(source, columns=["mmsi", "ts"])
    us = recorded.column("ts").cast(pa.int64()).to_numpy()
    # The day's reports thicken from night to afternoon: take the needed number of consecutive
    # reports from where a third of the day's have gone by, and compress their span to ``seconds``.
    want = int(round(rate * peak * seconds))
    first = min(len(us) // 3, max(len(us) - want, 0))
    last = min(first + want, len(us))
    if last - first < want:
        raise ValueError(f"the recorded day holds {len(us):,} reports, fewer than {want:,} ({seconds:g}s at {rate * peak:g}/s)")
    span_us = max(int(us[last - 1] - us[first]), 1)
    ts = ((us[first:last] - us[first]) * (seconds * US / (span_us + 1))).astype(np.int64)
    keep = slice(first, last)
    flow = recorded.column("mmsi").to_numpy()[keep] % flows
    flow, ts = _thin(flow, ts, rate_profile, peak, seconds, seed)
    table = payload_table("sensor", seed, flow.astype(np.int64), ts + ORIGIN_US)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return table.num_rows


def experiment_args(description: str, defaults: Mapping[str, Any]):
    """The experiments' common command line (every default overridable)."""
    import argparse

    ap = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=defaults.get("seconds", 20.0), help="trace length per run (s)")
    ap.add_argument("--rate", type=float, default=defaults.get("rate", 3000.0), help="mean rows/s")
    ap.add_argument("--work-us", type=float, default=defaults.get("work_us", 20.0), help="µs of CPU per unit of declared cost")
    ap.add_argument(
        "--trigger",
        type=float,
        default=defaults.get("trigger", TRIGGER_S),
        help="micro-batch interval, s (default: 0.25, the claims table's); the trigger sets the floor under every delay",
    )
    ap.add_argument("--budget", type=float, default=defaults.get("budget", 0.0), help="executor s per trigger; 0 = trigger")
    ap.add_argument(
        "--serve",
        type=float,
        default=defaults.get("serve"),
        help="s each trigger serves at once with the strategy, so its first picks are written by that trigger "
        "(default: the library's top_class_s, a tenth of the budget; 0: none)",
    )
    ap.add_argument("--seed", type=int, default=defaults.get("seed", 7))
    ap.add_argument("--off-scale", type=float, default=defaults.get("off_scale", 8.0))
    ap.add_argument(
        "--trace",
        choices=("bursty", "vessels"),
        default="bursty",
        help="arrivals: the bursty ON/OFF generator, or the real instants of recorded AIS reports (data extra)",
    )
    ap.add_argument("--strategies", default=",".join(defaults["strategies"]))
    ap.add_argument("--plans", default=",".join(defaults["plans"]))
    ap.add_argument("--out", default=defaults["out"])
    ap.add_argument("--quiet", action="store_true", help="no per-trigger lines")
    ap.add_argument("--no-report", action="store_true")
    ap.add_argument(
        "--per-trigger",
        action="store_true",
        help="serve the queues only inside triggers (continuous=False): no worker between triggers",
    )
    ap.add_argument(
        "--side-by-side",
        action="store_true",
        help="run a plan's strategies at once, one streaming query each, over the same rows replayed at the same "
        "instants: the machine's other load falls on all of them alike",
    )
    return ap


def spare_cores(wall_s: float = 2.0) -> float:
    """The cores this process gets now when it asks for all it may use: one thread per usable core
    (its CPU affinity) hashing in GIL-free calls for ``wall_s`` seconds, their CPU seconds over the
    wall seconds. On an idle machine it is the usable cores; on a shared one, what is left of them."""
    import hashlib
    import threading

    from sparkqos.runtime.assembly import usable_cores

    got: list[float] = []

    def burn() -> None:
        t0, end = time.thread_time(), time.perf_counter() + wall_s
        while time.perf_counter() < end:
            hashlib.pbkdf2_hmac("sha256", b"spare", b"cores", 2_000)
        got.append(time.thread_time() - t0)

    threads = [threading.Thread(target=burn) for _ in range(usable_cores())]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(got) / wall_s


def concurrently(calls: Mapping[str, Callable[[], Any]]) -> dict[str, Any]:
    """Each call on its own thread, all at once; their results by key (the first error raised)."""
    import concurrent.futures

    if len(calls) == 1:
        return {k: f() for k, f in calls.items()}
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(calls)) as pool:
        futures = {k: pool.submit(f) for k, f in calls.items()}
        return {k: f.result() for k, f in futures.items()}


def run_experiment(
    title: str,
    args,
    plans: Mapping[str, Callable[[], Any]],
    strategies: list[str],
    strategy_params: Callable[[str, str], Mapping[str, Any]] | None = None,
    qos: Callable[[str, str], Any] | None = None,
    rate_profile=None,
    run_name: Callable[[str, str], str] | None = None,
    executor_args: Mapping[str, Any] | None = None,
) -> tuple[list[tuple[str, str, RunStats]], int]:
    """Record one trace, run every (plan, strategy) through Spark in one session, print a line per
    trigger; ``plans`` maps a plan name to a function giving its queries as
    :func:`synthetic_transforms` does (transforms, classes, priorities). Returns [(plan, strategy,
    stats)] and the trace's row count. The runs of a plan follow one another, or with
    ``args.side_by_side`` run at once (:func:`run_side_by_side`). ``executor_args``: every run's
    executor options beyond the runner's."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    trace = out / "trace.parquet"
    kind = getattr(args, "trace", "bursty")
    if kind == "vessels":
        rows = write_vessel_trace(trace, args.rate, args.seconds, seed=args.seed, rate_profile=rate_profile)
    else:
        rows = write_bursty_trace(
            trace, args.rate, args.seconds, seed=args.seed, off_scale=args.off_scale, rate_profile=rate_profile
        )
    pairs = [(p, s) for p in plans for s in strategies]
    per_run = args.seconds + 20 + 6  # trace, replay lead, drain and stop
    arrivals = "real AIS report instants, compressed" if kind == "vessels" else "bursty"
    print(
        f"{title}: trace {rows} rows over {args.seconds:g}s ({arrivals}, mean {args.rate:g}/s); {len(pairs)} runs "
        f"({', '.join(plans)} × {', '.join(strategies)}); expect about {len(pairs) * per_run / 60 + 0.5:.0f} min "
        f"(more on a loaded machine)",
        flush=True,
    )
    spark = session(title)

    def run(p: str, s: str, **kw: Any) -> RunStats:
        """Plan ``p`` under strategy ``s`` (``name:variant`` runs ``name``) over the trace."""
        return run_sparkqos(
            spark,
            trace,
            plans[p](),
            s.split(":")[0],
            out=out,
            trace_s=args.seconds,
            trigger_s=args.trigger,
            serve_s=getattr(args, "serve", None),
            strategy_params=strategy_params(p, s) if strategy_params else None,
            qos=qos(p, s) if qos else None,
            executor_args=executor_args,
            **kw,
        )

    # A throw-away first streaming query per plan: the first one of a session pays start-up costs
    # (source runner, workers, JIT) that would otherwise land on whichever strategy runs first, and
    # a query's first micro-batch comes seconds after start() (planning, the source's reader; the
    # more so the bigger the plan): rows replayed before it would all wait for it, whatever the
    # strategy. Each plan's replays begin that long after their query starts, with a margin.
    lead: dict[str, float] = {}
    for p in plans:
        s0 = next(s for pp, s in pairs if pp == p)
        print(f"-- warm-up run of {p} (not measured)", flush=True)
        warm = run(p, s0, name="_warmup", input_rows=1, drain=False, quiet=True, lead_s=2.0)
        drop_metrics(out, "_warmup")
        shutil.rmtree(out / "outputs" / "_warmup", ignore_errors=True)
        late = (warm.first_progress - warm.replay_start) if warm.first_progress is not None else 0.0
        lead[p] = max(4.0, late + 2.0 + 3.0)
        print(
            f"   its first micro-batch came {late + 2.0:.1f}s after the run began (compiling the transforms included); "
            f"replays begin {lead[p]:.1f}s after it",
            flush=True,
        )
    results = []
    t0 = time.time()
    common = dict(
        input_rows=rows,
        budget_s=args.budget or None,
        quiet=args.quiet,
        continuous=not getattr(args, "per_trigger", False),
    )
    if getattr(args, "side_by_side", False):
        for p in plans:
            mine = {(run_name(p, s) if run_name else f"{p}-{s}"): s for pp, s in pairs if pp == p}
            print(f"-- {p}: {', '.join(mine)} side by side  (elapsed {time.time() - t0:.0f}s)", flush=True)
            done = run_side_by_side(
                spark,
                trace,
                {n: (plans[p](), s.split(":")[0]) for n, s in mine.items()},
                out=out,
                trace_s=args.seconds,
                trigger_s=args.trigger,
                lead_s=lead[p],
                serve_s=getattr(args, "serve", None),
                strategy_params=lambda n, p=p, mine=mine: strategy_params(p, mine[n]) if strategy_params else None,
                qos=lambda n, p=p, mine=mine: qos(p, mine[n]) if qos else None,
                executor_args=executor_args,
                **common,
            )
            results += [(p, s, done[n]) for n, s in mine.items()]
    else:
        for i, (p, s) in enumerate(pairs):
            name = run_name(p, s) if run_name else f"{p}-{s}"
            print(f"-- run {i + 1}/{len(pairs)}: {name}  (elapsed {time.time() - t0:.0f}s)", flush=True)
            results.append((p, s, run(p, s, name=name, lead_s=lead[p], **common)))
    spark.stop()
    return results, rows


@dataclass(frozen=True)
class Verdict:
    """One claim's outcome in one run: ``status`` HELD, NOT HELD, INCONCLUSIVE or NOT RUN (the
    check could not run; ``detail`` says why), the measured ``detail``, the one number it rests on
    (``measure``, e.g. a ratio) and the paper's figure."""

    claim: str
    status: str
    detail: str
    measure: float | None = None
    paper: str = ""

    @property
    def line(self) -> str:
        return f"[{self.status}] {self.claim}: {self.detail}"


#: Every verdict made in this process, in order: jobs/experiments/claims.py reads them after each
#: experiment's ``main`` instead of parsing printed lines.
RECORDED: list[Verdict] = []


def verdict_line(
    claim: str, held: bool, detail: str, *, measure: float | None = None, paper: str = "", status: str | None = None
) -> str:
    """``[HELD] claim: detail`` or ``[NOT HELD] claim: detail`` (``status`` INCONCLUSIVE or NOT RUN
    overrides ``held``); recorded in :data:`RECORDED` with its ``measure`` and the ``paper``'s figure."""
    v = Verdict(claim, status or ("HELD" if held else "NOT HELD"), detail, measure, paper)
    RECORDED.append(v)
    return v.line


def verdict(claim: str, held: bool, detail: str, **kw: Any) -> str:
    """:func:`verdict_line`, printed."""
    line = verdict_line(claim, held, detail, **kw)
    print(line, flush=True)
    return line


def finish_experiment(args, title: str, table: str, verdicts: list[str]) -> None:
    out = Path(args.out)
    (out / "summary.txt").write_text(table + "\n" + "\n".join(verdicts) + "\n")
    if not args.no_report:
        path = render_report(out, title)
        if path:
            print(f"report: {path}", flush=True)


def chain_plan(queries: Mapping[str, list[tuple[float, float]]]) -> Plan:
    """One operator chain per query over stream S: ``{query: [(σ, cost), ...]}`` leaf → root,
    operators named query + position."""
    ops = []
    for q, chain in queries.items():
        below = "S"
        for i, (sigma, cost) in enumerate(chain):
            ops.append(Operator(f"{q}{i}", (below,), sigma, cost, q))
            below = f"{q}{i}"
    return Plan(ops, streams=["S"])


def cost_unit_for(plan, rate: float, load: float) -> float:
    """Seconds per unit of declared cost so that ``rate`` rows/s bring ``load`` × one core of work
    (every operator path reads each row of the one stream once)."""
    per_row = sum(plan.service_time(p) for p in plan.paths)
    if not per_row > 0:
        raise ValueError("the plan declares no work")
    return load / (rate * per_row)
