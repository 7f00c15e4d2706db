"""The metrics table and the HTML report rendered from it."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from sparkqos import schedulers
from sparkqos.cli import main
from sparkqos.report import metrics
from sparkqos.sim import Simulator
from sparkqos.sim.arrivals import on_off_pareto
from sparkqos.testing.checks import three_query_plan


@pytest.fixture(scope="module")
def output_dir(tmp_path_factory):
    """A small metrics table: three strategies in the simulator, and one fake adaptive run."""
    out = tmp_path_factory.mktemp("exp")
    plan = three_query_plan()
    arrivals = {"S": on_off_pareto(1.2, 60, flows=8, seed=5)}
    for name in ("fifo", "chain", "rr"):
        result = Simulator(plan, schedulers.get(name), arrivals).run(until=60)
        for k, r in enumerate(_batches(metrics.from_simulation(result, plan, name, window=5.0))):
            metrics.write_batch(out, name, k, r)
    result = Simulator(plan, schedulers.get("chain"), arrivals).run(until=60)
    decisions = [
        {"time": t, "pick": ["fifo", "chain"][int(t // 10) % 2], "scores": {"fifo": 0.4, "chain": 0.6}} for t in range(0, 60, 10)
    ]
    rows = metrics.from_simulation(result, plan, "adaptive", window=5.0, decisions=decisions)
    for k, r in enumerate(_batches(rows)):
        metrics.write_batch(out, "adaptive", k, r)
    return out


def _batches(rows):
    by = {}
    for r in rows:
        by.setdefault(r["batchId"], []).append(r)
    return [by[k] for k in sorted(by)]


def test_rows_follow_the_schema_and_sum_up(output_dir):
    table = metrics.read(output_dir)
    assert table.schema == metrics.SCHEMA
    df = table.to_pandas()
    for run, g in df.groupby("run"):
        plan_out = g[g["query"] == metrics.PLAN_ROW]["rowsOut"].sum()
        query_out = g[g["query"] != metrics.PLAN_ROW]["rowsOut"].sum()
        assert plan_out == pytest.approx(query_out), run


def test_rewriting_a_batch_replaces_it(tmp_path):
    r = [metrics.row(run="x", batchId=3, query="*", klass="*", rowsOut=1.0)]
    metrics.write_batch(tmp_path, "x", 3, r)
    metrics.write_batch(tmp_path, "x", 3, r)
    assert metrics.read(tmp_path).num_rows == 1


def test_reading_one_runs_newest_batches(tmp_path):
    """What a Spark Connect client polls: only run ``x``'s newest files, in batch order; another
    run whose name starts the same way is not read."""
    for run, batches in (("x", (1, 2, 10)), ("x-2", (5,))):
        for b in batches:
            metrics.write_batch(tmp_path, run, b, [metrics.row(run=run, batchId=b, query="*", klass="*")])
    assert metrics.read(tmp_path, run="x").column("batchId").to_pylist() == [1, 2, 10]
    assert metrics.read(tmp_path, run="x", newest=2).column("batchId").to_pylist() == [2, 10]
    assert metrics.read(tmp_path).num_rows == 4


def _rows(run: str, b: int, out: float = 1.0) -> list[dict]:
    return [metrics.row(run=run, batchId=b, query=q, klass="*", rowsOut=out) for q in ("*", "q")]


def test_a_long_runs_metrics_are_merged_and_read_as_written(tmp_path):
    """Every 4 batches but the newest 2 go into one file and their small files away; the table
    reads the same, in batch order, and a client polling the newest batches still gets them."""
    writer = metrics.MetricsWriter(tmp_path, "x", every=4, margin=2)
    for b in range(11):
        writer.write(b, _rows("x", b, out=float(b)))
    metrics.write_batch(tmp_path, "y", 0, _rows("y", 0))
    names = sorted(p.name for p in (tmp_path / "metrics").iterdir())
    assert names == [
        "compact-x-000000000-000000003.parquet",
        "compact-x-000000004-000000007.parquet",
        *(f"part-x-{b:09d}.parquet" for b in (8, 9, 10)),
        "part-y-000000000.parquet",
    ]
    table = metrics.read(tmp_path, run="x")
    assert table.column("batchId").to_pylist() == [b for b in range(11) for _ in range(2)]
    assert table.column("rowsOut").to_pylist()[::2] == [float(b) for b in range(11)]
    assert metrics.read(tmp_path, run="x", newest=3).column("batchId").to_pylist() == [8, 8, 9, 9, 10, 10]
    assert metrics.read(tmp_path, run="x", newest=5).column("batchId").to_pylist()[::2] == [6, 7, 8, 9, 10]
    assert metrics.read(tmp_path).num_rows == 24


def test_the_newest_write_of_a_merged_batch_counts(tmp_path):
    """A small file a crash left beside the merged file holding its batch is older and skipped;
    the batch written again after the merge (a replay) is newer and replaces the merged rows."""
    writer = metrics.MetricsWriter(tmp_path, "x", every=2, margin=0)
    metrics.write_batch(tmp_path, "x", 0, _rows("x", 0, out=5.0))  # as if the crash came before removal
    stale = tmp_path / "metrics" / "part-x-000000000.parquet"
    saved = stale.read_bytes()
    for b in (0, 1):
        writer.write(b, _rows("x", b))
    assert not stale.exists()
    stale.write_bytes(saved)
    merged = tmp_path / "metrics" / "compact-x-000000000-000000001.parquet"
    os.utime(stale, ns=(merged.stat().st_mtime_ns - 10**9,) * 2)
    table = metrics.read(tmp_path, run="x")
    assert table.column("batchId").to_pylist() == [0, 0, 1, 1] and set(table.column("rowsOut").to_pylist()) == {1.0}
    os.utime(stale, ns=(merged.stat().st_mtime_ns + 10**9,) * 2)  # written after the merge
    table = metrics.read(tmp_path, run="x")
    assert sorted(zip(table.column("batchId").to_pylist(), table.column("rowsOut").to_pylist())) == [
        (0, 5.0),
        (0, 5.0),
        (1, 1.0),
        (1, 1.0),
    ]


def test_a_restarted_run_merges_what_its_earlier_process_left(tmp_path):
    """Batches 0-4 in small files from before a restart are read once by the new writer and merged
    with its own; one left by a crash beside the merged file holding it is not read again."""
    for b in range(5):
        metrics.write_batch(tmp_path, "x", b, _rows("x", b, out=float(b)))
    metrics.write_batch(tmp_path, "other", 0, _rows("other", 0))
    writer = metrics.MetricsWriter(tmp_path, "x", every=4, margin=2)
    for b in (5, 6):
        writer.write(b, _rows("x", b, out=float(b)))
    folder = tmp_path / "metrics"
    assert sorted(p.name for p in folder.glob("*-x-*")) == [
        "compact-x-000000000-000000003.parquet",
        *(f"part-x-{b:09d}.parquet" for b in (4, 5, 6)),
    ]
    table = metrics.read(tmp_path, run="x")
    assert table.column("rowsOut").to_pylist()[::2] == [float(b) for b in range(7)]
    # a crash between a merge and the removal: the leftover is older than the merged file
    leftover = folder / "part-x-000000001.parquet"
    metrics.write_batch(tmp_path, "x", 1, _rows("x", 1, out=99.0))
    merged = folder / "compact-x-000000000-000000003.parquet"
    os.utime(leftover, ns=(merged.stat().st_mtime_ns - 10**9,) * 2)
    again = metrics.MetricsWriter(tmp_path, "x", every=4, margin=2)
    assert sorted(again._held) == [4, 5, 6]
    assert metrics.read(tmp_path, run="x").column("rowsOut").to_pylist()[::2] == [float(b) for b in range(7)]


@pytest.mark.parametrize("every, margin", [(1, 0), (0, 0), (2.5, 0), (4, -1)])
def test_metrics_writer_checks_its_sizes(tmp_path, every, margin):
    with pytest.raises(ValueError, match="every must be|margin must be"):
        metrics.MetricsWriter(tmp_path, "x", every=every, margin=margin)


def test_unknown_column_is_rejected():
    with pytest.raises(ValueError, match="unknown metrics columns"):
        metrics.row(run="x", rows_out=1)


def test_delay_summary_weights():
    s = metrics.delay_summary([1.0, 3.0], weights=[3.0, 1.0])
    assert s["delayMean_s"] == pytest.approx(1.5) and s["delayMax_s"] == 3.0 and s["delayP50_s"] == 1.0
    assert math.isnan(metrics.delay_summary([])["delayP99_s"])


def test_report_renders(output_dir):
    assert main(["report", str(output_dir), "--title", "small"]) == 0
    page = output_dir / "report" / "index.html"
    text = page.read_text()
    assert "<title>small</title>" in text
    for name in ("queue.png", "delay.png", "output_rate.png", "strategy.png", "classes.png"):
        png = output_dir / "report" / name
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
        assert f"src='{name}'" in text
    summary = json.loads((output_dir / "report" / "summary.json").read_text())
    assert {row["run"] for row in summary} == {"fifo", "chain", "rr", "adaptive"}
    adaptive = next(row for row in summary if row["run"] == "adaptive")
    assert "fifo" in adaptive["strategy mix"] and "chain" in adaptive["strategy mix"]
    chain = next(row for row in summary if row["run"] == "chain")
    fifo = next(row for row in summary if row["run"] == "fifo")
    assert chain["rows out"] > 0 and fifo["peak queued"] >= chain["peak queued"] - 3


def test_report_without_metrics_says_so(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert "no metrics files" in capsys.readouterr().err


def test_delay_digest_is_bounded_and_close():
    """A long job keeps its delay summary in constant memory: count, mean and max exact, the
    p99 from a uniform reservoir within a few percent."""
    import numpy as np

    rng = np.random.default_rng(3)
    digest = metrics.DelayDigest(capacity=50_000, seed=1)
    chunks = [rng.exponential(1.0, 5000) * (1 + rng.random()) for _ in range(200)]
    for c in chunks:
        digest.add(c)
    everything = np.concatenate(chunks)
    assert digest._sample.size == 50_000
    assert digest.count == everything.size and digest.max == everything.max()
    assert digest.mean == pytest.approx(everything.mean())
    assert digest.percentile(99) == pytest.approx(np.percentile(everything, 99), rel=0.03)


def test_console_lines_show_a_dash_not_nan_and_the_mix_lists_strategies_only():
    """A trigger before any output (NaN delays) prints a dash; a record taken before adaptive
    picked its first strategy ("-") is not a strategy in the mix; a stream behind its event time
    says it is catching up."""
    from sparkqos.report.console import ClassMonitor

    lines: list[str] = []
    m = ClassMonitor({"fire": "H", "archive": "N"}, watch="fire", print_fn=lambda s, **_: lines.append(s), clock=lambda: 0.0)
    nan = float("nan")
    query = {"klass": "H", "query": "fire", "queuedRows": 0.0, "queuedBytes": 0.0, "delayP99_s": nan}
    base = {"batchId": 0, "numInputRows": 0, "numOutputRows": 0, "queuedRows": 0.0, "queuedBytes": 0.0}
    m.on_progress({**base, "delayMsP99": nan, "strategy": "-", "queries": [query]})
    behind = {"backlogS": 300.0, "backlogRows": 1.8e6, "catchUpEtaS": 40.0}
    m.on_progress({**base, "batchId": 1, "delayMsP99": 12.0, "strategy": "fifo", "queries": [query], **behind})
    text = "\n".join(lines) + m.summary(elapsed_s=1.0)
    assert "nan" not in text.lower()
    assert lines[0] == "first micro-batch 0.0s after start-up began"
    assert "delay p99        - ms (fire       - ms)" in lines[1]
    assert lines[2].endswith("| catching up: 1.8 M rows behind (300 s of stream), ETA 40 s")
    assert "strategy mix: fifo 100%" in text


def test_spark_jobs_are_described_with_the_figures_of_the_trigger_before():
    """Spark's UI shows sparkqos's figures: the trigger's jobs are named after the last record."""
    from sparkqos.spark.batch import describe_jobs

    class Context:
        description = None

        def setJobDescription(self, text):
            Context.description = text

    class Session:
        sparkContext = Context()

    nan = float("nan")
    last = {
        "queuedRows": 1234.0,
        "strategy": "chain",
        "queries": [
            {"klass": "H", "delayP99_s": 0.12},
            {"klass": "N", "delayP99_s": 0.5},
            {"klass": "N", "delayP99_s": 0.7},
            {"klass": "C", "delayP99_s": nan},
        ],
    }
    describe_jobs(Session(), "sensor_monitor", 7, last)
    expected = "sparkqos sensor_monitor batch 7 | before it: queued 1234 rows, p99 H 120 ms, N 700 ms, strategy chain"
    assert Context.description == expected
    describe_jobs(Session(), "sensor_monitor", 0, None)
    assert Context.description == "sparkqos sensor_monitor batch 0"


