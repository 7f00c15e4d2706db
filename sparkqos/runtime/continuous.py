"""The continuous worker: serves an executor's queues on a thread between triggers.

Without it the executor works only inside ``foreachBatch``, for a budget shorter than the trigger,
and idles while Spark does its own per-trigger work: the trigger's cadence, not the strategy,
decides delay. With ``RunConfig(continuous=True)`` the
:class:`~sparkqos.runtime.trigger.TriggerLoop` hands the executor to a :class:`ContinuousWorker`,
which runs ``executor.run(slice_s)`` again and again on its own thread, waits for a letter when
nothing can run, and goes on when a trigger queues new rows. pyarrow kernels release the GIL, so
the work overlaps what Spark does between triggers.

The worker's thread owns the executor and its own state (serving or not, since when), as a task
thread does in Flink's mailbox model: other threads never set its flags, they put letters in its
:class:`~sparkqos.runtime.mailbox.Mailbox` — pause, resume, close, or "tell me when this no longer
holds" — and the thread reads them between two slices, never inside one. A pause or a close is
urgent: the slice in flight returns after its current unit (never inside an operator run).
:meth:`~ContinuousWorker.pause` returns once the thread has read the letter (or was waiting for
letters, doing nothing, so that it reads it before any work): from then on the trigger's thread
owns the executor alone — it takes the outputs, ingests, checkpoints — and
:meth:`~ContinuousWorker.resume` hands it back. The executor's own locks (cluster threads) are
taken only inside a slice.

This module does not import pyspark.
"""

from __future__ import annotations

import contextlib
import enum
import os
import threading
import time
from collections.abc import Callable

from sparkqos.errors import check_number
from sparkqos.executor.loop import Executor, RunReport
from sparkqos.runtime.mailbox import Delivery, Letter, Mailbox

__all__ = ["ContinuousWorker"]


