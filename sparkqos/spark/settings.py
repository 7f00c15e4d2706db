"""Spark settings that shorten a micro-batch's fixed cost, for sessions a sparkqos job builds.

Every micro-batch writes two small files into the query's checkpoint before and after its
work: the offsets it is about to read (Spark's write-ahead log) and the commit once its sink has
run. Spark writes them through Hadoop's ``FileContext``, which for ``file:`` paths is
``LocalFs``: a checksummed file system that writes a ``.crc`` file beside each file and renames
both. On one core of the 2-core VM, measured on the main job (median over the triggers after
the first 15, Spark's own ``durationMs``), ``walCommit`` and ``commitOffsets`` took 34–42 ms
each; with the raw local file system 20–21 ms each: about 35 ms less per trigger, every
trigger, on the path every class's rows wait on.

:data:`LOCAL_CHECKPOINT` names the raw local file system for ``FileContext`` (Spark's
checkpoint manager, state stores included). It changes nothing for other schemes (``hdfs:``,
``s3a:``) and nothing in what is written: only the ``.crc`` side files are not written, and a
checkpoint written with them is read as before (a reader does not need them). The jobs under
``jobs/`` and the benchmarks' sessions set it; a user's own session can too::

    builder = SparkSession.builder
    for key, value in sparkqos.spark.settings.LOCAL_CHECKPOINT.items():
        builder = builder.config(key, value)

It is a setting of the Spark application (read when Hadoop's configuration is built), so
sparkqos never sets it on a session it is handed.

This module does not import pyspark.
"""

from __future__ import annotations

from typing import Any

__all__ = ["LOCAL_CHECKPOINT", "configure"]

#: Hadoop's raw local file system for ``FileContext`` paths of the ``file:`` scheme: no ``.crc``
#: side files for the checkpoint's offset and commit logs.
LOCAL_CHECKPOINT: dict[str, str] = {
    "spark.hadoop.fs.AbstractFileSystem.file.impl": "org.apache.hadoop.fs.local.RawLocalFs",
}


def configure(builder: Any, settings: dict[str, str] = LOCAL_CHECKPOINT) -> Any:
    """``builder`` (a ``SparkSession.Builder``) with ``settings`` added; returns the builder."""
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder
