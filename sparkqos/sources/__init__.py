"""Streams to run on: the Spark data sources ``sparkqos.bursty`` / ``.poisson`` / ``.replay``
(datasources.py, Python Data Source API) and the Spark-free generators behind them (generators.py).

Use: ``sources.register(spark)`` once per session, then
``spark.readStream.format("sparkqos.bursty").option("rate", 4000).load()``.
"""

from sparkqos.sources.datasources import BurstySource, PoissonSource, ReplaySource, register
from sparkqos.sources.generators import (
    PACKET_SCHEMA,
    PAYLOADS,
    SENSOR_SCHEMA,
    BurstyGenerator,
    PoissonGenerator,
    ReplayTrace,
    payload_table,
)

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
