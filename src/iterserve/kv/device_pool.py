"""Device block pool: free list, reference counts and the exact prefix index (0x0A).

Every device block is in exactly one of three states:

* **free**: refcount 0, no cache identity, on the FIFO free list;
* **used**: refcount > 0 (it may also carry a cache identity and be shared);
* **cached**: refcount 0 with a cache identity, on the LRU list; it stays
  reusable by exact prefix hits until :meth:`DevicePool.take_fresh` evicts it.

So ``free + used + cached == total`` always holds. Every operation is O(1) per
block (deque, ``OrderedDict``, lists indexed by block id).

Exactness: a block's cache identity is ``(hash, token_ids, parent_entry)``
where ``parent_entry`` is the registration serial of the block holding the
previous ``block_size`` tokens. :meth:`find` accepts a candidate only when its
tokens and parent serial match, so by induction from the root a verified
chain holds exactly the queried token prefix, even if the hash collides.
Serials are never reused, so an evicted-and-reused parent cannot validate a
stale child.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from iterserve.kv.errors import KvInvariantError
from iterserve.kv.free_list import FreeListPool

ROOT_ENTRY = 0
"""Parent serial of a request's first block; real serials start at 1."""

_UNREGISTERED = 0


class DevicePool(FreeListPool):
    """Owns device block states; knows nothing about requests."""

    __slots__ = ("_lru", "_ref_counts", "_num_used", "_block_of_hash",
                 "_hash", "_tokens", "_entry", "_parent_entry", "_next_entry")

    def __init__(self, num_blocks: int) -> None:
        if num_blocks <= 0:
            raise ValueError(f"num_blocks must be > 0, got {num_blocks}")
        super().__init__(num_blocks)
        self._lru: OrderedDict[int, None] = OrderedDict()  # oldest first
        self._ref_counts = [0] * num_blocks
        self._num_used = 0
        self._block_of_hash: dict[bytes, int] = {}
        self._hash: list[bytes | None] = [None] * num_blocks
        self._tokens: list[tuple[int, ...] | None] = [None] * num_blocks
        self._entry = [_UNREGISTERED] * num_blocks
        self._parent_entry = [_UNREGISTERED] * num_blocks
        self._next_entry = ROOT_ENTRY + 1

    @property
    def num_blocks_used(self) -> int:
        return self._num_used

    @property
    def num_blocks_cached(self) -> int:
        return len(self._lru)

    @property
    def num_blocks_available(self) -> int:
        return len(self._free) + len(self._lru)

    def ref_count(self, block_id: int) -> int:
        return self._ref_counts[block_id]

    def entry_of(self, block_id: int) -> int:
        """Registration serial of the block, 0 when it has no cache identity."""
        return self._entry[block_id]

    def find(self, block_hash: bytes, token_ids: Sequence[int], parent_entry: int) -> int | None:
        """The cached block holding exactly ``token_ids`` after ``parent_entry``, if any."""
        block_id = self._block_of_hash.get(block_hash)
        if block_id is None:
            return None
        if self._parent_entry[block_id] != parent_entry or self._tokens[block_id] != tuple(token_ids):
            return None  # hash collision: never a hit
        return block_id

    def is_hash_taken(self, block_hash: bytes) -> bool:
        return block_hash in self._block_of_hash

    def take_fresh(self) -> int:
        """A private block (refcount 1): the free list first, else evict the LRU cached block."""
        if self._free:
            block_id = self._free.popleft()
        elif self._lru:
            block_id, _ = self._lru.popitem(last=False)
            self._forget(block_id)
        else:
            raise KvInvariantError("take_fresh on an exhausted pool; callers must check capacity")
        self._ref_counts[block_id] = 1
        self._num_used += 1
        return block_id

    def acquire(self, block_id: int) -> None:
        """Add a reference to a cached block (a verified prefix hit)."""
        if self._ref_counts[block_id] == 0:
            if block_id not in self._lru:
                raise KvInvariantError(f"block {block_id} is free, not cached")
            del self._lru[block_id]
            self._num_used += 1
        self._ref_counts[block_id] += 1

    def release(self, block_id: int) -> bool:
        """Drop one reference; True when the block reached refcount 0."""
        count = self._ref_counts[block_id]
        if count <= 0:
            raise KvInvariantError(f"double release of block {block_id}")
        self._ref_counts[block_id] = count - 1
        if count > 1:
            return False
        self._num_used -= 1
        if self._entry[block_id] == _UNREGISTERED:
            self._free.append(block_id)
        else:
            self._lru[block_id] = None  # most recently used end
        return True

    def is_cached(self, block_id: int) -> bool:
        return self._entry[block_id] != _UNREGISTERED

    def register(self, block_id: int, block_hash: bytes, token_ids: Sequence[int],
                 parent_entry: int) -> int:
        """Give a used, committed block a cache identity; returns its new serial."""
        if self._ref_counts[block_id] <= 0 or self._entry[block_id] != _UNREGISTERED:
            raise KvInvariantError(f"block {block_id} cannot be registered")
        if block_hash in self._block_of_hash:
            raise KvInvariantError("hash already indexed")
        entry = self._next_entry
        self._next_entry += 1
        self._block_of_hash[block_hash] = block_id
        self._hash[block_id] = block_hash
        self._tokens[block_id] = tuple(token_ids)
        self._entry[block_id] = entry
        self._parent_entry[block_id] = parent_entry
        return entry

    def _forget(self, block_id: int) -> None:
        block_hash = self._hash[block_id]
        if block_hash is not None:
            del self._block_of_hash[block_hash]
        self._hash[block_id] = None
        self._tokens[block_id] = None
        self._entry[block_id] = _UNREGISTERED
        self._parent_entry[block_id] = _UNREGISTERED

    def audit(self) -> None:
        """O(total) consistency check for tests; raises :class:`KvInvariantError`."""
        free, cached = set(self._free), set(self._lru)
        used = {b for b, count in enumerate(self._ref_counts) if count > 0}
        _require(len(free) == len(self._free), "free list holds a block twice")
        _require(not (free & cached or free & used or cached & used), "block in two states")
        _require(len(used) == self._num_used, "used counter drifted")
        _require(len(free) + len(used) + len(cached) == self._num_blocks, "blocks leaked")
        _require(all(count >= 0 for count in self._ref_counts), "negative refcount")
        _require(all(self._entry[b] == _UNREGISTERED for b in free), "free block has identity")
        _require(all(self._entry[b] != _UNREGISTERED for b in cached), "cached block lost identity")
        for block_hash, block_id in self._block_of_hash.items():
            _require(self._hash[block_id] == block_hash, "hash index out of sync")


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise KvInvariantError(message)
