"""Simulation layer: everything that runs the scheduler without a model.

Owns the simulated executor (``executor.py``, durations from a cost model),
its factory, replay of decision logs by re-simulation (``replay.py``,
``replay_header.py``), the workload generators, distributions and trace
converters that *write* workload documents, and the run reports.

Parsing a workload file into records is not here: that codec is
``records/workload.py``. Layering (``docs/architecture.md``): sim sits above
engine and beside model; nothing below imports it.
"""
