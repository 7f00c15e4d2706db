"""Python and pandas UDFs on Arrow batches, converted the way Spark's Python worker converts them.

A PySpark transform may call user functions: a scalar ``pandas_udf`` (one call per batch, on
pandas Series) or a Python ``udf`` (one call per row; ``None`` in, ``None`` out is a null).
:class:`PythonUdf` runs the function, already unpickled by the session side
(:mod:`sparkqos.spark.udfs`), on the executor's Arrow batches:

* ``pandas``: each argument becomes a pandas Series as Spark makes it (``Array.to_pandas()``:
  integers with nulls become float64 with NaN, strings object); the result must be a Series of
  the batch's length and becomes Arrow as Spark makes it (nulls *and NaN* become null; a result
  of another type is cast unchecked, as with ``spark.sql.execution.pandas.convertToArrowArraySafely``
  off, Spark's default);
* ``arrow_rows``: an Arrow-optimised Python UDF (Spark's default where
  ``spark.sql.execution.pythonUDF.arrow.enabled`` is on): rows as Python values, results to
  Arrow with Spark's coercions (a bool for a string is ``"true"``/``"false"``, anything else
  ``str()``; a value Arrow rejects for the type is cast unchecked);
* ``rows``: a pickled Python UDF: rows as Python values; results must have the declared type's
  Python type (Spark's JVM converts other values its own way, which sparkqos does not
  reproduce, so such a result raises instead of giving another answer).

Whatever the function raises, or a result Spark would refuse, raises
:class:`~sparkqos.errors.UdfError` naming the query and the UDF.

>>> import pyarrow as pa
>>> from sparkqos.executor.expressions import col
>>> twice = PythonUdf("twice", lambda x: None if x is None else 2 * x, [col("v")], pa.int64(), "rows", "q")
>>> twice.evaluate(pa.record_batch({"v": [1, None]})).to_pylist()
[2, None]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd
import pyarrow as pa

from sparkqos.errors import ExpressionError, UdfError
from sparkqos.executor.expressions import Expr, describe, evaluate_array, kind
from sparkqos.executor.threadsafe import is_thread_safe

__all__ = ["KINDS", "Chained", "PythonUdf", "udf_type_supported"]

#: How a UDF runs (see the module docstring).
KINDS = ("pandas", "arrow_rows", "rows")


def udf_type_supported(t: pa.DataType) -> bool:
    """Whether a UDF may take or return Arrow type ``t``: integers, float32/64, strings, booleans."""
    return (
        pa.types.is_integer(t)
        or t in (pa.float32(), pa.float64())
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_boolean(t)
    )


def _python_type_ok(value: Any, t: pa.DataType) -> bool:
    """Whether a row UDF's result ``value`` has the Python type Spark's JVM takes as it is for ``t``."""
    if pa.types.is_boolean(t):
        return isinstance(value, bool)
    if pa.types.is_integer(t):
        if isinstance(value, bool) or not isinstance(value, int):
            return False
        bits = t.bit_width - 1
        return -(2**bits) <= value < 2**bits
    if pa.types.is_floating(t):
        return isinstance(value, float)
    return isinstance(value, str)


def _as_text(value: Any) -> str | None:
    """A row UDF's result for a string column: a bool as the JVM prints it, anything else ``str()``."""
    if value is None or type(value) is str:
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _to_arrow(values: Any, t: pa.DataType, **options: Any) -> pa.Array:
    """Spark's last step: the declared type straight away, or, where Arrow calls the values
    invalid for it (an overflow, a float for an integer), their own type cast unchecked."""
    build = pa.Array.from_pandas if isinstance(values, pd.Series) else pa.array
    try:
        return build(values, type=t, **options)
    except pa.ArrowInvalid:
        return build(values, **options).cast(t, safe=False)


class Chained:
    """Functions applied one after the other with nothing in between: what Spark's Python worker
    runs for a UDF whose one argument is a UDF of the same kind (``f(g(x))``), so ``g``'s result
    reaches ``f`` as ``g`` returned it, never converted to the declared type."""

    def __init__(self, functions: Sequence[Callable[..., Any]]):
        self.functions = tuple(functions)

    @property
    def __sparkqos_thread_safe__(self) -> bool:  # threadsafe.THREAD_SAFE: the chain is safe when each function is
        return all(is_thread_safe(f) for f in self.functions)

    def __call__(self, *args: Any) -> Any:
        first, *rest = self.functions
        out = first(*args)
        for f in rest:
            out = f(out)
        return out


