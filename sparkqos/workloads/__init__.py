"""Workloads to run sparkqos on, used by the jobs, the experiments, the benchmarks and the tests;
nothing in the library imports them (an import contract checks it).

* :mod:`~sparkqos.workloads.sensors`: the sensor network as a Spark-free ``QuerySet`` and the
  reading model behind its anomaly query;
* :mod:`~sparkqos.workloads.sensor_transforms`: the same queries as PySpark transforms (the main job);
* :mod:`~sparkqos.workloads.ais`: the recorded AIS vessel trace (``python -m sparkqos trace vessels``);
* :mod:`~sparkqos.workloads.vessels`: the vessel job's PySpark transforms over that trace.
"""
