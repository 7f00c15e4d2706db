"""Which user functions may run on several threads at once: :func:`thread_safe`.

The executor may cut a run of a row-wise operator into slices computed side by side
(``ExecutorOptions.threads``, :mod:`sparkqos.executor.slices`). Its own kernels allow that; a
user's function need not: Spark calls a UDF from separate Python worker processes, so code
written for Spark may share state through its closure (a random generator, a counter, a cache)
without a lock, and two calls at once in one process would give wrong rows with no error. So an
operator calling a UDF is sliced only when every UDF it calls was declared thread-safe by its
author; :func:`unsafe_udfs` names the ones that were not.

This module does not import pandas (the trigger loop's modules load without it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sparkqos.errors import ExpressionError

__all__ = ["THREAD_SAFE", "is_thread_safe", "thread_safe", "unsafe_udfs"]

#: The attribute :func:`thread_safe` sets on a user's function.
THREAD_SAFE = "__sparkqos_thread_safe__"


def thread_safe(fn: Any) -> Any:
    """Declare ``fn`` — a Python function, or the UDF ``F.pandas_udf`` / ``F.udf`` made of one —
    safe to call from several threads of one process at once; returns ``fn``. Say so only for a
    function that keeps no shared mutable state, or guards it. Use it below ``@pandas_udf``, or
    on the UDF itself::

        @pandas_udf("double")
        @sparkqos.thread_safe
        def score(t: pd.Series) -> pd.Series: ...

    The mark is an attribute of the function, so it travels with it wherever Spark pickles it.

    >>> f = thread_safe(lambda x: x)
    >>> is_thread_safe(f), is_thread_safe(lambda x: x)
    (True, False)
    """
    target = getattr(fn, "func", fn)  # a PySpark UDF keeps its function as .func
    if not callable(target):
        raise ExpressionError(f"thread_safe takes a function or a UDF, got {fn!r}")
    setattr(target, THREAD_SAFE, True)
    return fn


def is_thread_safe(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` was declared :func:`thread_safe` (a chain of functions answers for all of
    them)."""
    return getattr(fn, THREAD_SAFE, False) is True


def unsafe_udfs(node: Any) -> list[str]:
    """The names of the UDFs ``node`` calls — an expression, an operator, or any sparkqos object
    holding expressions in its attributes, however deep — whose functions are not declared
    :func:`thread_safe`. A UDF is an object whose class says ``calls_user_function`` (its
    function ``fn``, its name ``udf``)."""
    found: list[str] = []
    seen: set[int] = set()

    def walk(x: Any) -> None:
        if id(x) in seen:
            return
        seen.add(id(x))
        if getattr(type(x), "calls_user_function", False) and not is_thread_safe(x.fn):
            found.append(x.udf)
        if isinstance(x, (list, tuple, set, frozenset)):
            for v in x:
                walk(v)
        elif isinstance(x, dict):
            for v in x.values():
                walk(v)
        elif type(x).__module__.startswith("sparkqos."):  # an operator, an expression, their helpers
            for v in getattr(x, "__dict__", {}).values():
                walk(v)

    walk(node)
    return found
