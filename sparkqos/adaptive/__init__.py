"""The adaptive controller (thesis ch. 5): QoS specifications, scoring (eq 5.1-5.2) and the
roulette-wheel strategy, registered as ``"adaptive"`` when this package is imported."""

from sparkqos.adaptive.controller import Adaptive, AdaptiveController
from sparkqos.adaptive.qos import Goal, QosSpec, Window, load_qos, register_statistic, resolve, template
from sparkqos.schedulers import registry

registry.register("adaptive")(Adaptive)

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
