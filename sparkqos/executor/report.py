"""What a call of the executor did: :class:`RunReport`."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RunReport"]


@dataclass
class RunReport:
    """What one call of :meth:`~sparkqos.executor.loop.Executor.run` did."""

    units: int = 0
    operator_runs: int = 0
    rows_consumed: int = 0
    seconds: float = 0.0
    idle: bool = False
    #: CPU seconds the executor's threads used meanwhile (``time.thread_time`` of the calling
    #: thread, or the sum over the cluster threads): over ``seconds`` it is the cores the run used.
    cpu_s: float = 0.0

    def add(self, other: RunReport) -> None:
        """Add ``other``'s counts and times to this report (``idle`` is left alone)."""
        self.units += other.units
        self.operator_runs += other.operator_runs
        self.rows_consumed += other.rows_consumed
        self.seconds += other.seconds
        self.cpu_s += other.cpu_s
