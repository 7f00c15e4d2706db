"""Spark's hash functions in a transform's plan → the executor's bit-exact hashes
(:mod:`sparkqos.executor.expressions.hashes`).

``F.md5(s)``, ``F.sha1(s)``, ``F.sha2(s, n)`` and ``F.crc32(s)`` take binary: on a string the
analyzer has already inserted the cast to binary (its UTF-8 bytes), which the executor computes.
``sha2``'s bit length is a literal: 224, 256, 384, 512 or 0 (256); any other gives null, as in
Spark. ``F.xxhash64(...)`` and ``F.hash(...)`` (Murmur3) reach the analyzer as ``XxHash64`` /
``Murmur3Hash`` with Spark's seed 42 and take any number of atomic columns. Refused, naming
them: a bit length that is not a literal, a seed other than Spark's, and a hash of a struct,
array, map or a decimal wider than 18 digits.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from sparkqos.compile.nodes import Node, Rel
from sparkqos.executor.expressions import Call, Expr, Lit
from sparkqos.executor.expressions.hashes import SPARK_SEED, hash_supported

#: Spark's one-argument digests → the executor's function.
_DIGESTS = {"Md5": "md5", "Sha1": "sha1", "Crc32": "crc32"}
#: Spark's hashes of many columns → the executor's function (also Spark's SQL name).
_ROW_HASHES = {"XxHash64": "xxhash64", "Murmur3Hash": "hash"}
#: sha2's bit lengths → the executor's digest.
_SHA2 = {0: "sha256", 224: "sha224", 256: "sha256", 384: "sha384", 512: "sha512"}


def digest(qc: Any, node: Node, rel: Rel) -> Expr:
    return Call(_DIGESTS[node.cls], qc.expr(node.children[0], rel))


def sha2(qc: Any, node: Node, rel: Rel) -> Expr:
    x, bits = (qc.expr(k, rel) for k in node.children)
    if not isinstance(bits, Lit):  # a literal, or the analyzer's cast of one (folded by the compiler)
        raise qc.unsupported("Spark function 'sha2' with a bit length that is not a literal")
    name = None if bits.value is None else _SHA2.get(int(bits.value))
    return Lit(None, pa.string()) if name is None else Call(name, x)


def row_hash(qc: Any, node: Node, rel: Rel) -> Expr:
    name = _ROW_HASHES[node.cls]
    seed = node.fields.get("seed")
    if seed != SPARK_SEED:
        raise qc.unsupported(f"Spark function {name!r} with seed {seed}", f"sparkqos hashes with Spark's seed {SPARK_SEED}")
    args = [qc.expr(k, rel) for k in node.children]
    for a in args:
        t = a.check(rel.schema, qc.query)
        if not hash_supported(t):
            raise qc.unsupported(
                f"Spark function {name!r} of a {t} value",
                "sparkqos hashes numbers, booleans, strings, binary, timestamps and decimals of up to 18 digits",
            )
    return Call(name, *args)
