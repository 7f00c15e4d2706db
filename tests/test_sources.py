"""Streaming sources: rates and burstiness on the generators, replayability, and real readStream runs."""

from __future__ import annotations

import os
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.errors import PySparkNotImplementedError
from pyspark.sql.datasource import DataSourceStreamReader
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

from sparkqos.errors import SourceError
from sparkqos.sources.datasources import BurstySource, PoissonSource, ReplaySource, register
from sparkqos.sources.generators import US, BurstyGenerator, PoissonGenerator, ReplayTrace, payload_table, per_second_counts

ORIGIN = "2026-01-01T00:00:00Z"
ORIGIN_US = 1_767_225_600 * US


def cv(counts: np.ndarray) -> float:
    return float(counts.std() / counts.mean())


# -- generators: rates and burstiness --------------------------------------------------------------


def test_bursty_expected_rate_is_the_configured_rate_jiang_5_1():
    """Jiang §5.1 flows (Pareto ON a=1.4 / OFF a=1.2), default sparse OFF scale: the rate averaged over
    400 seeded 300 s runs is within 10% of the configured 100 rows/s. Flows start stationary, so the
    expectation is exact; single runs vary a lot (self-similar traffic, see the next tests)."""
    totals = [len(BurstyGenerator(rate=100.0, seed=s).arrivals(0, 300 * US)[1]) for s in range(400)]
    assert np.mean(totals) / 300 == pytest.approx(100.0, rel=0.10)


def test_bursty_single_scale_run_rate_within_10_percent_jiang_5_1():
    """With Jiang's single Pareto minimum for ON and OFF (offScale = onScale = 1 s) and 64 flows,
    each 1000 s run averages the configured rate within 10%."""
    for seed in range(3):
        _, ts = BurstyGenerator(rate=100.0, flows=64, on_scale=1.0, off_scale=1.0, seed=seed).arrivals(0, 1000 * US)
        assert len(ts) / 1000 == pytest.approx(100.0, rel=0.10), seed


def test_bursty_per_second_counts_have_cv_above_one():
    """Default bursty source: coefficient of variation of per-second counts > 1 (median of 10 one-hour
    runs); a Poisson stream of the same rate stays well below 1."""
    cvs = []
    for seed in range(10):
        _, ts = BurstyGenerator(rate=100.0, seed=seed).arrivals(0, 3600 * US)
        cvs.append(cv(per_second_counts(ts, 0, 3600 * US)))
    assert np.median(cvs) > 1.0
    _, ts = PoissonGenerator(rate=100.0, seed=0).arrivals(0, 3600 * US)
    assert cv(per_second_counts(ts, 0, 3600 * US)) < 0.6


def test_poisson_rate_within_10_percent_and_mean_shifts_thesis_6_1():
    """Thesis §6.1: the mean is redrawn every 5 s (spread 30%) with occasional 2x bursts; over 2000 s
    the rate is the configured long-run mean within 10%."""
    for seed in range(3):
        g = PoissonGenerator(rate=100.0, seed=seed)
        _, ts = g.arrivals(0, 2000 * US)
        assert len(ts) / 2000 == pytest.approx(100.0, rel=0.10), seed
        rates = np.array([g.second_rate(k) for k in range(0, 2000, 5)])
        assert len(np.unique(np.round(rates, 9))) == len(rates)  # a new mean every period
        assert all(g.second_rate(k) == g.second_rate(k - k % 5) for k in range(0, 50))  # constant inside one
        bursts = rates > g.base_rate * 1.3  # above the no-burst maximum
        assert 0.15 < bursts.mean() < 0.35  # burst probability 0.25


# -- replayability: rows are a pure function of (options, seed, range) -----------------------------


