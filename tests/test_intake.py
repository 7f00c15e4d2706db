"""Bounded intake and catch-up (sparkqos.runtime.intake, the sources' maxRowsPerTrigger).

The sources are driven as Spark drives them (the simple reader's ``read(start)``, or
``latestOffset(start, getDefaultReadLimit())`` and ``partitions`` for a partitioned reader), on a
source clock that can be shifted, and their batches fed to the trigger loop: no SparkSession, so
a stream that stops, stays down 20 minutes and resumes runs in a few seconds.
"""

from __future__ import annotations

import math
import time
import warnings
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from sparkqos.io.sinks import read_parquet_sink
from sparkqos.runtime.config import RunConfig
from sparkqos.runtime.intake import BacklogWarning, Intake, catch_up_line
from sparkqos.runtime.trigger import TriggerLoop
from sparkqos.sources import datasources
from sparkqos.sources.datasources import MAX_ROWS_PER_TRIGGER, BurstySource, PoissonSource, ReplaySource
from sparkqos.sources.generators import US, PoissonGenerator, payload_table
from sparkqos.workloads.sensors import sensor_queries

DOWN_S = 20 * 60  # the downtime
RATE = 20.0  # rows per second: small, so the 20 minutes are 24,000 rows
MAX_ROWS = 2_000
MEMORY_LIMIT = 400_000  # bytes queued in memory: the lower classes' backlog spills beyond it
BATCH_BYTES = 400_000  # a queue keeps its head batch in memory: at most one batch each, over the limit
#: declared CPU per row of the two costly sensor queries: a batch costs them 2 x 40 ms against the
#: executor's 0.02 s per trigger, so it falls behind on any machine and back-pressure has work
WORK_US = 20.0


class SourceClock:
    """The sources' wall clock (µs), moved by the test."""

    def __init__(self, now_us: int):
        self.now_us = now_us

    def __call__(self) -> int:
        return self.now_us


def _batch(simple, start: dict) -> tuple[pa.Table, dict]:
    rows, end = simple.read(start)
    batches = list(rows)
    return (pa.Table.from_batches(batches) if batches else None), end


def test_every_source_honours_max_rows_per_trigger_on_both_read_paths(tmp_path):
    """The simple reader (read on the driver) and the partitioned reader (Spark's admission
    control: getDefaultReadLimit → ReadMaxRows, ReadAllAvailable lifts it) cut a backlog into
    batches of at most maxRowsPerTrigger rows, covering it exactly."""
    trace = tmp_path / "trace.parquet"
    sensor, ts = PoissonGenerator(rate=50.0, seed=1).arrivals(0, 60 * US)
    pq.write_table(payload_table("sensor", 1, sensor, ts + 1_700_000_000 * US), trace)
    cases = [
        (PoissonSource, {"rate": "400", "seed": "2", "start": "0", "duration": "60"}),
        (BurstySource, {"rate": "400", "seed": "2", "start": "0", "duration": "60", "offScale": "2"}),
        (ReplaySource, {"path": str(trace), "speed": "max", "warmup": "false"}),
    ]
    for cls, opts in cases:
        limited = {**opts, "maxRowsPerTrigger": "700"}
        simple = cls(limited).simpleStreamReader(None)
        start, sizes, got = simple.initialOffset(), [], []
        for _ in range(200):
            table, end = _batch(simple, start)
            if end == start:
                break
            sizes.append(0 if table is None else table.num_rows)
            if table is not None:
                got.append(table)
            start = end
        everything = _batch(cls(opts).simpleStreamReader(None), simple.initialOffset())[0]
        assert max(sizes) <= 700 and sum(sizes) == everything.num_rows > 2 * 700, cls.__name__
        assert pa.concat_tables(got).equals(everything), cls.__name__
        parted = cls({**limited, "numPartitions": "2"}).streamReader(None)
        assert parted.getDefaultReadLimit() == ReadMaxRows(700)
        first = parted.initialOffset()
        end = parted.latestOffset(first, parted.getDefaultReadLimit())
        assert end == first | {"t_us": end["t_us"]} and 0 < end["t_us"]
        n = sum(b.num_rows for p in parted.partitions(first, end) for b in parted.read(p))
        assert n == 700 or (cls is ReplaySource and n <= 700)
        assert parted.latestOffset(first, ReadAllAvailable())["t_us"] >= end["t_us"]
    default = PoissonSource({"rate": "1", "numPartitions": "2"}).streamReader(None)
    assert default.getDefaultReadLimit() == ReadMaxRows(MAX_ROWS_PER_TRIGGER)
    unlimited = PoissonSource({"rate": "1", "numPartitions": "2", "maxRowsPerTrigger": "0"}).streamReader(None)
    assert unlimited.getDefaultReadLimit() == ReadAllAvailable()


