"""Sinks that write through Spark: :class:`DataFrameSink` hands a trigger's rows of every query to
any DataFrame writer in one DataFrame, and :func:`partitioned_writer` is an idempotent writer for it.
The Spark-free sinks (Parquet files, memory) and the ``Sink`` contract are in
:mod:`sparkqos.io.sinks`."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from sparkqos.errors import SinkError, check_number
from sparkqos.io.sinks import Sink, check_outputs, union_outputs

__all__ = ["DataFrameSink", "partitioned_writer"]


class DataFrameSink(Sink):
    """Any DataFrame writer: ``fn(df, batch_id)`` gets every query's rows of a trigger in one DataFrame.

    ``df`` has columns ``batch_id``, ``query`` and the union of the queries' output columns, so the
    writer runs one Spark job per trigger (docs/ARCHITECTURE.md). Idempotency is ``fn``'s: use
    ``partitioned_writer(path)`` or a writer keyed on ``batch_id``. Triggers with no rows call nothing.
    """

    def __init__(self, spark: SparkSession, fn: Callable[[DataFrame, int], Any]):
        if not callable(fn):
            raise SinkError(f"fn must be callable as fn(df, batch_id), got {fn!r}")
        self.spark = spark
        self.fn = fn

    def __repr__(self) -> str:
        return f"DataFrameSink(spark, fn={getattr(self.fn, '__name__', self.fn)!r})"

    def write(self, batch_id: int, outputs: Mapping[str, pa.Table]) -> None:
        batch_id = check_number("batch_id", batch_id, low=0, integer=True, error=SinkError)
        table = union_outputs(batch_id, check_outputs(outputs))
        if table is not None:
            self.fn(self.spark.createDataFrame(table), batch_id)


def partitioned_writer(path: str | os.PathLike, format: str = "parquet") -> Callable[[DataFrame, int], None]:
    """A ``DataFrameSink`` writer partitioned by (batch_id, query) with dynamic partition overwrite.

    Rewriting a batch replaces exactly its partitions, so a replay writes nothing twice.
    """
    target = str(path)

    def write(df: DataFrame, batch_id: int) -> None:
        (
            df.write.mode("overwrite")
            .option("partitionOverwriteMode", "dynamic")
            .partitionBy("batch_id", "query")
            .format(format)
            .save(target)
        )

    write.__name__ = f"partitioned_writer({target!r}, {format!r})"
    return write
