"""The recorded AIS vessel trace: parsing tracktable's .traj files, dead letters for bad
reports, the cached Parquet trace, its replay, and ``python -m sparkqos trace vessels``.

The parser's oracle is a plain row-by-row reading of the same text (``datetime.strptime``,
``float``); the replay's is Spark's own Parquet reader. Tests on the real files skip when the
``data`` extra (tracktable-data) is not installed.
"""

from __future__ import annotations

import importlib.util
import json
import math
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkqos import cli
from sparkqos.errors import SourceError
from sparkqos.sources.generators import US, ReplayTrace
from sparkqos.workloads import ais

HAS_DATA = importlib.util.find_spec("tracktable_data") is not None
needs_data = pytest.mark.skipif(not HAS_DATA, reason="the data extra is not installed: pip install -e '.[data]'")

HEADER = "*T*,{track},terrestrial,{n},0,*P*,terrestrial,2,1,1,0"
GOOD = [
    ("367000001", "2020-06-30 00:00:05", "-74.01", "40.60"),
    ("367000002", "2020-06-30 00:00:01", "-118.2", "33.8"),
    ("367000001", '"2020-06-30 00:00:05"', "-74.02", "40.61"),  # quoted time, same second as the first
    ("367000003", "2020-06-30 00:00:03", "180", "-90"),  # on the bounds: in range
]
BAD = [
    ("", "2020-06-30 00:00:02", "-74.0", "40.6", "mmsi", "missing mmsi"),
    ("367000004", "", "-74.0", "40.6", "ts", "missing ts"),
    ("367000004", "2020-06-30 00:00:02", " ", "40.6", "lon", "missing lon"),
    ("0", "2020-06-30 00:00:02", "-74.0", "40.6", "mmsi", "mmsi '0' is not a positive integer"),
    ("-5", "2020-06-30 00:00:02", "-74.0", "40.6", "mmsi", "mmsi '-5' is not a positive integer"),
    ("36700.5", "2020-06-30 00:00:02", "-74.0", "40.6", "mmsi", "mmsi '36700.5' is not a positive integer"),
    ("367000004", "2020-06-31 00:00:02", "-74.0", "40.6", "ts", "ts '2020-06-31 00:00:02' is not a time"),
    ("367000004", "30/06/2020 00:00", "-74.0", "40.6", "ts", "ts '30/06/2020 00:00' is not a time"),
    ("367000004", "2020-06-30 00:00:02", "west", "40.6", "lon", "lon 'west' is not a number"),
    ("367000004", "2020-06-30 00:00:02", "-74.0", "nan", "lat", "lat 'nan' is not a number"),
    ("367000004", "2020-06-30 00:00:02", "-181.5", "40.6", "lon", "lon -181.5 is outside [-180, 180]"),
    ("367000004", "2020-06-30 00:00:02", "-74.0", "90.01", "lat", "lat 90.01 is outside [-90, 90]"),
]


def track_line(track: str, points: list[tuple[str, ...]]) -> str:
    return ",".join([HEADER.format(track=track, n=len(points))] + [",".join(p[:4]) for p in points])


def sample_text() -> str:
    """Good and bad reports, a line with point properties, an old line without a track id, and
    three lines whose layout cannot be read."""
    lines = [
        track_line("t-good", GOOD),
        track_line("t-mixed", [GOOD[0], *BAD[:6]]),
        "",
        track_line("t-bad", BAD[6:]),
        "*T*,terrestrial,2,0,*P*,terrestrial,2,1,1,0,"  # old layout: no track id
        "367000009,2020-06-30 00:00:09,-70.5,41.5,367000009,2020-06-30 00:00:10,-70.6,41.6",
        "*T*,t-props,terrestrial,1,1,note,2,hello,*P*,terrestrial,2,1,1,2,speed,1,dest,2,"  # properties
        "367000010,2020-06-30 00:00:04,-75.5,39.5,12.5,NYC",
        track_line("t-short", GOOD[:2]).replace(",2,0,*P*", ",3,0,*P*"),  # declares 3 points, has 2
        "367000001,2020-06-30 00:00:05,-74.0,40.6",  # no header
        "*T*,t-noP,terrestrial,1,0,367000001,2020-06-30 00:00:05,-74.0,40.6",
    ]
    return "\n".join(lines) + "\n"


