"""Batch queues: sizes, oldest arrival, splitting for quotas, arrival-bounded takes, IPC."""

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkqos.executor.expressions import ARRIVAL, SEQ
from sparkqos.executor.queues import BatchQueue, merge, stamp, with_internal, workload

SCHEMA = with_internal(pa.schema([("v", pa.int64())]))


def batch(values, arrival, first_seq=0):
    return stamp(pa.record_batch({"v": pa.array(values, pa.int64())}), arrival, first_seq)


def test_stamp_adds_arrival_and_sequence_numbers():
    b = batch([7, 8, 9], 2.5, first_seq=10)
    assert b.schema == SCHEMA
    assert b.column(ARRIVAL).to_pylist() == [2.5] * 3 and b.column(SEQ).to_pylist() == [10, 11, 12]


def test_workload_rule_fig_4_1():
    assert workload(0) == 0
    assert workload(50) == 50 and workload(166) == 166  # A = 49.8 ≤ 50 → all
    assert workload(170) == 51  # A = 51 > 50
    assert workload(1000, ratio=0.1, threshold=50) == 100


def test_take_splits_the_head_and_keeps_sizes_right():
    q = BatchQueue(SCHEMA)
    q.push(batch(range(10), 1.0))
    q.push(batch(range(10, 15), 3.0, 10))
    total = q.nbytes
    got = q.take(4)
    assert [b.num_rows for b in got] == [4] and got[0].column("v").to_pylist() == [0, 1, 2, 3]
    assert q.rows == 11 and 0 < q.nbytes < total and q.oldest == 1.0
    got = q.take(8)
    assert [b.column("v").to_pylist() for b in got] == [[4, 5, 6, 7, 8, 9], [10, 11]]
    assert q.oldest == 3.0 and q.head_arrival == 3.0
    assert merge(q.take(100)).column("v").to_pylist() == [12, 13, 14]
    assert q.rows == 0 and q.nbytes == 0 and q.oldest is None and not q


def test_take_before_serves_rows_older_than_a_bound():
    q = BatchQueue(SCHEMA)
    q.push(batch([1, 2], 1.0))
    q.push(batch([3], 2.0, 2))
    q.push(batch([4], 3.0, 3))
    assert [b.column("v").to_pylist() for b in q.take_before(2.0, inclusive=False, limit=10)] == [[1, 2]]
    assert [b.column("v").to_pylist() for b in q.take_before(2.0, inclusive=True, limit=10)] == [[3]]
    assert q.take_before(2.5, inclusive=True, limit=10) == [] and q.rows == 1


def test_oldest_is_the_minimum_even_when_rows_are_not_sorted():
    q = BatchQueue(SCHEMA)
    q.push(batch([1], 5.0))
    q.push(batch([2], 4.0))
    assert q.oldest == 4.0 and q.head_arrival == 5.0
    q.take(1)
    assert q.oldest == 4.0


def test_ipc_roundtrip_keeps_every_row():
    q = BatchQueue(SCHEMA)
    q.push(batch(range(5), 1.0))
    q.take(2)
    q.push(batch(range(5, 8), 2.0, 5))
    back = BatchQueue.from_ipc(q.to_ipc())
    assert back.rows == q.rows == 6 and back.oldest == 1.0
    assert merge(back.take(10)).column("v").to_pylist() == [2, 3, 4, 5, 6, 7]
    assert BatchQueue.from_ipc(BatchQueue(SCHEMA).to_ipc()).rows == 0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 30), min_size=1, max_size=8), st.lists(st.integers(1, 40), min_size=1, max_size=12))
def test_takes_conserve_rows_in_fifo_order(sizes, takes):
    q = BatchQueue(SCHEMA)
    start = 0
    for i, n in enumerate(sizes):
        q.push(batch(range(start, start + n), float(i), start))
        start += n
    seen = []
    for k in takes:
        got = q.take(k)
        assert sum(b.num_rows for b in got) == min(k, start - len(seen))
        for b in got:
            seen += b.column("v").to_pylist()
        assert q.rows == start - len(seen)
        assert q.nbytes >= 0 and (q.nbytes == 0) == (q.rows == 0)
    assert seen == list(range(len(seen)))


def test_empty_merge_gives_an_empty_batch():
    assert merge([], SCHEMA).num_rows == 0
