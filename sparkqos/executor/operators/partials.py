"""Partial aggregates that pyarrow's hash kernels do not compute, combined by group code with numpy.

A window or keyed aggregation (:mod:`.event_window`) keeps one row of partial aggregates per
group. Most partials are pyarrow hash aggregates (``sum``, ``count``, ``min``…); the ones here
are what those kernels cannot do for a type or a function — each is a :class:`Partial`: every
input row becomes a piece (:meth:`Partial.rows`), pieces of a group combine into one
(:meth:`Partial.combine`, the same step for a batch's rows and for the state merged with a batch),
and the group's piece gives Spark's result (:meth:`Partial.result`).

* :class:`Moments`: ``stddev``/``stddev_samp``, ``stddev_pop``, ``variance``/``var_samp``,
  ``var_pop``, ``skewness``, ``kurtosis`` from (n, mean, M2, M3, M4), Spark's buffer
  (CentralMomentAgg); pieces merge by the k-way form of its merge rule, shifted by the group's
  first mean, so a group of equal values has M2 exactly 0 as in Spark.
* :class:`Pick`: one row of the group — ``first``/``last`` (arrival order), ``min``/``max`` of any
  orderable type in Spark's ordering (:func:`order_ranks`: structs field by field, arrays element
  by element, nulls first, NaN above every number, -0.0 equal to 0.0), ``max_by``/``min_by``
  (ties: the later row, as Spark's update and merge keep the newer one unless the older is
  strictly better).
* :class:`Collect`: ``collect_list`` (arrival order) and ``collect_set`` (each value once, floats
  normalised as Spark's set does: -0.0 as 0.0, every NaN one value).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkqos.executor.operators.base import normal_key
from sparkqos.executor.operators.ordering import order_ranks

#: The statistics of :class:`Moments`, with the highest moment each needs.
MOMENTS = {"stddev_samp": 2, "stddev_pop": 2, "var_samp": 2, "var_pop": 2, "skewness": 3, "kurtosis": 4}


@functools.lru_cache(maxsize=256)
def kernel_accepts(fn: str, t: pa.DataType) -> bool:
    """Whether pyarrow has the hash aggregate ``fn`` for values of type ``t`` (asked of pyarrow
    itself, on no rows)."""
    table = pa.table({"k": pa.array([], pa.int64()), "v": pa.array([], t)})
    try:
        table.group_by("k", use_threads=False).aggregate([("v", fn)])
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError, pa.ArrowInvalid):
        return False
    return True


@functools.lru_cache(maxsize=256)
def groupable(t: pa.DataType) -> bool:
    """Whether rows can be grouped by a key of type ``t`` (pyarrow's hash grouping takes it)."""
    table = pa.table({"k": pa.array([], t)})
    try:
        table.group_by("k", use_threads=False).aggregate([])
        pc.dictionary_encode(table.column("k").combine_chunks())
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError, pa.ArrowInvalid):
        return False
    return True


def first_of_groups(codes: np.ndarray, rows: np.ndarray, groups: int) -> np.ndarray:
    """Per group, the first of ``rows`` (indices in order) whose code is that group's; -1 when none."""
    out = np.full(groups, -1, dtype=np.int64)
    back = rows[::-1]
    out[codes[back]] = back  # of repeated indices the last assignment holds: the first row
    return out