def reference(text: str) -> tuple[list[tuple], int]:
    """(good reports as (mmsi, ts µs, lon, lat, track, point) sorted, number of rejected reports
    and lines): the same file read row by row."""
    good, rejected = [], 0
    for line in text.splitlines():
        if not line.strip():
            continue
        f = [x.strip() for x in line.split(",")]
        if f[0] != "*T*" or "*P*" not in f:
            rejected += 1
            continue
        p = f.index("*P*")
        has_id = f[1] not in ("terrestrial", "generic")
        track = f[1] if has_id else ""
        n = int(f[2 + has_id])
        stride = 4 + int(f[p + 5])
        first = p + 6 + 2 * int(f[p + 5])
        if len(f) - first != n * stride:
            rejected += 1
            continue
        for i in range(n):
            mmsi, ts, lon, lat = f[first + i * stride : first + i * stride + 4]
            try:
                assert mmsi.isdigit() and int(mmsi) > 0
                t = datetime.strptime(ts.strip('"'), "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
                x, y = float(lon), float(lat)
                assert math.isfinite(x) and math.isfinite(y) and abs(x) <= 180 and abs(y) <= 90
            except (AssertionError, ValueError):
                rejected += 1
                continue
            good.append((int(mmsi), int(t.timestamp()) * US, x, y, track, i))
    return sorted(good), rejected


def rows(table: pa.Table) -> list[tuple]:
    d = table.to_pydict()
    ts = table.column("ts").cast(pa.int64()).to_pylist()
    return [(d["mmsi"][i], ts[i], d["lon"][i], d["lat"][i], d["track"][i], d["point"][i]) for i in range(table.num_rows)]


@pytest.fixture
def sample(tmp_path) -> Path:
    path = tmp_path / "sample.traj"
    path.write_text(sample_text())
    return path


# -- parsing and dead letters ----------------------------------------------------------------------


def test_sample_good_rows_match_a_row_by_row_reading_and_are_time_ordered(sample):
    good, dead = ais.parse_traj(sample)
    expected, rejected = reference(sample.read_text())
    assert good.schema == ais.TRACE_SCHEMA
    assert sorted(rows(good)) == expected
    assert dead.num_rows == rejected
    ts = good.column("ts").cast(pa.int64()).to_numpy()
    assert (np.diff(ts) >= 0).all()
    # the two reports of the same second keep the file's order
    second = int(datetime.strptime(GOOD[0][1], "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC).timestamp()) * US
    same = [(r[4], r[5]) for r in rows(good) if r[1] == second]
    assert same == [("t-good", 0), ("t-good", 2), ("t-mixed", 0)]
    crlf = ais.parse_traj_text(sample.read_text().replace("\n", "\r\n"))  # Windows line ends read alike
    assert crlf[0].equals(good) and crlf[1].drop_columns(["record"]).equals(dead.drop_columns(["record"]))


def test_every_bad_report_is_a_dead_letter_with_its_reason_and_raw_text(sample):
    _, dead = ais.parse_traj(sample)
    assert dead.schema == ais.DEAD_LETTER_SCHEMA
    letters = dead.to_pylist()
    points = [d for d in letters if d["row"] is not None]
    assert len(points) == len(BAD)
    for letter, (mmsi, ts, lon, lat, column, reason) in zip(points, BAD, strict=True):
        assert letter["column"] == column
        assert letter["reason"].startswith(reason), letter
        assert json.loads(letter["record"]) == {"mmsi": mmsi, "ts": ts, "lon": lon, "lat": lat}
    assert [(d["batch_id"], d["row"]) for d in points[:6]] == [(2, i) for i in range(1, 7)]
    assert [d["batch_id"] for d in points[6:]] == [4] * 6  # line 3 is blank
    lines = [d for d in letters if d["row"] is None]
    assert [d["batch_id"] for d in lines] == [7, 8, 9]
    assert "declares 3 points of 4 fields (12 fields) but the line has 8" in lines[0]["reason"]
    assert "starts with *T*" in lines[1]["reason"]
    assert "no *P*" in lines[2]["reason"]
    assert json.loads(lines[1]["record"]) == {"text": sample.read_text().splitlines()[7]}


def test_dead_letter_columns_are_the_projects():
    from sparkqos.io.deadletter import DEAD_LETTER_SCHEMA

    assert ais.DEAD_LETTER_SCHEMA == DEAD_LETTER_SCHEMA


FIELD_VALUES = {
    "mmsi": st.one_of(st.integers(1, 999_999_999).map(str), st.sampled_from(["", "0", "-3", "1e5", "x"])),
    "ts": st.one_of(
        st.datetimes(datetime(2020, 1, 1), datetime(2020, 12, 31)).map(lambda d: d.strftime("%Y-%m-%d %H:%M:%S")),
        st.sampled_from(["", "2020-13-01 00:00:00", "noon"]),
    ),
    "lon": st.one_of(st.floats(-200, 200).map(lambda v: f"{v:.5f}"), st.sampled_from(["", "inf", "1x"])),
    "lat": st.one_of(st.floats(-100, 100).map(lambda v: f"{v:.5f}"), st.sampled_from(["", "-", "1e400"])),
}


@settings(max_examples=15, deadline=None)
@given(st.lists(st.lists(st.fixed_dictionaries(FIELD_VALUES), max_size=12), max_size=6))
def test_reports_in_equal_good_plus_dead_and_good_match_the_row_by_row_reading(tracks):
    text = "\n".join(
        track_line(f"t{i}", [(p["mmsi"], p["ts"], p["lon"], p["lat"]) for p in points]) for i, points in enumerate(tracks)
    )
    good, dead = ais.parse_traj_text(text)
    expected, rejected = reference(text)
    assert sorted(rows(good)) == expected
    assert dead.num_rows == rejected
    assert good.num_rows + dead.num_rows == sum(len(t) for t in tracks)
    assert all(dead.column("reason").to_pylist())


# -- the cached trace and the CLI ------------------------------------------------------------------


def test_vessel_trace_builds_once_and_rebuilds_when_the_limit_changes(sample, tmp_path, monkeypatch):
    out = tmp_path / "cache"
    path, stats = ais.vessel_trace(file=str(sample), cache_dir=out)
    good, dead = ais.parse_traj(sample)
    assert pq.read_table(path).equals(good)
    assert pq.read_table(ais.dead_letter_path(path)).equals(dead)
    assert (stats.rows, stats.dead_letters) == (good.num_rows, dead.num_rows)
    assert sum(stats.dead_reasons.values()) == dead.num_rows
    calls = []
    monkeypatch.setattr(ais, "parse_traj", lambda p: calls.append(p) or (good, dead))
    again, stats_again = ais.vessel_trace(file=str(sample), cache_dir=out)
    assert (again, stats_again, calls) == (path, stats, [])
    limited, small = ais.vessel_trace(file=str(sample), cache_dir=out, limit=3)
    assert len(calls) == 1 and limited != path
    assert pq.read_table(limited).equals(good.slice(0, 3)) and small.rows == 3
    with pytest.raises(SourceError, match="limit"):
        ais.vessel_trace(file=str(sample), cache_dir=out, limit=0)
    with pytest.raises(SourceError, match="unknown file 'Atlantis'"):
        ais.vessel_trace(file="Atlantis", cache_dir=out)


def test_stats_are_per_second_counts_over_the_whole_span(sample):
    good, dead = ais.parse_traj(sample)
    stats = ais.trace_stats(good, dead)
    seconds = [t // US for t in good.column("ts").cast(pa.int64()).to_pylist()]
    counts = Counter(seconds)
    per_second = np.array([counts.get(s, 0) for s in range(min(seconds), max(seconds) + 1)])
    assert stats.span_s == len(per_second)
    assert stats.rows_per_s == pytest.approx(per_second.mean())
    assert stats.cv == pytest.approx(per_second.std() / per_second.mean())
    assert stats.vessels == len(set(good.column("mmsi").to_pylist()))


def test_cli_writes_the_trace_and_prints_its_statistics(sample, tmp_path, capsys):
    out = tmp_path / "v.parquet"
    assert cli.main(["trace", "vessels", "--file", str(sample), "--out", str(out), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    good, dead = ais.parse_traj(sample)
    assert pq.read_table(out).equals(good)
    assert (printed["rows"], printed["dead_letters"], printed["trace"]) == (good.num_rows, dead.num_rows, str(out))
    assert cli.main(["trace", "vessels", "--file", str(sample), "--out", str(out)]) == 0
    assert "CV of per-second counts" in capsys.readouterr().out


def test_missing_data_extra_is_a_clear_error(monkeypatch, capsys):
    monkeypatch.setattr(ais, "_PACKAGE", "tracktable_data_not_installed")
    with pytest.raises(SourceError, match=r"pip install -e '\.\[data\]'"):
        ais.traj_file("US_coastal_2020_06_30")
    assert cli.main(["trace", "vessels"]) == 2
    assert "pip install -e '.[data]'" in capsys.readouterr().err


# -- replay ----------------------------------------------------------------------------------------


def test_replay_releases_a_seconds_reports_together_and_speed_compresses_the_gaps(sample, tmp_path):
    from sparkqos.sources.datasources import ReplaySource

    path, _ = ais.vessel_trace(file=str(sample), cache_dir=tmp_path)
    table = pq.read_table(path)
    trace = ReplayTrace(path).trace_us()
    ts = table.column("ts").cast(pa.int64()).to_numpy()
    assert np.array_equal(trace, ts - ts.min())
    for t in np.unique(trace):  # a range that starts at a second holds all of its reports
        assert ReplayTrace(path).rows(int(t), int(t) + 1).num_rows == int((trace == t).sum())
    src = ReplaySource({"path": str(path), "speed": "50", "retime": "true", "start": "1000"})
    reader = src._reader()  # the time reader (Spark reads it on the driver, through a simple reader)
    span = int(trace.max()) + 1
    start, end = {"origin_us": 1_000 * US, "t_us": 0, "seed": 0}, {"origin_us": 1_000 * US, "t_us": span, "seed": 0}
    got = pa.concat_tables([pa.Table.from_batches(list(reader.read(p))) for p in reader.partitions(start, end)])
    released = got.column("ts").cast(pa.int64()).to_numpy() - 1_000 * US
    assert np.array_equal(released, trace // 50)  # the recorded gaps, 50 times shorter
    assert got.drop_columns(["ts"]).equals(table.drop_columns(["ts"]))


@pytest.fixture(scope="module")
def registered(spark):
    from sparkqos.sources import register

    register(spark)
    return spark


def test_replay_readstream_of_the_trace_equals_sparks_parquet_read(registered, sample, tmp_path):
    path, _ = ais.vessel_trace(file=str(sample), cache_dir=tmp_path)
    df = registered.readStream.format("sparkqos.replay").option("path", str(path)).option("speed", "max").load()
    q = df.writeStream.format("memory").queryName("ais_replay").trigger(availableNow=True).start()
    q.awaitTermination(120)
    got = sorted(registered.table("ais_replay").collect())
    assert got == sorted(registered.read.parquet(str(path)).collect())
    assert len(got) == pq.read_metadata(path).num_rows


# -- the real files (data extra) -------------------------------------------------------------------


@needs_data
@pytest.mark.parametrize("name", sorted(ais.AIS_FILES))
def test_real_file_parses_like_the_row_by_row_reading(name):
    path = ais.traj_file(name)
    text = path.read_text()
    good, dead = ais.parse_traj(path)
    expected, rejected = reference(text)
    assert sorted(rows(good)) == expected
    assert dead.num_rows == rejected
    declared = sum(int(line.split(",")[3]) for line in text.splitlines())
    assert good.num_rows + dead.num_rows == declared
    assert (np.diff(good.column("ts").cast(pa.int64()).to_numpy()) >= 0).all()
