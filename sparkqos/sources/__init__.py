"""Streams to run on: the Spark data sources ``sparkqos.bursty`` / ``.poisson`` / ``.replay``
(datasources.py, Python Data Source API) and the Spark-free generators behind them
(generators.py). The recorded AIS vessel trace is a workload: :mod:`sparkqos.workloads.ais`.

Use: ``sources.register(spark)`` once per session, then
``spark.readStream.format("sparkqos.bursty").option("rate", 4000).load()``.

The data-source names load pyspark on first use only, so the Spark-free generators import
without it.
"""

from typing import Any

from sparkqos.sources.generators import (
    PACKET_SCHEMA,
    PAYLOADS,
    SENSOR_SCHEMA,
    BurstyGenerator,
    PoissonGenerator,
    ReplayTrace,
    payload_table,
)

_DATASOURCES = ("BurstySource", "PoissonSource", "ReplaySource", "register")


def __getattr__(name: str) -> Any:
    if name in _DATASOURCES:
        from sparkqos.sources import datasources

        return getattr(datasources, name)
    raise AttributeError(f"module 'sparkqos.sources' has no attribute {name!r}")


__all__ = [
    "PACKET_SCHEMA",
    "PAYLOADS",
    "SENSOR_SCHEMA",
    "BurstyGenerator",
    "BurstySource",
    "PoissonGenerator",
    "PoissonSource",
    "ReplaySource",
    "ReplayTrace",
    "payload_table",
    "register",
]
