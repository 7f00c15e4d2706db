"""``sparkqos.runtime.delta.DeltaSink`` as README spells it: the sink is :mod:`sparkqos.io.delta`'s."""

from sparkqos.io.delta import DeltaSink

__all__ = ["DeltaSink"]
