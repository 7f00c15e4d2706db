"""The notebooks in notebooks/ run top to bottom, as a user runs them (nbclient, a fresh kernel)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

# each test starts a kernel with a Spark session of its own
pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent


def execute(name: str, env: dict[str, str], cwd: Path) -> nbformat.NotebookNode:
    nb = nbformat.read(ROOT / "notebooks" / name, as_version=4)
    saved = dict(os.environ)
    os.environ.update(env)  # the kernel inherits this process's environment
    try:
        NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}).execute()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return nb


def outputs_of(nb: nbformat.NotebookNode, kind: str) -> list:
    return [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", []) if o.output_type == kind]


@pytest.mark.parametrize("session", ["classic", "connect"])
def test_quickstart_runs_top_to_bottom(tmp_path, session):
    """On classic PySpark and on a local Spark Connect session (Databricks' kind): starts the
    stream with PySpark transforms, shows one updating progress table, stops, plots
    delay per class and queued memory inline, reads the outputs back (its last cell checks the
    archive has rows)."""
    env = {
        # the stream runs this long and on until every query has delivered rows: what is checked
        # below needs one trigger's progress, not a length of stream
        "SPARKQOS_QUICKSTART_SECONDS": "2",
        "SPARKQOS_QUICKSTART_SESSION": session,
        "SPARKQOS_QUICKSTART_OUT": str(tmp_path / "out"),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }
    nb = execute("quickstart.ipynb", env, tmp_path)
    assert not outputs_of(nb, "error")
    banner = "".join(
        o.get("text", "") for o in outputs_of(nb, "stream") if "outputs, checkpoint and metrics" in o.get("text", "")
    )
    assert ("pyspark.sql.connect" in banner) == (session == "connect"), banner  # the session kind asked for
    images = [o for o in outputs_of(nb, "display_data") if "image/png" in o.get("data", {})]
    assert len(images) == 1  # the two plots, in one figure
    (progress_cell,) = [c for c in nb.cells if c.cell_type == "code" and "display_id=True" in c.source]
    shown = [o for o in progress_cell.outputs if o.output_type == "display_data"]
    assert len(shown) == 1, "the progress is one table updated in place, not a scroll of lines"
    assert "archive" in shown[0]["data"]["text/html"]  # updated from its "waiting" placeholder
    assert (tmp_path / "out" / "metrics").is_dir() and (tmp_path / "out" / "outputs" / "query=fire").is_dir()
