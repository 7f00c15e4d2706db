"""A Delta Lake sink on delta-rs (the ``deltalake`` package: no Spark job, no JARs).

:class:`DeltaSink` keeps one Delta table per query, ``path/NAME``, each row carrying the batch
that wrote it (``batch_id``, a column readers may drop). Writing batch ``b`` is one Delta commit
per query that has rows (or had rows of ``b`` from an earlier attempt): an overwrite restricted to
``batch_id = b`` (replaceWhere), committed with the transaction identifier ``(app_id, b)`` of
Delta's protocol (``CommitProperties(app_transactions=[Transaction(app_id, b)])``). So:

* a batch replayed after a crash replaces what an earlier attempt committed of it — as
  :class:`~sparkqos.io.sinks.ParquetSink` does, so the table holds exactly the last attempt of
  every batch, which is what the checkpoint continues from (an attempt's rows can differ from the
  replay's: the strategy's interleaving is timed);
* the table's transaction version for ``app_id`` is the last batch committed to it, readable by
  any Delta reader (``DeltaTable(path).transaction_version(app_id)``), and a table's history has one
  commit per batch that wrote it;
* a query with no rows in a batch that no attempt wrote costs no commit.

Whole batches only (no early parts: a Delta commit per part would multiply the table's versions).
This module does not import pyspark; ``deltalake`` is imported when the sink is made (the
``delta`` extra).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa

from sparkqos.errors import SinkError
from sparkqos.io.sinks import Sink, check_outputs

__all__ = ["BATCH_COLUMN", "DeltaSink", "read_delta_sink"]

#: The column each row's batch id is kept in.
BATCH_COLUMN = "batch_id"


def _deltalake() -> Any:
    try:
        import deltalake
    except ImportError:
        raise SinkError(
            "DeltaSink needs the deltalake package (delta-rs): pip install 'sparkqos[delta]'",
            parameter="sink",
            value="DeltaSink",
            expected="deltalake installed",
        ) from None
    return deltalake


class DeltaSink(Sink):
    """Delta tables ``path/NAME``, one per query, exactly once per batch (module docstring).

    ``app_id`` names this stream in the tables' transaction identifiers (default ``"sparkqos"``;
    give each stream writing the same tables its own).
    """

    def __init__(self, path: str | os.PathLike, app_id: str = "sparkqos"):
        self.deltalake = _deltalake()
        self.path = Path(path)
        self.app_id = str(app_id)

    def __getstate__(self) -> dict:
        return {"path": self.path, "app_id": self.app_id}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["path"], state["app_id"])

    def __repr__(self) -> str:
        return f"DeltaSink({str(self.path)!r}, app_id={self.app_id!r})"

    def committed(self, query: str) -> int:
        """The last batch committed to ``query``'s table by this ``app_id`` (-1: none)."""
        table = self.path / query
        if not (table / "_delta_log").is_dir():
            return -1
        version = self.deltalake.DeltaTable(str(table)).transaction_version(self.app_id)
        return -1 if version is None else int(version)

    def write(self, batch_id: int, outputs: Mapping[str, pa.Table]) -> None:
        dl = self.deltalake
        names = set(check_outputs(outputs)) | {p.name for p in self.path.glob("*") if (p / "_delta_log").is_dir()}
        for name in sorted(names):
            table = outputs.get(name)
            rows = 0 if table is None else table.num_rows
            if not rows and self.committed(name) < batch_id:
                continue  # nothing now, nothing from an earlier attempt of this batch
            commit = dl.CommitProperties(app_transactions=[dl.Transaction(self.app_id, int(batch_id))])
            target = str(self.path / name)
            if table is None or not rows:
                dl.DeltaTable(target).delete(f"{BATCH_COLUMN} = {int(batch_id)}", commit_properties=commit)
                continue
            data = table.append_column(BATCH_COLUMN, pa.array([int(batch_id)] * rows, pa.int64()))
            dl.write_deltalake(
                target,
                data,
                mode="overwrite",
                predicate=f"{BATCH_COLUMN} = {int(batch_id)}",
                schema_mode=None,
                commit_properties=commit,
            )

    def read(self, with_batch_id: bool = False) -> dict[str, pa.Table]:
        return read_delta_sink(self.path, with_batch_id)


def read_delta_sink(path: str | os.PathLike, with_batch_id: bool = False) -> dict[str, pa.Table]:
    """Every query's rows from the Delta tables under ``path``, in batch order (with the
    ``batch_id`` column when ``with_batch_id``)."""
    dl = _deltalake()
    out = {}
    for table in sorted(p for p in Path(path).glob("*") if (p / "_delta_log").is_dir()):
        data = dl.DeltaTable(str(table)).to_pyarrow_table()
        data = data.sort_by([(BATCH_COLUMN, "ascending")]) if data.num_rows else data
        out[table.name] = data if with_batch_id else data.drop_columns([BATCH_COLUMN])
    return out
