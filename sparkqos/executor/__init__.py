"""The executor: a compiled plan's operators run on Arrow batches under any registered strategy.

``CompiledPlan`` (plan.py) holds the scheduling plan and the physical operators (operators/);
``Executor`` (loop.py) asks the strategy for units and runs them; ``ExecutorState`` (state.py) is
the strategies' read-only view over the queues (queues.py); expressions.py is the typed expression
language the operators evaluate with pyarrow compute. Never imports pyspark or the simulator.
"""

from sparkqos.executor.loop import EMIT, Executor, RunReport, replay
from sparkqos.executor.plan import CompiledPlan
from sparkqos.executor.state import ExecutorState

__all__ = ["EMIT", "CompiledPlan", "Executor", "ExecutorState", "RunReport", "replay"]
