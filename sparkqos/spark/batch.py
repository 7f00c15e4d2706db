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

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from sparkqos.errors import StoppedInTrigger
from sparkqos.executor.plan import CompiledPlan
from sparkqos.report.console import service_words
from sparkqos.runtime.config import RunConfig
from sparkqos.runtime.trigger import TriggerLoop
from sparkqos.spark.spark_part import evaluate_parts, reads_input, use_session


def describe_jobs(spark: Any, name: str, batch_id: int, last: dict[str, Any] | None) -> None:
    """Name the Spark jobs of this trigger after sparkqos's figures of the one before — queued
    rows, p99 delay per query class, the strategy in force, targets met and rows shed — so Spark's UI (Jobs, and the
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
        text += service_words(last).replace("  ", ", ")
    sc.setJobDescription(text)


class BatchFunction:
    """``foreachBatch(BatchFunction(compiled, config, loop))``: one trigger per call."""

    def __init__(self, compiled: CompiledPlan, config: RunConfig, loop: TriggerLoop | None = None, gate: StopGate | None = None):
        self.compiled = compiled
        self.config = config
        self._loop = loop
        self._gate = gate

    def __getstate__(self) -> dict[str, Any]:
        # Client-side callbacks cannot run where the copy runs (and may not pickle): the client
        # follows the run through the metrics table instead.
        return {"compiled": self.compiled, "config": self.config.replace(on_progress=None, on_delays=None)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.compiled = state["compiled"]
        self.config = state["config"]
        self._loop = None
        self._gate = None

    @property
    def loop(self) -> TriggerLoop:
        """The loop this function feeds, built (and restored from the checkpoint) on first use."""
        if self._loop is None:
            self._loop = TriggerLoop(self.compiled, self.config)
        return self._loop

    def __call__(self, batch_df, batch_id: int) -> None:
        with stop_as_spark_reads_it(batch_id):
            if self._gate is not None:
                self._gate.enter(batch_df)
            self._trigger(batch_df, batch_id)

    def _trigger(self, batch_df, batch_id: int) -> None:
        loop = self.loop
        compiled = self.compiled

        def read() -> tuple[pa.Table, dict[str, Any], Any]:
            parts: dict[str, Any] = {}
            later = None
            if compiled.spark_parts:
                # the parts of queries Spark evaluates, higher classes first, before the input's
                # own rows are read; with early writes, the lower classes' parts only once the top
                # class's rows are written
                now, rest = _split_parts(compiled, loop.top_class if loop.defers_lower_parts else None)
                t0 = time.perf_counter()
                parts = _evaluate(compiled, now, batch_df)
                loop.phase_s["spark"] += time.perf_counter() - t0
                if rest:
                    later = lambda: _evaluate(compiled, rest, batch_df)  # noqa: E731
            describe_jobs(batch_df.sparkSession, self.config.name, batch_id, loop.progress.last)
            use_session(compiled, batch_df.sparkSession)  # aggregates Spark computes, at this trigger's end
            t0 = time.perf_counter()
            if reads_input(compiled):
                table = batch_df.toArrow()  # Spark reads the source here
            else:
                table = compiled.sources[loop.ingest.stream].empty_table()
            loop.phase_s["toArrow"] += time.perf_counter() - t0
            return table, parts, later

        # a batch already checkpointed (replayed after a crash) is not read again
        loop.process(read, batch_id)


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


class StopGate:
    """Where a stop lands: at the start of a ``foreachBatch`` call, before the trigger starts any
    Spark job, rather than inside one, whose cancelled tasks' Python workers may print a broken
    pipe on their way out.

    :func:`stop_between_triggers` arms it; the next call of the foreachBatch function then waits
    in :meth:`enter` until ``query.stop()`` has marked the query stopped and interrupted its
    thread, and fails with that interruption, which Spark takes as the stop. Spark replays the
    batch, which nothing has touched, on the next start. One gate per start of a query."""

    def __init__(self, hold_s: float = 60.0):
        self.hold_s = hold_s
        self.armed = threading.Event()
        self.reached = threading.Event()
        self.stopping = threading.Event()

    def enter(self, batch_df) -> None:
        """At the start of the foreachBatch function: nothing unless armed; armed, hold the trigger
        until the stop interrupts its thread (at most ``hold_s``)."""
        if not self.armed.is_set():
            return
        self.reached.set()
        self.stopping.wait(self.hold_s)
        # Spark runs the function's calls into the JVM on the stream thread, which query.stop()
        # interrupts after marking the query stopped: a short sleep there raises the interruption.
        jvm = batch_df.sparkSession.sparkContext._jvm
        by = time.time() + self.hold_s
        while time.time() < by:
            jvm.java.lang.Thread.sleep(20)
        raise TimeoutError(f"the stream was asked to stop but was not stopped within {self.hold_s:g} s")


def stop_between_triggers(query, wait_s: float, gate: StopGate | None = None) -> None:
    """Stop a streaming query between triggers: wait up to ``wait_s`` for the running trigger to
    end first, so that the batch it works on is committed rather than replayed on the next start.
    With ``gate`` (the foreachBatch function's), a trigger that starts meanwhile — when triggers
    run late Spark starts the next one at once — is held at the start of the function and
    stopped there. A trigger that outlasts the wait is stopped inside: :func:`stop_as_spark_reads_it`
    keeps that stop quiet too."""
    if query is None:
        return
    if gate is not None:
        gate.armed.set()
    by = time.time() + wait_s
    while query.isActive and query.status.get("isTriggerActive") and time.time() < by:
        if gate is not None and gate.reached.is_set():
            break
        time.sleep(0.05)
    if gate is not None:
        gate.stopping.set()
    query.stop()


#: Java exceptions Spark's stream thread takes as its own stop (``StreamExecution.IO_EXCEPTION_NAMES``).
_INTERRUPTIONS = (
    "java.lang.InterruptedException",
    "java.io.InterruptedIOException",
    "java.nio.channels.ClosedByInterruptException",
)
#: How a Python traceback names a failed call into the JVM; Spark's stream thread searches the
#: error of a Python ``foreachBatch`` function for it, then for one of :data:`_INTERRUPTIONS`.
_PY4J_CALL_FAILED = "py4j.protocol.Py4JJavaError: An error occurred while calling"


@contextlib.contextmanager
def stop_as_spark_reads_it(batch_id: int) -> Iterator[None]:
    """Around a ``foreachBatch`` function: when ``query.stop()`` lands inside the trigger (a Spark
    job of it cancelled, or a call into the JVM interrupted), raise :class:`StoppedInTrigger`
    with a one-line message instead of the Py4J error and its Java stack trace.

    Spark's stream thread receives the function's error as the text of its Python traceback
    and, to tell a stop from a failure, matches it against the regular expression
    ``Py4JJavaError: An error occurred while calling((.|\\r\\n|\\r|\\n)*)(InterruptedException|…)``.
    Java runs each repetition of that group as a nested call, so over a traceback that carries
    a Java stack trace (about 12,000 characters) the thread dies of a StackOverflowError and
    prints a thousand ``java.util.regex.Pattern`` frames. The one-line message still says what
    Spark looks for — the cancelled job with the query's run id, or the interruption — so Spark
    ends the query as stopped, prints nothing, and replays the uncommitted batch on the next
    start."""
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - only a stop is replaced; anything else re-raised as it is
        stop = _stop_in(exc)
        if stop is None:
            raise
        raise StoppedInTrigger(batch_id, stop) from None


def _stop_in(exc: BaseException) -> str | None:
    """``exc`` (or an exception it was raised from or during) as a one-line account of a stop —
    the Java exceptions of a failed JVM call, innermost last — or None when it is no stop."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        java = getattr(exc, "java_exception", None)  # py4j.protocol.Py4JJavaError
        if java is not None:
            chain = _java_chain(java)
            interrupted = next((c for c in chain if c.startswith(_INTERRUPTIONS)), None)
            cancelled = any(c.startswith("org.apache.spark.SparkException") and "cancelled" in c for c in chain)
            if interrupted is not None:  # in the form of Spark's expression, with nothing after it
                return " <- ".join(chain) + f"; {_PY4J_CALL_FAILED} the JVM: {interrupted.split(':')[0]}"
            if cancelled:  # Spark finds "SparkException", "cancelled" and its job group (the run id)
                return " <- ".join(chain)
        exc = exc.__cause__ or exc.__context__
    return None


def _java_chain(java: Any, most: int = 6) -> list[str]:
    """The first line of ``toString()`` of a Java exception and of its causes."""
    chain: list[str] = []
    try:
        while java is not None and len(chain) < most:
            chain.append((str(java.toString()).splitlines() or [""])[0])
            java = java.getCause()
    except Exception:  # noqa: BLE001 - the JVM is going away: what was read is enough
        pass
    return chain
