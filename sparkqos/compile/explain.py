"""Where each operator of each query runs, as text (``sparkqos.explain``, ``handle.explain()``).

For each query, its operators from the root down, each with its engine: ``native`` (a sparkqos
operator the strategy schedules), ``spark`` (a part Spark evaluates inside the micro-batch, with
what it computes and why), or, from :func:`sparkqos.explain`, ``refused`` with the reason. The
layout follows ``DataFrame.explain()``: a header per query, one indented line per operator.
"""

from __future__ import annotations

from collections.abc import Mapping

from sparkqos.executor.plan import CompiledPlan

__all__ = ["explain_compiled", "explain_text"]


def _lines(compiled: CompiledPlan, query: str) -> list[str]:
    plan, parts = compiled.plan, compiled.spark_parts
    out: list[str] = []

    def walk(name: str, depth: int) -> None:
        pad = "  " * depth
        if name in parts:
            out.append(f"{pad}+- spark   {name}: {parts[name].describe()}")
            return
        if name in compiled.sources:
            out.append(f"{pad}+- input   {name}")
            return
        op = plan[name]
        out.append(f"{pad}+- native  {name} ({op.kind})")
        for i in op.inputs:
            walk(i, depth + 1)

    walk(compiled.root(query), 0)
    return out


def explain_text(
    compiled: Mapping[str, CompiledPlan | str], placement: str = "auto", classes: Mapping[str, str] | None = None
) -> str:
    """The text for queries each compiled alone (query → its plan) or refused (query → the reason)."""
    lines = [f"== sparkqos plan (placement={placement!r}) =="]
    for query, c in compiled.items():
        klass = (classes or {}).get(query)
        lines.append(f"query {query!r}" + (f" (class {klass})" if klass else "") + ":")
        if isinstance(c, str):
            lines.append(f"+- refused {c}")
        else:
            lines.extend(_lines(c, query))
    return "\n".join(lines)


def explain_compiled(compiled: CompiledPlan) -> str:
    """The text for every query of one compiled plan."""
    lines = ["== sparkqos plan =="]
    for query in compiled.roots:
        klass = compiled.plan.queries[query].klass
        lines.append(f"query {query!r}" + (f" (class {klass})" if klass else "") + ":")
        lines.extend(_lines(compiled, query))
    return "\n".join(lines)
