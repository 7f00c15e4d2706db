"""``python -m sparkqos report OUTPUT_DIR``: an HTML page with PNG figures from a metrics table.

Figures in the papers' style — queued tuples, delay and output rate against time for each run,
the strategy timeline of adaptive runs, mean delay per query class — and one summary table.
Static files only: open ``OUTPUT_DIR/report/index.html`` in a browser, no server needed.
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


def _relative_time(table: pd.DataFrame) -> pd.DataFrame:
    """Spark runs stamp triggers with wall-clock seconds since the epoch; plot them from each
    run's first trigger instead (simulator windows already start near 0)."""
    start = table.groupby("run")["time_s"].transform("min")
    wall = start > 1e8
    first = table.groupby("run")["durationMs"].transform("first").fillna(0) / 1000.0
    return table.assign(time_s=table["time_s"].where(~wall, table["time_s"] - start + first))


def _line_figure(plt, plan: pd.DataFrame, column: str, ylabel: str, path: Path, rate: bool = False) -> None:
    fig, ax = plt.subplots(figsize=(8, 3.6))
    for run, g in plan.groupby("run", sort=False):
        g = g.sort_values("time_s")
        y = g[column].to_numpy(dtype=float)
        if rate:
            t = g["time_s"].to_numpy(dtype=float)
            dt = np.diff(np.concatenate([[0.0], t]))
            y = np.divide(y, dt, out=np.full_like(y, np.nan), where=dt > 0)
        ax.plot(g["time_s"], y, label=run, linewidth=1.2)
    ax.set_xlabel("time (s)")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def render(output_dir: str | Path, title: str | None = None) -> Path:
    """Render ``output_dir``'s metrics into ``output_dir/report/`` and return the HTML path."""
    output_dir = Path(output_dir)
    table = metrics.read(output_dir).to_pandas()
    plt = _pyplot()
    folder = output_dir / "report"
    folder.mkdir(parents=True, exist_ok=True)
    plan = _relative_time(table[table["query"] == metrics.PLAN_ROW])

    figures: list[tuple[str, str]] = []
    _line_figure(plt, plan, "queuedRows", "queued tuples", folder / "queue.png")
    figures.append(("queue.png", "Queued tuples against time"))
    _line_figure(plt, plan, "delayMean_s", "mean delay (s)", folder / "delay.png")
    figures.append(("delay.png", "Mean tuple delay of each trigger's output"))
    _line_figure(plt, plan, "rowsOut", "rows out per second", folder / "output_rate.png", rate=True)
    figures.append(("output_rate.png", "Output rate against time"))

    adaptive = [run for run, g in plan.groupby("run", sort=False) if g["strategy"].nunique() > 1]
    if adaptive:
        fig, ax = plt.subplots(figsize=(8, 0.9 + 0.6 * len(adaptive)))
        names = sorted(set(plan[plan["run"].isin(adaptive)]["strategy"]))
        for i, run in enumerate(adaptive):
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
        ax.set_yticks(range(len(adaptive)), adaptive)
        ax.set_xlabel("time (s)")
        handles = [plt.Line2D([], [], marker="s", linestyle="", color=plt.get_cmap("tab10")(k)) for k in range(len(names))]
        ax.legend(handles, names, fontsize=8, ncol=min(len(names), 6), loc="upper center", bbox_to_anchor=(0.5, -0.35))
        fig.tight_layout()
        fig.savefig(folder / "strategy.png", dpi=110)
        plt.close(fig)
        figures.append(("strategy.png", "Strategy in force (adaptive runs)"))

    per_class = class_delays(table)
    if not per_class.empty:
        pivot = per_class.pivot(index="klass", columns="run", values="mean delay (s)")
        fig, ax = plt.subplots(figsize=(8, 3.6))
        pivot.plot.bar(ax=ax, rot=0)
        ax.set_ylabel("mean delay (s)")
        ax.set_xlabel("query class")
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=8, ncol=3)
        fig.tight_layout()
        fig.savefig(folder / "classes.png", dpi=110)
        plt.close(fig)
        figures.append(("classes.png", "Mean delay per query class"))

    table_summary = summary(table)
    title = title or f"sparkqos report: {output_dir.name}"
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title>",
        "<style>body{font-family:sans-serif;max-width:980px;margin:2em auto;color:#222}"
        "table{border-collapse:collapse}td,th{border:1px solid #bbb;padding:4px 8px;text-align:right}"
        "th{background:#eee}td:first-child,td:last-child{text-align:left}figure{margin:1.5em 0}</style>",
        "</head><body>",
        f"<h1>{html.escape(title)}</h1>",
        "<h2>Summary</h2>",
        table_summary.to_html(index=False, float_format=lambda v: f"{v:,.3f}", border=0, escape=True),
    ]
    if not per_class.empty:
        parts += [
            "<h2>Mean delay per class (s)</h2>",
            per_class.pivot(index="run", columns="klass", values="mean delay (s)").to_html(
                float_format=lambda v: f"{v:,.3f}", border=0
            ),
        ]
    for name, caption in figures:
        parts.append(
            f"<figure><img src='{name}' alt='{html.escape(caption)}' width='780'>"
            f"<figcaption>{html.escape(caption)}</figcaption></figure>"
        )
    parts.append("</body></html>")
    page = folder / "index.html"
    page.write_text("\n".join(parts), encoding="utf-8")
    (folder / "summary.json").write_text(json.dumps(table_summary.to_dict(orient="records"), indent=1))
    return page