def test_resume_after_20_minutes_down_catches_up_bounded_and_exactly_once(tmp_path, monkeypatch):
    """The main job's situation after downtime, in small: a Poisson sensor stream at 20 rows/s
    runs 3 triggers, stops, stays down 20 minutes (the source clock jumps), and resumes from the
    checkpoint. The 24,000 rows missed come in batches of at most 2,000 (maxRowsPerTrigger); the
    executor, given little time per trigger, falls behind. The intake bound follows the top
    class: class H (fire) is served first and stays within Intake.max_queued_rows plus one
    batch, so the intake never waits for the lower classes, whose backlog spills beyond the
    memory limit instead. The progress says "catching up … ETA" until the stream is within 5 s of
    the wall clock; once the source is caught up, class H's rows are fresh again (p99 under a
    second) while C and N still work through theirs; finish() drains them, and the archive query
    (every row) then holds each generated row exactly once."""
    clock = SourceClock(int(time.time() * US) - (DOWN_S + 30) * US)
    monkeypatch.setattr(datasources, "_now_us", clock)
    opts = {"rate": str(RATE), "seed": "5", "warmup": "false", "maxRowsPerTrigger": str(MAX_ROWS)}
    intake = Intake(max_queued_rows=3_000, wait_s=60.0, memory_limit_bytes=MEMORY_LIMIT)

    def loop() -> TriggerLoop:
        config = RunConfig(
            checkpoint=tmp_path / "ckpt",
            output=tmp_path / "out",
            strategy="fifo",
            continuous=False,
            budget_s=0.02,
            whole_batches=False,  # runs cut to the 0.02 s budget, so the executor falls behind
            intake=intake,
        )
        return TriggerLoop(sensor_queries(work_us=WORK_US, window_s=5.0), config)

    # before the downtime: 3 triggers 10 s apart
    first, simple = loop(), PoissonSource(opts).simpleStreamReader(None)
    start = origin = simple.initialOffset()
    batch_id = 0
    for _ in range(3):
        clock.now_us += 10 * US
        table, start = _batch(simple, start)
        first.process(table, batch_id)
        batch_id += 1
    first.close()
    # 20 minutes later the job starts again: a new loop from the checkpoint, a new source from the offset
    clock.now_us = int(time.time() * US)
    monkeypatch.setattr(datasources, "_now_us", lambda: int(time.time() * US))
    second, simple = loop(), PoissonSource(opts).simpleStreamReader(None)
    assert second.restore() == batch_id - 1
    progress, sizes = [], []
    backlog = RATE * DOWN_S
    with warnings.catch_warnings():
        warnings.simplefilter("error", BacklogWarning)  # the executor keeps up: no warning
        for _ in range(int(backlog // MAX_ROWS) + 8):
            table, start = _batch(simple, start)
            sizes.append(0 if table is None else table.num_rows)
            progress.append(second.process(table if table is not None else pa.table({}), batch_id))
            batch_id += 1
            if progress[-1]["backlogS"] == 0 and progress[-1]["queuedRows"] == 0:
                break  # caught up: nothing behind in the source, nothing left queued
    assert max(sizes) <= MAX_ROWS and sum(sizes) > backlog * 0.9
    assert len(progress) <= backlog / MAX_ROWS + 8
    lines = [catch_up_line(p) for p in progress]
    assert lines[1].startswith("catching up: ") and " rows behind " in lines[1] and ", ETA " in lines[1]
    # the bound follows the top class's queue (fire, class H: one query, one batch over the bound
    # at most); the lower classes' backlog does not hold the intake back, and beyond the memory
    # limit it spills
    top = [sum(q["queuedRows"] for q in p["queries"] if q["klass"] == "H") for p in progress]
    assert max(top) <= intake.max_queued_rows + MAX_ROWS
    assert all(p["queuedMemoryBytes"] <= intake.memory_limit_bytes + 4 * BATCH_BYTES for p in progress)
    assert any(p["spilledBytes"] > 0 for p in progress)
    # class H keeps up within the bound, so the intake never waited for the lower classes
    assert all(p["intakeWaitS"] == 0 for p in progress)
    assert lines[-1] is None and progress[-1]["backlogS"] == 0
    # caught up: the next trigger's rows are fresh
    clock_table, start = _batch(simple, start)
    last = second.process(clock_table if clock_table is not None else pa.table({}), batch_id)
    # class H first: its rows are fresh again once the source caught up, while the lower
    # classes may still be working through their backlog (finish() drains them below)
    fire = next(q for q in last["queries"] if q["query"] == "fire")
    assert math.isnan(fire["delayP99_s"]) or fire["delayP99_s"] < 1.0
    second.finish()
    second.close()
    archive = read_parquet_sink(tmp_path / "out" / "outputs")["archive"]
    sensor, ts = PoissonGenerator(rate=RATE, seed=origin["seed"]).arrivals(0, start["t_us"])
    expected = payload_table("sensor", origin["seed"], sensor, ts + origin["origin_us"])
    expected_ts = expected.column("ts").cast(pa.int64()).to_numpy() / US
    got = Counter(zip(archive.column("sensor_id").to_pylist(), archive.column("ts").to_pylist(), strict=True))
    assert got == Counter(zip(expected.column("sensor_id").to_pylist(), expected_ts.tolist(), strict=True))


def test_backlog_tracker_warns_when_the_stream_falls_behind():
    """A lag that grows batch after batch is "falling behind" (inf ETA) and warns once per
    warn_every_s; a lag that is merely constant (old recorded timestamps) says nothing."""
    from sparkqos.runtime.intake import BacklogTracker

    t = BacklogTracker(catch_up_lag_s=5.0)
    for k in range(12):  # event time advances half as fast as the wall clock
        b = t.observe(1000.0 + k, 100, 990.0 + k / 2)
    assert math.isinf(b["catchUpEtaS"]) and catch_up_line(b).startswith("falling behind: ")
    steady = BacklogTracker(catch_up_lag_s=5.0)
    for k in range(12):
        b = steady.observe(1000.0 + k, 100, 10.0 + k)
    assert b["backlogS"] > 0 and catch_up_line(b) is None
    assert BacklogTracker().observe(1000.0, 0, math.nan)["backlogS"] == 0


def test_intake_options_are_checked():
    from sparkqos.errors import RunnerError

    with pytest.raises(RunnerError, match="max_queued_rows"):
        Intake(max_queued_rows=0)
    with pytest.raises(RunnerError, match="intake must be a sparkqos.Intake"):
        RunConfig(checkpoint="/tmp/x", intake={"max_queued_rows": 5})