@pytest.mark.parametrize(
    "make",
    [lambda: BurstyGenerator(rate=200.0, flows=16, off_scale=2.0, seed=5), lambda: PoissonGenerator(rate=200.0, seed=5)],
    ids=["bursty", "poisson"],
)
def test_rows_do_not_depend_on_how_the_stream_is_cut(make):
    whole_flow, whole_ts = make().arrivals(0, 40 * US)
    assert len(whole_ts) > 1000
    cuts = [0, 1, 2_500_000, 2_500_001, 9 * US, 17_333_333, 30 * US, 40 * US]
    g = make()
    parts = [g.arrivals(a, b) for a, b in zip(cuts, cuts[1:])]
    assert np.array_equal(np.concatenate([p[1] for p in parts]), whole_ts)
    assert np.array_equal(np.concatenate([p[0] for p in parts]), whole_flow)
    # a restarted generator asked only for a late range (driver restarted from a checkpoint)
    f, ts = make().arrivals(30 * US, 40 * US)
    assert np.array_equal(ts, whole_ts[whole_ts >= 30 * US])
    # payloads are hashes of (seed, flow, arrival), so they replay too
    late = payload_table("sensor", 5, f, ts)
    full = payload_table("sensor", 5, whole_flow, whole_ts)
    assert late.equals(full.slice(len(whole_ts) - len(ts)))


def test_bursty_cache_pruning_and_going_back_give_the_same_rows():
    g = BurstyGenerator(rate=100.0, flows=8, off_scale=1.0, seed=2)
    first = g.arrivals(0, 50 * US)[1]
    g.prune(45.0)
    assert np.array_equal(g.arrivals(40 * US, 50 * US)[1], first[first >= 40 * US])


def test_different_seeds_differ_and_payload_values_are_plausible():
    a = BurstyGenerator(rate=100.0, seed=1).arrivals(0, 600 * US)
    b = BurstyGenerator(rate=100.0, seed=2).arrivals(0, 600 * US)
    assert not np.array_equal(a[1][:100], b[1][:100])
    g = PoissonGenerator(rate=500.0, sensors=64, seed=0)
    flow, ts = g.arrivals(0, 200 * US)
    sensor = payload_table("sensor", 0, flow, ts).to_pydict()
    temps = np.array(sensor["temperature"])
    fire = temps > 60
    assert 0.0005 < fire.mean() < 0.005  # rare fire readings for the fire-detection query
    assert ((temps[~fire] > 14) & (temps[~fire] < 31)).all()
    assert set(sensor["location"]) == {f"zone-{z}" for z in range(8)}
    assert set(sensor["sensor_id"]) == set(range(64))
    packet = payload_table("packet", 0, flow, ts).to_pydict()
    assert set(packet["protocol"]) == {"tcp", "udp", "icmp"}
    assert 40 <= min(packet["size"]) and max(packet["size"]) <= 1500
    assert all(s.startswith("10.0.") for s in packet["src"][:50])


# -- reader-level restart, without Spark -----------------------------------------------------------


def _reader(source_cls, **options):
    """The source's time reader (what its driver-side simple reader wraps with one partition)."""
    return source_cls({k: str(v) for k, v in options.items()})._reader()


def test_one_partition_reads_on_the_driver_and_more_with_tasks():
    """numPartitions 1 (the default): Spark's simple-reader path, the rows read when the offset is
    planned (streamReader declines, simpleStreamReader answers); the rows of a range are those the
    time reader gives, read again alike for a batch replayed after a restart; availableNow still
    reaches the time reader. More partitions: the time reader itself, read by tasks."""
    opts = {"rate": "500", "seed": "4", "start": str(ORIGIN), "duration": "10"}
    src = PoissonSource(opts)
    with pytest.raises(PySparkNotImplementedError):
        src.streamReader(src.schema())
    simple = src.simpleStreamReader(src.schema())
    assert isinstance(simple, SupportsTriggerAvailableNow)
    start = simple.initialOffset()
    rows, end = simple.read(start)
    held = pa.Table.from_batches(list(rows))
    assert held.num_rows > 1000 and end["t_us"] > start["t_us"]
    assert pa.Table.from_batches(list(simple.readBetweenOffsets(start, end))).equals(held)
    assert held.equals(_read(_reader(PoissonSource, **opts), start, end))
    simple.prepareForTriggerAvailableNow()
    assert simple.reader._target_wall_us is not None
    parted = PoissonSource({**opts, "numPartitions": "2"})
    assert isinstance(parted.streamReader(parted.schema()), DataSourceStreamReader)


def _read(reader, start, end):
    tables = [pa.Table.from_batches(list(reader.read(p))) for p in reader.partitions(start, end)]
    tables = [t for t in tables if t.num_rows]
    return pa.concat_tables(tables) if tables else None


