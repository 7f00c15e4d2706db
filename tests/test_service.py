"""Latency targets (``slo=``), load shedding (``shed=``) and where a row's delay goes.

* Targets and ages parse from seconds or strings with a unit; anything else, or a name that is
  neither a query nor a class of the plan, is a ConfigError naming the key.
* Earliest deadline first in the simulator, against schedules computed by hand.
* Shedding: only the queries given an age lose rows, every shed row is a dead letter with reason
  ``shed``, and across a crash between the sink write and the checkpoint the replayed batch sheds
  the same rows — 0 lost beyond the shed, 0 duplicated.
* The parts of a row's delay add up to its delay.
* A target out of reach is said once, with the capacity measured.
"""

from __future__ import annotations

import math
import time
import warnings
from collections import Counter

import pyarrow as pa
import pytest

from sparkqos import Operator, Plan
from sparkqos.errors import ConfigError
from sparkqos.io.deadletter import json_records, read_dead_letters
from sparkqos.io.sinks import read_parquet_sink
from sparkqos.runtime.config import RunConfig
from sparkqos.runtime.decompose import PARTS, column
from sparkqos.runtime.service import Service, SloWarning
from sparkqos.runtime.targets import parse_durations
from sparkqos.runtime.trigger import TriggerLoop
from sparkqos.schedulers.deadline import EarliestDeadline
from sparkqos.sim import Simulator
from sparkqos.testing import sensor_table
from sparkqos.workloads.sensors import sensor_queries

T0 = 1_700_000_000.0


@pytest.mark.parametrize(
    ("given", "seconds"),
    [("500 ms", 0.5), ("500ms", 0.5), ("0.5s", 0.5), ("2 s", 2.0), (" 1min ", 60.0), (3, 3.0), (0.25, 0.25), ("1e-1s", 0.1)],
)
def test_durations_parse_from_seconds_or_a_unit(given, seconds):
    assert parse_durations("slo", {"fire": given}) == {"fire": seconds}


@pytest.mark.parametrize("bad", ["soon", "5 parsecs", "-1s", "0", 0, -2.0, float("nan"), True, None, "", [1]])
def test_a_bad_duration_is_a_config_error_naming_the_key(bad):
    with pytest.raises(ConfigError, match=r"slo\['fire'\]"):
        RunConfig(checkpoint="/tmp/unused", slo={"fire": bad})


def test_targets_must_name_queries_or_classes_of_the_plan(tmp_path):
    with pytest.raises(ConfigError, match=r"shed: 'nope' is neither a query nor a class"):
        TriggerLoop(sensor_queries(), RunConfig(checkpoint=tmp_path / "c", output=tmp_path / "o", shed={"nope": "1s"}))
    with pytest.raises(ConfigError, match="slo must map"):
        RunConfig(checkpoint=tmp_path / "c", slo=["fire", "1s"])
    with pytest.raises(ConfigError, match="dead-letter table"):
        TriggerLoop(sensor_queries(), RunConfig(checkpoint=tmp_path / "c", shed={"N": "1s"}))


def _edf_run(targets: dict[str, float], risk: float) -> tuple[str, list[float]]:
    """Query n has 6 rows and query h 3, all arriving at 0, every run one row of cost 1, fifo
    inside (ties: n first). Returns the order served and h's delays."""
    plan = Plan([Operator("n", ("A",), 1.0, 1.0, query="n"), Operator("h", ("B",), 1.0, 1.0, query="h")], streams=["A", "B"])
    scheduler = EarliestDeadline("fifo", targets=targets, risk=risk)
    sim = Simulator(plan, scheduler, {"A": [(0, 6.0)], "B": [(0, 3.0)]}, record_dispatches=True)
    result = sim.run(until=9.5)
    order = "".join(d.unit.head for d in sim.dispatches)
    ends = [d.time + 1.0 for d in sim.dispatches if d.unit.head == "h"]  # each run takes its row's cost, 1
    del result
    return order, ends


