"""Zeroed host memory for the K/V pools, backed by transparent huge pages where
the OS offers them.

The paged attention kernel reads a pool's blocks scattered over tens of
megabytes per layer; on 4 KiB pages nearly every block visit misses the TLB
(a page walk per block, two-dimensional under a hypervisor), a large share of
a decode step's attention (measure it with
benchmarks/bench_paged_kernel.py --pages). A private anonymous mapping
advised MADV_HUGEPAGE is backed by 2 MiB pages when the kernel's THP mode is
`always` or `madvise`; under `never`, or without madvise, it is ordinary
zeroed memory. Either way its pages come zeroed from the OS on first touch,
so an unused tail of a pool costs no resident memory and no start-up time.

That first touch is not free, though: the OS zeroes each 2 MiB page as it
faults in, and under a hypervisor that backs guest memory lazily (a
Firecracker VM here) the host faults it in too. A step whose rows first
reach a new huge page of every layer's pools (16 on the small preset) then
stalls in system time, and that stall becomes the run's worst inter-token
gap. :func:`prefault` takes that cost up front: the runtime commits a
pool the user sized (`--num-kv-blocks`, `--kv-cache-memory`) and every
pool of `iterserve serve` that way at start-up, as vLLM does its KV cache,
and leaves an offline pool sized from free memory lazy
(`EngineConfig.commit_kv`).
"""

from __future__ import annotations

import mmap

import numpy as np

#: The x86-64 / aarch64 (4 KiB base) huge page size the mapping is aligned to.
HUGE_PAGE_BYTES = 2 << 20


def zeroed_bytes(num_bytes: int, huge_pages: bool = True) -> np.ndarray:
    """A writable uint8 array of `num_bytes` zeros; with `huge_pages`, an
    anonymous mapping advised MADV_HUGEPAGE and aligned to HUGE_PAGE_BYTES
    (the array keeps the mapping alive), else numpy's calloc."""
    if num_bytes < 0:
        raise ValueError(f"num_bytes must be >= 0, got {num_bytes}")
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    if not huge_pages or advice is None or num_bytes < HUGE_PAGE_BYTES:
        return np.zeros(num_bytes, dtype=np.uint8)
    mapping = mmap.mmap(-1, num_bytes + HUGE_PAGE_BYTES,
                        flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    mapping.madvise(advice)
    whole = np.frombuffer(mapping, dtype=np.uint8)
    start = -whole.ctypes.data % HUGE_PAGE_BYTES
    return whole[start:start + num_bytes]


#: Base page size: one write per page faults a range in (a whole huge page where granted).
PAGE_BYTES = 4096


def prefault(array: np.ndarray, num_bytes: int) -> None:
    """Fault in the first `num_bytes` of a zeroed uint8 array by writing a
    zero to each of its pages (the contents stay zero)."""
    if num_bytes < 0:
        raise ValueError(f"num_bytes must be >= 0, got {num_bytes}")
    array[:num_bytes:PAGE_BYTES] = 0
