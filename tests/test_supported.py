"""README's list of what runs where is the compiler's own (issue 24, item 4): generated from its
tables by ``python -m sparkqos supported``; this fails when README's copy is out of date."""

from __future__ import annotations

from pathlib import Path

from sparkqos.cli import main
from sparkqos.compile.supported import BEGIN, END, supported_markdown

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_holds_the_generated_list():
    text = README.read_text(encoding="utf-8")
    start, end = text.index(BEGIN), text.index(END) + len(END)
    assert text[start:end] == supported_markdown(), "README is out of date: paste `python -m sparkqos supported` over its list"


def test_the_list_names_both_engines_and_the_cli_prints_it(capsys):
    text = supported_markdown()
    assert "`from_json`" in text.split("**Evaluated by Spark")[1] and "`where/filter`" in text.split("**Evaluated")[0]
    assert main(["supported"]) == 0
    assert capsys.readouterr().out.rstrip("\n") == text


def test_the_list_names_the_aggregate_functions_that_run_and_the_approximate_ones_refused():
    native, refused = supported_markdown().split("**Refused**")
    for name in ("`stddev/std/stddev_samp`", "`kurtosis`", "`count_if`", "`max_by`", "`collect_set`", "`bool_and/every`"):
        assert name in native.split("**Evaluated")[0]
    assert "`approx_count_distinct`" in refused and "`percentile_approx`" in refused
