"""Spark's plan nodes as a PySpark user writes them, and refusals in a Spark user's words.

The compiler reads Spark's analyzed plans, whose nodes carry Spark-internal class names
(``Project``, ``Filter``, ``Deduplicate``…). What sparkqos says to a user — ``explain()``, the
reasons a part goes to Spark, the generated list of what runs where — names them as the
DataFrame API does (``select``, ``where``, ``dropDuplicates``).
"""

from __future__ import annotations

from sparkqos.errors import UnsupportedTransform

__all__ = ["OPERATION_HINTS", "STEP_WORDS", "in_user_words"]

#: What users wrote, for the plan nodes sparkqos does not run, named in UnsupportedTransform.
#: ``Distinct`` is what SQL's ``SELECT DISTINCT`` and ``UNION`` (without ``ALL``) give;
#: ``DataFrame.distinct()`` is ``dropDuplicates()`` and gives ``Deduplicate``.
OPERATION_HINTS = {
    "Aggregate": "groupBy/agg",
    "Join": "join",
    "Distinct": "SELECT DISTINCT or UNION in SQL",
    "Sort": "orderBy/sort",
    "GlobalLimit": "limit",
    "LocalLimit": "limit",
    "Sample": "sample",
    "Generate": "explode",
    "Expand": "cube/rollup",
    "Intersect": "intersect",
    "Except": "subtract/exceptAll",
    "MapInPandas": "mapInPandas",
    "MapInArrow": "mapInArrow",
    "FlatMapGroupsInPandas": "groupBy().applyInPandas",
    "FlatMapGroupsWithState": "mapGroupsWithState",
    "TransformWithState": "transformWithState",
    "TransformWithStateInPySpark": "transformWithStateInPandas",
    "UpdateEventTimeWatermarkColumn": "transformWithStateInPandas with eventTimeColumnName",
    "Offset": "offset",
    "LateralJoin": "lateralJoin, e.g. with a Python UDTF",
}

#: The stateless row-wise nodes, one word each, as a PySpark user writes them.
STEP_WORDS = {
    "Project": "select",
    "Filter": "where",
    "Generate": "explode",
    "SubqueryAlias": "alias",
    "Repartition": "repartition",
    "RepartitionByExpression": "repartition",
    "EventTimeWatermark": "withWatermark",
    "MapInPandas": "mapInPandas",
    "MapInArrow": "mapInArrow",
}


def in_user_words(error: UnsupportedTransform) -> str:
    """What ``error`` refuses, as a Spark user says it: a function sparkqos has no native
    version of, or an operation it cannot run, named as PySpark names it.

    >>> in_user_words(UnsupportedTransform("q", "Spark function 'from_json'"))
    'sparkqos has no native version of from_json'
    >>> in_user_words(UnsupportedTransform("q", "Spark function 'cast' from string to timestamp"))
    'sparkqos has no native version of cast from string to timestamp'
    >>> in_user_words(UnsupportedTransform("q", "Spark operation 'Sort'", "orderBy/sort"))
    'sparkqos cannot run orderBy/sort'
    >>> in_user_words(UnsupportedTransform("q", "Spark operation 'Join'", "join is not supported under Spark Connect yet"))
    'sparkqos cannot run join (join is not supported under Spark Connect yet)'
    >>> in_user_words(UnsupportedTransform("q", "column 'k'", "a reference to a column of another DataFrame"))
    'sparkqos cannot run this query: a reference to a column of another DataFrame'
    """
    op, detail = error.operation, error.detail
    if op.startswith(("reading ", "column ")) and detail:  # the query reads something it was not given
        return f"sparkqos cannot run this query: {detail}"
    for prefix, verb in (("Spark function '", "has no native version of"), ("Spark operation '", "cannot run")):
        if op.startswith(prefix):
            name, _, rest = op.removeprefix(prefix).partition("'")
            hint = OPERATION_HINTS.get(name)
            if verb == "cannot run" and (hint or STEP_WORDS.get(name)):
                name = hint or STEP_WORDS[name]
            more = f" ({detail})" if detail and detail != name else ""
            return f"sparkqos {verb} {name}{rest}{more}"
    return f"sparkqos cannot run {op}" + (f" ({detail})" if detail else "")