@pytest.mark.parametrize("source_cls", [BurstySource, PoissonSource])
def test_reader_restart_from_a_checkpointed_offset_reads_the_same_rows(source_cls):
    opts = dict(rate=300, start=ORIGIN, duration=30, maxSecondsPerTrigger=7, numPartitions=3, offScale=2)
    if source_cls is PoissonSource:
        opts.pop("offScale")
    reader = _reader(source_cls, **opts)
    offsets = [reader.initialOffset()]
    assert offsets[0] == {"origin_us": ORIGIN_US, "t_us": 0, "seed": offsets[0]["seed"]}  # random seed kept
    while True:
        nxt = reader.latestOffset(offsets[-1], None)
        if nxt == offsets[-1]:
            break
        offsets.append(nxt)
    assert [o["t_us"] for o in offsets] == [0, 7 * US, 14 * US, 21 * US, 28 * US, 30 * US]
    batches = [_read(reader, a, b) for a, b in zip(offsets, offsets[1:])]
    restarted = _reader(source_cls, **opts)  # a new driver: only the checkpointed offsets survive
    assert _read(restarted, offsets[3], offsets[4]).equals(batches[3])
    assert _read(restarted, offsets[1], offsets[2]).equals(batches[1])
    ts = pa.concat_tables(batches).column("ts").cast(pa.int64()).to_numpy()
    assert (np.diff(ts) >= 0).all() and ts[0] >= ORIGIN_US and ts[-1] < ORIGIN_US + 30 * US


def test_available_now_target_stops_the_stream_at_the_wall_clock():
    reader = _reader(PoissonSource, rate=10, seed=1)  # origin = now, endless
    start = reader.initialOffset()
    reader.prepareForTriggerAvailableNow()
    end = reader.latestOffset(start, None)
    assert reader.latestOffset(end, None) == end  # nothing beyond the target
    assert end["t_us"] < 60 * US


@pytest.mark.parametrize("source_cls", [BurstySource, PoissonSource])
def test_without_start_the_stream_starts_after_a_warm_up_batch(source_cls):
    """Batch 0 is one read task with no rows (Spark starts up on it), batch 1 re-anchors
    the origin at the wall clock of its planning (no rows), then stream time runs from there."""
    reader = _reader(source_cls, rate=1000, seed=3)
    first = reader.initialOffset()
    assert first["phase"] == "warmup" and first["t_us"] == 0
    ready = reader.latestOffset(first, None)
    assert ready == {**first, "phase": "ready"}
    parts = reader.partitions(first, ready)
    assert len(parts) == 1 and sum(b.num_rows for b in reader.read(parts[0])) == 0
    before = time.time_ns() // 1000
    started = reader.latestOffset(ready, None)
    assert started["phase"] == "started" and started["t_us"] == 0 and started["origin_us"] >= before
    assert reader.partitions(ready, started) == []
    time.sleep(0.05)
    nxt = reader.latestOffset(started, None)
    assert nxt["phase"] == "started" and 0 < nxt["t_us"] <= time.time_ns() // 1000 - started["origin_us"]
    assert nxt["origin_us"] == started["origin_us"] and nxt["seed"] == first["seed"]
    restarted = _reader(source_cls, rate=1000, seed=3)  # a restart from a checkpoint taken at "ready"
    assert restarted.latestOffset(ready, None)["phase"] == "started"


def test_no_warm_up_with_a_start_time_warmup_false_available_now_or_max_speed(trace_files):
    assert "phase" not in _reader(PoissonSource, rate=10, start=ORIGIN).initialOffset()
    assert "phase" not in _reader(PoissonSource, rate=10, warmup="false").initialOffset()
    reader = _reader(PoissonSource, rate=10)
    start = reader.initialOffset()
    reader.prepareForTriggerAvailableNow()
    assert reader.latestOffset(start, None)["phase"] == "warmup"  # availableNow reads up to its target
    replay = _reader(ReplaySource, path=trace_files[1], speed="max")
    offset = replay.latestOffset(replay.initialOffset(), None)
    assert offset["t_us"] > 0 and offset["phase"] == "warmup"
    with pytest.raises(SourceError, match="option warmup must be true or false"):
        _reader(BurstySource, warmup="maybe").initialOffset()


