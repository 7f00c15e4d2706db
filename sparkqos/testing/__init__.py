"""Public helpers for tests and benchmarks: twin plans for both engines
(:mod:`~sparkqos.testing.twins`), the scheduler contract as checks
(:mod:`~sparkqos.testing.checks`, :func:`check_scheduler`) and the papers' worked tables and
theorems as checks on the simulator (:mod:`~sparkqos.testing.papers`), so tests and benchmarks
never import private names and a user's own strategy gets the library's checks."""

from sparkqos.testing.checks import check_scheduler
from sparkqos.testing.twins import (
    KEYS,
    SCHEMA,
    FakeClock,
    SyntheticQuery,
    TwinPlans,
    assert_same_rows,
    drive,
    feeds,
    rows_by_query,
    sensor_table,
    sorted_rows,
    synthetic_plans,
)

__all__ = [
    "KEYS",
    "SCHEMA",
    "FakeClock",
    "SyntheticQuery",
    "TwinPlans",
    "assert_same_rows",
    "check_scheduler",
    "drive",
    "feeds",
    "rows_by_query",
    "sensor_table",
    "sorted_rows",
    "synthetic_plans",
]
