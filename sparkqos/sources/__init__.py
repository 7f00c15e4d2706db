"""Streams to run on: the Spark data sources ``sparkqos.bursty`` / ``.poisson`` / ``.replay``
(datasources.py, Python Data Source API), the Spark-free generators behind them (generators.py)
and the recorded AIS vessel trace (ais.py, issue 16).

Use: ``sources.register(spark)`` once per session, then
``spark.readStream.format("sparkqos.bursty").option("rate", 4000).load()``.

The data-source names load pyspark on first use only, so the Spark-free parts (the generators,
the vessel trace behind ``python -m sparkqos trace``) import without it.
"""

from typing import Any

from sparkqos.sources.ais import TRACE_SCHEMA, TraceStats, parse_traj, vessel_trace
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
    "TRACE_SCHEMA",
    "BurstyGenerator",
    "BurstySource",
    "PoissonGenerator",
    "PoissonSource",
    "ReplaySource",
    "ReplayTrace",
    "TraceStats",
    "parse_traj",
    "payload_table",
    "register",
    "vessel_trace",
]