class PythonUdf(Expr):
    """User function ``fn`` named ``udf`` over ``args``, giving ``return_type``; ``kind`` is one
    of :data:`KINDS`; ``query`` names the query in errors."""

    #: A user's code: sliced runs only when ``fn`` is declared thread-safe (:mod:`sparkqos.executor.threadsafe`).
    calls_user_function = True

    def __init__(self, udf: str, fn: Callable[..., Any], args: Sequence[Expr], return_type: pa.DataType, kind: str, query: str):
        if kind not in KINDS:
            raise ExpressionError(f"UDF {udf!r}: unknown kind {kind!r}; kinds are {list(KINDS)}")
        if not callable(fn):
            raise ExpressionError(f"UDF {udf!r}: expected a callable, got {fn!r}")
        if not udf_type_supported(return_type):
            raise ExpressionError(f"UDF {udf!r}: return type {return_type} is not one sparkqos computes")
        self.udf, self.fn, self.args = udf, fn, tuple(args)
        self.return_type, self.kind, self.query = return_type, kind, query

    def __repr__(self) -> str:
        return f"{self.udf}({', '.join(repr(a) for a in self.args)})"

    def columns(self) -> set[str]:
        return set().union(*(a.columns() for a in self.args))

    def check(self, schema: pa.Schema, where: str) -> pa.DataType:
        for a in self.args:
            t = a.check(schema, where)
            if not (udf_type_supported(t) or kind(t) == "null"):
                raise ExpressionError(f"operator {where!r}: UDF {self.udf!r} cannot take {describe(a, t)}")
        return self.return_type

    def evaluate(self, batch: pa.RecordBatch) -> pa.Array:
        if batch.num_rows == 0:  # Spark never calls a UDF on no rows (operators bind on an empty batch)
            return pa.array([], self.return_type)
        arrays = [evaluate_array(a, batch) for a in self.args]
        if self.kind == "pandas":
            return self._pandas(arrays, batch.num_rows)
        return self._rows(arrays, batch.num_rows)

    def _failed(self, problem: str) -> UdfError:
        return UdfError(self.query, self.udf, problem)

    def _pandas(self, arrays: list[pa.Array], n: int) -> pa.Array:
        series = [a.to_pandas() for a in arrays]
        try:
            result = self.fn(*series)
        except Exception as exc:
            raise self._failed(f"raised {type(exc).__name__}: {exc}") from exc
        if not isinstance(result, pd.Series):
            raise self._failed(f"returned {type(result).__name__} where Spark expects a pandas.Series")
        if len(result) != n:
            raise self._failed(f"returned {len(result)} rows for a batch of {n}")
        if isinstance(result.dtype, pd.CategoricalDtype):
            result = result.astype(result.dtype.categories.dtype)
        mask = None if hasattr(result.array, "__arrow_array__") else result.isnull()
        try:
            return _to_arrow(result, self.return_type, mask=mask, safe=False)
        except (pa.ArrowException, ValueError, TypeError) as exc:
            raise self._failed(f"returned a {result.dtype} Series Spark cannot convert to {self.return_type}: {exc}") from exc

    def _rows(self, arrays: list[pa.Array], n: int) -> pa.Array:
        fn = self.fn
        rows = zip(*(a.to_pylist() for a in arrays), strict=True) if arrays else (() for _ in range(n))
        out: list[Any] = []
        for row in rows:
            try:
                out.append(fn(*row))
            except Exception as exc:
                raise self._failed(f"raised {type(exc).__name__}: {exc} (arguments {row!r})") from exc
        t = self.return_type
        text = pa.types.is_string(t) or pa.types.is_large_string(t)
        if self.kind == "arrow_rows":
            if text:
                out = [_as_text(v) for v in out]
            try:
                return _to_arrow(out, t)
            except (pa.ArrowException, ValueError, TypeError, OverflowError) as exc:
                raise self._failed(f"returned values Spark cannot convert to {t}: {exc}") from exc
        for v in out:
            if v is None or _python_type_ok(v, t):
                continue
            if text and isinstance(v, bool):
                continue
            raise self._failed(
                f"returned {v!r} ({type(v).__name__}) for a {t} result: Spark's JVM converts such a value its "
                "own way, which sparkqos does not reproduce; return the declared type (or None)"
            )
        if text:
            out = [_as_text(v) for v in out]
        return pa.array(out, type=t)
