"""The Spark-free runtime of a stream: the trigger loop (trigger.py), the continuous worker that
serves between triggers (continuous.py), checkpoints (checkpoint.py), progress records
(progress.py) and the run configuration (config.py); the sinks and dead letters it writes to are
:mod:`sparkqos.io`'s.
Nothing here imports pyspark (an import contract checks it): :mod:`sparkqos.spark` hands each
micro-batch in as Arrow."""
