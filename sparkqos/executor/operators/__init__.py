"""Physical operators of the executor, on pyarrow compute (thesis §3.2.2; Chain §5 for joins).

One module per operator: :mod:`.select`, :mod:`.project`, :mod:`.union`, :mod:`.synthetic`,
:mod:`.window` (window aggregation), :mod:`.event_window` (Spark's event-time window
aggregation, for PySpark transforms), :mod:`.lag` (per-key lag), :mod:`.dedup` (streaming
deduplication), :mod:`.generate` (explode), :mod:`.group_state` (a user's
function with per-key state, applyInPandasWithState), :mod:`.stateful_processor` (a user's
StatefulProcessor, transformWithStateInPandas), :mod:`.keyed_agg` (aggregation
without a time window, update mode), :mod:`.session_window` (Spark's session windows), :mod:`.spark_aggregates` (the aggregates
Spark computes over a group's buffered rows),
:mod:`.join` (window join), and for PySpark transforms' joins :mod:`.static_join`
(with a stored table) and :mod:`.interval_join` (two branches of the stream on an event-time
range), on the base class of
:mod:`.base`. Each operator is bound to its input schemas when a plan is built
(:meth:`PhysicalOperator.bind`, which type-checks its expressions and returns the output schema)
and then runs on the rows the executor hands it from its input queues
(:meth:`PhysicalOperator.run`). Every row carries the executor's columns ``__arrival`` and
``__seq`` through every operator. Window and join state is bounded and serialisable
(:meth:`~PhysicalOperator.to_state` / :meth:`~PhysicalOperator.from_state`, Arrow IPC bytes).

Every operator has a Spark equivalent that gives the same answer on a finite input: for those of
the QuerySet builder ``sparkqos.spark.translate.operator_to_spark`` builds it from the operator's
public properties; those compiled from PySpark transforms have the transform itself (the executor
never imports Spark).
"""

from sparkqos.executor.operators.base import PhysicalOperator
from sparkqos.executor.operators.dedup import Deduplicate
from sparkqos.executor.operators.event_window import EventWindowAggregate, WindowAgg
from sparkqos.executor.operators.generate import Generate
from sparkqos.executor.operators.group_state import PandasWithState
from sparkqos.executor.operators.interval_join import IntervalJoin
from sparkqos.executor.operators.join import WindowJoin
from sparkqos.executor.operators.keyed_agg import KeyedAggregate
from sparkqos.executor.operators.lag import KeyedLag, Lag
from sparkqos.executor.operators.project import Project
from sparkqos.executor.operators.select import Select
from sparkqos.executor.operators.session_window import SessionWindowAggregate
from sparkqos.executor.operators.spark_aggregates import SparkAggregates
from sparkqos.executor.operators.stateful_processor import TransformWithState
from sparkqos.executor.operators.static_join import StaticJoin
from sparkqos.executor.operators.synthetic import Synthetic
from sparkqos.executor.operators.union import Union
from sparkqos.executor.operators.window import WindowAggregate

__all__ = [
    "Deduplicate",
    "EventWindowAggregate",
    "Generate",
    "IntervalJoin",
    "KeyedAggregate",
    "KeyedLag",
    "Lag",
    "PandasWithState",
    "PhysicalOperator",
    "Project",
    "Select",
    "SessionWindowAggregate",
    "SparkAggregates",
    "StaticJoin",
    "Synthetic",
    "TransformWithState",
    "Union",
    "WindowAgg",
    "WindowAggregate",
    "WindowJoin",
]