def test_earliest_deadline_first_against_hand_computed_schedules():
    # Without a target fifo serves n's six rows first (ties go to the plan's first operator):
    # h's rows end at 7, 8, 9.
    assert _edf_run({}, 0.5) == ("nnnnnnhhh", [7.0, 8.0, 9.0])
    # Target 4, at risk after 2: h is served from t = 2 on, its rows end at 3, 4, 5 — the last
    # one late (5 > 4): the target was at risk too late.
    assert _edf_run({"h": 4.0}, 0.5) == ("nnhhhnnnn", [3.0, 4.0, 5.0])
    # At risk after a quarter (t = 1): rows end at 2, 3, 4, all within the target.
    assert _edf_run({"h": 4.0}, 0.25) == ("nhhhnnnnn", [2.0, 3.0, 4.0])
    # Both always at risk (risk 0): the earliest deadline first. All rows arrived at 0, so each
    # query's deadline is its target: n's 3 before h's 4 (all of n), or h's 4 before n's 5.
    assert _edf_run({"h": 4.0, "n": 3.0}, 0.0)[0] == "nnnnnnhhh"
    assert _edf_run({"h": 4.0, "n": 5.0}, 0.0)[0] == "hhhnnnnnn"


def test_earliest_deadline_keeps_the_inner_strategys_state_and_checks_its_targets():
    plan = Plan([Operator("a", ("s",), 1.0, 1.0, query="q")], streams=["s"])
    edf = EarliestDeadline("rr", targets={"q": 1.0})
    assert edf.in_force() == ("rr", {})  # progress names the strategy inside
    assert edf.state_dict() == {"inner": edf.inner and edf.strategy.state_dict()}
    edf.load_state_dict(edf.state_dict())
    with pytest.raises(Exception, match="targets name queries"):
        Simulator(plan, EarliestDeadline("fifo", targets={"other": 1.0}), {"s": [(0, 1.0)]}).run(until=2)


def _shed_loop(root, **kw) -> TriggerLoop:
    config = RunConfig(
        checkpoint=root / "ckpt",
        output=root / "out",
        strategy="fifo",
        continuous=False,
        budget_s=0.002,  # far less than the work: the lower classes fall behind
        whole_batches=False,
        shed={"archive": "3s"},
        **kw,
    )
    return TriggerLoop(sensor_queries(work_us=200.0, window_s=5.0), config)


BATCHES = [sensor_table(400, b, start=T0 + b) for b in range(12)]  # one second of stream each


def test_shedding_drops_only_what_fell_behind_and_replays_the_same_rows(tmp_path):
    """archive (class N) may shed rows 3 s behind the stream; a crash after batch 7's sink write
    (before its checkpoint) and a restart replay batch 7 from the checkpoint of batch 6: the
    replay sheds exactly the rows the first attempt did, and in the end every input row is in
    archive's output or in the dead letters, once."""
    loop = _shed_loop(tmp_path)
    save = loop.store.save

    def crash_at_7(batch_id, *a, **k):
        if batch_id == 7:
            raise KeyboardInterrupt("crash between the sink write and the checkpoint")
        return save(batch_id, *a, **k)

    loop.store.save = crash_at_7
    progress = []
    with pytest.raises(KeyboardInterrupt):
        for b, t in enumerate(BATCHES):
            progress.append(loop.process(t, b))
    first_attempt = read_dead_letters(tmp_path / "out" / "deadletter").filter(pa.compute.equal(pa.compute.field("batch_id"), 7))
    again = _shed_loop(tmp_path)
    assert again.restore() == 6
    for b in range(7, len(BATCHES)):
        progress.append(again.process(BATCHES[b], b))
    replayed = read_dead_letters(tmp_path / "out" / "deadletter").filter(pa.compute.equal(pa.compute.field("batch_id"), 7))
    assert replayed.to_pylist() == first_attempt.to_pylist() and first_attempt.num_rows > 0
    again.finish()
    dead = read_dead_letters(tmp_path / "out" / "deadletter")
    assert set(dead.column("reason").to_pylist()) == {"shed"} and set(dead.column("column").to_pylist()) == {"archive"}
    shed = Counter(dead.column("row").to_pylist())
    assert max(shed.values()) == 1  # no row shed twice
    out = read_parquet_sink(tmp_path / "out" / "outputs")
    # every other query lost nothing: fire, anomaly and zone_stats as without shedding
    assert sum(p["shedRows"] for p in progress) == dead.num_rows
    assert all(q["shedRows"] == 0 for p in progress for q in p["queries"] if q["query"] != "archive")
    # archive: each input row written once or shed once, never both, none lost
    every = pa.concat_tables(BATCHES)
    key = list(zip(every.column("sensor_id").to_pylist(), every.column("ts").to_pylist(), strict=True))
    written = Counter(zip(out["archive"].column("sensor_id").to_pylist(), out["archive"].column("ts").to_pylist(), strict=True))
    assert max(written.values()) == 1
    assert len(written) + dead.num_rows == len(key) == len(set(key))


