"""Spark's ordering of values of any orderable type, as dense integer ranks (numpy).

What min/max of a struct or an array, max_by/min_by and collect_set's equality need, and what
grouping by a key pyarrow cannot hash (a struct, an array) uses: :func:`order_ranks` gives equal
values one rank and orders them as Spark does — null first, NaN above every number and equal to
every NaN, -0.0 equal to 0.0, structs field by field, arrays element by element (a prefix first).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkqos.errors import ExpressionError


def orderable(t: pa.DataType) -> bool:
    """Whether Spark orders values of type ``t`` (maps it does not; structs and arrays when their
    parts are orderable)."""
    if pa.types.is_map(t):
        return False
    if pa.types.is_struct(t):
        return all(orderable(f.type) for f in t)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return orderable(t.value_type)
    return not pa.types.is_null(t)


def order_ranks(x: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Ranks of ``x`` in Spark's ascending order: equal values share a rank, a larger value has a
    larger one, null is 0 and below every value, NaN above every number, -0.0 equal to 0.0;
    structs compare field by field, arrays element by element (a prefix first).

    >>> order_ranks(pa.array([2.0, None, float("nan"), -0.0, 0.0])).tolist()
    [2, 0, 3, 1, 1]
    >>> order_ranks(pa.array([{"a": 1, "b": None}, {"a": 1, "b": "x"}, None, {"a": 0, "b": "z"}])).tolist()
    [3, 4, 0, 2]
    >>> order_ranks(pa.array([[1, 2], [1], None, [1, None], []])).tolist()
    [5, 3, 0, 4, 2]
    """
    if isinstance(x, pa.ChunkedArray):
        x = x.combine_chunks()
    n = len(x)
    valid = x.is_valid().to_numpy(zero_copy_only=False) if x.null_count else np.ones(n, dtype=bool)
    t = x.type
    if not orderable(t):
        raise ExpressionError(f"Spark does not order values of type {t}")
    if pa.types.is_struct(t):
        flat = x.flatten()  # a null struct's fields read as null: its own rank 0 comes first anyway
        keys = [order_ranks(f) for f in reversed(flat)] + [valid.astype(np.int64)]
        ranks = _dense(np.lexsort(keys) if keys else np.arange(n), keys)
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        ranks = _list_ranks(x, valid)
    elif pa.types.is_floating(t) or pa.types.is_integer(t):
        v = x.fill_null(0).to_numpy(zero_copy_only=False)
        if pa.types.is_floating(t):
            v = np.where(v == 0, 0.0, v)  # -0.0 equals 0.0
        _, inverse = np.unique(v, return_inverse=True, equal_nan=True)  # NaN last, all one value
        ranks = inverse.reshape(-1).astype(np.int64) + 1
    else:
        filled = x.filter(pa.array(valid)) if x.null_count else x
        r = pc.rank(filled, sort_keys="ascending", tiebreaker="dense").to_numpy(zero_copy_only=False).astype(np.int64)
        ranks = np.zeros(n, dtype=np.int64)
        ranks[valid] = r
        return ranks
    return np.where(valid, ranks, 0)


def _dense(order: np.ndarray, keys: Sequence[np.ndarray]) -> np.ndarray:
    """Dense ranks (from 1) of rows sorted by ``order`` under the lexsort ``keys``."""
    n = len(order)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    step = np.zeros(n, dtype=bool)
    for k in keys:
        s = k[order]
        step[1:] |= s[1:] != s[:-1]
    ranks = np.empty(n, dtype=np.int64)
    ranks[order] = np.cumsum(step) + 1
    return ranks


def _list_ranks(x: pa.Array, valid: np.ndarray) -> np.ndarray:
    """Ranks of arrays: element ranks (+1, so a missing element, 0, comes before any) padded to
    the longest, compared left to right."""
    n = len(x)
    lengths = pc.list_value_length(x).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    width = int(lengths.max()) if n else 0
    elements = order_ranks(pc.list_flatten(x)) + 1
    parents = pc.list_parent_indices(x).to_numpy(zero_copy_only=False).astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]) if n else np.zeros(0, dtype=np.int64)
    grid = np.zeros((n, max(width, 1)), dtype=np.int64)
    grid[parents, np.arange(len(parents)) - starts[parents]] = elements
    keys = [grid[:, j] for j in reversed(range(grid.shape[1]))] + [valid.astype(np.int64)]
    return _dense(np.lexsort(keys), keys)
