"""A compiled query set: the scheduling plan for the strategies and the physical operators for the executor."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from sparkqos.errors import PlanError
from sparkqos.executor.expressions import INTERNAL
from sparkqos.executor.operators import PhysicalOperator
from sparkqos.model.plan import Plan


class CompiledPlan:
    """A built query set: the scheduling :attr:`plan` and the physical :attr:`operators`.

    ``sparkqos.spark.translate.plan_to_spark`` runs one of its queries on Spark's own engine.
    """

    def __init__(
        self,
        plan: Plan,
        operators: dict[str, PhysicalOperator],
        sources: dict[str, pa.Schema],
        roots: dict[str, str],
        spark_parts: Mapping[str, Any] | None = None,
    ):
        self.plan = plan
        self.operators = operators
        self.sources = sources
        self.roots = roots
        #: Streams fed by parts of queries Spark evaluates in each micro-batch, stream → its
        #: :class:`~sparkqos.compile.spark_part.SparkPart` (the other streams are the input's).
        self.spark_parts: dict[str, Any] = dict(spark_parts or {})

    def __repr__(self) -> str:
        return f"CompiledPlan({list(self.roots)}, {self.plan!r})"

    def fresh(self) -> CompiledPlan:
        """The same plan with new, empty operators (window and join state start over)."""
        ops = {}
        for name, op in self.operators.items():
            new = op.copy()
            new.bind(name, op.input_schemas)
            ops[name] = new
        return CompiledPlan(self.plan, ops, self.sources, self.roots, self.spark_parts)

    def output_schema(self, query: str) -> pa.Schema:
        """Columns a query delivers (without the executor's columns)."""
        schema = self.operators[self.root(query)].schema
        return pa.schema([f for f in schema if f.name not in INTERNAL])

    def root(self, query: str) -> str:
        """The operator whose output is ``query``'s; raises :class:`PlanError` for an unknown query."""
        try:
            return self.roots[query]
        except KeyError:
            raise PlanError(f"no query named {query!r}; queries are {sorted(self.roots)}") from None
