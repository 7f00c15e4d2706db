"""What ``foreachBatch`` runs: a small, picklable function carrying configuration only.

Classic PySpark calls it in the driver, the process that built it: it feeds the
:class:`~sparkqos.runtime.trigger.TriggerLoop` it was given, so the handle's progress, ``finish()``
and ``stop()`` see the same executor. Spark Connect (Databricks shared and serverless compute)
pickles it to a long-lived Python worker next to the server: the copy carries the compiled plan
and the :class:`~sparkqos.runtime.config.RunConfig` — never a session, a DataFrame, a lock or the
executor — builds its own loop on the first batch, restored from the checkpoint, and keeps it for
the worker's life. The client then reads progress from the metrics table, not from shared memory.
One code path for both: nothing here asks which kind of session it runs under.
"""

from __future__ import annotations

import time
from typing import Any

from sparkqos.executor.plan import CompiledPlan
from sparkqos.runtime.config import RunConfig
from sparkqos.runtime.trigger import TriggerLoop
from sparkqos.spark.spark_part import evaluate_parts, reads_input


def describe_jobs(spark: Any, name: str, batch_id: int, last: dict[str, Any] | None) -> None:
    """Name the Spark jobs of this trigger after sparkqos's figures of the one before — queued
    rows, p99 delay per query class, the strategy in force — so Spark's UI (Jobs, and the
    streaming query's batches) shows them beside Spark's own. Under Spark Connect the client has
    no SparkContext to name jobs with: nothing is set."""
    try:
        sc = spark.sparkContext
    except Exception:  # noqa: BLE001 - Spark Connect
        return
    text = f"sparkqos {name} batch {batch_id}"
    if last is not None:
        p99: dict[str, float] = {}
        for q in last["queries"]:
            d = q["delayP99_s"]
            if d == d:  # not NaN: the class wrote rows
                p99[q["klass"]] = max(p99.get(q["klass"], 0.0), d)
        classes = ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in sorted(p99.items())) or "-"
        text += f" | before it: queued {last['queuedRows']:.0f} rows, p99 {classes}, strategy {last['strategy']}"
    sc.setJobDescription(text)


class BatchFunction:
    """``foreachBatch(BatchFunction(compiled, config, loop))``: one trigger per call."""

    def __init__(self, compiled: CompiledPlan, config: RunConfig, loop: TriggerLoop | None = None):
        self.compiled = compiled
        self.config = config
        self._loop = loop

    def __getstate__(self) -> dict[str, Any]:
        # Client-side callbacks cannot run where the copy runs (and may not pickle): the client
        # follows the run through the metrics table instead.
        return {"compiled": self.compiled, "config": self.config.replace(on_progress=None, on_delays=None)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.compiled = state["compiled"]
        self.config = state["config"]
        self._loop = None

    @property
    def loop(self) -> TriggerLoop:
        """The loop this function feeds, built (and restored from the checkpoint) on first use."""
        if self._loop is None:
            self._loop = TriggerLoop(self.compiled, self.config)
        return self._loop

    def __call__(self, batch_df, batch_id: int) -> None:
        loop = self.loop
        compiled = self.compiled
        parts: dict[str, Any] = {}
        later = None
        if compiled.spark_parts and batch_id > loop.restore():
            # the parts of queries Spark evaluates, higher classes first, before the input's own
            # rows are read (a batch already checkpointed is not evaluated again); with early
            # writes, the lower classes' parts only once the top class's rows are written
            now, rest = _split_parts(compiled, loop.top_class if loop.defers_lower_parts else None)
            t0 = time.perf_counter()
            parts = _evaluate(compiled, now, batch_df)
            loop.phase_s["spark"] += time.perf_counter() - t0
            if rest:
                later = lambda: _evaluate(compiled, rest, batch_df)  # noqa: E731
        describe_jobs(batch_df.sparkSession, self.config.name, batch_id, loop.progress.last)
        t0 = time.perf_counter()
        if reads_input(compiled):
            table = batch_df.toArrow()  # Spark reads the source here
        else:
            table = compiled.sources[loop.ingest.stream].empty_table()
        loop.phase_s["toArrow"] += time.perf_counter() - t0
        loop.process(table, batch_id, parts, later)


def _split_parts(compiled: CompiledPlan, top: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The Spark-evaluated parts to run before the trigger serves (all of them, or the top
    class's when ``top`` is given) and those to run once the top class's rows are written."""
    plan = compiled.plan
    if top is None:
        return dict(compiled.spark_parts), {}
    now = {s: p for s, p in compiled.spark_parts.items() if plan.queries[p.query].klass == top}
    return now, {s: p for s, p in compiled.spark_parts.items() if s not in now}


def _evaluate(compiled: CompiledPlan, parts: dict[str, Any], batch_df) -> dict[str, Any]:
    tables, seconds = evaluate_parts(parts, compiled.plan.classes, batch_df)
    return {s: (t, seconds[s]) for s, t in tables.items()}


def stop_between_triggers(query, wait_s: float) -> None:
    """Stop a streaming query between triggers: wait up to ``wait_s`` for the running trigger to
    end first. Stopping inside a trigger that is reading a Python data source made Spark's stream
    thread die of a StackOverflowError in its own error handling (harmless — the trigger is
    replayed on restart — but a page of stack trace)."""
    if query is None:
        return
    by = time.time() + wait_s
    while query.isActive and query.status.get("isTriggerActive") and time.time() < by:
        time.sleep(0.05)
    query.stop()
