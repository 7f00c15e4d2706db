"""Spark's hash functions, bit-exact: ``md5``, ``sha1``, ``sha2`` (224/256/384/512), ``crc32``
on strings and binary, and ``xxhash64`` and ``hash`` (Spark's Murmur3, 32-bit) of any number of
atomic columns.

The digests are computed once per distinct value of the batch (``dictionary_encode``, then one
``hashlib`` / ``zlib`` call per distinct value and a ``take``): keys repeat, and a digest costs
a microsecond per call where the encoding costs tens of nanoseconds per row. ``xxhash64`` and
``hash`` are vectorised with numpy over whole columns, word by word, as Spark's hashers walk each
value (``XXH64`` and ``Murmur3_x86_32`` of spark-unsafe):

* booleans, bytes, shorts, ints and dates are hashed as one 4-byte int (true = 1), longs and
  timestamps (microseconds since the epoch) as one 8-byte long; a float as the int of its
  bits, a double as the long of its bits, -0.0 as 0 and every NaN as Java's canonical NaN; a
  decimal of precision at most 18 as the long of its unscaled value;
* strings (their UTF-8 bytes) and binary as bytes; Spark's Murmur3 hashes each byte past the
  last whole 4-byte word as a sign-extended int of its own (``hashUnsafeBytes``, kept by Spark
  for compatibility), which is not the reference Murmur3;
* the hash of several columns chains: each column's hash is seeded with the previous one,
  starting from the seed (42); a null leaves the running hash as it is, so the result is never
  null.

>>> import pyarrow as pa
>>> digest("sha256", pa.array(["Spark", None])).to_pylist()
['529bc3b07127ecb7e53a4dcf1991d9152c24537d919178022b2c42657f79a26b', None]
>>> crc32(pa.array([b"Spark"])).to_pylist()
[1557323817]
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkqos.errors import ExpressionError

#: Spark's seed of ``hash`` and ``xxhash64``.
SPARK_SEED = 42

#: Digest name → the ``hashlib`` constructor computing it.
DIGESTS: dict[str, Callable[[bytes], Any]] = {
    "md5": hashlib.md5,
    "sha1": hashlib.sha1,
    "sha224": hashlib.sha224,
    "sha256": hashlib.sha256,
    "sha384": hashlib.sha384,
    "sha512": hashlib.sha512,
}


def _as_array(x: pa.Array | pa.ChunkedArray | pa.Scalar) -> tuple[pa.Array, bool]:
    """``x`` as one array, and whether it was a scalar (the result is then a scalar too)."""
    if isinstance(x, pa.Scalar):
        return pa.array([x.as_py()], x.type), True
    if isinstance(x, pa.ChunkedArray):
        return (x.combine_chunks() if x.num_chunks != 1 else x.chunk(0)), False
    return x, False


def _per_distinct(fn: Callable[[bytes], Any], out: pa.DataType) -> Callable[[Any], Any]:
    """``fn`` of each value's bytes (null → null), called once per distinct value."""

    def apply(x: pa.Array | pa.ChunkedArray | pa.Scalar) -> pa.Array | pa.Scalar:
        arr, scalar = _as_array(x)
        if pa.types.is_null(arr.type):
            result = pa.nulls(len(arr), out)
        else:
            if not (pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type)):
                arr = pc.cast(arr, pa.large_binary() if pa.types.is_large_string(arr.type) else pa.binary())
            encoded = pc.dictionary_encode(arr)
            values = pa.array([fn(v) for v in encoded.dictionary.to_pylist()], out)
            result = pc.take(values, encoded.indices)
        return result[0] if scalar else result

    return apply


def digest(name: str, x: pa.Array | pa.ChunkedArray | pa.Scalar) -> pa.Array | pa.Scalar:
    """The lowercase hex digest ``name`` (:data:`DIGESTS`) of each string's UTF-8 bytes or each
    binary value; null → null."""
    return _HEX[name](x)


_HEX = {name: _per_distinct(lambda v, h=h: h(v).hexdigest(), pa.string()) for name, h in DIGESTS.items()}