def _shedding_config(tmp_path, shed):
    """A trigger loop's configuration that sheds by ``shed``: fifo, no continuous worker, a budget
    of 2 ms per trigger (so class N falls behind), batches served in parts."""
    return RunConfig(
        checkpoint=tmp_path / "c",
        output=tmp_path / "o",
        strategy="fifo",
        continuous=False,
        budget_s=0.002,
        whole_batches=False,
        shed=shed,
    )


def test_queries_shedding_the_same_rows_get_the_same_dead_letters(tmp_path):
    """Class N's two queries (zone_stats and archive) shed at one age: each shed row is a dead
    letter of each query that dropped it, counted per query, its record the JSON text of its input
    row (built once when both dropped the same rows) — as if each query's were built alone."""
    config = _shedding_config(tmp_path, {"N": "3s"})
    loop = TriggerLoop(sensor_queries(work_us=200.0, window_s=5.0), config)
    progress = [loop.process(t, b) for b, t in enumerate(BATCHES[:8])]
    dead = read_dead_letters(tmp_path / "o" / "deadletter")
    every = pa.concat_tables(BATCHES[:8])
    text = json_records(every).to_pylist()  # a row's seq is its place in the stream
    by_query = {q: dead.filter(pa.compute.equal(dead.column("column"), q)) for q in ("zone_stats", "archive")}
    assert all(t.num_rows for t in by_query.values())
    for q, t in by_query.items():
        assert sum(r["shedRows"] for p in progress for r in p["queries"] if r["query"] == q) == t.num_rows
        assert set(t.column("reason").to_pylist()) == {"shed"}
        assert t.column("record").to_pylist() == [text[i] for i in t.column("row").to_pylist()]
    assert set(dead.column("column").to_pylist()) == {"zone_stats", "archive"}


@pytest.mark.parametrize("shed, after_top", [({"N": "3s"}, True), ({"N": "3s", "fire": "3s"}, False)])
def test_the_top_class_is_served_before_the_lower_classes_shed(tmp_path, shed, after_top):
    """With no top-class query shedding, a trigger serves the top class's round before it sheds
    (the shed rows' dead letters are built then), so class H's rows never wait for them; with the
    top class shedding too, the shedding comes first, as it must for its own rows."""
    config = _shedding_config(tmp_path, shed)
    loop = TriggerLoop(sensor_queries(work_us=200.0, window_s=5.0), config)
    assert loop.shed_after_top is after_top
    events: list[str] = []
    serve, shed_rows, top = loop.executor.serve, loop.service.shed, set(loop.levels[0])
    loop.executor.serve = lambda ops, *a, **k: events.append("top" if set(ops) == top else "lower") or serve(ops, *a, **k)
    loop.service.shed = lambda *a, **k: events.append("shed") or shed_rows(*a, **k)
    shed_total = 0
    for b, t in enumerate(BATCHES[:6]):
        events.clear()
        shed_total += loop.process(t, b)["shedRows"]
        assert events.count("shed") == 1 and events.count("top") == 1
        assert (events.index("shed") == events.index("top") + 1) if after_top else events[0] == "shed"
    assert shed_total > 0


def test_no_shedding_without_a_policy(tmp_path):
    loop = TriggerLoop(
        sensor_queries(work_us=200.0, window_s=5.0),
        RunConfig(checkpoint=tmp_path / "c", output=tmp_path / "o", strategy="fifo", continuous=False, budget_s=0.002),
    )
    progress = [loop.process(t, b) for b, t in enumerate(BATCHES[:6])]
    assert all(p["shedRows"] == 0 for p in progress) and read_dead_letters(tmp_path / "o" / "deadletter").num_rows == 0
    assert progress[-1]["queuedRows"] > 0  # it did fall behind


def test_the_parts_of_a_delay_add_up_to_it_and_targets_are_reported(tmp_path):
    loop = TriggerLoop(
        sensor_queries(work_us=0.0, window_s=5.0),
        RunConfig(checkpoint=tmp_path / "c", output=tmp_path / "o", strategy="fifo", slo={"fire": "1h", "C": "1ms"}),
    )
    now = time.time()
    for b in range(3):  # rows spread over the 4 s ending 2 s before the batch
        p = loop.process(sensor_table(300, b, start=now - 6.0 + 0.1 * b), b)
    loop.close()
    fire = next(q for q in p["queries"] if q["query"] == "fire")
    anomaly = next(q for q in p["queries"] if q["query"] == "anomaly")
    parts = [fire[column(part)] for part in PARTS]
    assert all(x >= 0 for x in parts)
    assert math.isclose(sum(parts), fire["delayMean_s"], abs_tol=0.05)
    assert fire["delayPartWait_s"] > 2.0  # the rows' event times were 2-6 s old when the trigger began
    assert fire["sloTargetS"] == 3600.0 and fire["sloMet"] == 1.0 and fire["sloViolations"] == 0
    assert anomaly["sloTargetS"] == 0.001 and anomaly["sloMet"] == 0.0 and anomaly["sloViolations"] == anomaly["rowsOut"]
    assert p["sloMet"] == 0.0
    # the report draws where each class's delay went, one stacked bar per class
    from sparkqos.report import render

    page = render(tmp_path / "o", classes=["H", "C", "N"])
    assert (page.parent / "delay_parts.png").stat().st_size > 0 and "delay_parts.png" in page.read_text()


