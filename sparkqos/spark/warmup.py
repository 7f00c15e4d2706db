"""Warming Spark's read path up before a stream's first micro-batch.

A fresh JVM runs its first micro-batches several times slower than later ones: Spark's job
scheduling, task serialisation and the Arrow conversion behind ``toArrow()`` are interpreted
until the JIT compiler has seen them run often enough. Each trigger reads its micro-batch with a
``toArrow()`` job, so the first seconds of a stream pay for that warm-up in every class's delay,
and on a small or busy machine (one core shared by Spark's JVM and the Python driver) the first
ten or twenty triggers take longer than the trigger interval: a class-H row that arrives then
waits for the trigger before and its own, and the top class's p99 over a minute is set by the
start-up alone.

:func:`warm_up` runs the same read on synthetic rows of the input's schema (``toArrow()`` of a
static DataFrame, ``rows`` rows a time) until ``budget_s`` seconds or :data:`MAX_READS` reads are
spent, before the query starts; stream time starts later, so the warm-up delays the first
micro-batch instead of the rows. It runs once per Spark application (a restarted stream in the
same session finds the JVM warm) and only for processing-time triggers (an available-now or
once run has no per-row latency to protect). It is best effort: any error ends it quietly and
the stream starts as it would have.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np
import pyarrow as pa

__all__ = ["MAX_READS", "synthetic_rows", "warm_up"]

_log = logging.getLogger(__name__)

#: Reads at most: the per-read time stops falling well before this on the machines measured
#: (docs/ARCHITECTURE.md, "Start-up").
MAX_READS = 30
#: Rows per read: about one micro-batch of the main job at 4,000 rows/s and a 0.25 s trigger.
ROWS = 1024

#: The Spark applications (or Connect sessions) already warmed up in this process.
_warmed: set[str] = set()


def synthetic_rows(schema: pa.Schema, rows: int = ROWS) -> pa.Table:
    """``rows`` rows of ``schema`` with values (not nulls) in every column of an atomic type, so
    that the warm-up runs the same conversions a real batch does; nested and other types are
    null."""
    i = np.arange(rows, dtype=np.int64)
    columns = []
    for field in schema:
        t = field.type
        if pa.types.is_timestamp(t):
            column = pa.array(time.time_ns() // 1000 + i, pa.int64()).cast(pa.timestamp("us")).cast(t)
        elif pa.types.is_date(t):
            column = pa.array(19_000 + i % 365, pa.int32()).cast(pa.date32()).cast(t)
        elif pa.types.is_integer(t):
            column = pa.array(i % 64).cast(t)
        elif pa.types.is_floating(t):
            column = pa.array(i * 0.5).cast(t)
        elif pa.types.is_decimal(t):
            column = pa.array(i % 64).cast(pa.decimal128(38, 0)).cast(t)
        elif pa.types.is_boolean(t):
            column = pa.array(i % 2 == 0)
        elif pa.types.is_string(t) or pa.types.is_large_string(t):
            column = pa.array([f"w{k % 16}" for k in range(rows)], t)
        elif pa.types.is_binary(t) or pa.types.is_large_binary(t):
            column = pa.array([b"w%d" % (k % 16) for k in range(rows)], t)
        else:
            column = pa.nulls(rows, t)
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=schema)


def _key(spark: Any) -> str:
    """The Spark application (classic) or Connect session a warm-up is for."""
    session_id = getattr(spark, "session_id", None)
    if isinstance(session_id, str):
        return f"connect:{session_id}"
    return f"app:{spark.sparkContext.applicationId}"


def warm_up(spark: Any, schema: pa.Schema, budget_s: float, rows: int = ROWS) -> tuple[int, float]:
    """Run ``toArrow()`` on ``rows`` synthetic rows of ``schema`` until ``budget_s`` seconds or
    :data:`MAX_READS` reads are spent, once per Spark application; the reads done and the seconds
    they took ((0, 0.0) when there was nothing to do)."""
    if budget_s <= 0:
        return 0, 0.0
    try:
        key = _key(spark)
        if key in _warmed:
            return 0, 0.0
        _warmed.add(key)
        t0 = time.perf_counter()
        df = spark.createDataFrame(synthetic_rows(schema, rows))
        reads = 0
        while reads < MAX_READS and time.perf_counter() - t0 < budget_s:
            df.toArrow()
            reads += 1
        return reads, time.perf_counter() - t0
    except Exception as exc:  # noqa: BLE001 - best effort: the stream starts as it would have
        _log.debug("warming Spark's read path up stopped: %s", exc)
        return 0, 0.0
