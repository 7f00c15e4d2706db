"""Dead letters: input rows the plan cannot process, kept with the reason instead of failing the query.

A micro-batch is checked against the stream's declared schema before it is queued:

* a column the batch lacks (the source's schema changed) — every row, reason ``missing column``;
* a value that does not cast to the declared type (``"n/a"`` in a number column, a string where
  an integer was declared) — that row, reason ``column 'x': 'n/a' is not double``;
* a null in a ``required`` (key) column;
* NaN or ±inf in a floating column (when ``finite``);
* a value outside ``ranges[column] = (low, high)`` (inclusive).

:meth:`RowChecks.split` returns the good rows (exactly the declared schema) and the rejected rows
as a dead-letter table — ``batch_id``, ``row`` (index in the micro-batch), ``reason``, ``column``
and ``record`` (the original row as JSON, whatever its types were) — so rows in = rows processed +
rows dead-lettered, always. :class:`DeadLetterSink` writes that table as Parquet
``path/batch=ID.parquet`` (atomic rename; a replayed batch replaces its file, like the output sink).

>>> import pyarrow as pa
>>> schema = pa.schema([("id", pa.int32()), ("t", pa.float64())])
>>> checks = RowChecks(required=("id",), ranges={"t": (-50, 150)})
>>> batch = pa.table({"id": [1, None, 3, 4], "t": ["20.5", "21", "n/a", "900"]})
>>> good, dead = checks.split(batch, schema, batch_id=7)
>>> good.to_pylist()
[{'id': 1, 't': 20.5}]
>>> [(r["row"], r["reason"]) for r in dead.to_pylist()]
[(1, "null in key column 'id'"), (2, "column 't': 'n/a' is not double"), (3, "column 't' = 900.0 is outside [-50, 150]")]
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sparkqos.atomic import write_atomic
from sparkqos.errors import SinkError, check_number

__all__ = ["DEAD_LETTER_SCHEMA", "DeadLetterSink", "RowChecks", "dead_letters", "json_records", "read_dead_letters"]

DEAD_LETTER_SCHEMA = pa.schema(
    [
        ("batch_id", pa.int64()),
        ("row", pa.int64()),
        ("reason", pa.string()),
        ("column", pa.string()),
        ("record", pa.string()),
    ]
)

_BATCH_FILE = re.compile(r"^batch=(\d+)\.parquet$")


def _json_value(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return repr(v)  # JSON has no NaN/inf
    if isinstance(v, (bytes, bytearray)):
        return v.hex()
    if isinstance(v, (int, float, str, bool)) or v is None:
        return v
    return str(v)


class RowChecks:
    """What makes an input row unprocessable (module docstring). Parameters are the rules:

    ``required`` key columns that may not be null (default: the schema's non-nullable fields),
    ``ranges`` ``{column: (low, high)}`` inclusive bounds (None = unbounded on that side),
    ``finite`` whether NaN / ±inf in a floating column is rejected.
    """

    def __init__(
        self,
        required: Iterable[str] | None = None,
        ranges: Mapping[str, tuple[float | None, float | None]] | None = None,
        finite: bool = True,
    ):
        self.required = None if required is None else tuple(required)
        self.ranges = dict(ranges or {})
        for name, bounds in self.ranges.items():
            if not (isinstance(bounds, (tuple, list)) and len(bounds) == 2):
                raise SinkError(f"ranges[{name!r}] must be (low, high), got {bounds!r}")
            low, high = bounds
            if low is not None and high is not None and low > high:
                raise SinkError(f"ranges[{name!r}]: low {low!r} is above high {high!r}")
        self.finite = bool(finite)

    def __repr__(self) -> str:
        return f"RowChecks(required={self.required!r}, ranges={self.ranges!r}, finite={self.finite})"

    def _check_names(self, schema: pa.Schema) -> None:
        for name in self.required or ():
            if name not in schema.names:
                raise SinkError(f"required column {name!r} is not in the stream's schema {schema.names}")
        for name in self.ranges:
            if name not in schema.names:
                raise SinkError(f"range for column {name!r}, which is not in the stream's schema {schema.names}")

    def split(self, table: pa.Table, schema: pa.Schema, batch_id: int = 0) -> tuple[pa.Table, pa.Table]:
        """(rows conforming to ``schema``, dead-letter rows with their reasons). Each rejected row
        appears once, with the first reason found (columns in schema order; missing, cast, null,
        not finite, range)."""
        self._check_names(schema)
        n = table.num_rows
        reason: list[str | None] = [None] * n
        column: list[str | None] = [None] * n
        bad = np.zeros(n, dtype=bool)

        def reject(mask: np.ndarray, col: str, why) -> None:
            fresh = np.flatnonzero(mask & ~bad)
            for i in fresh:
                reason[i] = why(i) if callable(why) else why
                column[i] = col
            bad[fresh] = True

        required = set(self.required if self.required is not None else (f.name for f in schema if not f.nullable))
        columns: list[pa.Array] = []
        for field in schema:
            if field.name not in table.column_names:
                reject(
                    np.ones(n, dtype=bool),
                    field.name,
                    f"missing column {field.name!r} ({field.type}); the batch has {table.column_names}",
                )
                columns.append(pa.nulls(n, field.type))
                continue
            raw = table.column(field.name).combine_chunks() if n else pa.array([], table.schema.field(field.name).type)
            values, failed = _cast(raw, field.type)
            if failed.any():
                texts = raw.to_pylist()
                reject(failed, field.name, lambda i, t=texts, f=field: f"column {f.name!r}: {t[i]!r} is not {f.type}")
            if field.name in required:
                nulls = np.asarray(values.is_null(), dtype=bool) & ~failed
                reject(nulls, field.name, f"null in key column {field.name!r}")
            if self.finite and pa.types.is_floating(field.type) and n:
                num = values.to_numpy(zero_copy_only=False)
                reject(
                    ~np.isfinite(num) & ~np.asarray(values.is_null(), dtype=bool),
                    field.name,
                    lambda i, v=num, f=field.name: f"{'NaN' if math.isnan(v[i]) else 'infinite value'} in column {f!r}",
                )
            if field.name in self.ranges and n:
                low, high = self.ranges[field.name]
                num = pc.cast(values, pa.float64()).to_numpy(zero_copy_only=False)
                with np.errstate(invalid="ignore"):
                    out = np.zeros(n, dtype=bool)
                    if low is not None:
                        out |= num < low
                    if high is not None:
                        out |= num > high
                reject(
                    out,
                    field.name,
                    lambda i, v=num, f=field.name, lo=low, hi=high: f"column {f!r} = {float(v[i])!r} is outside [{lo}, {hi}]",
                )
            columns.append(values)
        good = pa.Table.from_arrays(columns, schema=schema)
        if bad.any():
            good = good.filter(pa.array(~bad))
        return good, self._dead(table, batch_id, bad, reason, column)

    @staticmethod
    def _dead(table: pa.Table, batch_id: int, bad: np.ndarray, reason: list, column: list) -> pa.Table:
        rows = np.flatnonzero(bad)
        if not rows.size:
            return DEAD_LETTER_SCHEMA.empty_table()
        return dead_letters(table.take(pa.array(rows)), batch_id, rows, [reason[i] for i in rows], [column[i] for i in rows])


def json_records(records: pa.Table) -> pa.Array:
    """Each row of ``records`` as one JSON object, keys sorted: the text ``json.dumps`` gives for
    the row's dict (values as :func:`_json_value` makes them), built a column at a time.

    Shedding dead-letters every row it drops, up to a whole burst's worth in one trigger, so the
    text is assembled by Arrow: integers and booleans are cast, strings encoded once per distinct
    value, floats by their ``repr``; other types (timestamps, bytes, nested) go value by value."""
    names = records.column_names
    if len(set(names)) != len(names):  # a dict keeps the last of equal keys
        return pa.array(
            [json.dumps({k: _json_value(v) for k, v in r.items()}, sort_keys=True) for r in records.to_pylist()],
            pa.string(),
        )
    if not names:
        return pa.array(["{}"] * records.num_rows, pa.string())
    pieces: list[Any] = []
    for i, name in enumerate(sorted(names)):
        pieces.append(("{" if i == 0 else ", ") + json.dumps(name) + ": ")
        pieces.append(
            _json_texts(records.column(name).combine_chunks() if records.num_rows else pa.array([], records.column(name).type))
        )
    pieces.append("}")
    return pc.binary_join_element_wise(*pieces, "")


def _json_texts(col: pa.Array) -> pa.Array:
    """``json.dumps(_json_value(v))`` of each value of ``col``, as a string array without nulls."""
    t = col.type
    if pa.types.is_integer(t):
        text = pc.cast(col, pa.string())
    elif pa.types.is_boolean(t):
        text = pc.if_else(col, "true", "false")
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        distinct = pc.unique(col.drop_null())
        encoded = pa.array([json.dumps(v) for v in distinct.to_pylist()], pa.string())
        text = pc.take(encoded, pc.index_in(col, distinct))
    elif pa.types.is_floating(t):
        values = col.fill_null(0).to_numpy(zero_copy_only=False).astype(np.float64).tolist()
        text = pa.array([repr(v) if math.isfinite(v) else f'"{v!r}"' for v in values], pa.string())
    elif pa.types.is_timestamp(t) and t.unit in _PER_SECOND and t.tz in _UTC:
        text = _utc_texts(col)
    else:
        text = pa.array([json.dumps(_json_value(v)) for v in col.to_pylist()], pa.string())
    text = text.cast(pa.string())
    return pc.if_else(col.is_null(), "null", text) if col.null_count else text


#: Timestamp units :func:`_utc_texts` writes, and the time zones it writes as ``+00:00``.
_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000}
_UTC = (None, "UTC", "Etc/UTC", "GMT", "Z", "+00:00")


def _utc_texts(col: pa.Array) -> pa.Array:
    """``json.dumps(str(v))`` of a UTC (or zone-less) timestamp column: ``"YYYY-MM-DD HH:MM:SS"``,
    then ``.ffffff`` when there are microseconds, then ``+00:00`` when it has a zone."""
    t = col.type
    per_s = _PER_SECOND[t.unit]
    ticks = col.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False)
    frac = ticks % per_s  # floor: 1969-12-31 23:59:59.999999 is -1 us
    whole = pa.array((ticks - frac) // per_s, pa.int64()).cast(pa.timestamp("s"))
    text = pc.strftime(whole, "%Y-%m-%d %H:%M:%S")
    micros = pa.array(frac * (1_000_000 // per_s), pa.int64())
    shown = pc.binary_join_element_wise(".", pc.utf8_lpad(micros.cast(pa.string()), 6, "0"), "")
    text = pc.binary_join_element_wise(text, pc.if_else(pc.equal(micros, 0), "", shown), "")
    return pc.binary_join_element_wise('"', text, "" if t.tz is None else "+00:00", '"', "")


def dead_letters(records: pa.Table, batch_id: int, rows: np.ndarray, reason: list[str], column: list[str | None]) -> pa.Table:
    """Dead-letter rows of ``records`` (the original rows, kept as JSON), one per row, with their
    ``rows`` numbers, ``reason`` and ``column``."""
    return pa.table(
        {
            "batch_id": pa.array(np.full(len(rows), batch_id), pa.int64()),
            "row": pa.array(rows, pa.int64()),
            "reason": pa.array(reason, pa.string()),
            "column": pa.array(column, pa.string()),
            "record": json_records(records),
        },
        schema=DEAD_LETTER_SCHEMA,
    )


def _cast(raw: pa.Array, target: pa.DataType) -> tuple[pa.Array, np.ndarray]:
    """``raw`` as ``target``; values that do not convert become null and are flagged."""
    n = len(raw)
    failed = np.zeros(n, dtype=bool)
    if raw.type == target:
        return raw, failed
    if pa.types.is_string(raw.type) or pa.types.is_large_string(raw.type):
        raw = pc.utf8_trim_whitespace(raw)
    try:
        return pc.cast(raw, target, safe=True), failed
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        pass
    # Some value does not fit: cast one by one (only batches that hold a bad value come here).
    out: list[Any] = []
    for i, v in enumerate(raw):
        if not v.is_valid:
            out.append(None)
            continue
        try:
            out.append(pc.cast(pa.array([v.as_py()], raw.type), target, safe=True)[0].as_py())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            out.append(None)
            failed[i] = True
    return pa.array(out, target), failed


class DeadLetterSink:
    """Dead-letter rows as Parquet ``path/batch=ID.parquet``; writing a batch id again replaces its
    file (nothing twice after a replay); a batch with no dead letters leaves no file.

    >>> import tempfile
    >>> sink = DeadLetterSink(tempfile.mkdtemp())
    >>> _, dead = RowChecks(required=("id",)).split(pa.table({"id": [1, None]}), pa.schema([("id", pa.int64())]), 3)
    >>> sink.write(3, dead); sink.write(3, dead)
    >>> read_dead_letters(sink.path).select(["batch_id", "row", "reason"]).to_pylist()
    [{'batch_id': 3, 'row': 1, 'reason': "null in key column 'id'"}]
    """

    def __init__(self, path: str | os.PathLike, fsync: bool = True):
        self.path = Path(path)
        self.fsync = fsync
        self.path.mkdir(parents=True, exist_ok=True)

    def __repr__(self) -> str:
        return f"DeadLetterSink({str(self.path)!r})"

    def write(self, batch_id: int, dead: pa.Table | None) -> None:
        """Store batch ``batch_id``'s dead letters (None or an empty table: there were none)."""
        if dead is None:
            dead = DEAD_LETTER_SCHEMA.empty_table()
        check_number("batch_id", batch_id, low=0, integer=True, error=SinkError)
        if not isinstance(dead, pa.Table) or dead.schema != DEAD_LETTER_SCHEMA:
            raise SinkError(f"dead letters must be a pyarrow.Table with schema {DEAD_LETTER_SCHEMA}")
        final = self.path / f"batch={batch_id}.parquet"
        if dead.num_rows == 0:
            if final.exists():
                final.unlink()
            return
        write_atomic(final, lambda f: pq.write_table(dead, f), fsync=self.fsync)


def read_dead_letters(path: str | os.PathLike) -> pa.Table:
    """Every dead-letter row under ``path``, in batch order (empty table if there are none)."""
    root = Path(path)
    if not root.is_dir():
        return DEAD_LETTER_SCHEMA.empty_table()
    files = sorted((int(m.group(1)), p) for p in root.iterdir() if (m := _BATCH_FILE.match(p.name)))
    if not files:
        return DEAD_LETTER_SCHEMA.empty_table()
    return pa.concat_tables([pq.read_table(p, schema=DEAD_LETTER_SCHEMA) for _, p in files])
