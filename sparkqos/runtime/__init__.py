"""The Spark-free runtime of a stream: the trigger loop (trigger.py), the continuous worker that
serves between triggers (continuous.py), checkpoints (checkpoint.py), sinks (sinks.py), dead
letters (deadletter.py), progress records (progress.py) and the run configuration (config.py).
Nothing here imports pyspark (an import contract checks it): :mod:`sparkqos.spark` hands each
micro-batch in as Arrow."""
