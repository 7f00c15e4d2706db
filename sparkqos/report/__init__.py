"""``python -m sparkqos report OUTPUT_DIR``: an HTML page with PNG figures from a metrics table.

:mod:`sparkqos.report.html` draws the page (pandas, matplotlib); :mod:`sparkqos.report.metrics`
is the table and :mod:`sparkqos.report.console` what a job prints. The package loads the page's
code on first use (PEP 562), so the runtime, which writes metrics and console lines, never loads
pandas or matplotlib.
"""

from __future__ import annotations

from typing import Any

__all__ = ["FIGURES", "render", "summary"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from sparkqos.report import html

        return getattr(html, name)
    raise AttributeError(f"module 'sparkqos.report' has no attribute {name!r}")