def test_bad_options_are_named():
    with pytest.raises(SourceError, match=r"unknown option\(s\) \['flow'\]"):
        _reader(BurstySource, flow=3)
    with pytest.raises(SourceError, match="option rate must be a finite number > 0, got -5.0"):
        _reader(PoissonSource, rate=-5)
    with pytest.raises(SourceError, match="option payload must be one of 'sensor', 'packet', got 'video'"):
        BurstySource({"payload": "video"}).schema()
    with pytest.raises(SourceError, match="option start must be epoch seconds or an ISO-8601 time, got 'soon'"):
        _reader(BurstySource, start="soon")
    with pytest.raises(SourceError, match="option flows must be an integer, got '2.5'"):
        _reader(BurstySource, flows="2.5")
    with pytest.raises(SourceError, match="poisson: spread must be a finite number >= 0 and < 1, got 1.5"):
        _reader(PoissonSource, spread=1.5)
    with pytest.raises(SourceError, match="option path .* is required"):
        ReplaySource({}).schema()


# -- replay ----------------------------------------------------------------------------------------


def trace_table(n: int = 300) -> pa.Table:
    rng = np.random.default_rng(11)
    ts = 1_600_000_000 * US + np.cumsum(rng.integers(0, 40_000, n))  # ~50 rows/s, some equal stamps
    return pa.table(
        {
            "sensor_id": pa.array(rng.integers(0, 10, n), pa.int64()),
            "location": [f"zone-{i % 3}" for i in range(n)],
            "temperature": np.round(rng.normal(21, 3, n), 3),
            "ts": pa.array(ts, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        }
    )


@pytest.fixture
def trace_files(tmp_path):
    table = trace_table()
    parquet = tmp_path / "trace.parquet"
    pq.write_table(table, parquet)
    csv_path = tmp_path / "trace.csv"
    naive = table.set_column(3, "ts", table.column("ts").cast(pa.timestamp("us")))
    from pyarrow import csv

    csv.write_csv(naive, csv_path)
    return table, parquet, csv_path


def test_replay_trace_ranges_partition_the_file(trace_files):
    table, parquet, csv_path = trace_files
    for path in (parquet, csv_path):
        trace = ReplayTrace(path)
        assert trace.table().equals(table), path
        span = int(trace.trace_us(trace.table()).max()) + 1
        cuts = [0, 1, span // 3, span // 2, span]
        parts = [trace.rows(a, b) for a, b in zip(cuts, cuts[1:])]
        assert pa.concat_tables(parts).equals(table)


def test_replay_errors_name_the_problem(tmp_path, trace_files):
    table, parquet, _ = trace_files
    with pytest.raises(SourceError, match="does not exist"):
        ReplayTrace(tmp_path / "missing.parquet")
    with pytest.raises(SourceError, match="no timestamp column 'time'"):
        ReplayTrace(parquet, timestamp_column="time").table()
    with pytest.raises(SourceError, match="cannot tell the format"):
        (tmp_path / "trace.txt").write_text("x")
        ReplayTrace(tmp_path / "trace.txt")
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"ts": ["yesterday"]}), bad)
    with pytest.raises(SourceError, match="must hold timestamps, got string"):
        ReplayTrace(bad).table()


def test_replay_pace_follows_the_trace_and_speed(trace_files):
    table, parquet, _ = trace_files
    span = int(ReplayTrace(parquet).trace_us(table).max()) + 1
    for speed, expected in (("1", 10 * US), ("4", 40 * US)):
        reader = _reader(ReplaySource, path=parquet, speed=speed, start=1_000)
        start = {"origin_us": 1_000 * US, "t_us": 0, "seed": 0}
        reader._target_wall_us = 1_010 * US  # 10 s of wall clock after the origin
        assert reader.latestOffset(start, None)["t_us"] == min(expected, span)
    reader = _reader(ReplaySource, path=parquet, speed="max")
    assert reader.latestOffset(reader.initialOffset(), None)["t_us"] == span


# -- real readStream runs --------------------------------------------------------------------------


def _run_available_now(spark, fmt, options, name, checkpoint=None):
    df = spark.readStream.format(fmt).options(**{k: str(v) for k, v in options.items()}).load()
    writer = df.writeStream.format("memory").queryName(name).trigger(availableNow=True)
    q = writer.start()
    q.awaitTermination(120)
    assert not q.isActive
    return spark.table(name).toArrow(), [p["numInputRows"] for p in q.recentProgress]


