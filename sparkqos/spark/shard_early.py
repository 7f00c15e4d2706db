"""Early writes of the sharded lane: the top classes' rows of a micro-batch, written while the
shards still serve the lower classes.

A shard serves its top class first (:meth:`~sparkqos.runtime.shard.ShardWork.step`); the rows of
every class above the lowest it has at that point go at once to the driver over a socket
(:func:`send_early`, from the shard's Spark task), and the driver writes them as a part of the
micro-batch (:meth:`~sparkqos.io.sinks.PartedSink.write_part`, from :class:`EarlyInbox`'s thread)
while the shards serve the lower classes, store their state and return. Without it every class's
rows waited for the slowest shard's whole budget, Spark's state commit and the collect.

Exactly-once: the rows a shard sent also come back in its task's result (``early`` rows), with
the task attempt that made them. At the end of the micro-batch the driver keeps the parts when,
for every shard, the parts written are those of the attempt whose result Spark kept (none when
the result has no early rows); otherwise — a task retried after its part was written, a part
that came too late — it writes the batch whole from the results, which replaces every part. A
crash leaves parts of a batch no commit covers; Spark replays the batch and its first write
replaces them, as with the driver lane's early writes (:mod:`sparkqos.runtime.early`). A part
that cannot be sent (no route to the driver) is only late: it is in the result.

Each micro-batch gets a random token (a Spark local property, so its tasks see it); the inbox
takes parts of the open token only, so a stray task of an earlier attempt, or anyone else who
reaches the port, writes nothing.
"""

from __future__ import annotations

import json
import secrets
import socket
import struct
import threading
import time
from collections.abc import Mapping

import pyarrow as pa

from sparkqos.executor.operators.base import ipc_to_table, table_to_ipc
from sparkqos.io.sinks import Sink
from sparkqos.runtime.early import EarlyParts, sink_tables

__all__ = ["TOKEN_PROPERTY", "EarlyBatch", "EarlyInbox", "send_early"]

#: The Spark local property carrying the open micro-batch's token to its tasks.
TOKEN_PROPERTY = "sparkqos.shardEarlyToken"
_LEN = struct.Struct("!I")
#: Seconds a shard waits to reach the driver; the rows are in its result anyway.
_CONNECT_S = 2.0


def send_early(address: tuple[str, int], token: str, shard: int, attempt: int, outputs: Mapping[str, pa.Table]) -> bool:
    """From a shard's task: send ``outputs`` (query → rows with the executor's columns) to the
    driver's inbox at ``address`` for the micro-batch of ``token``; False when the driver could
    not be reached (nothing else happens: the rows are in the task's result)."""
    blobs = [table_to_ipc(t) for t in outputs.values()]
    header = json.dumps(
        {"token": token, "shard": shard, "attempt": attempt, "queries": list(outputs), "sizes": [len(b) for b in blobs]}
    ).encode()
    try:
        with socket.create_connection(address, timeout=_CONNECT_S) as conn:
            conn.sendall(_LEN.pack(len(header)) + header + b"".join(blobs))
        return True
    except OSError:
        return False


class EarlyBatch:
    """What the inbox wrote of one micro-batch: the parts (rows, delays) and, per shard, the task
    attempt they came from (``None`` for a shard two attempts wrote parts for)."""

    def __init__(self) -> None:
        self.parts = EarlyParts()
        self.attempts: dict[int, int | None] = {}

    def kept(self, results: Mapping[int, int]) -> bool:
        """Whether the parts are exactly the early rows of ``results`` (shard → the attempt whose
        result holds early rows)."""
        return self.attempts == dict(results)


class EarlyInbox:
    """The driver's end: a listening socket and a thread that writes each part of the open
    micro-batch to ``sink`` as it comes (:meth:`open`, :meth:`close`)."""

    def __init__(self, sink: Sink, host: str):
        self.sink = sink
        self._server = socket.create_server(("", 0))
        self.address = (host, self._server.getsockname()[1])
        self._lock = threading.Lock()
        self._batch_id: int | None = None
        self._token: str | None = None
        self._early = EarlyBatch()
        self._thread = threading.Thread(target=self._serve, name="sparkqos-shard-early", daemon=True)
        self._thread.start()

    def open(self, batch_id: int) -> str:
        """Take parts of micro-batch ``batch_id`` from now on; returns its token."""
        with self._lock:
            self._batch_id, self._token, self._early = batch_id, secrets.token_hex(16), EarlyBatch()
            return self._token

    def close(self) -> EarlyBatch:
        """Stop taking parts of the open micro-batch (waiting for a write under way); what was written."""
        with self._lock:
            early, self._batch_id, self._token, self._early = self._early, None, None, EarlyBatch()
            return early

    def shutdown(self) -> None:
        self._server.close()
        self._thread.join(timeout=5)

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:  # closed
                return
            with conn:
                conn.settimeout(5.0)
                try:
                    self._take(conn)
                except (OSError, ValueError, KeyError, pa.ArrowInvalid):
                    continue  # a broken or foreign message: the rows are in the task's result

    def _take(self, conn: socket.socket) -> None:
        header = json.loads(_read(conn, _LEN.unpack(_read(conn, _LEN.size))[0]))
        tables = {q: ipc_to_table(_read(conn, n)) for q, n in zip(header["queries"], header["sizes"], strict=True)}
        with self._lock:
            if self._token is None or not secrets.compare_digest(str(header["token"]), self._token):
                return
            early, batch_id = self._early, self._batch_id
            shard, attempt = int(header["shard"]), int(header["attempt"])
            self.sink.write_part(batch_id, sink_tables(tables), first=not early.attempts)
            at = time.time()
            for query, table in tables.items():
                early.parts.add(query, table, at)
            known = early.attempts.get(shard, attempt)
            early.attempts[shard] = attempt if known == attempt else None


def _read(conn: socket.socket, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = conn.recv(min(left, 1 << 20))
        if not chunk:
            raise OSError("connection closed mid-message")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
