"""The strategy registry: strategies by name, so configurations and jobs select them by string.

A strategy nested in another (``ClassShares``' ``inner``, ``Adaptive``'s ``candidates``) is a
parameter of its owner, given as a component: a :class:`Scheduler` (``inner=PathCapacity(quantum=0.2)``),
a bare registry name (that strategy with its defaults), or — the spelling of configuration files,
which need names — a table ``{"name": "pc", "params": {"quantum": 0.2}}``, the shape of
``StrategyConfig(name, params=...)`` and of a TOML inline table; :func:`component` reads all three.

>>> from sparkqos.schedulers import registry
>>> registry.get("chain")
Chain()
>>> "fifo" in registry.available()
True
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from sparkqos.errors import SchedulerError, UnknownStrategy, warn_deprecated
from sparkqos.schedulers.base import Scheduler
from sparkqos.schedulers.builtin import BUILT_IN

#: Every strategy by name: the built-ins' table (a ``"module:Class"`` until first asked for, then
#: the class) and what :func:`register` added.
_REGISTRY: dict[str, type[Scheduler] | str] = dict(BUILT_IN)

S = TypeVar("S", bound=type[Scheduler])

#: A nested strategy as its owner takes it: a Scheduler, a registry name, or ``{"name", "params"}``.
Component = str | Scheduler | Mapping[str, Any]


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
        held = _REGISTRY.get(name)
        if held is not None and not replace and held is not cls and held != f"{cls.__module__}:{cls.__qualname__}":
            where = held if isinstance(held, str) else held.__name__
            raise SchedulerError(f"a strategy named {name!r} is already registered ({where})")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return decorate


def unregister(name: str) -> None:
    _REGISTRY.pop(name, None)


def available() -> list[str]:
    return sorted(_REGISTRY)


def _lookup(name: str) -> type[Scheduler] | None:
    """The class registered as ``name`` (a built-in imported now if it was not yet), or None."""
    try:
        held = _REGISTRY.get(name)
    except TypeError:  # not hashable: not a name
        return None
    if isinstance(held, str):
        module, _, attr = held.partition(":")
        held = _REGISTRY[name] = getattr(importlib.import_module(module), attr)
    return held


def get(name: str, **params: Any) -> Scheduler:
    """A new instance of the strategy registered as ``name``."""
    cls = _lookup(name)
    if cls is None:
        raise UnknownStrategy(str(name), available())
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
    ClassShares(inner='fifo', k=2.0, quantum=0.2)
    >>> build("pc", 2.0, class_shares=True)
    ClassShares(inner=PathCapacity(quantum=0.2), k=2.0, quantum=0.2)
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


def _table(spec: Mapping[str, Any], where: str) -> tuple[str, dict[str, Any]]:
    """The name and parameters of a component given as a ``{"name", "params"}`` table."""
    params = spec.get("params", {})
    if set(spec) - {"name", "params"} or not isinstance(spec.get("name"), str) or not isinstance(params, Mapping):
        raise SchedulerError(f"{where}: a strategy table is {{'name': <strategy>, 'params': {{...}}}}, got {dict(spec)!r}")
    return spec["name"], dict(params)


def component(spec: Component, *, where: str) -> str | Scheduler:
    """``spec`` as its owner keeps it: a Scheduler or a name as given, a ``{"name", "params"}``
    table built through the registry (a table without parameters is its bare name).

    >>> component({"name": "pc", "params": {"quantum": 0.2}}, where="inner")
    PathCapacity(quantum=0.2)
    >>> component({"name": "fifo"}, where="inner")
    'fifo'
    """
    if isinstance(spec, (str, Scheduler)):
        return spec
    if isinstance(spec, Mapping):
        name, params = _table(spec, where)
        return get(name, **params) if params else name
    raise SchedulerError(
        f"{where} is a strategy: a Scheduler, a registry name or {{'name': ..., 'params': {{...}}}}, got {spec!r}"
    )


def label(spec: str | Scheduler) -> str:
    """The name a component goes by: its registry name (its class name when unregistered)."""
    return spec if isinstance(spec, str) else type(spec).name or type(spec).__name__


def with_params(spec: Component, params: Mapping[str, Any], *, where: str) -> Component:
    """``spec`` with ``params`` set on top of its own: what the deprecated ``inner_params`` and
    ``member_params`` spellings meant."""
    if not isinstance(params, Mapping):
        raise SchedulerError(f"{where} must be a table of parameters, got {params!r}")
    if isinstance(spec, Scheduler):
        return spec.clone(**params)
    if isinstance(spec, Mapping):
        name, own = _table(spec, where)
        return {"name": name, "params": {**own, **params}}
    return {"name": spec, "params": dict(params)}


def sized_component(spec: Component, budget_s: float, period_s: float | None = None, *, where: str) -> str | Scheduler:
    """``spec`` with the time parameters it leaves unset sized by its strategy's own
    :meth:`~sparkqos.schedulers.base.Scheduler.sized_params` (what it sets is kept). A Scheduler
    is used as given; so is a name nobody registered (its owner reports it).

    >>> sized_component({"name": "cqc", "params": {"k": 3.0}}, 0.5, where="candidate")
    Cqc(k=3.0, quantum=0.05)
    >>> sized_component("fifo", 0.5, where="candidate")
    'fifo'
    """
    if isinstance(spec, str):
        name, params = spec, {}
    elif isinstance(spec, Mapping):
        name, params = _table(spec, where)
    else:
        return component(spec, where=where)
    cls = _lookup(name)
    if cls is None:
        return component(spec, where=where)
    sized = cls.sized_params(budget_s, period_s, **params)
    return get(name, **sized) if sized else name


def deprecated(owner: str, old: str, new: str, *, depth: int = 1) -> None:
    """Warn that ``owner``'s keyword ``old`` stays one release; ``new`` is the spelling to use.
    ``depth``: how many calls of ours stand between the user's call and the caller of this."""
    warn_deprecated(f"{owner}: {old}=", new, stacklevel=2 + depth)
