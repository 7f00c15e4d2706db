"""The executor's options, one frozen, validated object: :class:`ExecutorOptions`.

:class:`~sparkqos.executor.loop.Executor` takes it as ``options=`` (or its fields as keywords, for
short); the streaming runner carries it in its run configuration (``RunConfig.executor``), so
``sparkqos.stream`` and ``sparkqos.run`` share one set of defaults.

>>> ExecutorOptions(whole_batches=False, ratio=0.5).ratio
0.5
>>> ExecutorOptions(shed=True)
Traceback (most recent call last):
...
sparkqos.errors.ExecutorOptionError: shed=True needs memory_limit_bytes (what to shed beyond)
>>> ExecutorOptions.of(wole_batches=True)  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
sparkqos.errors.ExecutorOptionError: unknown executor option 'wole_batches' (did you mean 'whole_batches'?); options are ...
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass
from typing import Any

from sparkqos.errors import ExecutorOptionError, check_choice, check_number
from sparkqos.executor.queues import RATIO, THRESHOLD
from sparkqos.model.stats import DEFAULT_WEIGHT

__all__ = ["ExecutorOptions"]


@dataclass(frozen=True, kw_only=True)
class ExecutorOptions:
    """How the executor serves (thesis §3.2.4 and fig 4.1).

    ``budget_s``: executor seconds per trigger for the streaming runner (None: the trigger
    interval, 1 s without one); :meth:`Executor.run` takes its budget per call.
    ``whole_batches`` rounds fig 4.1's amount up to whole queued batches for single-input
    operators: fewer, larger kernel calls (benchmarks/executor_overhead.py compares both);
    ``False`` keeps the rule exact, as the papers state it. ``cluster_threads``: threads serving a
    strategy's clusters (COS §4.2) at once; None lets the runner give one per core the process
    may run on to a strategy that serves clusters, 0 serves them in the calling thread.
    ``threads``: the threads one run of a row-wise operator (a select, a projection, a static
    join) may use at once, cut into slices (:mod:`sparkqos.executor.slices`) — only an operator
    whose UDFs, if any, are each declared :func:`~sparkqos.executor.threadsafe.thread_safe`; None
    and 1 run every operator on the thread that serves it (the streaming runner's None: one per
    usable core). ``overhead_share``: the largest share of an operator
    run's time its fixed cost (dispatch, queue bookkeeping, Arrow slicing; measured as it runs,
    :mod:`sparkqos.executor.runcost`) should take: no run is sized below the rows that make it
    so, when they are queued — a cost-aware quantum under every strategy, which only ever makes
    runs larger; None lets the runner set it (:data:`~sparkqos.executor.runcost.OVERHEAD_SHARE`),
    0 sizes runs as the strategy and the workload rule say, as the papers state them (a bare
    executor's default). ``ratio`` / ``threshold``: fig
    4.1's workload rule for units without a quota; ``w``: the statistics' smoothing weight (eq
    3.1); ``tolerance``: how far a smoothed estimate must move before strategies see it;
    ``stats_period``: the statistics window (thesis: one second); ``starvation_limit``: how many
    consecutive picks of an operator with no work are tolerated. Overload: with
    ``memory_limit_bytes`` the bytes queued in memory stay under the limit — the newest batches
    of the fullest queues spill to Arrow IPC files in ``spill_dir`` (default: a temporary folder),
    or with ``shed=True`` are dropped and counted per query.
    """

    budget_s: float | None = None
    whole_batches: bool = True
    cluster_threads: int | None = None
    threads: int | None = None
    overhead_share: float | None = None
    ratio: float = RATIO
    threshold: int = THRESHOLD
    w: float = DEFAULT_WEIGHT
    tolerance: float = 0.2
    stats_period: float = 1.0
    starvation_limit: int = 100
    memory_limit_bytes: int | None = None
    spill_dir: str | None = None
    shed: bool = False

    def __post_init__(self) -> None:
        err = ExecutorOptionError
        check_number("budget_s", self.budget_s, low=0, low_open=True, none_ok=True, error=err)
        if self.budget_s is not None:
            object.__setattr__(self, "budget_s", float(self.budget_s))  # frozen: normalised once, here
        check_choice("whole_batches", self.whole_batches, (True, False), error=err)
        check_number("cluster_threads", self.cluster_threads, integer=True, low=0, none_ok=True, error=err)
        check_number("threads", self.threads, integer=True, low=1, none_ok=True, error=err)
        check_number("overhead_share", self.overhead_share, low=0, high=1, high_open=True, none_ok=True, error=err)
        check_number("ratio", self.ratio, low=0, low_open=True, high=1, where="workload ", error=err)
        check_number("threshold", self.threshold, integer=True, low=0, where="workload ", error=err)
        check_number("w", self.w, low=0, high=1, error=err)
        check_number("tolerance", self.tolerance, low=0, error=err)
        check_number("stats_period", self.stats_period, low=0, low_open=True, error=err)
        check_number("starvation_limit", self.starvation_limit, integer=True, low=1, error=err)
        check_number("memory_limit_bytes", self.memory_limit_bytes, integer=True, low=0, none_ok=True, error=err)
        check_choice("shed", self.shed, (True, False), error=err)
        if self.shed and self.memory_limit_bytes is None:
            raise err(
                "shed=True needs memory_limit_bytes (what to shed beyond)",
                parameter="memory_limit_bytes",
                value=None,
                expected="an integer >= 0 when shed=True",
            )

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The options, in order."""
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def of(cls, base: ExecutorOptions | None = None, **options: Any) -> ExecutorOptions:
        """``base`` (default: the defaults) with ``options`` set; an unknown option raises
        naming it and what there is."""
        names = cls.names()
        for key in options:
            if key not in names:
                near = difflib.get_close_matches(key, names, n=1)
                hint = f" (did you mean {near[0]!r}?)" if near else ""
                expected = ", ".join(names)
                raise ExecutorOptionError(
                    f"unknown executor option {key!r}{hint}; options are {expected}",
                    parameter=key,
                    value=options[key],
                    expected=f"one of {expected}",
                )
        return dataclasses.replace(base if base is not None else cls(), **options)
