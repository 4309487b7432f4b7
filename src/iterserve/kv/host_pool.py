"""Host-memory swap pool: a fixed number of host blocks (0x0C, PRESERVE_EXACT).

Host blocks are exclusively owned by one swapped request generation; there is
no sharing or caching on the host side, so ``free + swapped == total``.
"""

from __future__ import annotations

from iterserve.kv.errors import KvInvariantError
from iterserve.kv.free_list import FreeListPool


class HostPool(FreeListPool):
    """Free list of host block ids; O(1) per block."""

    __slots__ = ("_is_free",)

    def __init__(self, num_blocks: int) -> None:
        if num_blocks < 0:
            raise ValueError(f"num_host_blocks must be >= 0, got {num_blocks}")
        super().__init__(num_blocks)
        self._is_free = [True] * num_blocks

    @property
    def num_host_blocks_swapped(self) -> int:
        return self._num_blocks - len(self._free)

    def take(self) -> int:
        if not self._free:
            raise KvInvariantError("host pool exhausted; callers must check capacity")
        block_id = self._free.popleft()
        self._is_free[block_id] = False
        return block_id

    def release(self, block_id: int) -> None:
        if self._is_free[block_id]:
            raise KvInvariantError(f"double free of host block {block_id}")
        self._is_free[block_id] = True
        self._free.append(block_id)

    def audit(self) -> None:
        """O(total) consistency check for tests."""
        if len(set(self._free)) != len(self._free) or sum(self._is_free) != len(self._free):
            raise KvInvariantError("host free list out of sync")