@pytest.fixture(scope="module")
def registered(spark):
    register(spark)
    return spark


def test_bursty_readstream_matches_the_generator(registered):
    opts = dict(rate=80, seed=4, start=ORIGIN, duration=24, maxSecondsPerTrigger=10, offScale=2, flows=16)
    rows, per_batch = _run_available_now(registered, "sparkqos.bursty", opts, "bursty_rows")
    assert len(per_batch) == 3 and sum(per_batch) == rows.num_rows  # batches of 10 s, 10 s, 4 s
    assert rows.schema.field("ts").type == pa.timestamp("us", tz="UTC")
    flow, ts = BurstyGenerator(rate=80.0, flows=16, off_scale=2.0, seed=4).arrivals(0, 24 * US)
    expected = payload_table("sensor", 4, flow, ts + ORIGIN_US)
    got = rows.sort_by([("ts", "ascending"), ("sensor_id", "ascending")])
    assert got.column_names == expected.column_names
    for column in expected.column_names:
        assert got.column(column).to_pylist() == expected.column(column).to_pylist(), column


def test_poisson_readstream_packet_payload(registered):
    opts = dict(rate=60, seed=9, start=ORIGIN, duration=12, payload="packet", numPartitions=2)
    rows, per_batch = _run_available_now(registered, "sparkqos.poisson", opts, "poisson_rows")
    sensor, ts = PoissonGenerator(rate=60.0, seed=9).arrivals(0, 12 * US)
    assert rows.num_rows == len(ts) == sum(per_batch)
    assert rows.column_names == ["src", "dst", "size", "protocol", "ts"]
    got = np.sort(rows.column("ts").cast(pa.int64()).to_numpy())
    assert np.array_equal(got, ts + ORIGIN_US)


def test_replay_readstream_reproduces_the_file_rows(registered, trace_files):
    table, parquet, csv_path = trace_files
    for i, path in enumerate((parquet, csv_path)):
        opts = dict(path=path, speed="max", maxSecondsPerTrigger=2)
        rows, per_batch = _run_available_now(registered, "sparkqos.replay", opts, f"replay_rows_{i}")
        assert len(per_batch) >= 3  # the ~6 s trace is cut into 2 s batches
        assert rows.equals(table), path  # same rows, same values, same order


def test_replayed_batch_after_a_crash_has_the_same_rows(registered, tmp_path):
    """Spark re-runs the last uncommitted batch from the offsets in its checkpoint: delete that
    batch's commit marker (a crash before commit) and restart — the source yields the same rows."""
    seen: dict[int, list[pa.Table]] = {}

    def collect(df, batch_id):
        seen.setdefault(batch_id, []).append(df.toArrow().sort_by([("ts", "ascending"), ("sensor_id", "ascending")]))

    opts = dict(rate=100, start=ORIGIN, duration=15, maxSecondsPerTrigger=5, offScale=2, flows=16)  # no seed
    checkpoint = str(tmp_path / "ckpt")

    def run():
        df = registered.readStream.format("sparkqos.bursty").options(**{k: str(v) for k, v in opts.items()}).load()
        q = df.writeStream.foreachBatch(collect).option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
        q.awaitTermination(120)

    run()
    assert sorted(seen) == [0, 1, 2]
    for marker in ("2", ".2.crc"):  # the commit file and Hadoop's checksum beside it
        if os.path.exists(os.path.join(checkpoint, "commits", marker)):
            os.remove(os.path.join(checkpoint, "commits", marker))
    run()
    assert len(seen[2]) == 2 and seen[2][0].num_rows > 0
    assert seen[2][1].equals(seen[2][0])


def test_replay_retime_stamps_the_release_time(trace_files):
    table, parquet, _ = trace_files
    reader = _reader(ReplaySource, path=parquet, speed=2, retime="true", start=1_000)
    span = int(ReplayTrace(parquet).trace_us(table).max()) + 1
    rows = _read(reader, {"origin_us": 1_000 * US, "t_us": 0, "seed": 0}, {"origin_us": 1_000 * US, "t_us": span, "seed": 0})
    trace = ReplayTrace(parquet).trace_us(table)
    assert rows.column("ts").cast(pa.int64()).to_pylist() == list(1_000 * US + trace // 2)
    assert rows.drop_columns(["ts"]).equals(table.drop_columns(["ts"]))
