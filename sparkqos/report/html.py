"""The report page: ``python -m sparkqos report OUTPUT_DIR`` draws a metrics table as HTML and PNG figures.

Figures in the papers' style — queued rows, mean delay of each class and output rate against
time for each run, the strategy in force over time, mean delay per query class — one summary
table, and, when the folder holds ``claims.json`` (jobs/experiments/claims.py), the papers' claims
table first. Static files only: open ``OUTPUT_DIR/report/index.html`` in a browser.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from sparkqos.report import metrics
from sparkqos.report.console import NO_STRATEGY_YET

FIGURES = ("queue", "delay", "output_rate", "strategy", "classes", "delay_parts")

#: The parts of a row's delay, in the order it passes them (sparkqos.runtime.decompose), and
#: what the figure calls them.
DELAY_PARTS = (
    ("delayPartWait_s", "in the source"),
    ("delayPartSpark_s", "Spark's trigger work"),
    ("delayPartTrigger_s", "sparkqos's trigger work"),
    ("delayPartQueue_s", "queued"),
    ("delayPartRun_s", "operator runs"),
    ("delayPartSink_s", "sink write"),
)


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        from sparkqos.errors import SparkqosError

        raise SparkqosError("the report draws with matplotlib: pip install 'sparkqos[plot]'") from None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """One row per run: output, delay (mean weighted by rows, worst trigger p99), queued rows,
    and the share of triggers each strategy was in force. Counts are integers (the simulator's
    fractional tuples keep one decimal), delays rounded to 0.1 ms."""
    plan = table[table["query"] == metrics.PLAN_ROW]
    out = []
    for run, g in plan.groupby("run", sort=False):
        w = g["rowsOut"].to_numpy()
        d = g["delayMean_s"].to_numpy()
        ok = np.isfinite(d) & (w > 0)
        mix = g["strategy"][g["strategy"] != NO_STRATEGY_YET].value_counts(normalize=True)
        out.append(
            {
                "run": run,
                "triggers": len(g),
                "rows out": _count(w.sum()),
                "mean delay (s)": _seconds(np.sum(d[ok] * w[ok]) / w[ok].sum() if ok.any() else math.nan),
                "worst p99 delay (s)": _seconds(np.nanmax(g["delayP99_s"]) if g["delayP99_s"].notna().any() else math.nan),
                "peak queued": _count(g["queuedRows"].max()),
                "mean queued": round(float(g["queuedRows"].mean()), 1),
                "strategy mix": ", ".join(f"{k} {v:.0%}" for k, v in mix.items()),
            }
        )
    return pd.DataFrame(out)


def _count(v: float) -> int | float:
    """A count as an integer, unless it is fractional (the simulator's fluid tuples): one decimal.

    >>> _count(256188.0), _count(12.25)
    (256188, 12.2)
    """
    v = float(v)
    return int(v) if v.is_integer() else round(v, 1)


def _seconds(v: float) -> float:
    """Seconds to 0.1 ms (NaN stays NaN).

    >>> _seconds(1.2799523111195419)
    1.28
    """
    return round(float(v), 4) if math.isfinite(v) else math.nan


def class_delays(table: pd.DataFrame) -> pd.DataFrame:
    """Mean delay per (run, class), weighted by rows out."""
    q = table[(table["query"] != metrics.PLAN_ROW) & table["delayMean_s"].notna() & (table["rowsOut"] > 0)]
    if q.empty:
        return pd.DataFrame(columns=["run", "klass", "mean delay (s)"])
    q = q.assign(weighted=q["delayMean_s"] * q["rowsOut"])
    g = q.groupby(["run", "klass"], sort=False)[["weighted", "rowsOut"]].sum()
    g["mean delay (s)"] = g["weighted"] / g["rowsOut"]
    return g.reset_index()[["run", "klass", "mean delay (s)"]]


def _relative_time(rows: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
    """``rows`` (of ``table``) with Spark's wall-clock trigger times (seconds since the epoch) moved
    to seconds since the start of their run's first trigger that read input — a replay begins a
    while after its query starts; the idle triggers before it are left out — so runs line up.
    Simulator windows already start near 0 and are kept as they are."""
    plan = table[table["query"] == metrics.PLAN_ROW]
    began = (plan["time_s"] - plan["durationMs"].fillna(0) / 1000.0).where(plan["rowsIn"].fillna(0) > 0)
    origin = began.groupby(plan["run"]).min().combine_first(table.groupby("run")["time_s"].min())
    wall = rows["run"].map(table.groupby("run")["time_s"].min()) > 1e8
    moved = rows.assign(time_s=rows["time_s"].where(~wall, rows["time_s"] - rows["run"].map(origin)))
    return moved[~wall | (moved["time_s"] >= 0)]


def human(v: float) -> str:
    """A number as a person reads it: counts with thousands separators and no decimals, small
    values with three significant digits.

    >>> [human(v) for v in (241145.0, 12.3456, 0.0123456, float("nan"))]
    ['241,145', '12.35', '0.0123', '-']
    """
    if v is None or not math.isfinite(v):
        return "-"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 1:
        return f"{v:.2f}"
    return f"{v:.3g}"


#: A pause between two triggers at least this long, and ``GAP_FACTOR`` times the run's usual
#: pause, is downtime (the job stopped and later resumed from its checkpoint): the figures draw it
#: as a gap, not as a line from the last figure before it to the first after.
GAP_LEAST_S = 20.0
GAP_FACTOR = 20.0


def downtimes(plan: pd.DataFrame) -> dict[str, list[tuple[float, float]]]:
    """Per run of ``plan`` (plan rows), the stretches with no trigger — (end of the trigger
    before, start of the one after) — long enough to be downtime (``GAP_LEAST_S``, ``GAP_FACTOR``)."""
    out: dict[str, list[tuple[float, float]]] = {}
    for run, g in plan.groupby("run", sort=False):
        g = g.sort_values("time_s")
        end = g["time_s"].to_numpy(dtype=float)
        start = end - g["durationMs"].fillna(0).to_numpy(dtype=float) / 1000.0
        pause = start[1:] - end[:-1]
        usual = float(np.median(np.clip(pause, 0, None))) if pause.size else 0.0
        gap = np.flatnonzero(pause > max(GAP_LEAST_S, GAP_FACTOR * usual))
        out[run] = [(float(end[i]), float(start[i + 1])) for i in gap]
    return out


def _broken(t: np.ndarray, y: np.ndarray, gaps: list[tuple[float, float]]) -> tuple[np.ndarray, np.ndarray]:
    """``(t, y)`` with a NaN point in each gap between two of its points, so no line crosses it.

    >>> _broken(np.array([0.0, 1.0, 300.0]), np.array([5.0, 6.0, 7.0]), [(1.0, 299.0)])
    (array([  0.,   1., 150., 300.]), array([ 5.,  6., nan,  7.]))
    """
    mids = np.array([(a + b) / 2 for a, b in gaps], dtype=float)
    at = np.searchsorted(t, mids)
    inside = (at > 0) & (at < len(t))
    return np.insert(t, at[inside], mids[inside]), np.insert(y.astype(float), at[inside], np.nan)


def class_order(table: pd.DataFrame, classes: list[str] | None = None) -> list[str]:
    """The query classes of ``table``: those of ``classes`` (the plan's, highest priority first)
    in that order, then any others in the order they first appear (the plan's query order)."""
    seen = list(dict.fromkeys(table.loc[table["query"] != metrics.PLAN_ROW, "klass"]))
    first = [k for k in (classes or []) if k in seen]
    return first + [k for k in seen if k not in first]


def _axes(ax, title: str, ylabel: str) -> None:
    ax.set_title(title, fontsize=11)
    ax.set_xlabel("time since the run's first input (s)")
    ax.set_ylabel(ylabel)
    ax.yaxis.set_major_formatter(_ticks())
    ax.grid(alpha=0.3)


def _ticks():
    """Axis ticks with thousands separators and no trailing zeros (35,000; 2.5; 0.25)."""
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _: f"{v:,.0f}" if abs(v) >= 100 or v == int(v) else f"{v:g}")


def _save(plt, fig, path: Path, handles=None, labels=None) -> None:
    """Save ``fig`` with a legend below the axes and their labels, where it covers nothing: of
    ``handles`` and ``labels`` when given, else of the lines of its first axes when there are
    several (one line needs no name)."""
    if handles is None:
        handles, labels = fig.axes[0].get_legend_handles_labels()
        handles, labels = (handles, labels) if len(handles) > 1 else ([], [])
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncol=min(len(handles), 6), fontsize=8, frameon=False)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _line_figure(plt, plan: pd.DataFrame, column: str, labels: tuple[str, str], path: Path, rate: bool = False) -> None:
    """One line per run of the plan rows' ``column`` against time (``rate``: per second since
    the trigger before), broken at downtime."""
    fig, ax = plt.subplots(figsize=(8, 3.6), layout="constrained")
    gaps = downtimes(plan)
    for run, g in plan.groupby("run", sort=False):
        g = g.sort_values("time_s")
        t = g["time_s"].to_numpy(dtype=float)
        y = g[column].to_numpy(dtype=float)
        if rate:
            dt = np.diff(np.concatenate([[0.0], t]))
            y = np.divide(y, dt, out=np.full_like(y, np.nan), where=dt > 0)
            y[np.searchsorted(t, [b for _, b in gaps[run]])] = np.nan  # rows since before the downtime
        ax.plot(*_broken(t, y, gaps[run]), label=run, linewidth=1.2)
    _axes(ax, *labels)
    _save(plt, fig, path)


def _class_delay_figure(plt, table: pd.DataFrame, order: list[str], path: Path) -> bool:
    """Mean delay of each class's output per trigger against time: one panel per class, highest
    priority first, all on one y-scale so the classes compare; broken at downtime."""
    q = _relative_time(table[(table["query"] != metrics.PLAN_ROW) & table["delayMean_s"].notna() & (table["rowsOut"] > 0)], table)
    if q.empty:
        return False
    gaps = downtimes(_relative_time(table[table["query"] == metrics.PLAN_ROW], table))
    q = q.assign(weighted=q["delayMean_s"] * q["rowsOut"])
    g = q.groupby(["klass", "run", "time_s"], sort=False)[["weighted", "rowsOut"]].sum().reset_index()
    g["delay"] = g["weighted"] / g["rowsOut"]
    classes = [k for k in order if k in set(g["klass"])]
    fig, axes = plt.subplots(
        len(classes), 1, figsize=(8, 2.6 * len(classes) + 0.6), squeeze=False, sharex=True, sharey=True, layout="constrained"
    )
    for ax, klass in zip(axes[:, 0], classes, strict=True):
        for run, r in g[g["klass"] == klass].groupby("run", sort=False):
            r = r.sort_values("time_s")
            t, y = r["time_s"].to_numpy(dtype=float), r["delay"].to_numpy(dtype=float)
            ax.plot(*_broken(t, y, gaps.get(run, [])), label=run, linewidth=1.1)
        _axes(ax, f"class {klass}: mean delay of each trigger's output", "delay (s)")
        if ax is not axes[-1, 0]:
            ax.set_xlabel("")
    _save(plt, fig, path)
    return True


def _strategy_figure(plt, plan: pd.DataFrame, path: Path) -> bool:
    """The strategy in force at each trigger, one row of marks per run."""
    runs = list(dict.fromkeys(plan["run"]))
    if not runs:
        return False
    fig, ax = plt.subplots(figsize=(8, 1.4 + 0.6 * len(runs)), layout="constrained")
    names = sorted(set(plan["strategy"]))
    colour = plt.get_cmap("tab10")
    for i, run in enumerate(runs):
        g = plan[plan["run"] == run].sort_values("time_s")
        ax.scatter(g["time_s"], [i] * len(g), c=[colour(names.index(s) % 10) for s in g["strategy"]], marker="s", s=14)
    ax.set_yticks(range(len(runs)), runs)
    ax.set_ylim(-0.6, len(runs) - 0.4)
    ax.set_title("Strategy in force at each trigger", fontsize=11)
    ax.set_xlabel("time since the run's first input (s)")
    handles = [plt.Line2D([], [], marker="s", linestyle="", color=colour(k % 10)) for k in range(len(names))]
    _save(plt, fig, path, handles, names)
    return True


def _classes_figure(plt, per_class: pd.DataFrame, order: list[str], path: Path) -> bool:
    """Mean delay of each class over the whole run, one bar per run, classes highest priority first."""
    if per_class.empty:
        return False
    pivot = per_class.pivot(index="klass", columns="run", values="mean delay (s)")
    pivot = pivot.reindex([k for k in order if k in pivot.index])
    fig, ax = plt.subplots(figsize=(8, 3.6), layout="constrained")
    pivot.plot.bar(ax=ax, rot=0, legend=False)
    ax.set_title("Mean delay per query class over the whole run", fontsize=11)
    ax.set_ylabel("mean delay (s)")
    ax.set_xlabel("query class (highest priority first)")
    ax.yaxis.set_major_formatter(_ticks())
    ax.grid(alpha=0.3, axis="y")
    _save(plt, fig, path)
    return True


def delay_parts(table: pd.DataFrame) -> pd.DataFrame:
    """Per (run, class): mean seconds of each part of the delay of the rows written, weighted by
    rows out (runs without the parts, such as the simulator's, give nothing)."""
    columns = [c for c, _ in DELAY_PARTS]
    q = table[(table["query"] != metrics.PLAN_ROW) & (table["rowsOut"] > 0)].dropna(subset=columns)
    if q.empty:
        return pd.DataFrame(columns=["run", "klass", *columns])
    weighted = q[columns].multiply(q["rowsOut"], axis=0).assign(run=q["run"], klass=q["klass"], rowsOut=q["rowsOut"])
    g = weighted.groupby(["run", "klass"], sort=False).sum()
    return g[columns].divide(g["rowsOut"], axis=0).reset_index()


def _delay_parts_figure(plt, table: pd.DataFrame, order: list[str], path: Path) -> bool:
    """Where each class's delay went: one stacked bar per (run, class), the parts in the order a
    row passes them, all classes on one scale."""
    parts = delay_parts(table)
    if parts.empty:
        return False
    rank = {k: i for i, k in enumerate(order)}
    parts = parts.assign(rank=parts["klass"].map(lambda k: rank.get(k, len(rank)))).sort_values(["run", "rank"])
    labels = [k if parts["run"].nunique() == 1 else f"{r}\n{k}" for r, k in zip(parts["run"], parts["klass"], strict=True)]
    fig, ax = plt.subplots(figsize=(8, 3.8), layout="constrained")
    bottom = np.zeros(len(parts))
    for column, name in DELAY_PARTS:
        values = parts[column].to_numpy()
        ax.bar(labels, values, bottom=bottom, label=name)
        bottom += values
    _axes(ax, "Where each class's delay went (mean per row written)", "delay (s)")
    ax.set_xlabel("query class (highest priority first)")
    handles, names = ax.get_legend_handles_labels()
    _save(plt, fig, path, handles, names)
    return True


def _claims_html(output_dir: Path) -> list[str]:
    """The claims table of jobs/experiments/claims.py (``claims.json``), when the folder has one,
    under its note's paragraphs (the command it came from, the machine it ran on)."""
    path = output_dir / "claims.json"
    if not path.is_file():
        return []
    doc = json.loads(path.read_text())
    head = ["claim", "paper", "simulator", "Spark bursty", "Spark vessels", "verdict", "measured reason"]
    keys = ["claim", "paper", "simulator", "bursty", "vessels", "verdict", "reason"]
    rows = []
    for r in doc["rows"]:
        r = {**r, "claim": f"{r['section']}: {r['claim']}"}
        color = {"held": "#e6f4e6", "not held": "#fbe3e3"}.get(r["verdict"], "#fff6d6")
        if r["verdict"].startswith("not run"):  # a check that did not run: no verdict on its claim
            color = "#eeeeee"
        cells = "".join(f"<td>{html.escape(str(r[k]))}</td>" for k in keys)
        rows.append(f"<tr style='background:{color}'>{cells}</tr>")
    return [
        "<h2>The papers' claims</h2>",
        *(f"<p>{html.escape(paragraph)}</p>" for paragraph in doc.get("note", "").split("\n\n")),
        "<table class='claims'><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>",
        *rows,
        "</table>",
    ]


def render(output_dir: str | Path, title: str | None = None, classes: list[str] | None = None) -> Path:
    """Render ``output_dir``'s metrics (and claims table, if any) into ``output_dir/report/``
    and return the HTML path. ``classes``: the plan's query classes, highest priority first (the
    order of every figure and table; default: the order the classes first appear)."""
    output_dir = Path(output_dir)
    folder = output_dir / "report"
    folder.mkdir(parents=True, exist_ok=True)
    title = title or f"sparkqos report: {output_dir.name}"
    claims = _claims_html(output_dir)
    if claims and not (output_dir / "metrics").is_dir():
        return _write_page(folder, title, claims)
    table = metrics.read(output_dir).to_pandas()
    order = class_order(table, classes)
    per_class = class_delays(table)
    figures = _figures(_pyplot(), table, per_class, order, folder)
    table_summary = summary(table)
    parts = [
        *claims,
        "<h2>Summary</h2>",
        table_summary.to_html(index=False, float_format=human, border=0, escape=True),
    ]
    if not per_class.empty:
        pivot = per_class.pivot(index="run", columns="klass", values="mean delay (s)")
        parts += [
            "<h2>Mean delay per class (s)</h2>",
            pivot[[k for k in order if k in pivot.columns]].to_html(float_format=human, border=0),
        ]
    for name, caption in figures:
        parts.append(
            f"<figure><img src='{name}' alt='{html.escape(caption)}' width='780'>"
            f"<figcaption>{html.escape(caption)}</figcaption></figure>"
        )
    (folder / "summary.json").write_text(json.dumps(table_summary.to_dict(orient="records"), indent=1))
    return _write_page(folder, title, parts)


def _figures(plt, table: pd.DataFrame, per_class: pd.DataFrame, order: list[str], folder: Path) -> list[tuple[str, str]]:
    """Draw the figures into ``folder``: (file name, caption) of each drawn."""
    plan = _relative_time(table[table["query"] == metrics.PLAN_ROW], table)
    figures: list[tuple[str, str]] = []
    if _class_delay_figure(plt, table, order, folder / "class_delay.png"):
        figures.append(("class_delay.png", "Mean delay of each query class against time"))
    _line_figure(plt, plan, "queuedRows", ("Rows queued in sparkqos at each trigger's end", "queued rows"), folder / "queue.png")
    figures.append(("queue.png", "Queued rows against time (a break: no trigger ran, the job was stopped)"))
    _line_figure(
        plt, plan, "delayMean_s", ("Mean delay of each trigger's output, all queries", "delay (s)"), folder / "delay.png"
    )
    figures.append(("delay.png", "Mean tuple delay of each trigger's output"))
    _line_figure(plt, plan, "rowsOut", ("Throughput", "rows out per second"), folder / "output_rate.png", rate=True)
    figures.append(("output_rate.png", "Output rate against time"))
    if _strategy_figure(plt, plan, folder / "strategy.png"):
        figures.append(("strategy.png", "Strategy in force over time"))
    if _classes_figure(plt, per_class, order, folder / "classes.png"):
        figures.append(("classes.png", "Mean delay per query class"))
    if _delay_parts_figure(plt, table, order, folder / "delay_parts.png"):
        figures.append(("delay_parts.png", "Where each class's delay went: source, Spark, trigger, queue, runs, sink"))
    return figures


def _write_page(folder: Path, title: str, body: list[str]) -> Path:
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title>",
        "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
        "table{border-collapse:collapse}td,th{border:1px solid #bbb;padding:4px 8px;text-align:right}"
        "th{background:#eee}td:first-child,td:last-child{text-align:left}figure{margin:1.5em 0}"
        "table.claims td{text-align:left;font-size:90%}</style>",
        "</head><body>",
        f"<h1>{html.escape(title)}</h1>",
        *body,
        "</body></html>",
    ]
    page = folder / "index.html"
    page.write_text("\n".join(parts), encoding="utf-8")
    return page
