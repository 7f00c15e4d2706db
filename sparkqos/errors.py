"""Error classes. Each message names the offending value and what was expected."""

from __future__ import annotations


class SparkqosError(Exception):
    """Base class of every error sparkqos raises on purpose."""


class PlanError(SparkqosError, ValueError):
    """An operator plan is malformed (cycle, unknown input, bad selectivity or cost...)."""


class WorkloadError(SparkqosError, ValueError):
    """A workload file or workload definition is malformed."""


class QosSpecError(SparkqosError, ValueError):
    """A QoS specification is malformed (unknown statistic or direction, bad weights, unknown key)."""


class SchedulerError(SparkqosError):
    """A scheduler broke its contract or was configured wrongly."""


class UnknownStrategy(SchedulerError, KeyError):
    """A strategy name that is not in the registry."""

    def __init__(self, name: str, available: list[str]):
        self.name = name
        self.available = available
        super().__init__(f"unknown strategy {name!r}; registered strategies are: {', '.join(available)}")

    def __str__(self) -> str:  # KeyError would quote the whole message otherwise
        return self.args[0]


class SchemaMismatch(SparkqosError, ValueError):
    """A batch offered to a stream does not match the schema the plan declared for it."""


class ExpressionError(PlanError):
    """An expression refers to an unknown column or mixes incompatible types."""


class SourceError(SparkqosError, ValueError):
    """A streaming source was given a bad option (unknown payload, negative rate, missing file...)."""


class SinkError(SparkqosError, ValueError):
    """A sink was given a bad batch id, query name or output table."""


class CheckpointError(SparkqosError, ValueError):
    """A checkpoint cannot be written or read (bad batch id, state that is not JSON...)."""


class CheckpointCorrupt(CheckpointError):
    """A checkpoint file is torn or damaged (truncated, bad magic, checksum mismatch)."""


class ConfigError(SparkqosError, ValueError):
    """A job configuration (TOML file or --set override) is malformed: unknown key, wrong type, bad value."""


class RunnerError(SparkqosError, ValueError):
    """The streaming runner was configured wrongly."""
