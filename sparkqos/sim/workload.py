"""Workload files: a plan, its arrivals and the simulator's run rules, in TOML.

::

    run = "quantum"            # "one" | "quantum"
    slotted = false
    quantum = 1.0              # optional, time units per quantum
    overhead = 0.0             # optional, start-up time per operator run (thesis §4.5)
    [classes]                  # optional query-class priorities
    H = 6
    [[operator]]
    name = "O1"
    input = "S1"               # a stream, another operator, or a list of them
    selectivity = 0.2
    cost = 1.0                 # time per input tuple
    query = "Q1"               # optional (default: the root operator's name)
    class = "H"                # optional
    kind = "filter"            # optional; "join" blocks while an input is empty (Chain §5)
    [arrivals]
    S1 = [[1, 1.0], [3, 1.0]]  # [time, amount]
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkqos.errors import PlanError, WorkloadError, check_choice, check_number
from sparkqos.model.plan import OPERATOR_KINDS, Operator, Plan
from sparkqos.sim.engine import RUN_RULES

TOP_KEYS = {"run", "slotted", "quantum", "overhead", "classes", "operator", "arrivals", "streams", "description"}
OPERATOR_KEYS = {"name", "input", "selectivity", "cost", "query", "class", "kind", "tuple_size"}


@dataclass
class Workload:
    plan: Plan
    arrivals: dict[str, list[tuple[float, float]]]
    run: str = "quantum"
    slotted: bool = False
    quantum: float = 1.0
    description: str = ""
    source: str = field(default="<memory>", repr=False)
    overhead: float = 0.0

    def simulator(self, scheduler, **kwargs):
        """A :class:`~sparkqos.sim.Simulator` for this workload."""
        from sparkqos.sim.engine import Simulator

        return Simulator(
            self.plan,
            scheduler,
            self.arrivals,
            run=self.run,
            slotted=self.slotted,
            quantum=self.quantum,
            overhead=self.overhead,
            **kwargs,
        )


def _operator(raw: Any, where: str) -> Operator:
    """One ``[[operator]]`` table (``where``: the file and the operator's position)."""
    where += f" ({raw.get('name')!r})" if isinstance(raw, dict) and "name" in raw else ""
    if not isinstance(raw, dict):
        raise WorkloadError(f"{where} must be a table")
    bad = set(raw) - OPERATOR_KEYS
    if bad:
        raise WorkloadError(f"{where}: unknown key(s) {sorted(bad)}; allowed keys are {sorted(OPERATOR_KEYS)}")
    for key in ("name", "input", "selectivity", "cost"):
        if key not in raw:
            raise WorkloadError(f"{where}: missing required key {key!r}")
    name = raw["name"]
    if not isinstance(name, str) or not name:
        raise WorkloadError(f"{where}: name must be a non-empty string, got {name!r}")
    inputs = raw["input"]
    if isinstance(inputs, str):
        inputs = [inputs]
    if not isinstance(inputs, list) or not inputs or not all(isinstance(i, str) for i in inputs):
        raise WorkloadError(f"{where}: input must be a name or a list of names, got {raw['input']!r}")
    kind = check_choice("kind", raw.get("kind", "filter"), OPERATOR_KINDS, error=WorkloadError, where=f"{where}: ")
    for key in ("query", "class"):
        if key in raw and not isinstance(raw[key], str):
            raise WorkloadError(f"{where}: {key} must be a string, got {raw[key]!r}")
    # Finite numbers here; their bounds are the plan's to check (a PlanError).
    number = {
        key: float(check_number(key, raw.get(key, 1.0), error=WorkloadError, where=f"{where}: "))
        for key in ("selectivity", "cost", "tuple_size")
    }
    return Operator(
        name=name,
        inputs=tuple(inputs),
        selectivity=number["selectivity"],
        cost=number["cost"],
        query=raw.get("query"),
        klass=raw.get("class"),
        kind=kind,
        tuple_size=number["tuple_size"],
    )


def _arrivals(stream: str, items: Any, source: str) -> list[tuple[float, float]]:
    """``arrivals.<stream>``: a list of [time, amount]."""
    if not isinstance(items, list):
        raise WorkloadError(f"{source}: arrivals.{stream} must be a list of [time, amount], got {items!r}")
    parsed = []
    for k, item in enumerate(items):
        if not isinstance(item, list) or len(item) != 2:
            raise WorkloadError(f"{source}: arrivals.{stream}[{k}] must be [time, amount], got {item!r}")
        at = f"{source}: arrivals.{stream}[{k}] "
        t = check_number("time", item[0], low=0, error=WorkloadError, where=at)
        amount = check_number("amount", item[1], low=0, low_open=True, error=WorkloadError, where=at)
        parsed.append((float(t), float(amount)))
    return parsed


def parse_workload(doc: dict[str, Any], source: str = "<memory>") -> Workload:
    """Build a :class:`Workload` from a parsed TOML document, naming any key that is wrong."""
    unknown = set(doc) - TOP_KEYS
    if unknown:
        raise WorkloadError(f"{source}: unknown key(s) {sorted(unknown)}; allowed keys are {sorted(TOP_KEYS)}")
    top = f"{source}: "
    run = check_choice("run", doc.get("run", "quantum"), RUN_RULES, error=WorkloadError, where=top)
    slotted = doc.get("slotted", False)
    if not isinstance(slotted, bool):
        raise WorkloadError(f"{source}: slotted must be true or false, got {slotted!r}")
    quantum = float(check_number("quantum", doc.get("quantum", 1.0), low=0, low_open=True, error=WorkloadError, where=top))
    overhead = float(check_number("overhead", doc.get("overhead", 0.0), low=0, error=WorkloadError, where=top))

    raw_ops = doc.get("operator")
    if not isinstance(raw_ops, list) or not raw_ops:
        raise WorkloadError(f"{source}: needs at least one [[operator]] table")
    ops = [_operator(raw, f"{source}: operator #{k + 1}") for k, raw in enumerate(raw_ops)]

    raw_arrivals = doc.get("arrivals", {})
    if not isinstance(raw_arrivals, dict):
        raise WorkloadError(f"{source}: [arrivals] must be a table of stream = [[time, amount], ...]")
    extra_streams = doc.get("streams", [])
    if not isinstance(extra_streams, list) or not all(isinstance(s, str) for s in extra_streams):
        raise WorkloadError(f"{source}: streams must be a list of names, got {extra_streams!r}")
    arrivals = {stream: _arrivals(stream, items, source) for stream, items in raw_arrivals.items()}

    classes = doc.get("classes", {})
    if not isinstance(classes, dict):
        raise WorkloadError(f"{source}: [classes] must be a table of class = priority")
    try:
        plan = Plan(ops, streams=[*raw_arrivals, *extra_streams], classes=classes)
    except PlanError as exc:
        raise PlanError(f"{source}: {exc}", parameter=exc.parameter, value=exc.value, expected=exc.expected) from None
    description = doc.get("description", "")
    return Workload(plan, arrivals, run, slotted, quantum, str(description), source, overhead)


def load_workload(path: str | Path) -> Workload:
    """Read a workload TOML file (see the module docstring for the format)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise WorkloadError(f"cannot read workload {str(path)!r}: {exc.strerror or exc}") from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise WorkloadError(f"{path}: not valid TOML: {exc}") from None
    return parse_workload(doc, str(path))
