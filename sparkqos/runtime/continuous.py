"""The continuous worker: serves an executor's queues on a thread between triggers.

Without it the executor works only inside ``foreachBatch``, for a budget shorter than the trigger,
and idles while Spark does its own per-trigger work: the trigger's cadence, not the strategy,
decides delay. With ``RunConfig(continuous=True)`` the
:class:`~sparkqos.runtime.trigger.TriggerLoop` hands the executor to a :class:`ContinuousWorker`,
which runs ``executor.run(slice_s)`` again and again on its own thread, waits on a condition when
nothing can run, and is woken when a trigger queues new rows. pyarrow kernels release the GIL, so
the work overlaps what Spark does between triggers.

Ownership of the executor is handed over explicitly, never shared: the worker touches it only
between :meth:`~ContinuousWorker.resume` and :meth:`~ContinuousWorker.pause`; ``pause`` sets an
event the running slice checks between units (never inside an operator run) and waits until the
slice has returned, so from then on the trigger's thread owns the executor alone — it takes the
outputs, ingests, checkpoints — and ``resume`` hands it back. One lock (the condition's) guards the
worker's flags and counters; the executor's own locks (cluster threads) sit below it and are only
taken inside a slice.

This module does not import pyspark.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable

from sparkqos.errors import check_number
from sparkqos.executor.loop import Executor, RunReport

__all__ = ["ContinuousWorker"]


class ContinuousWorker:
    """Serves ``executor`` in slices of ``slice_s`` seconds on a daemon thread named ``name``.

    It starts paused (:meth:`resume` starts the thread). ``served`` adds up the slices'
    :class:`RunReport` (units, rows consumed, busy and CPU seconds) since the last
    :meth:`take_counters`. A slice that raises stops the worker;
    the next :meth:`pause` re-raises that error in the caller's thread.

    ``orphan_s``: with no :meth:`resume` for that long the thread ends by itself (state kept; the
    next resume starts a new one). Under Spark Connect the worker lives in the server's Python
    worker, which outlives the stream: once the client stops the query no trigger comes again, and
    the thread must not serve (and hold CPU) for the life of that process.

    ``after_slice`` is called on the worker's thread with each slice's :class:`RunReport`, while
    the worker still owns the executor (a :meth:`pause` waits for it): the trigger loop writes the
    new outputs of the classes above the lowest from there (``RunConfig.early_write_s``). Its errors stop the worker
    like a slice's.

    ``on_event`` (crash tests only) is called with ``"slice"`` on the worker's thread after each
    slice that consumed rows, and with ``"pause"`` by :meth:`pause` while a slice may still be in
    flight, before it waits for that slice: the two moments a crash can hit only in this mode.
    """

    def __init__(
        self,
        executor: Executor,
        slice_s: float,
        name: str = "sparkqos-continuous",
        on_event: Callable[[str], None] | None = None,
        orphan_s: float = 60.0,
        after_slice: Callable[[RunReport], None] | None = None,
        nice: int = 0,
    ):
        check_number("slice_s", slice_s, low=0, low_open=True)
        check_number("orphan_s", orphan_s, low=0, low_open=True)
        self.orphan_s = float(orphan_s)
        self._resumed_at = time.monotonic()
        self.executor = executor
        self.slice_s = float(slice_s)
        self.name = name
        self.served = RunReport()
        self.slices = 0
        self.on_event = on_event
        self.after_slice = after_slice
        self.nice = nice
        self._cond = threading.Condition()
        self._stop_slice = threading.Event()  # checked by the running slice between units
        self._paused = True
        self._running = False  # a slice is in flight (the worker owns the executor)
        self._work = False  # there may be something to run (cleared when a slice finds nothing)
        self._closing = False
        self._exiting = False  # the thread has decided to end (it may still be alive a moment)
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    @property
    def alive(self) -> bool:
        """The thread is running (paused or not)."""
        return self._thread is not None and self._thread.is_alive()

    # -- the trigger's side ------------------------------------------------------------------------
    def pause(self) -> None:
        """Stop at the next safe point and stay stopped: on return the caller owns the executor.
        Re-raises the error a slice failed with, if any."""
        if self.on_event is not None:
            self.on_event("pause")
        with self._cond:
            self._paused = True
            self._stop_slice.set()
            while self._running:
                self._cond.wait()
            error, self._error = self._error, None
        if error is not None:
            raise error

    def resume(self) -> None:
        """Hand the executor back (starting the thread at the first call, or after :meth:`close`):
        it serves until nothing can run, then waits for the next resume."""
        with self._cond:
            if self._thread is None or not self._thread.is_alive() or self._exiting:
                self._closing = False
                self._exiting = False
                self._thread = threading.Thread(target=self._main, name=self.name, daemon=True)
                self._thread.start()
            self._paused = False
            self._stop_slice.clear()
            self._work = True
            self._resumed_at = time.monotonic()
            self._cond.notify_all()

    def wait_while(self, busy: Callable[[], bool], timeout_s: float) -> bool:
        """Wait, at most ``timeout_s``, while ``busy()`` holds and the worker has work it can run
        (checked after each slice); True if ``busy()`` still holds at the end."""
        by = time.monotonic() + timeout_s
        with self._cond:
            while busy() and self._work and not self._paused and self._error is None:
                left = by - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(min(left, 1.0))
        return busy()

    def take_counters(self) -> RunReport:
        """What the slices did since the last call (units, operator runs, rows consumed, busy and
        CPU seconds), and reset it."""
        with self._cond:
            out, self.served = self.served, RunReport()
            return out

    def close(self, timeout_s: float | None = None) -> None:
        """Stop the thread after its slice in flight and join it; the worker is left paused
        (a later :meth:`resume` starts a new thread)."""
        with self._cond:
            self._closing = True
            self._paused = True
            self._stop_slice.set()
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)
        with self._cond:
            if self._thread is thread and (thread is None or not thread.is_alive()):
                self._thread = None

    # -- the worker's side -------------------------------------------------------------------------
    def _orphaned(self) -> bool:
        """No trigger has resumed the worker for ``orphan_s``: the stream is gone (call with the lock)."""
        return time.monotonic() - self._resumed_at > self.orphan_s

    def _main(self) -> None:
        if self.nice and hasattr(os, "setpriority"):
            # this thread only (Linux: a thread's id is a process id for setpriority); raising
            # one's own nice value needs no privilege
            with contextlib.suppress(OSError):
                os.setpriority(
                    os.PRIO_PROCESS, threading.get_native_id(), min(19, os.getpriority(os.PRIO_PROCESS, 0) + self.nice)
                )
        cond = self._cond
        while True:
            with cond:
                while not self._closing and (self._paused or not self._work) and not self._orphaned():
                    cond.wait(min(self.orphan_s, 5.0))
                if self._closing or self._orphaned():
                    self._paused = True  # as after close(): the next resume() starts a new thread
                    self._exiting = True
                    return
                self._running = True
            try:
                report = self.executor.run(self.slice_s, stop=self._stop_slice)
                if self.on_event is not None and report.rows_consumed:
                    self.on_event("slice")
                if self.after_slice is not None:
                    self.after_slice(report)
            except BaseException as exc:  # noqa: BLE001 - handed to the trigger's thread by pause()
                with cond:
                    self._error = exc
                    self._running = False
                    self._closing = True
                    self._exiting = True
                    cond.notify_all()
                return
            with cond:
                self._running = False
                self.served.add(report)
                self.slices += 1
                if report.idle:
                    self._work = False  # nothing can run until a trigger queues more
                cond.notify_all()
