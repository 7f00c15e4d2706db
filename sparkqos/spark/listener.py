"""A ``StreamingQueryListener`` that hands sparkqos's per-trigger metrics to a callback.

Spark's own progress events know nothing of queues, strategies or per-class delays; this listener
pairs each ``QueryProgressEvent`` of a sparkqos query with the runner's matching progress record
(``QosStream.lastProgress``) so dashboards that already consume listener events get both::

    from sparkqos.spark.listener import QosProgressListener
    spark.streams.addListener(QosProgressListener(handle, lambda spark_p, qos_p: print(qos_p["strategy"])))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyspark.sql.streaming import StreamingQueryListener


class QosProgressListener(StreamingQueryListener):
    """Calls ``callback(spark_progress, qos_progress)`` after every trigger of ``handle``'s query."""

    def __init__(self, handle, callback: Callable[[Any, dict[str, Any] | None], None]):
        self.handle = handle
        self.callback = callback

    def onQueryStarted(self, event) -> None:
        pass

    def onQueryProgress(self, event) -> None:
        progress = event.progress
        if progress.name != self.handle.name:
            return
        mine = next((p for p in reversed(self.handle.recentProgress) if p["batchId"] == progress.batchId), None)
        self.callback(progress, mine)

    def onQueryIdle(self, event) -> None:
        pass

    def onQueryTerminated(self, event) -> None:
        pass
