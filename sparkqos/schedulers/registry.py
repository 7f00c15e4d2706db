"""The strategy registry: strategies by name, so configurations and jobs select them by string.

>>> from sparkqos.schedulers import registry
>>> registry.get("chain")
Chain()
>>> "fifo" in registry.available()
True
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from sparkqos.errors import SchedulerError, UnknownStrategy
from sparkqos.schedulers.base import Scheduler

_REGISTRY: dict[str, type[Scheduler]] = {}

S = TypeVar("S", bound=type[Scheduler])


def register(name: str, *, replace: bool = False) -> Callable[[S], S]:
    """Class decorator that makes a strategy available by ``name``.

    >>> from sparkqos.schedulers import Fifo
    >>> @register("lifo_demo")
    ... class Demo(Fifo):
    ...     pass
    >>> get("lifo_demo").name
    'lifo_demo'
    >>> unregister("lifo_demo")
    """

    if not isinstance(name, str) or not name or not name.replace("_", "").isalnum():
        raise SchedulerError(f"strategy names are identifiers such as 'my_chain', got {name!r}")

    def decorate(cls: S) -> S:
        if not (isinstance(cls, type) and issubclass(cls, Scheduler)):
            raise SchedulerError(f"register({name!r}) needs a Scheduler subclass, got {cls!r}")
        if name in _REGISTRY and not replace and _REGISTRY[name] is not cls:
            raise SchedulerError(f"a strategy named {name!r} is already registered ({_REGISTRY[name].__name__})")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return decorate


def unregister(name: str) -> None:
    _REGISTRY.pop(name, None)


def available() -> list[str]:
    return sorted(_REGISTRY)


def get(name: str, **params: Any) -> Scheduler:
    """A new instance of the strategy registered as ``name``."""
    try:
        cls = _REGISTRY[name]
    except (KeyError, TypeError):
        raise UnknownStrategy(str(name), available()) from None
    try:
        return cls(**params)
    except TypeError as exc:
        allowed = cls._param_names()
        raise SchedulerError(f"strategy {name!r} takes parameters {allowed or 'none'}; got {sorted(params)} ({exc})") from None


def build(
    name: str, budget_s: float | None = None, period_s: float | None = None, *, class_shares: bool = False, **params: Any
) -> Scheduler:
    """A new instance of the strategy registered as ``name``: with ``budget_s``, its time
    parameters left unset sized to a trigger of that many seconds (``Scheduler.sized_params``;
    ``period_s`` the trigger interval); with ``class_shares``, under CQC's class shares (what
    the strategy's ``class_shares_params`` says: ``class_shares`` over it by default).

    >>> build("fifo", 2.0, class_shares=True)
    ClassShares(inner='fifo', k=2.0, quantum=0.2, inner_params=None)
    >>> build("pc", 2.0)
    PathCapacity(quantum=0.2)
    """
    if not isinstance(class_shares, bool):
        raise SchedulerError(f"class_shares must be True or False, got {class_shares!r}")
    cls = type(get(name))
    if class_shares:
        name, params = cls.class_shares_params(name, dict(params))
        cls = type(get(name))
    if budget_s is not None:
        params = cls.sized_params(budget_s, period_s, **params)
    return get(name, **params)
