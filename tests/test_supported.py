"""The list of what runs where in docs/transforms.md is the compiler's own: generated from its
tables by ``python -m sparkqos supported``; this fails when the page's copy is out of date, or
when the list names one construct in two places."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from sparkqos.cli import main
from sparkqos.compile.supported import BEGIN, END, supported_markdown

PAGE = Path(__file__).resolve().parents[1] / "docs" / "transforms.md"


def test_the_transforms_page_holds_the_generated_list():
    text = PAGE.read_text(encoding="utf-8")
    start, end = text.index(BEGIN), text.index(END) + len(END)
    assert text[start:end] == supported_markdown(), (
        "docs/transforms.md is out of date: paste `python -m sparkqos supported` over its list"
    )


def test_the_list_names_both_engines_and_the_cli_prints_it(capsys):
    text = supported_markdown()
    assert "`from_json`" in text.split("**Evaluated by Spark")[1] and "`where/filter`" in text.split("**Evaluated")[0]
    assert main(["supported"]) == 0
    assert capsys.readouterr().out.rstrip("\n") == text


def test_each_construct_appears_once_under_the_engine_that_runs_it():
    """Native operations and functions, the functions Spark evaluates and the refused operations
    are four disjoint lists without repeats (``distinct()`` is native: it is ``dropDuplicates()``;
    SQL's ``SELECT DISTINCT`` is refused)."""
    text = supported_markdown()
    native, rest = text.split("**Evaluated by Spark")
    spark, refused = rest.split("**Refused**")
    ops = re.search(r"\* operations: (.*);", native).group(1)
    functions = re.search(r"\* functions and operators: (.*)\.", native).group(1)
    lists = [re.findall(r"`([^`]+)`", part) for part in (ops, functions, spark.split("e.g. ")[1], refused)]
    named = [name for names in lists for name in names if name not in ("UnsupportedTransform",)]
    assert len(named) == len(set(named)), sorted(n for n, c in Counter(named).items() if c > 1)
    assert "dropDuplicates/distinct()" in lists[0] and "SELECT DISTINCT or UNION in SQL" in lists[3]
    assert not any(n in ("distinct", "distinct()") for n in lists[3])


def test_the_list_names_the_aggregate_functions_that_run_natively_and_those_spark_computes():
    native, refused = supported_markdown().split("**Refused**")
    for name in ("`stddev/std/stddev_samp`", "`kurtosis`", "`count_if`", "`max_by`", "`collect_set`", "`bool_and/every`"):
        assert name in native.split("**Evaluated")[0]
    by_spark = native.split("**Computed by Spark over a group's buffered rows")[1]
    assert "`approx_count_distinct`" in by_spark and "`percentile_approx`" in by_spark and "pandas UDAFs" in by_spark
    assert "`approx_count_distinct`" not in refused and "`percentile_approx`" not in refused