def _resumed_run(out, gap_s: float = 300.0) -> None:
    """The metrics of a job stopped after 10 triggers and resumed ``gap_s`` later from its
    checkpoint, its backlog queued at once: wall-clock times, classes written N, C, H (the order
    of the plan's queries), whose priorities are H, C, N."""
    t0 = 1_790_000_000.0
    for b in range(20):
        t = t0 + b + (gap_s if b >= 10 else 0.0)
        queued = 300_000.0 if b == 10 else 100.0 * b
        rows = [
            metrics.row(
                run="job", batchId=b, time_s=t, query=q, klass=k, rowsIn=100.0, rowsOut=50.0, delayMean_s=d, durationMs=200.0
            )
            for q, k, d in (("archive", "N", 0.9), ("anomaly", "C", 0.5), ("fire", "H", 0.1 + (b >= 10) * 40))
        ]
        plan = dict(rowsIn=100.0, rowsOut=150.0, queuedRows=queued, delayMean_s=0.5, strategy="chain" if b % 2 else "fifo")
        rows.append(metrics.row(run="job", batchId=b, time_s=t, query=metrics.PLAN_ROW, klass="*", durationMs=200.0, **plan))
        metrics.write_batch(out, "job", b, rows)


def test_a_resumed_runs_report_shows_the_downtime_as_a_gap(tmp_path, monkeypatch):
    """A run stopped and resumed five minutes later: every line over time breaks across the
    downtime (a NaN point, no segment from before it to after it), the rate after it is not the
    rows over the downtime, the classes share one y-scale in priority order H, C, N, and the
    strategy legend covers neither the axes nor their label."""
    import numpy as np
    from matplotlib.figure import Figure

    from sparkqos.report import render

    drawn = {}
    real_savefig = Figure.savefig

    boxes = {}

    def savefig(fig, path, *args, **kwargs):
        drawn[Path(path).name] = fig
        real_savefig(fig, path, *args, **kwargs)
        renderer = fig.canvas.get_renderer()  # where the saved image put the legends and labels
        ax = fig.axes[0]
        boxes[Path(path).name] = [
            [legend.get_window_extent(renderer) for legend in fig.legends],
            [ax.get_window_extent(renderer), ax.xaxis.label.get_window_extent(renderer)],
        ]

    monkeypatch.setattr(Figure, "savefig", savefig)
    _resumed_run(tmp_path)
    render(tmp_path, classes=["H", "C", "N"])

    def segments(line) -> list[tuple[float, float]]:
        """(first x, last x) of each run of points with a y: the pieces matplotlib draws joined."""
        pieces: list[list[float]] = [[]]
        for x, y in zip(line.get_xdata(), line.get_ydata(), strict=True):
            if np.isnan(y):
                pieces.append([])
            else:
                pieces[-1].append(x)
        return [(p[0], p[-1]) for p in pieces if p]

    for name in ("queue.png", "delay.png", "output_rate.png", "class_delay.png"):
        for ax in drawn[name].axes:
            (line,) = ax.get_lines()
            (first, last), (after, end) = segments(line)
            assert first < 1 and 9 < last < 10 and 310 < after < 312 and 319 < end < 320, (name, segments(line))
    rate = np.asarray(drawn["output_rate.png"].axes[0].get_lines()[0].get_ydata(), float)
    assert np.nanmin(rate) == pytest.approx(150.0)  # 150 rows a second, never 150 over 300 s

    panels = drawn["class_delay.png"].axes
    assert [ax.get_title().split(":")[0] for ax in panels] == ["class H", "class C", "class N"]
    assert all(panels[0].get_shared_y_axes().joined(panels[0], ax) for ax in panels[1:])

    assert [t.get_text() for t in drawn["classes.png"].axes[0].get_xticklabels()] == ["H", "C", "N"]

    (legend,), covered = boxes["strategy.png"]
    assert not any(legend.overlaps(box) for box in covered)
    assert [t.get_text() for t in drawn["strategy.png"].legends[0].get_texts()] == ["chain", "fifo"]


