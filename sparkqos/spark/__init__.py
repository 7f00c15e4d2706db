"""Spark integration: the only package that imports pyspark (docs/ARCHITECTURE.md, "Dependency rules").

``sparkqos.spark.translate`` compiles the executor's expressions and operators into Spark
DataFrame code, so the same logical query runs on Spark's own engine (the tests' oracle).
Submodules import pyspark; importing this package alone does not.
"""