def _take(values: pa.Array | pa.ChunkedArray, rows: np.ndarray) -> pa.Array:
    """``values`` at ``rows``, null where a row is -1."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    return values.take(pa.array(np.maximum(rows, 0), mask=rows < 0))


class Partial:
    """A partial aggregate combined by group code (see the module's docstring)."""

    #: Its columns in the state table.
    columns: tuple[str, ...]
    #: The result's type.
    out_type: pa.DataType
    #: The result for a group of no rows (a global aggregate of an empty input).
    empty: object = None

    def rows(self, values: Sequence[pa.Array]) -> dict[str, pa.Array]:
        """Each input row as a piece: a column per state column."""
        raise NotImplementedError

    def combine(self, table: pa.Table, codes: np.ndarray, groups: int) -> dict[str, pa.Array]:
        """The pieces of ``table`` (rows in arrival order) combined per group code ``codes``
        (0 … groups − 1): a column per state column, ``groups`` long."""
        raise NotImplementedError

    def result(self, part: pa.Table) -> pa.Array:
        """Spark's result per row of ``part`` (combined pieces)."""
        raise NotImplementedError


class Moments(Partial):
    """``fn`` of :data:`MOMENTS` over doubles (Spark casts the input to double first)."""

    def __init__(self, name: str, fn: str, null_on_divide: bool = True):
        self.fn, self.order, self.null_on_divide = fn, MOMENTS[fn], null_on_divide
        self.columns = (f"{name}_n", f"{name}_avg", *(f"{name}_m{k}" for k in range(2, self.order + 1)))
        self.out_type = pa.float64()

    def rows(self, values: Sequence[pa.Array]) -> dict[str, pa.Array]:
        (x,) = values
        x = x if x.type == pa.float64() else pc.cast(x, pa.float64())
        out = {self.columns[0]: pc.cast(x.is_valid(), pa.int64()), self.columns[1]: x.fill_null(0.0)}
        zeros = pa.array(np.zeros(len(x)))
        return out | {c: zeros for c in self.columns[2:]}

    def combine(self, table: pa.Table, codes: np.ndarray, groups: int) -> dict[str, pa.Array]:
        with np.errstate(invalid="ignore", over="ignore", under="ignore"):  # NaN and ±inf propagate, as in Spark
            return self._combine(table, codes, groups)

    def _combine(self, table: pa.Table, codes: np.ndarray, groups: int) -> dict[str, pa.Array]:
        col = {c: table.column(c).to_numpy() for c in self.columns}
        n = col[self.columns[0]].astype(np.float64)
        valid = n > 0
        avg = np.where(valid, col[self.columns[1]], 0.0)
        m = [np.where(valid, col[c], 0.0) for c in self.columns[2:]]
        total = np.bincount(codes, weights=n, minlength=groups)
        # The mean, shifted by the group's first mean so that equal values give it exactly.
        first = first_of_groups(codes, np.flatnonzero(valid), groups)
        base = np.where(first >= 0, avg[np.maximum(first, 0)], 0.0)
        d = np.where(valid, avg - base[codes], 0.0)
        mean = base + np.bincount(codes, weights=n * d, minlength=groups) / np.where(total > 0, total, 1.0)
        delta = np.where(valid, avg - mean[codes], 0.0)
        out = {self.columns[0]: pa.array(total.astype(np.int64)), self.columns[1]: pa.array(mean)}
        m2 = m[0] + n * delta**2
        out[self.columns[2]] = pa.array(np.bincount(codes, weights=m2, minlength=groups))
        if self.order >= 3:
            m3 = m[1] + 3 * delta * m[0] + n * delta**3
            out[self.columns[3]] = pa.array(np.bincount(codes, weights=m3, minlength=groups))
        if self.order >= 4:
            m4 = m[2] + 4 * delta * m[1] + 6 * delta**2 * m[0] + n * delta**4
            out[self.columns[4]] = pa.array(np.bincount(codes, weights=m4, minlength=groups))
        return out

    def result(self, part: pa.Table) -> pa.Array:
        n = part.column(self.columns[0]).to_numpy().astype(np.float64)
        m2 = part.column(self.columns[2]).to_numpy()
        # Spark's evaluation: null without rows; its divideByZeroEvalResult (null, or NaN when
        # legacy) for a sample statistic of one row or a shape of no spread; and null where a
        # divisor is 0 all the same (its Divide's rule: m2³ may underflow).
        divide_by_zero = np.zeros(len(n), dtype=bool)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
            if self.fn in ("var_pop", "stddev_pop"):
                num, den = m2, n
            elif self.fn in ("var_samp", "stddev_samp"):
                divide_by_zero = n == 1
                num, den = m2, n - 1
            elif self.fn == "skewness":
                divide_by_zero = m2 == 0
                num, den = np.sqrt(n) * part.column(self.columns[3]).to_numpy(), np.sqrt(m2 * m2 * m2)
            else:
                divide_by_zero = m2 == 0
                num, den = n * part.column(self.columns[4]).to_numpy(), m2 * m2
            v = num / den
            if self.fn == "kurtosis":
                v = v - 3.0
            if self.fn.startswith("stddev"):
                v = np.sqrt(v)
        null = (n == 0) | ((den == 0) & ~divide_by_zero)
        if self.null_on_divide:
            null |= divide_by_zero
        else:
            v = np.where(divide_by_zero, math.nan, v)
        return pa.array(v, mask=null)


class Pick(Partial):
    """One row's value per group: ``rule`` ``first`` / ``last`` (arrival order; ``skip_nulls``:
    of the non-null values), ``min`` / ``max`` (Spark's ordering, nulls skipped) or ``max_by`` /
    ``min_by`` (the value of the row whose second input is largest / smallest, rows with a null
    ordering skipped, ties to the later row)."""

    def __init__(self, name: str, rule: str, out_type: pa.DataType, skip_nulls: bool = False):
        self.rule, self.skip_nulls, self.out_type = rule, skip_nulls, out_type
        self.by = rule in ("max_by", "min_by")
        self.columns = (name, f"{name}_by") if self.by else (name,)

    def rows(self, values: Sequence[pa.Array]) -> dict[str, pa.Array]:
        return dict(zip(self.columns, values, strict=True))

    def combine(self, table: pa.Table, codes: np.ndarray, groups: int) -> dict[str, pa.Array]:
        values = table.column(self.columns[0]).combine_chunks()
        ranked = table.column(self.columns[1]).combine_chunks() if self.by else values
        n = len(values)
        pos = np.arange(n)
        if self.rule in ("first", "last"):
            keep = values.is_valid().to_numpy(zero_copy_only=False) if self.skip_nulls else np.ones(n, dtype=bool)
            key = np.zeros(n, dtype=np.int64)
            tie = pos if self.rule == "first" else -pos
        else:
            key = order_ranks(ranked)
            keep = key > 0
            if self.rule in ("max", "max_by"):
                key = -key
            tie = -pos if self.by else pos
        rows = np.flatnonzero(keep)
        order = rows[np.lexsort((tie[rows], key[rows], codes[rows]))]
        chosen = first_of_groups(codes, order, groups) if len(order) else np.full(groups, -1, dtype=np.int64)
        return {c: _take(table.column(c), chosen) for c in self.columns}

    def result(self, part: pa.Table) -> pa.Array:
        v = part.column(self.columns[0]).combine_chunks()
        return v if v.type == self.out_type else v.cast(self.out_type)


class Collect(Partial):
    """``collect_list`` (``distinct`` False) or ``collect_set`` of one column, of type
    ``array<element>`` as Spark gives it; nulls dropped unless ``skip_nulls`` is False; the
    elements typed nullable when they may be null or ``nullable`` says so."""

    def __init__(self, name: str, element: pa.DataType, distinct: bool, skip_nulls: bool = True, nullable: bool = False):
        self.distinct, self.skip_nulls = distinct, skip_nulls
        self.columns = (name,)
        self.out_type = pa.list_(pa.field("element", element, nullable=nullable or not skip_nulls))
        self.empty = []

    def rows(self, values: Sequence[pa.Array]) -> dict[str, pa.Array]:
        (x,) = values
        if self.distinct:
            x = normal_key(x) if pa.types.is_floating(x.type) else x
        if self.skip_nulls and x.null_count:
            valid = x.is_valid().to_numpy(zero_copy_only=False)
            offsets = np.concatenate([[0], np.cumsum(valid)]).astype(np.int32)
            x = x.filter(pa.array(valid))
        else:
            offsets = np.arange(len(x) + 1, dtype=np.int32)
        return {self.columns[0]: pa.ListArray.from_arrays(pa.array(offsets), x, type=self.out_type)}

    def combine(self, table: pa.Table, codes: np.ndarray, groups: int) -> dict[str, pa.Array]:
        lists = table.column(self.columns[0]).combine_chunks()
        flat = pc.list_flatten(lists)
        owner = codes[pc.list_parent_indices(lists).to_numpy(zero_copy_only=False).astype(np.int64)]
        order = np.argsort(owner, kind="stable")  # each group's values in arrival order
        owner, flat = owner[order], flat.take(pa.array(order))
        if self.distinct and len(flat):
            same = order_ranks(flat)
            _, first = np.unique(owner * (int(same.max()) + 1) + same, return_index=True)
            keep = np.sort(first)
            owner, flat = owner[keep], flat.take(pa.array(keep))
        offsets = np.concatenate([[0], np.cumsum(np.bincount(owner, minlength=groups))]).astype(np.int32)
        return {self.columns[0]: pa.ListArray.from_arrays(pa.array(offsets), flat, type=self.out_type)}

    def result(self, part: pa.Table) -> pa.Array:
        return part.column(self.columns[0]).combine_chunks()
