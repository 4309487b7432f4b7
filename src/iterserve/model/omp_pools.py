"""Keep one OpenMP thread pool alive: set-up work on a passing thread.

torch's CPU intra-op parallelism is OpenMP, and libgomp keeps a pool of
worker threads per thread that has opened a parallel region. Once the
process's pool threads outnumber its CPUs, libgomp throttles every worker's
spin-wait to a few hundred spins, so each of a forward's ~300 parallel
regions pays a futex sleep and wake-up per worker. Loading the weights and
warming the kernels on the caller's thread, then running every forward on
the engine thread, leaves two pools alive, and on a machine with few cores
every forward then pays those sleeps (`benchmarks/bench_omp_pools.py`
measures the difference).
Run such set-up through :func:`on_passing_thread`: its pool ends with the
thread, and the engine thread's pool is the only one left.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def on_passing_thread(work: Callable[[], T], *, name: str = "iterserve-setup") -> T:
    """``work()`` run on a new thread that ends with it; its result, or its exception."""
    outcome: list[T] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            outcome.append(work())
        except BaseException as error:  # re-raised on the caller's thread
            failure.append(error)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return outcome[0]
