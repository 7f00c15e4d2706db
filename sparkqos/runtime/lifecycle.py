"""Where a :class:`~sparkqos.runtime.trigger.TriggerLoop` is in its life: one value, one table of moves.

A loop is built :attr:`~Life.NEW`; the first trigger (or :meth:`~TriggerLoop.restore`) loads the
checkpoint and makes it :attr:`~Life.READY`. With the continuous worker a trigger takes the
executor from it (:attr:`~Life.IN_TRIGGER`) and hands it back when its commit is taken.
``close()`` (the stream is stopped, from another thread than the trigger's) makes it
:attr:`~Life.CLOSED`: a trigger still in flight, or one after it, runs but hands the executor to no
worker until ``reopen()``. A trigger or ``finish()`` that raises leaves it :attr:`~Life.FAILED`
for good: its memory is ahead of its checkpoint, and only a fresh loop restored from the
checkpoint goes on.

>>> life = Lifecycle()
>>> for event in ("close", "restore", "trigger", "reopen", "trigger", "hand back"):
...     moved = life.step(event)
...     print(f"{event} -> {life.state.name}")
close -> NEW_CLOSED
restore -> CLOSED
trigger -> CLOSED
reopen -> READY
trigger -> IN_TRIGGER
hand back -> READY
>>> life.step("fail"), life.step("reopen"), life.state
(True, False, <Life.FAILED: 'failed'>)

This module does not import pyspark.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable
from typing import Literal

__all__ = ["Event", "Life", "Lifecycle"]


class Life(enum.Enum):
    """The states of a trigger loop (see the module)."""

    NEW = "new"  # restore() has not run: the executor is empty, the checkpoint unread
    NEW_CLOSED = "new, closed"  # close() before restore(): restore() leads to CLOSED
    READY = "ready"  # restored, between triggers: the continuous worker, if any, holds the executor
    IN_TRIGGER = "in trigger"  # a trigger holds the executor (the worker paused) until it hands it back
    CLOSED = "closed"  # restored and closed: triggers hand the executor to no worker until reopen()
    FAILED = "failed"  # a trigger or finish() raised: the memory is ahead of the checkpoint


#: What happens to a loop: it is restored, a trigger takes the executor or hands it back, the
#: stream is closed or reopened, a trigger or finish() fails.
Event = Literal["restore", "trigger", "hand back", "close", "reopen", "fail"]

#: Every move a loop makes; an event not listed for a state leaves it as it is (a second close, a
#: trigger after close: it hands nothing back, a reopen of a failed loop).
MOVES: dict[tuple[Life, Event], Life] = {
    (Life.NEW, "restore"): Life.READY,
    (Life.NEW, "close"): Life.NEW_CLOSED,
    (Life.NEW_CLOSED, "restore"): Life.CLOSED,
    (Life.NEW_CLOSED, "reopen"): Life.NEW,
    (Life.READY, "trigger"): Life.IN_TRIGGER,
    (Life.READY, "close"): Life.CLOSED,
    (Life.READY, "fail"): Life.FAILED,
    (Life.IN_TRIGGER, "hand back"): Life.READY,
    (Life.IN_TRIGGER, "close"): Life.CLOSED,
    (Life.IN_TRIGGER, "fail"): Life.FAILED,
    (Life.CLOSED, "reopen"): Life.READY,
    (Life.CLOSED, "fail"): Life.FAILED,
}


class Lifecycle:
    """A loop's :class:`Life`, moved along :data:`MOVES` under a lock: ``close()`` comes from the
    thread that stops the stream while a trigger's thread may be handing the executor back."""

    def __init__(self) -> None:
        self._state = Life.NEW
        self._lock = threading.Lock()

    @property
    def state(self) -> Life:
        return self._state

    def step(self, event: Event, then: Callable[[], None] | None = None) -> bool:
        """Apply ``event``; True if the state changed. ``then`` runs when it did, still under the
        lock, so no other event comes between the move and what follows from it."""
        with self._lock:
            after = MOVES.get((self._state, event), self._state)
            if after is self._state:
                return False
            self._state = after
            if then is not None:
                then()
            return True
