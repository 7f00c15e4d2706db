"""The sharded lane's drain ticks: a Spark source whose offset moves only while a shard has a backlog.

A shard that ends its micro-batch with rows queued needs another micro-batch without new input.
After such a micro-batch the driver records the next tick — its number and the shards with a
backlog — in a file beside Spark's checkpoint (:class:`Ticks`); the source ``sparkqos.shard_ticks``
(read on the driver, where the file is) offers it as its latest offset, one row per listed shard,
keyed as that shard's input is. So Spark runs the next micro-batch for those shards only, and with
no input and no backlog the offsets stand still: Spark plans no micro-batch and commits no state.
Under available-now the source ends when its ticks do (its ``prepareForTriggerAvailableNow`` keeps
no target), so the query ends once the input is read and no shard has rows queued.

A tick's rows are decided by its offset alone (the shards are in it), so a micro-batch Spark
replays after a restart gets the same rows.

>>> import tempfile, pathlib
>>> ticks = Ticks(pathlib.Path(tempfile.mkdtemp()) / "ticks.json")
>>> ticks.latest()
{'drainTick': 0, 'shards': []}
>>> ticks.ask([1])
{'drainTick': 1, 'shards': [1]}
>>> tick_rows({"drainTick": 0, "shards": []}, ticks.latest(), [10, 11])
[(11, -1, 1, b'')]
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path

from pyspark.sql.datasource import DataSource, SimpleDataSourceStreamReader
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

from sparkqos.atomic import write_atomic
from sparkqos.errors import SourceError

__all__ = ["TICK_PART", "TickSource", "Ticks", "is_tick_offset", "tick_rows"]

#: The ``part`` of a tick's rows: input partitions are numbered from 0, so a shard tells its
#: ticks from its input by it.
TICK_PART = -1
_NONE = {"drainTick": 0, "shards": []}


class Ticks:
    """The file of the newest tick the driver asked for: ``{"drainTick": n, "shards": [...]}``."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def latest(self) -> dict:
        """The newest tick asked for (tick 0, no shards, before any)."""
        try:
            return json.loads(self.path.read_text())
        except FileNotFoundError:
            return dict(_NONE)

    def ask(self, shards: Sequence[int]) -> dict:
        """Ask for one more micro-batch of ``shards`` (those with a backlog); returns the tick."""
        tick = {"drainTick": self.latest()["drainTick"] + 1, "shards": sorted(int(s) for s in shards)}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, lambda f: f.write(json.dumps(tick).encode()), fsync=False)
        return tick


def tick_rows(start: dict, end: dict, keys: Sequence[int]) -> list[tuple[int, int, int, bytes]]:
    """The rows of the ticks after ``start`` up to ``end``: one per shard ``end`` lists, in the
    sharded lane's packed shape (key, part, seq, blob), with no blob."""
    if end["drainTick"] <= start["drainTick"]:
        return []
    return [(keys[s], TICK_PART, end["drainTick"], b"") for s in end["shards"]]


def is_tick_offset(line: str) -> bool:
    """Whether a line of Spark's offset log is this source's offset (the other sources' lines
    say where the input stands).

    >>> is_tick_offset('{"drainTick":3,"shards":[0]}'), is_tick_offset('{"t_us": 10}'), is_tick_offset("-")
    (True, False, False)
    """
    try:
        offset = json.loads(line)
    except ValueError:
        return False
    return isinstance(offset, dict) and "drainTick" in offset


class _TickReader(SimpleDataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, ticks: Ticks, keys: list[int]):
        self.ticks = ticks
        self.keys = keys

    def initialOffset(self) -> dict:
        return dict(_NONE)

    def prepareForTriggerAvailableNow(self) -> None:
        pass  # no target: the ticks end when the shards' backlogs do

    def read(self, start: dict) -> tuple[Iterator[tuple], dict]:
        latest = self.ticks.latest()
        if latest["drainTick"] <= start["drainTick"]:
            return iter([]), start
        return iter(tick_rows(start, latest, self.keys)), latest

    def readBetweenOffsets(self, start: dict, end: dict) -> Iterator[tuple]:
        return iter(tick_rows(start, end, self.keys))

    def commit(self, end: dict) -> None:
        pass


class TickSource(DataSource):
    """``spark.readStream.format("sparkqos.shard_ticks").option("path", FILE).option("keys", "k0,k1,...")``:
    the drain ticks of a sharded stream (module docstring); ``keys`` are the shards' grouping keys."""

    @classmethod
    def name(cls) -> str:
        return "sparkqos.shard_ticks"

    def schema(self) -> str:
        return "key long, part int, seq long, blob binary"

    def simpleStreamReader(self, schema) -> SimpleDataSourceStreamReader:
        path, keys = self.options.get("path"), self.options.get("keys")
        if not path or not keys:
            raise SourceError("sparkqos.shard_ticks: options path (the ticks file) and keys (the shards' keys) are required")
        return _TickReader(Ticks(path), [int(k) for k in keys.split(",")])
