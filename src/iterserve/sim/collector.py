"""The cyclic garbage collector held back for the length of a simulation.

A simulated run frees everything it drops by reference counts: it makes no
reference cycles (``tests/lab/test_sim_collector.py`` runs one with every
observer and finds no cyclic garbage after it). The cyclic collector's
passes therefore find nothing to free; they only walk the live objects,
and a long run keeps a growing set of them (the waiting requests' views,
the traces, the recorder's records; the report's timelines after it).
Inside :func:`collector_held_back` no pass runs; on exit the collector is
enabled again if it was, so a process that runs a simulation keeps its own
settings afterwards. Holding the collector back only partly (the objects
alive before the run frozen, rare young passes) still spent seconds of a
long ``iterserve simulate`` walking live objects, mostly in the report
phase, and freed nothing: disabled, the peak memory is lower too
(benchmarks/README.md has the measurements).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_held_back() -> Iterator[None]:
    """No automatic collection for the duration of the ``with`` block
    (``gc.disable``); afterwards the collector is enabled again if it was.
    Nested blocks leave it to the outermost. Cycles made inside (a policy of
    one's own, a plot) are freed by the first pass after the block."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