def test_a_job_running_some_queries_keeps_only_the_targets_of_their_classes(capsys):
    """The main job's default targets name classes H and C; run with ``queries.run = ["fire"]``
    (class H alone) the job leaves C's target out and says so, where ``stream`` would refuse a
    class the plan does not have. A name that is no class of the job still reaches ``stream``."""
    from jobs._jobkit import for_running_classes

    kept = for_running_classes(
        "sensor_monitor", "slo", {"H": "500ms", "C": "1s", "X": "1s"}, {"H": 3, "C": 2, "N": 1}, {"fire": "H"}
    )
    assert kept == {"H": "500ms", "X": "1s"}
    assert "scheduler.slo for class C left out" in capsys.readouterr().out


class _Stats:
    """What :meth:`Service.check_capacity` reads of an executor's statistics."""

    def __init__(self):
        self.consumed = dict.fromkeys(("a", "b"), 0.0)

    def operator(self, op):
        return type("OpStats", (), {"consumed": self.consumed[op]})()


class _State:
    def __init__(self, cost_s: float):
        self.stats = _Stats()
        self._cost = cost_s

    def cost(self, op):
        return self._cost

    def selectivity(self, op):
        return 1.0


def _service(target_s: float = 1.0):
    from types import SimpleNamespace

    plan = Plan([Operator("a", ("S",), 1.0, 1.0, query="q"), Operator("b", ("S",), 1.0, 1.0, query="r")], streams=["S"])
    return Service(SimpleNamespace(plan=plan), SimpleNamespace(slo={"q": target_s}, shed={}), keeps_dead=False)


def _record(t: float, rate: float, behind: float, busy: float) -> dict:
    return {
        "timestamp": t,
        "inputRowsPerSecond": rate,
        "numInputRows": int(rate * 0.5),
        "executorBusyS": 0.5,
        "queries": [
            {"query": "q", "behindS": behind, "executorBusyS": busy},
            {"query": "r", "behindS": 0.1, "executorBusyS": 0.0},
        ],
    }


def test_a_target_out_of_reach_is_said_once_with_the_capacity_measured():
    """A query falling further behind its target although targets serve it first: the warning
    says so once, with the rows per second it could take in (measured) and its share of the
    executor; its own work estimated at more than the executor's time says so too."""
    service, state = _service(), _State(cost_s=1e-5)  # 10 us a row: 1,000 rows/s need 0.01 s/s
    with pytest.warns(SloWarning) as said:
        for i in range(30):
            state.stats.consumed["a"] += 250.0  # 500 rows/s taken in, at a trigger each 0.5 s
            service.check_capacity(state, _record(100 + 0.5 * i, 1000.0, 1.5 + 0.2 * i, busy=0.45))
    (w,) = said
    text = str(w.message)
    assert "'q' (1000 ms) cannot be met" in text and "took in 500 rows/s of the 1000 rows/s that came in" in text
    assert "90% of the executor's time" in text and "shed=" in text

    quiet, state = _service(), _State(cost_s=1e-5)  # past the target but not falling further behind
    with warnings.catch_warnings():
        warnings.simplefilter("error", SloWarning)
        for i in range(30):
            quiet.check_capacity(state, _record(100 + 0.5 * i, 1000.0, 1.5 + 0.2 * (i % 2), busy=0.45))
            quiet.check_capacity(state, _record(200 + 0.5 * i, 1000.0, 0.5, busy=0.45))  # within the target

    heavy, state = _service(), _State(cost_s=2e-3)  # 2 ms a row: 1,000 rows/s need 2 s/s
    with pytest.warns(SloWarning, match=r"needs 2\.00 executor seconds per second .* at most 500 rows/s"):
        for i in range(Service.OVER + 1):
            heavy.check_capacity(state, _record(100 + 0.5 * i, 1000.0, 0.2, busy=0.45))
