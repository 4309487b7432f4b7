"""The counters every block pool shares: a fixed total and a FIFO free list.

:class:`DevicePool` and :class:`HostPool` both derive from :class:`FreeListPool`,
so ``num_blocks_total`` and ``num_blocks_free`` are counted in one place.
"""

from __future__ import annotations

from collections import deque


class FreeListPool:
    """``num_blocks`` block ids, all free at the start, handed out oldest-freed first."""

    __slots__ = ("_num_blocks", "_free")

    def __init__(self, num_blocks: int) -> None:
        self._num_blocks = num_blocks
        self._free: deque[int] = deque(range(num_blocks))

    @property
    def num_blocks_total(self) -> int:
        return self._num_blocks

    @property
    def num_blocks_free(self) -> int:
        return len(self._free)
