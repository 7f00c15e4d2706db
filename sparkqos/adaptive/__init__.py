"""The adaptive controller (thesis ch. 5): QoS specifications, scoring (eq 5.1-5.2) and the
roulette-wheel strategy (``"adaptive"`` in the table of built-in strategies,
:data:`sparkqos.schedulers.builtin.BUILT_IN`)."""

from sparkqos.adaptive.controller import Adaptive, AdaptiveController
from sparkqos.adaptive.qos import Goal, QosSpec, Window, load_qos, register_statistic, resolve, template

__all__ = [
    "Adaptive",
    "AdaptiveController",
    "Goal",
    "QosSpec",
    "Window",
    "load_qos",
    "register_statistic",
    "resolve",
    "template",
]
