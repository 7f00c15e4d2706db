"""A compiled query set: the scheduling plan for the strategies and the physical operators for the executor."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence
import pyarrow as pa
from sparkqos.errors import PlanError
from sparkqos.executor.expressions import INTERNAL, Agg, Expr
from sparkqos.executor.operators import PhysicalOperator, Project, Select, Synthetic, Union, WindowAggregate, WindowJoin
from sparkqos.model.plan import Operator, Plan
from sparkqos.executor.queues import with_internal


class CompiledPlan:
    """A built query set: the scheduling :attr:`plan` and the physical :attr:`operators`."""

    def __init__(self, plan: Plan, operators: dict[str, PhysicalOperator], sources: dict[str, pa.Schema],
                 roots: dict[str, str]):
        self.plan = plan
        self.operators = operators
        self.sources = sources
        self.roots = roots

    def __repr__(self) -> str:
        return f"CompiledPlan({list(self.roots)}, {self.plan!r})"

    def fresh(self) -> CompiledPlan:
        """The same plan with new, empty operators (window and join state start over)."""
        ops = {}
        for name, op in self.operators.items():
            new = op.copy()
            new.bind(name, op.input_schemas)
            ops[name] = new
        return CompiledPlan(self.plan, ops, self.sources, self.roots)

    def output_schema(self, query: str) -> pa.Schema:
        """Columns a query delivers (without the executor's columns)."""
        schema = self.operators[self._root(query)].schema
        return pa.schema([f for f in schema if f.name not in INTERNAL])

    def _root(self, query: str) -> str:
        try:
            return self.roots[query]
        except KeyError:
            raise PlanError(f"no query named {query!r}; queries are {sorted(self.roots)}") from None

    def to_spark(self, query: str, inputs: Mapping[str, Any], internal: bool = False):
        """Run ``query`` on Spark's engine: ``inputs`` maps each stream to a DataFrame holding its
        rows with the executor's columns (see ``sparkqos.spark.translate.stamped_frame``)."""
        root = self._root(query)

        def build(name: str):
            if name in self.sources:
                if name not in inputs:
                    raise PlanError(f"query {query!r} reads stream {name!r}, which is not in inputs {sorted(inputs)}")
                return inputs[name]
            return self.operators[name].to_spark(*[build(i) for i in self.plan[name].inputs])

        df = build(root)
        if internal:
            return df
        return df.select(*[n for n in df.columns if n not in INTERNAL])