def test_summary_json_counts_are_integers(tmp_path):
    """The report's summary.json: counts as integers, delays rounded to 0.1 ms."""
    from sparkqos.report import render

    _resumed_run(tmp_path)
    render(tmp_path)
    (row,) = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert row["triggers"] == 20 and row["rows out"] == 3000 and isinstance(row["rows out"], int)
    assert row["peak queued"] == 300_000 and isinstance(row["peak queued"], int)
    assert row["mean delay (s)"] == 0.5


def test_the_summary_counts_every_trigger_and_runs_to_the_stop():
    """The summary's trigger count is the number of progress records (the metrics table's, so
    summary.json's), a record before adaptive's first pick included; its run length ends when the
    job decided to stop (after 60 s of a --duration 60), not after the last trigger and the drain."""
    from sparkqos.report.console import ClassMonitor

    now = [100.0]
    m = ClassMonitor({"fire": "H", "archive": "N"}, watch="fire", classes=["H", "N"], print_fn=None, clock=lambda: now[0])
    query = {"klass": "H", "query": "fire", "queuedRows": 0.0, "queuedBytes": 0.0, "delayP99_s": 0.1}
    for batch, strategy in enumerate(["-", "fifo", "chain"]):
        m.on_progress({"batchId": batch, "numInputRows": 5, "numOutputRows": 5, "queuedRows": 7.0, "queuedBytes": 0.0,
                       "delayMsP99": 100.0, "strategy": strategy, "queries": [query]})  # fmt: skip
        now[0] += 20.0
    m.stopping()
    now[0] += 5.0  # the last trigger ends, the outputs drain
    head = m.summary().splitlines()[0]
    assert head.startswith("summary after 60 s from the first micro-batch, 3 triggers; peak queued 7 rows")
    assert "strategy mix: fifo 50%, chain 50%" in head
