"""A mailbox: how other threads ask the thread that owns some state to act on it (Flink's model).

In Flink a task's thread owns its operators and their state; no other thread touches them. Other
threads put *mail* (an action) in the task's mailbox, and the task's thread runs it between two
units of its own work. :class:`Mailbox` is that for the continuous worker
(:class:`~sparkqos.runtime.continuous.ContinuousWorker`): any thread :meth:`~Mailbox.put`\\ s a
:class:`Letter`; the owner :meth:`~Mailbox.take`\\ s letters between two runs of its work and
answers each one once it has acted on it. An urgent letter sets :attr:`Mailbox.has_mail`, which the
owner's work checks between units (never inside one) to return early. When the owner ends, it
:meth:`~Mailbox.close`\\ s its mailbox: a later put says nobody will read it, and the letters still
inside are answered unread, so no sender waits for an owner that is gone.

This module does not import pyspark.
"""

from __future__ import annotations

import enum
import threading
from collections import deque
from typing import Any

__all__ = ["Delivery", "Letter", "Mailbox"]


class Letter:
    """What a thread asks of a mailbox's owner: ``kind`` (the owner's vocabulary) and ``arg``.
    ``answered`` is set once the owner has acted on it, or ended without reading it."""

    __slots__ = ("answered", "arg", "kind")

    def __init__(self, kind: Any, arg: Any = None):
        self.kind = kind
        self.arg = arg
        self.answered = threading.Event()

    def answer(self) -> None:
        self.answered.set()

    def __repr__(self) -> str:
        return f"Letter({self.kind!r})"


class Delivery(enum.Enum):
    """What became of a letter put in a mailbox."""

    #: The owner has ended: nobody will read the letter.
    CLOSED = "closed"
    #: The owner was waiting for letters and doing nothing else: it takes this one the next time
    #: it looks (an owner that reads every letter before it works again acts on it before any work).
    PARKED = "parked"
    #: The owner is at work: it takes the letter at its next safe point.
    QUEUED = "queued"


class Mailbox:
    """Letters for one owner thread, oldest first.

    >>> box = Mailbox()
    >>> box.put(Letter("pause"), urgent=True), box.has_mail.is_set()
    (<Delivery.QUEUED: 'queued'>, True)
    >>> box.take(0.0), box.has_mail.is_set(), box.take(0.0)
    (Letter('pause'), False, None)
    >>> box.close(), box.put(Letter("resume"))
    (True, <Delivery.CLOSED: 'closed'>)
    """

    def __init__(self) -> None:
        self._letters: deque[Letter] = deque()
        self._cond = threading.Condition()
        self._open = True
        self._parked = False  # the owner waits in take()
        #: Set while an urgent letter waits: the owner's work stops at its next safe point.
        self.has_mail = threading.Event()

    def put(self, letter: Letter, urgent: bool = False) -> Delivery:
        """Any thread: leave ``letter`` for the owner (``urgent``: stop its work in flight at the
        next safe point, so it reads the letter now)."""
        with self._cond:
            if not self._open:
                return Delivery.CLOSED
            self._letters.append(letter)
            if urgent:
                self.has_mail.set()
            self._cond.notify()
            return Delivery.PARKED if self._parked else Delivery.QUEUED

    def take(self, timeout_s: float) -> Letter | None:
        """The owner: the oldest letter, waiting up to ``timeout_s`` for one (0: not at all);
        None when none came."""
        with self._cond:
            if not self._letters and timeout_s > 0:
                self._parked = True
                try:
                    self._cond.wait(timeout_s)
                finally:
                    self._parked = False
            if not self._letters:
                return None
            letter = self._letters.popleft()
            if not self._letters:
                self.has_mail.clear()
            return letter

    def close(self, only_if_empty: bool = False) -> bool:
        """The owner ends: later puts are refused, and the letters still inside are answered
        unread. ``only_if_empty``: close only when no letter waits (False: one does; take it)."""
        with self._cond:
            if only_if_empty and self._letters:
                return False
            self._open = False
            left = list(self._letters)
            self._letters.clear()
            self.has_mail.clear()
        for letter in left:
            letter.answer()
        return True