#: Spark's ``crc32``: the CRC-32 of each value's bytes as a long; null → null.
crc32 = _per_distinct(zlib.crc32, pa.int64())


# -- words of a column, as Spark's hashers read them ------------------------------------------------

_INT, _LONG, _BYTES = "int", "long", "bytes"


def _words(arr: pa.Array) -> tuple[str, Any]:
    """How Spark hashes the values of ``arr``: (``"int"``, uint32 array), (``"long"``, uint64
    array) or (``"bytes"``, (data uint8, starts, lengths)); nulls hold anything."""
    t = arr.type
    if pa.types.is_boolean(t):
        return _INT, pc.fill_null(arr, False).to_numpy(zero_copy_only=False).astype(np.uint32)
    if pa.types.is_signed_integer(t) and t.bit_width <= 32:
        return _INT, pc.fill_null(arr, 0).to_numpy().astype(np.int32).view(np.uint32)
    if pa.types.is_signed_integer(t):
        return _LONG, pc.fill_null(arr, 0).to_numpy().astype(np.int64).view(np.uint64)
    if pa.types.is_date32(t):
        return _INT, pc.fill_null(pc.cast(arr, pa.int32()), 0).to_numpy().view(np.uint32)
    if pa.types.is_timestamp(t):
        micros = pc.cast(pc.cast(arr, pa.timestamp("us", tz=t.tz)), pa.int64())
        return _LONG, pc.fill_null(micros, 0).to_numpy().view(np.uint64)
    if pa.types.is_float32(t):
        v = pc.fill_null(arr, 0.0).to_numpy()
        bits = np.where(np.isnan(v), np.uint32(0x7FC00000), np.where(v == 0, np.uint32(0), v.view(np.uint32)))
        return _INT, bits.astype(np.uint32)
    if pa.types.is_float64(t):
        v = pc.fill_null(arr, 0.0).to_numpy()
        bits = np.where(np.isnan(v), np.uint64(0x7FF8000000000000), np.where(v == 0, np.uint64(0), v.view(np.uint64)))
        return _LONG, bits.astype(np.uint64)
    if pa.types.is_decimal128(t) and t.precision <= 18:
        # 16-byte little-endian two's complement; a value of at most 18 digits is its low 8 bytes
        raw = np.frombuffer(arr.buffers()[1], dtype=np.int64, count=2 * (arr.offset + len(arr)))
        return _LONG, raw[2 * arr.offset :: 2].view(np.uint64).copy()
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
        if len(arr) == 0:
            return _BYTES, (np.zeros(8, np.uint8), np.zeros(0, np.int64), np.zeros(0, np.int64))
        offsets = np.frombuffer(
            arr.buffers()[1],
            dtype=np.int64 if pa.types.is_large_string(t) or pa.types.is_large_binary(t) else np.int32,
            count=arr.offset + len(arr) + 1,
        )[arr.offset :].astype(np.int64)
        data = arr.buffers()[2]
        raw = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)
        starts = offsets[:-1]
        lengths = np.where(arr.is_valid().to_numpy(zero_copy_only=False), offsets[1:] - starts, 0)
        # padded so that a word may be read at any start, then viewed as unaligned words
        padded = np.concatenate([raw[: int(offsets[-1]) if len(offsets) else 0], np.zeros(8, np.uint8)])
        return _BYTES, (padded, starts, lengths)
    raise ExpressionError(f"Spark's hash of a {t} column is not computed by sparkqos")


def hash_supported(t: pa.DataType) -> bool:
    """Whether :func:`xxhash64` and :func:`murmur3` hash values of type ``t`` as Spark does."""
    if pa.types.is_null(t):
        return True
    try:
        _words(pa.array([], t))
    except ExpressionError:
        return False
    return True


def _unaligned(padded: np.ndarray, itemsize: int) -> np.ndarray:
    """``padded`` viewed as little-endian words of ``itemsize`` bytes starting at every byte."""
    dtype = np.dtype(f"<u{itemsize}")
    return np.ndarray((len(padded) - itemsize + 1,), dtype, padded, 0, (1,))


