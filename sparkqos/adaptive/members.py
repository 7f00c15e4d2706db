"""The strategies :class:`~sparkqos.adaptive.controller.Adaptive` runs, read from its parameters.

A candidate is a component (:mod:`sparkqos.schedulers.registry`): a Scheduler, a registry name or a
``{"name", "params"}`` table; the class shares under every candidate are one ClassShares. The
deprecated spellings — parameters by candidate name (``member_params``) and a bare table of the
class shares' ``k`` and ``quantum`` — are read here too, with a DeprecationWarning.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sparkqos.errors import SchedulerError
from sparkqos.schedulers import registry
from sparkqos.schedulers.base import Scheduler
from sparkqos.schedulers.classes import ClassShares


def with_member_params(given: list[Any], member_params: Mapping[str, Mapping[str, Any]], *, depth: int = 2) -> list[Any]:
    """The candidates ``given`` with the deprecated ``member_params`` (parameters by candidate
    name) folded in, as components (a name becomes a ``{"name", "params"}`` table)."""
    registry.deprecated("adaptive", "member_params", "the candidates themselves: candidates=['fifo', Cqc(k=3.0)]", depth=depth)
    if not isinstance(member_params, Mapping):
        raise SchedulerError(f"member_params maps candidate names to parameter tables, got {member_params!r}")
    labels = [registry.label(registry.component(c, where="adaptive: candidates")) for c in given]
    strangers = sorted(set(member_params) - set(labels))
    if strangers:
        raise SchedulerError(f"member_params names {strangers}, which are not candidates {labels}")
    where = "adaptive: member_params"
    return [registry.with_params(c, member_params[n], where=where) if n in member_params else c for c, n in zip(given, labels)]


def listed_candidates(candidates: Sequence[registry.Component] | str | Mapping[str, Any]) -> list[Any]:
    return [candidates] if isinstance(candidates, (str, Mapping)) else list(candidates)


def read_candidates(
    candidates: Sequence[registry.Component] | str, member_params: Mapping[str, Mapping[str, Any]] | None
) -> tuple[Any, list[str | Scheduler]]:
    """(``candidates`` as :class:`Adaptive` keeps it, each candidate as a component). Names and
    Schedulers are kept as given; tables, and the deprecated ``member_params``, make the list of
    components."""
    given = listed_candidates(candidates)
    if member_params is not None:
        given = with_member_params(given, member_params, depth=3)
    members = [registry.component(c, where="adaptive: candidates") for c in given]
    changed = member_params is not None or any(isinstance(c, Mapping) for c in given)
    if not members or any(registry.label(m) == "adaptive" for m in members):
        raise SchedulerError(
            f"candidates are names of non-adaptive strategies (or such strategies, or tables), got {candidates!r}"
        )
    return (members if changed else candidates), members


def class_shares_table(spec: registry.Component) -> registry.Component:
    """The class shares under each candidate as a component; the deprecated table of ClassShares'
    ``k`` and ``quantum`` (``class_shares={"k": 2.0}``) becomes ``{"name": "class_shares", "params": ...}``."""
    if not isinstance(spec, Mapping) or "name" in spec:
        return spec
    if {"inner", "inner_params"} & set(spec):
        raise SchedulerError(
            "class_shares is None or the k and quantum of the class shares under each candidate "
            f"(a ClassShares whose inner is each candidate in turn), got {spec!r}"
        )
    registry.deprecated("adaptive", "class_shares={...}", "class_shares=ClassShares(k=..., quantum=...)", depth=3)
    return {"name": "class_shares", "params": dict(spec)}


def read_class_shares(spec: registry.Component | None) -> ClassShares | None:
    """The ClassShares each candidate runs under, kept with ``inner=None`` (each candidate takes its
    place; one given with the default inner is read so), or None.

    >>> read_class_shares(ClassShares(k=2.0))
    ClassShares(inner=None, k=2.0, quantum=1.0)
    """
    if spec is None:
        return None
    shares = registry.component(class_shares_table(spec), where="adaptive: class_shares")
    shares = registry.get(shares) if isinstance(shares, str) else shares
    if not isinstance(shares, ClassShares) or shares.inner not in (None, "hr"):
        raise SchedulerError(
            "class_shares is None or the k and quantum of the class shares under each candidate "
            f"(a ClassShares whose inner is each candidate in turn), got {spec!r}"
        )
    return shares if shares.inner is None else shares.clone(inner=None)
