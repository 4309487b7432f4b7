"""Engine layer: the step loop and what every executor shares (0x00B, 0x0C).

Owns the loop (``loop.py``: state -> plan -> validate -> execute -> validate
-> advance, arrival publication, the stall check), the ``Executor`` protocol,
the one result assembly both executors use (``result_builder.py``), KV
residency for a run (``kv_residency.py``), readiness bookkeeping, the online
engine and its request streams, observers and event publication, and the
decision log (writing, reading, tracing).

It knows no concrete executor: the simulated one lives in ``sim/``, the torch
one in ``model/``. It imports records, cost, kv, metrics, admission, plan and
policies only (see ``docs/architecture.md``); ``lint-imports`` enforces it.
"""