# -- XXH64 -------------------------------------------------------------------------------------------

_P1 = np.uint64(0x9E3779B185EBCA87)
_P2 = np.uint64(0xC2B2AE3D27D4EB4F)
_P3 = np.uint64(0x165667B19E3779F9)
_P4 = np.uint64(0x85EBCA77C2B2AE63)
_P5 = np.uint64(0x27D4EB2F165667C5)


def _rotl64(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


def _fmix64(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> np.uint64(33))
    h = h * _P2
    h = h ^ (h >> np.uint64(29))
    h = h * _P3
    return h ^ (h >> np.uint64(32))


def _xx_round(acc: np.ndarray, word: np.ndarray) -> np.ndarray:
    return _rotl64(acc + word * _P2, 31) * _P1


def _xx_merge(h: np.ndarray, acc: np.ndarray) -> np.ndarray:
    return (h ^ _xx_round(np.uint64(0), acc)) * _P1 + _P4


def _xx_word(h: np.ndarray, word: np.ndarray) -> np.ndarray:
    return _rotl64(h ^ _xx_round(np.uint64(0), word), 27) * _P1 + _P4


def _xx_int(h: np.ndarray, word: np.ndarray) -> np.ndarray:
    return _rotl64(h ^ (word.astype(np.uint64) * _P1), 23) * _P2 + _P3


def _xx_byte(h: np.ndarray, byte: np.ndarray) -> np.ndarray:
    return _rotl64(h ^ (byte.astype(np.uint64) * _P5), 11) * _P1


def _xx_bytes(padded: np.ndarray, starts: np.ndarray, lengths: np.ndarray, seed: np.ndarray) -> np.ndarray:
    """XXH64 of each value's bytes (Spark's ``XXH64.hashUnsafeBytes``), one seed per value."""
    w64, w32 = _unaligned(padded, 8), _unaligned(padded, 4)
    stripes = np.where(lengths >= 32, lengths // 32, 0)
    h = seed + _P5
    if stripes.any():
        v1, v2, v3, v4 = seed + _P1 + _P2, seed + _P2, seed.copy(), seed - _P1
        for k in range(int(stripes.max())):
            on = stripes > k
            at = np.where(on, starts + 32 * k, 0)
            v1 = np.where(on, _xx_round(v1, w64[at]), v1)
            v2 = np.where(on, _xx_round(v2, w64[at + 8]), v2)
            v3 = np.where(on, _xx_round(v3, w64[at + 16]), v3)
            v4 = np.where(on, _xx_round(v4, w64[at + 24]), v4)
        big = _rotl64(v1, 1) + _rotl64(v2, 7) + _rotl64(v3, 12) + _rotl64(v4, 18)
        for v in (v1, v2, v3, v4):
            big = _xx_merge(big, v)
        h = np.where(stripes > 0, big, h)
    h = h + lengths.astype(np.uint64)
    pos = starts + 32 * stripes
    rest = lengths - 32 * stripes
    words = rest // 8
    for k in range(int(words.max()) if len(words) else 0):
        on = words > k
        h = np.where(on, _xx_word(h, w64[np.where(on, pos + 8 * k, 0)]), h)
    pos, rest = pos + 8 * words, rest - 8 * words
    on = rest >= 4
    h = np.where(on, _xx_int(h, w32[np.where(on, pos, 0)]), h)
    pos, rest = pos + 4 * on, rest - 4 * on
    for k in range(int(rest.max()) if len(rest) else 0):
        on = rest > k
        h = np.where(on, _xx_byte(h, padded[np.where(on, pos + k, 0)]), h)
    return _fmix64(h)


def _xx_column(how: str, words: Any, seed: np.ndarray) -> np.ndarray:
    if how == _INT:
        return _fmix64(_xx_int(seed + _P5 + np.uint64(4), words))
    if how == _LONG:
        return _fmix64(_xx_word(seed + _P5 + np.uint64(8), words))
    return _xx_bytes(*words, seed)


# -- Murmur3 (x86, 32-bit) ------------------------------------------------------------------------------

_C1, _C2 = np.uint32(0xCC9E2D51), np.uint32(0x1B873593)


def _rotl32(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def _mix_k1(k: np.ndarray) -> np.ndarray:
    return _rotl32(k * _C1, 15) * _C2


def _mix_h1(h: np.ndarray, k: np.ndarray) -> np.ndarray:
    return _rotl32(h ^ k, 13) * np.uint32(5) + np.uint32(0xE6546B64)


def _fmix32(h: np.ndarray, length: np.ndarray | int) -> np.ndarray:
    h = h ^ np.asarray(length).astype(np.uint32)
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(0x85EBCA6B)
    h = h ^ (h >> np.uint32(13))
    h = h * np.uint32(0xC2B2AE35)
    return h ^ (h >> np.uint32(16))


def _mm_bytes(padded: np.ndarray, starts: np.ndarray, lengths: np.ndarray, seed: np.ndarray) -> np.ndarray:
    """Spark's ``Murmur3_x86_32.hashUnsafeBytes`` of each value's bytes, one seed per value."""
    w32 = _unaligned(padded, 4)
    h = seed
    words = lengths // 4
    for k in range(int(words.max()) if len(words) else 0):
        on = words > k
        h = np.where(on, _mix_h1(h, _mix_k1(w32[np.where(on, starts + 4 * k, 0)])), h)
    pos, rest = starts + 4 * words, lengths - 4 * words
    signed = padded.view(np.int8)
    for k in range(int(rest.max()) if len(rest) else 0):
        on = rest > k
        byte = signed[np.where(on, pos + k, 0)].astype(np.int32).view(np.uint32)  # sign-extended, as Java's byte
        h = np.where(on, _mix_h1(h, _mix_k1(byte)), h)
    return _fmix32(h, lengths)


def _mm_column(how: str, words: Any, seed: np.ndarray) -> np.ndarray:
    if how == _INT:
        return _fmix32(_mix_h1(seed, _mix_k1(words)), 4)
    if how == _LONG:
        low = (words & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        high = (words >> np.uint64(32)).astype(np.uint32)
        return _fmix32(_mix_h1(_mix_h1(seed, _mix_k1(low)), _mix_k1(high)), 8)
    return _mm_bytes(*words, seed)


def _chained(
    column: Callable[[str, Any, np.ndarray], np.ndarray], unsigned: type, signed: pa.DataType, seed: int
) -> Callable[..., Any]:
    def apply(*xs: pa.Array | pa.ChunkedArray | pa.Scalar) -> pa.Array | pa.Scalar:
        arrays = [_as_array(x) for x in xs]
        n = max((len(a) for a, scalar in arrays if not scalar), default=1)
        h = np.full(n, seed & np.iinfo(unsigned).max, dtype=unsigned)
        with np.errstate(over="ignore"):
            for arr, scalar in arrays:
                if pa.types.is_null(arr.type):
                    continue  # a null leaves the running hash as it is
                how, words = _words(arr)
                valid = arr.is_valid().to_numpy(zero_copy_only=False)
                if scalar and n != 1:
                    words = np.repeat(words, n) if how != _BYTES else (words[0], np.repeat(words[1], n), np.repeat(words[2], n))
                    valid = np.repeat(valid, n)
                h = np.where(valid, column(how, words, h), h)
        out = pa.array(h.view(np.dtype(signed.to_pandas_dtype())), signed)
        return out[0] if all(scalar for _, scalar in arrays) else out

    return apply


#: Spark's ``xxhash64(*cols)``: a long, never null.
xxhash64 = _chained(_xx_column, np.uint64, pa.int64(), SPARK_SEED)
#: Spark's ``hash(*cols)`` (Murmur3, 32-bit): an int, never null.
murmur3 = _chained(_mm_column, np.uint32, pa.int32(), SPARK_SEED)
