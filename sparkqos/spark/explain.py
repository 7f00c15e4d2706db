"""``sparkqos.explain(df, queries)``: where each operator of each query would run, before any data moves."""

from __future__ import annotations

from collections.abc import Mapping

from sparkqos.compile.explain import explain_text
from sparkqos.compile.spark_part import check_placement
from sparkqos.compile.words import in_user_words
from sparkqos.errors import UnsupportedTransform
from sparkqos.executor.plan import CompiledPlan
from sparkqos.spark.transforms import Transform, compile_transforms

__all__ = ["explain"]


def _refusal(exc: UnsupportedTransform, placement: str) -> str:
    """Why a query is refused, in a Spark user's words; for a function, why Spark does not
    evaluate it instead (it is above an operator with state, or ``placement`` forbids it)."""
    text = in_user_words(exc)
    if exc.operation.startswith("Spark function "):
        if placement == "native":
            text += ', and placement="native" keeps every part out of Spark'
        else:
            text += (
                "; Spark evaluates such functions only in the stateless part of a query directly over "
                "the input, and this one is above an aggregation, a join, a union or another operator with state"
            )
    return text


def explain(
    df,
    queries: Mapping[str, Transform],
    *,
    classes: Mapping[str, str] | None = None,
    placement: str = "auto",
    print_: bool = True,
) -> str:
    """For each query of ``queries`` (name → PySpark transform) over ``df``, each operator with
    where it runs — ``native``, ``spark`` (evaluated by Spark inside the micro-batch, with what it
    computes and why) or ``refused`` (with the reason ``sparkqos.stream`` would raise) — printed
    like ``DataFrame.explain()`` unless ``print_`` is False, and returned as a string. Each query
    is compiled alone, so one refused query does not hide the others."""
    check_placement(placement)
    compiled: dict[str, CompiledPlan | str] = {}
    for name, transform in queries.items():
        klass = (classes or {}).get(name)
        try:
            compiled[name] = compile_transforms(df, {name: transform}, {name: klass} if klass else None, None, placement)
        except UnsupportedTransform as exc:
            compiled[name] = _refusal(exc, placement)
    text = explain_text(compiled, placement, classes)
    if print_:
        print(text)
    return text
