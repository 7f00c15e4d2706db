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
