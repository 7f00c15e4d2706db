"""How the adaptive strategy scores and picks: :class:`Scoring`, one parameter of
:class:`~sparkqos.adaptive.controller.Adaptive` (its fields may also be given to ``Adaptive`` by
name, for short)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from sparkqos.model.stats import DEFAULT_WEIGHT

__all__ = ["Scoring"]


@dataclass(frozen=True)
class Scoring:
    """``decay`` and ``age_unit`` of eq 5.1 (a score ages by ``decay`` per pick or per second),
    the smoothing weight ``w`` of the window statistics (eq 3.1), the ``spread`` reading of eq 5.1,
    the window's ``delay_signal`` and ``memory_signal``, the roulette wheel's ``sharpness`` and
    ``explore`` share, and ``log_limit``: how many decisions are kept (the newest; None: all).
    Checked by the controller that uses them (:class:`~sparkqos.adaptive.controller.AdaptiveController`).

    >>> Scoring.of(None, decay=0.5).decay
    0.5
    """

    decay: float = 0.98
    age_unit: str = "picks"
    w: float = DEFAULT_WEIGHT
    spread: str = "strategies"
    delay_signal: str = "little"
    memory_signal: str = "release"
    sharpness: float = 3.0
    explore: float = 0.05
    log_limit: int | None = 10_000

    @classmethod
    def of(cls, base: Scoring | None, **values: Any) -> Scoring:
        """``base`` (default: the defaults) with ``values`` set; an unknown name is a TypeError,
        as for any unknown keyword."""
        unknown = sorted(set(values) - set(cls.__dataclass_fields__))
        if unknown:
            raise TypeError(f"unexpected parameter(s) {unknown}")
        return dataclasses.replace(base if base is not None else cls(), **values)
