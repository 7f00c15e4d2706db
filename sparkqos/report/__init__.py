"""``python -m sparkqos report OUTPUT_DIR``: an HTML page with PNG figures from a metrics table.

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

FIGURES = ("queue", "delay", "output_rate", "strategy", "classes")


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
    and the share of triggers each strategy was in force."""
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
                "rows out": float(w.sum()),
                "mean delay (s)": float(np.sum(d[ok] * w[ok]) / w[ok].sum()) if ok.any() else math.nan,
                "worst p99 delay (s)": float(np.nanmax(g["delayP99_s"])) if g["delayP99_s"].notna().any() else math.nan,
                "peak queued": float(g["queuedRows"].max()),
                "mean queued": float(g["queuedRows"].mean()),
                "strategy mix": ", ".join(f"{k} {v:.0%}" for k, v in mix.items()),
            }
        )
    return pd.DataFrame(out)


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


def _line_figure(plt, plan: pd.DataFrame, column: str, labels: tuple[str, str], path: Path, rate: bool = False) -> None:
    fig, ax = plt.subplots(figsize=(8, 3.6))
    for run, g in plan.groupby("run", sort=False):
        g = g.sort_values("time_s")
        y = g[column].to_numpy(dtype=float)
        if rate:
            t = g["time_s"].to_numpy(dtype=float)
            dt = np.diff(np.concatenate([[0.0], t]))
            y = np.divide(y, dt, out=np.full_like(y, np.nan), where=dt > 0)
        ax.plot(g["time_s"], y, label=run, linewidth=1.2)
    _axes(ax, *labels)
    ax.legend(fontsize=8, ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _class_delay_figure(plt, table: pd.DataFrame, path: Path) -> bool:
    """Mean delay of each class's output per trigger against time, one panel per class."""
    q = _relative_time(table[(table["query"] != metrics.PLAN_ROW) & table["delayMean_s"].notna() & (table["rowsOut"] > 0)], table)
    if q.empty:
        return False
    q = q.assign(weighted=q["delayMean_s"] * q["rowsOut"])
    g = q.groupby(["klass", "run", "time_s"], sort=False)[["weighted", "rowsOut"]].sum().reset_index()
    g["delay"] = g["weighted"] / g["rowsOut"]
    classes = list(dict.fromkeys(g["klass"]))
    fig, axes = plt.subplots(len(classes), 1, figsize=(8, 2.6 * len(classes) + 0.6), squeeze=False, sharex=True)
    for ax, klass in zip(axes[:, 0], classes):
        for run, r in g[g["klass"] == klass].groupby("run", sort=False):
            r = r.sort_values("time_s")
            ax.plot(r["time_s"], r["delay"], label=run, linewidth=1.1)
        _axes(ax, f"class {klass}: mean delay of each trigger's output", "delay (s)")
    axes[0, 0].legend(fontsize=8, ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _claims_html(output_dir: Path) -> list[str]:
    """The claims table of jobs/experiments/claims.py (``claims.json``), when the folder has one."""
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
        cells = "".join(f"<td>{html.escape(str(r[k]))}</td>" for k in keys)
        rows.append(f"<tr style='background:{color}'>{cells}</tr>")
    return [
        "<h2>The papers' claims</h2>",
        f"<p>{html.escape(doc.get('note', ''))}</p>",
        "<table class='claims'><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>",
        *rows,
        "</table>",
    ]


def render(output_dir: str | Path, title: str | None = None) -> Path:
    """Render ``output_dir``'s metrics (and claims table, if any) into ``output_dir/report/``
    and return the HTML path."""
    output_dir = Path(output_dir)
    folder = output_dir / "report"
    folder.mkdir(parents=True, exist_ok=True)
    title = title or f"sparkqos report: {output_dir.name}"
    claims = _claims_html(output_dir)
    if claims and not (output_dir / "metrics").is_dir():
        return _write_page(folder, title, claims)
    table = metrics.read(output_dir).to_pandas()
    plt = _pyplot()
    plan = _relative_time(table[table["query"] == metrics.PLAN_ROW], table)

    figures: list[tuple[str, str]] = []
    if _class_delay_figure(plt, table, folder / "class_delay.png"):
        figures.append(("class_delay.png", "Mean delay of each query class against time"))
    _line_figure(plt, plan, "queuedRows", ("Rows queued in sparkqos at each trigger's end", "queued rows"), folder / "queue.png")
    figures.append(("queue.png", "Queued rows against time"))
    _line_figure(
        plt, plan, "delayMean_s", ("Mean delay of each trigger's output, all queries", "delay (s)"), folder / "delay.png"
    )
    figures.append(("delay.png", "Mean tuple delay of each trigger's output"))
    _line_figure(plt, plan, "rowsOut", ("Throughput", "rows out per second"), folder / "output_rate.png", rate=True)
    figures.append(("output_rate.png", "Output rate against time"))

    runs = list(dict.fromkeys(plan["run"]))
    if runs:
        fig, ax = plt.subplots(figsize=(8, 0.9 + 0.6 * len(runs)))
        names = sorted(set(plan[plan["run"].isin(runs)]["strategy"]))
        for i, run in enumerate(runs):
            g = plan[plan["run"] == run].sort_values("time_s")
            ax.scatter(
                g["time_s"],
                [i] * len(g),
                c=[names.index(s) for s in g["strategy"]],
                cmap="tab10",
                vmin=0,
                vmax=9,
                marker="s",
                s=14,
            )
        ax.set_yticks(range(len(runs)), runs)
        ax.set_title("Strategy in force at each trigger", fontsize=11)
        ax.set_xlabel("time since the run's first input (s)")
        handles = [plt.Line2D([], [], marker="s", linestyle="", color=plt.get_cmap("tab10")(k)) for k in range(len(names))]
        ax.legend(handles, names, fontsize=8, ncol=min(len(names), 6), loc="upper center", bbox_to_anchor=(0.5, -0.35))
        fig.tight_layout()
        fig.savefig(folder / "strategy.png", dpi=110)
        plt.close(fig)
        figures.append(("strategy.png", "Strategy in force over time"))

    per_class = class_delays(table)
    if not per_class.empty:
        pivot = per_class.pivot(index="klass", columns="run", values="mean delay (s)")
        fig, ax = plt.subplots(figsize=(8, 3.6))
        pivot.plot.bar(ax=ax, rot=0)
        ax.set_title("Mean delay per query class over the whole run", fontsize=11)
        ax.set_ylabel("mean delay (s)")
        ax.set_xlabel("query class")
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=8, ncol=3)
        fig.tight_layout()
        fig.savefig(folder / "classes.png", dpi=110)
        plt.close(fig)
        figures.append(("classes.png", "Mean delay per query class"))

    table_summary = summary(table)
    parts = [
        *claims,
        "<h2>Summary</h2>",
        table_summary.to_html(index=False, float_format=human, border=0, escape=True),
    ]
    if not per_class.empty:
        parts += [
            "<h2>Mean delay per class (s)</h2>",
            per_class.pivot(index="run", columns="klass", values="mean delay (s)").to_html(float_format=human, border=0),
        ]
    for name, caption in figures:
        parts.append(
            f"<figure><img src='{name}' alt='{html.escape(caption)}' width='780'>"
            f"<figcaption>{html.escape(caption)}</figcaption></figure>"
        )
    (folder / "summary.json").write_text(json.dumps(table_summary.to_dict(orient="records"), indent=1))
    return _write_page(folder, title, parts)


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
