"""Spark's hash functions computed natively, bit-exact (classic pyspark).

* ``md5``, ``sha1``, ``sha2`` (every bit length, 0, one Spark answers with null, a null one),
  ``crc32`` of strings (unicode, empty, longer than 32 bytes) and binary, and ``xxhash64`` and
  ``hash`` of every atomic type (bytes to longs, floats and doubles with NaN and -0.0, booleans,
  strings, binary, timestamps, decimals) alone and chained over many columns, with nulls: the
  rows of Spark's own run of the same transform, in a select, in a filter and above a window
  aggregate, with nothing left to Spark;
* the main job's archive (``sha2`` of the sensor id) runs natively, all of it;
* what is not computed natively (a bit length that is not a literal, a hash of a struct) is
  refused naming it under placement "native".
"""

from __future__ import annotations

import datetime as dt
import math
import random
from decimal import Decimal

import pytest
from pyspark.sql import functions as F

import sparkqos
from sparkqos.errors import UnsupportedTransform
from sparkqos.spark.transforms import compile_transforms
from sparkqos.testing import assert_same_rows
from sparkqos.workloads.sensor_transforms import SENSOR_QUERY_CLASSES, sensor_transforms
from sparkqos.workloads.sensors import sensor_trace

SCHEMA = (
    "i int, l long, s string, b binary, d double, f float, t boolean, y byte, h short, ts timestamp, dec decimal(18,4), "
    "w decimal(6,2)"
)
COLUMNS = ("i", "l", "s", "b", "d", "f", "t", "y", "h", "ts", "dec", "w")
T0 = dt.datetime(2024, 3, 1, 10, 0, tzinfo=dt.UTC)


def random_rows(n: int, seed: int) -> list[tuple]:
    """``n`` rows of every type, with nulls, edge values and strings of 0 to 70 characters."""
    rng = random.Random(seed)

    def text():
        return "".join(rng.choice("ab é€𝄞\x00z9-") for _ in range(rng.choice([0, 1, 3, 7, 8, 31, 32, 33, 70])))

    def pick(*choices):
        return rng.choice([None, *choices])

    return [
        (
            pick(0, -1, 2**31 - 1, -(2**31), rng.randint(-(2**31), 2**31 - 1)),
            pick(0, -1, 2**63 - 1, -(2**63), rng.randint(-(2**63), 2**63 - 1)),
            pick("", text(), text()),
            pick(b"", bytes(rng.randrange(256) for _ in range(rng.randint(0, 80)))),
            pick(math.nan, -0.0, 0.0, math.inf, -math.inf, rng.uniform(-1e9, 1e9)),
            pick(math.nan, -0.0, 0.0, rng.uniform(-10, 10)),
            pick(True, False),
            pick(-128, 127, rng.randint(-128, 127)),
            pick(-(2**15), rng.randint(-(2**15), 2**15 - 1)),
            pick(T0 + dt.timedelta(microseconds=rng.randint(-(10**15), 10**15))),
            pick(Decimal(rng.randint(-(10**17), 10**17)).scaleb(-4)),
            pick(Decimal(rng.randint(-(10**5), 10**5)).scaleb(-2)),
        )
        for _ in range(n)
    ]


def digests(df):
    out = []
    for c in ("s", "b"):
        out += [F.md5(c).alias(f"md5_{c}"), F.sha1(c).alias(f"sha1_{c}"), F.crc32(c).alias(f"crc32_{c}")]
        out += [F.sha2(c, n).alias(f"sha{n}_{c}") for n in (0, 224, 256, 384, 512)]
        out.append(F.expr(f"sha2({c}, 100)").alias(f"sha100_{c}"))  # a bit length Spark answers with null
    out += [F.sha2(F.col("i").cast("string"), 256).alias("key"), F.md5(F.lit("Spark")).alias("lit")]
    out.append(F.expr("sha2(s, CAST(NULL AS INT))").alias("null_bits"))
    return df.select("i", *out)


def row_hashes(df):
    out = [F.xxhash64(c).alias(f"xx_{c}") for c in COLUMNS] + [F.hash(c).alias(f"mm_{c}") for c in COLUMNS]
    out += [F.xxhash64(*COLUMNS).alias("xx_all"), F.hash(*COLUMNS).alias("mm_all")]
    out += [F.xxhash64(F.lit(None), "s", F.lit(7)).alias("xx_lit"), F.hash(F.lit("é"), "i").alias("mm_lit")]
    return df.select("i", *out)


def filtered(df):
    return df.where((F.xxhash64("s", "l") % 3 == 0) | (F.hash("d") > 0)).select("i", F.crc32("b").alias("c"))


def above_a_window(df):
    return (
        df.withWatermark("ts", "1 second")
        .groupBy(F.window("ts", "1000 days"))
        .agg(F.count("*").alias("n"))
        .select(F.sha2(F.col("n").cast("string"), 256).alias("h"), F.hash("window.start").alias("w"))
    )


QUERIES = {"digests": digests, "row_hashes": row_hashes, "filtered": filtered}


def test_hashes_equal_spark_natively(spark_sql):
    df = spark_sql.createDataFrame(random_rows(300, seed=11), SCHEMA)
    queries = {**QUERIES, "above_a_window": above_a_window}
    assert not compile_transforms(df, queries).spark_parts, "every hash runs natively"
    got = sparkqos.run(df, queries, batch_rows=64, placement="native")
    for name, transform in queries.items():
        want = transform(df).toArrow()
        assert want.num_rows > 0, name
        assert_same_rows(got[name], want, name)


def test_hashes_of_an_empty_and_an_all_null_input_equal_spark(spark_sql):
    for rows in ([], [(None,) * len(COLUMNS)] * 3):
        df = spark_sql.createDataFrame(rows, SCHEMA)
        got = sparkqos.run(df, QUERIES, placement="native")
        for name, transform in QUERIES.items():
            assert_same_rows(got[name], transform(df).toArrow(), f"{name} over {len(rows)} rows")


def test_the_archive_runs_natively(spark, tmp_path):
    path = tmp_path / "trace.parquet"
    sensor_trace(path, 100, 5.0, seed=3)
    df = spark.read.parquet(str(path))
    text = sparkqos.explain(df, sensor_transforms(), classes=SENSOR_QUERY_CLASSES, print_=False)
    archive = text.split("query 'archive'")[1]
    assert "+- native" in archive and "+- spark" not in archive and "refused" not in archive, archive


@pytest.mark.parametrize(
    ("transform", "named"),
    [
        (lambda d: d.select(F.expr("sha2(s, i)")), "'sha2' with a bit length that is not a literal"),
        (lambda d: d.select(F.xxhash64(F.struct("i", "s"))), "'xxhash64' of a struct"),
        (lambda d: d.select(F.hash(F.array("i"))), "'hash' of a list"),
    ],
)
def test_what_is_not_native_is_refused_naming_it(spark, transform, named):
    df = spark.createDataFrame(random_rows(2, seed=1), SCHEMA)
    with pytest.raises(UnsupportedTransform, match=named):
        sparkqos.run(df, {"q": transform}, placement="native")
