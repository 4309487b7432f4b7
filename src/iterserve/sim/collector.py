"""The cyclic garbage collector held back for the length of a simulation.

A simulated run allocates a few short-lived tuples and records per request
per decision and keeps a growing set of long-lived ones (views, the decision
log's buffers, the recorder's columns). With the default thresholds the
collector runs a young-generation pass every 700 net allocations and, as the
long-lived set grows, full passes that walk all of it. Inside
:func:`collector_held_back` the objects alive before the run are frozen out of
the collector's reach and the young generation is collected every
``YOUNG_THRESHOLD`` allocations; on exit both are restored, so a process that
runs a simulation keeps its own collector settings afterwards.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

#: Net allocations between young-generation passes inside a simulation.
YOUNG_THRESHOLD = 50_000


@contextmanager
def collector_held_back() -> Iterator[None]:
    """Freeze what is alive now and collect young objects less often, for the
    duration of the ``with`` block; the previous thresholds are restored on
    exit, and the frozen objects are handed back to the collector unless the
    process had frozen some itself (``runtime`` freezes its start-up objects:
    ``gc.unfreeze`` cannot tell ours from those, so both stay frozen)."""
    thresholds = gc.get_threshold()
    already_frozen = gc.get_freeze_count() > 0
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        if not already_frozen:
            gc.unfreeze()
