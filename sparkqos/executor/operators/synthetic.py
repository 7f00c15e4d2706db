"""Synthetic: the papers' generic operator of declared selectivity and per-row cost (thesis §3.2.2; Chain §6; Jiang §5)."""

from __future__ import annotations

import functools
import hashlib
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkqos.errors import ExpressionError, PlanError, check_number
from sparkqos.executor.expressions import SEQ
from sparkqos.executor.operators.base import PhysicalOperator


class Synthetic(PhysicalOperator):
    """The papers' generic operator: keeps a fraction ``selectivity`` of rows and spends
    ``cost_s`` seconds of CPU per input row (thesis §3.2.2; Chain §6; Jiang §5).

    Keep/drop is a deterministic hash of the integer column ``key`` (default the sequence
    number) and ``seed``, so Spark reproduces it with 64-bit integer arithmetic that never
    overflows: with P = 2³¹ − 1, h = ((|key| mod P)·48271 + seed) mod P, then two squaring
    rounds h ← (h² + 69621) mod P and h ← (h² + seed) mod P (the squares decorrelate operators
    that differ only in their seed), keep when h < :attr:`threshold` = selectivity·P.

    >>> import pyarrow as pa
    >>> from sparkqos.executor.queues import stamp, with_internal
    >>> op = Synthetic(0.5, cost_s=0.0, seed=1)
    >>> _ = op.bind("q/syn", [with_internal(pa.schema([("v", pa.int64())]))])
    >>> kept = op.process(stamp(pa.record_batch({"v": list(range(10_000))}), 0.0, 0)).num_rows
    >>> 4800 < kept < 5200
    True
    """

    kind = "filter"
    preserves_order = True
    MODULUS = 2_147_483_647
    A1, A2 = 48_271, 69_621

    def __init__(self, selectivity: float, cost_s: float = 1e-6, seed: int = 0, key: str = SEQ):
        super().__init__()
        check_number("selectivity", selectivity, low=0, high=1, error=PlanError, where="synthetic ")
        check_number("cost_s", cost_s, low=0, error=PlanError, where="synthetic ")
        check_number("seed", seed, integer=True, low=0, error=PlanError, where="synthetic ")
        self.selectivity = float(selectivity)
        self.cost_s = float(cost_s) if cost_s > 0 else 1e-7
        self.work_s = float(cost_s)
        self.seed = seed
        self.key = key
        self._threshold = int(self.selectivity * self.MODULUS)

    @property
    def threshold(self) -> int:
        """A row is kept when its hash is below this (selectivity · :attr:`MODULUS`)."""
        return self._threshold

    def copy(self) -> Synthetic:
        return Synthetic(self.selectivity, self.work_s, self.seed, self.key)

    def _output_schema(self) -> pa.Schema:
        src = self.input_schemas[0]
        if src.get_field_index(self.key) < 0:
            raise ExpressionError(f"operator {self.name!r}: unknown key column {self.key!r}; columns are {src.names}")
        t = src.field(self.key).type
        if not pa.types.is_integer(t):
            raise ExpressionError(f"operator {self.name!r}: key column {self.key!r} must be an integer, got {t}")
        return src

    def keep_mask(self, keys: pa.Array) -> pa.Array:
        p = self.MODULUS
        nulls = keys.null_count
        x = (keys.fill_null(0) if nulls else keys).to_numpy(zero_copy_only=False).astype(np.int64)
        # In place, a few numpy calls: on the cos experiment's 400 operators the runs are small
        # and this runs with the GIL held between calls, beside another cluster thread.
        np.abs(x, out=x)
        x %= p
        seed = self.seed % p
        x *= self.A1
        x += seed
        x %= p
        np.multiply(x, x, out=x)
        x += self.A2
        x %= p
        np.multiply(x, x, out=x)
        x += seed
        x %= p
        keep = pa.array(x < self._threshold)
        return pc.and_(keep, keys.is_valid()) if nulls else keep

    def process(self, batch: pa.RecordBatch, port: int = 0) -> pa.RecordBatch:
        if self.work_s > 0:
            _burn(self.work_s * batch.num_rows)
        return batch.filter(self.keep_mask(batch.column(self.key)))


#: What the burn computes: PBKDF2-HMAC-SHA256 iterations, which CPython's hashlib runs in one
#: OpenSSL call without the GIL, on no memory to speak of. One call spends a whole run's cost, as
#: one pyarrow kernel does a whole batch. Many short GIL-free calls would not do: each gives the
#: GIL back and must take it again, and a thread that wants the GIL back from a running Python
#: thread waits out the switch interval (5 ms), so burning threads beside a Python thread would
#: get almost no CPU.
_PASSWORD, _SALT = b"sparkqos", b"synthetic"


@functools.cache
def _iterations_per_s() -> float:
    """The fastest of three measured rates (thread CPU time), once per process, at the first burn."""
    rates = []
    for _ in range(3):
        t0 = time.thread_time()
        hashlib.pbkdf2_hmac("sha256", _PASSWORD, _SALT, 5_000)
        rates.append(5_000 / max(time.thread_time() - t0, 1e-6))
    return max(rates)


def _burn(seconds: float) -> None:
    """Spend ``seconds`` of CPU (the declared per-row cost of a synthetic operator) in a hash that
    releases the GIL: two operators burning on two threads (COS's cluster threads, or the
    continuous worker beside Spark's own Python work) really run side by side, as real
    pyarrow/numpy work does, where a Python busy loop would hold the GIL and serialise them.

    The time is the calling thread's CPU time, not the wall clock: on a busy machine (two cluster
    threads beside Spark's JVM on two cores) a thread that waits for a core spends no work, so a
    wall-clock burn would do less work than declared exactly when the machine is loaded. Each
    call asks for 95% of what is left at the fastest rate measured, so it stops short rather than
    over; usually two or three calls spend it all."""
    rate = _iterations_per_s()
    end = time.thread_time() + seconds
    while (left := end - time.thread_time()) > 0:
        hashlib.pbkdf2_hmac("sha256", _PASSWORD, _SALT, max(1, int(left * rate * 0.95)))