class _Ask(enum.Enum):
    """What a letter to the worker asks (:class:`~sparkqos.runtime.mailbox.Letter`'s ``kind``)."""

    PAUSE = "pause"  # stop serving; answered once the worker holds no executor work
    RESUME = "resume"  # serve again (and the orphan clock starts over)
    CLOSE = "close"  # end the thread
    WATCH = "watch"  # answered once arg() is false after a slice, or the worker stops serving


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
        self.executor = executor
        self.slice_s = float(slice_s)
        self.name = name
        self.served = RunReport()
        self.slices = 0
        self.on_event = on_event
        self.after_slice = after_slice
        self.nice = nice
        self._counters = threading.Lock()  # served and slices: added by the thread, taken by a trigger
        self._error: BaseException | None = None  # set by the thread as it ends, taken by pause()
        self._lock = threading.Lock()  # which thread and mailbox are the current ones
        self._mailbox: Mailbox | None = None  # None or closed: no thread reads it
        self._thread: threading.Thread | None = None

    @property
    def alive(self) -> bool:
        """The thread is running (paused or not)."""
        return self._thread is not None and self._thread.is_alive()

    # -- the trigger's side: letters ---------------------------------------------------------------
    def pause(self) -> None:
        """Stop at the next safe point and stay stopped: on return the caller owns the executor.
        Re-raises the error a slice failed with, if any."""
        if self.on_event is not None:
            self.on_event("pause")
        letter = Letter(_Ask.PAUSE)
        # PARKED: the thread was waiting for letters and reads them all before it works again
        if self._post(letter, urgent=True) is Delivery.QUEUED:
            letter.answered.wait()
        error, self._error = self._error, None
        if error is not None:
            raise error

    def resume(self) -> None:
        """Hand the executor back (starting the thread at the first call, or after :meth:`close`):
        it serves until nothing can run, then waits for the next resume."""
        letter = Letter(_Ask.RESUME)
        with self._lock:
            if self._mailbox is None or self._mailbox.put(letter) is Delivery.CLOSED:
                self._mailbox = Mailbox()
                self._mailbox.put(letter)
                self._thread = threading.Thread(target=self._main, args=(self._mailbox,), name=self.name, daemon=True)
                self._thread.start()

    def wait_while(self, busy: Callable[[], bool], timeout_s: float) -> bool:
        """Wait, at most ``timeout_s``, while ``busy()`` holds and the worker has work it can run
        (the worker checks after each slice); True if ``busy()`` still holds at the end."""
        if not busy():
            return False
        letter = Letter(_Ask.WATCH, (busy, time.monotonic() + timeout_s))
        if self._post(letter) is not Delivery.CLOSED:
            letter.answered.wait(timeout_s)
        return busy()

    def take_counters(self) -> RunReport:
        """What the slices did since the last call (units, operator runs, rows consumed, busy and
        CPU seconds), and reset it."""
        with self._counters:
            out, self.served = self.served, RunReport()
            return out

    def close(self, timeout_s: float | None = None) -> None:
        """Stop the thread after its slice in flight and join it; the worker is left paused
        (a later :meth:`resume` starts a new thread)."""
        with self._lock:
            thread = self._thread
            if self._mailbox is not None:
                self._mailbox.put(Letter(_Ask.CLOSE), urgent=True)
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)
        with self._lock:
            if self._thread is thread and (thread is None or not thread.is_alive()):
                self._thread = None

    def _post(self, letter: Letter, urgent: bool = False) -> Delivery:
        with self._lock:
            return Delivery.CLOSED if self._mailbox is None else self._mailbox.put(letter, urgent)

    # -- the worker's side: its thread -------------------------------------------------------------
    def _main(self, mailbox: Mailbox) -> None:
        """Read every letter, then serve one slice if serving, and again; wait for a letter when
        not serving. The thread ends on a close, an error, or no resume for ``orphan_s``."""
        self._lower_priority()
        serving = False  # the thread starts with a resume in its mailbox
        resumed_at = time.monotonic()
        watching: list[Letter] = []
        try:
            while True:
                letter = mailbox.take(0.0 if serving else min(self.orphan_s, 5.0))
                if letter is None:
                    if time.monotonic() - resumed_at > self.orphan_s and mailbox.close(only_if_empty=True):
                        return  # the stream is gone: the next resume() starts a new thread
                    if serving:
                        serving = not self._slice(mailbox).idle  # idle: nothing can run until a trigger queues more
                        watching = [w for w in watching if not _released(w, serving)]
                    continue
                # a letter touches no executor state: after a pause another thread may own it
                if letter.kind is _Ask.CLOSE:
                    return
                if letter.kind is _Ask.WATCH:
                    watching.append(letter)
                else:
                    serving = letter.kind is _Ask.RESUME
                    resumed_at = time.monotonic() if serving else resumed_at
                    letter.answer()
                if not serving:
                    watching = [w for w in watching if not _released(w, serving)]
        except BaseException as exc:  # noqa: BLE001 - handed to the trigger's thread by pause()
            self._error = exc
        finally:
            mailbox.close()
            for w in watching:
                w.answer()

    def _slice(self, mailbox: Mailbox) -> RunReport:
        """One slice: until ``slice_s`` is spent, nothing can run, or an urgent letter comes."""
        report = self.executor.run(self.slice_s, stop=mailbox.has_mail)
        if self.on_event is not None and report.rows_consumed:
            self.on_event("slice")
        if self.after_slice is not None:
            self.after_slice(report)
        with self._counters:
            self.served.add(report)
            self.slices += 1
        return report

    def _lower_priority(self) -> None:
        if self.nice and hasattr(os, "setpriority"):
            # this thread only (Linux: a thread's id is a process id for setpriority); raising
            # one's own nice value needs no privilege
            with contextlib.suppress(OSError):
                os.setpriority(
                    os.PRIO_PROCESS, threading.get_native_id(), min(19, os.getpriority(os.PRIO_PROCESS, 0) + self.nice)
                )


def _released(watch: Letter, serving: bool) -> bool:
    """Answer a waiting :meth:`ContinuousWorker.wait_while` when the worker stopped serving, its
    time is up or its condition no longer holds (checked after a slice, while the worker owns the
    executor; a condition that raises is answered too: the waiter calls it again in its own
    thread and gets the error there)."""
    busy, by = watch.arg
    try:
        done = not serving or time.monotonic() >= by or not busy()
    except Exception:  # noqa: BLE001
        done = True
    if done:
        watch.answer()
    return done
