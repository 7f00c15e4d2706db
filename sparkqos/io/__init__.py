"""Where a run's rows leave it, and how they are read back: output sinks and dead letters, all
without Spark.

* :mod:`~sparkqos.io.sinks` — the sink contract (``Sink``, ``PartedSink`` for early parts of a
  batch), the Parquet sink (the default) and its reader, the memory sink;
* :mod:`~sparkqos.io.delta` — the Delta Lake sink on delta-rs (the ``delta`` extra);
* :mod:`~sparkqos.io.deadletter` — the row checks that turn bad input rows into dead letters, the
  dead-letter sink and its reader.

Every sink here writes a batch idempotently (a replayed batch id replaces what an earlier attempt
wrote), which is what makes a run exactly-once with the checkpoints of :mod:`sparkqos.runtime`.
The sink that writes through a Spark writer (``DataFrameSink``) is in :mod:`sparkqos.spark.sinks`:
only ``spark/`` and ``sources/`` import pyspark, and this package stays importable where Spark is
not (the runtime, Spark's Python workers).
"""
