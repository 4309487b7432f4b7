"""Paged KV block manager: mechanism only, no policy (0x0A, 0x0C).

Data flow per request generation (a :class:`RequestKey`)::

    lookup_prefix(tokens)      -> PrefixHit           (read-only; not residency)
    allocate(key, tokens)      -> AllocationGranted | AllocationFailed
    commit(key, rows)          -> CommitResult         (executor wrote K/V rows)
    append_rows(key, tokens)   -> AllocationGranted | AllocationFailed
    swap_out(key) / swap_in    -> SwapGranted | SwapFailed (copy mapping)
    release(key)               -> ReleasedBlocks

The manager decides nothing about who runs: every capacity shortfall is a
returned fact and leaves the pools unchanged. Only committed full blocks enter
the prefix cache, so a hit never reads K/V that has not been written. A hit
never covers a request's final token: the executor must compute at least one
row (the prefill row that emits output 1, or the rebuild frontier's next
decode row, 0x01A/0x0C), so hits are capped at ``len(token_ids) - 1`` rows.
Hot-path calls cost O(blocks touched); nothing scans the pool.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from iterserve.kv.block_hash import ROOT_HASH, BlockHasher, blake2b_block_hash
from iterserve.kv.config import BlockManagerConfig
from iterserve.kv.device_pool import ROOT_ENTRY, DevicePool
from iterserve.kv.errors import (
    DuplicateRequestError,
    KvInvariantError,
    RequestStateError,
    UnknownRequestError,
)
from iterserve.kv.host_pool import HostPool
from iterserve.kv.results import (
    AllocationFailed,
    AllocationGranted,
    AllocationResult,
    CommitResult,
    ExtensionResult,
    ExtensionStatus,
    FailureReason,
    PoolUsage,
    PrefixClaimed,
    PrefixHit,
    ReleasedBlocks,
    RequestKey,
    SwapDirection,
    SwapFailed,
    SwapGranted,
    SwapResult,
)
from iterserve.records.kv_abi import blocks_for


@dataclass(slots=True)
class _Chain:
    """Cursor over a request's verified cached chain (0x0A exact prefix identity).

    ``entry`` is the serial of the cached block holding the last chained full
    block (ours or an identical one); None once a collision broke the chain.
    """

    num_blocks: int = 0
    block_hash: bytes = ROOT_HASH
    entry: int | None = ROOT_ENTRY


@dataclass(slots=True)
class _Resident:
    block_ids: list[int]
    num_rows: int
    num_committed_rows: int
    token_ids: list[int] | None
    chain: _Chain


@dataclass(slots=True)
class _Swapped:
    host_block_ids: list[int]
    num_rows: int
    num_committed_rows: int
    token_ids: list[int] | None


@dataclass(frozen=True, slots=True)
class _Match:
    block_ids: tuple[int, ...]
    chain_hash: bytes
    chain_entry: int
    num_reclaimable_hits: int  # hits currently unreferenced: they consume availability

    def new_chain(self) -> _Chain:
        return _Chain(len(self.block_ids), self.chain_hash, self.chain_entry)


class BlockManager:
    """Owns the device and host pools and every request's block table."""

    __slots__ = ("_config", "_block_size", "_hasher", "_device", "_host", "_resident", "_swapped",
                 "_releasing")

    def __init__(self, config: BlockManagerConfig,
                 hasher: BlockHasher = blake2b_block_hash) -> None:
        self._config = config
        self._block_size = config.block_size_rows
        self._hasher = hasher
        self._device = DevicePool(config.num_device_blocks)
        self._host = HostPool(config.num_host_blocks)
        self._resident: dict[RequestKey, _Resident] = {}
        self._swapped: dict[RequestKey, _Swapped] = {}
        self._releasing: set[RequestKey] = set()  # release requested, not yet complete

    @property
    def config(self) -> BlockManagerConfig:
        return self._config

    # ------------------------------------------------------------------ facts

    def usage(self) -> PoolUsage:
        device, host = self._device, self._host
        return PoolUsage(device.num_blocks_total, device.num_blocks_free, device.num_blocks_used,
                         device.num_blocks_cached, host.num_blocks_total, host.num_blocks_free,
                         host.num_host_blocks_swapped)

    def is_resident(self, key: RequestKey) -> bool:
        return key in self._resident

    def is_swapped(self, key: RequestKey) -> bool:
        return key in self._swapped

    def num_rows(self, key: RequestKey) -> int:
        return self._get_any(key).num_rows

    def num_committed_rows(self, key: RequestKey) -> int:
        return self._get_any(key).num_committed_rows

    def block_table(self, key: RequestKey) -> tuple[int, ...]:
        """Device block ids in row order; for the executor only, never the scheduler."""
        return tuple(self._get_resident(key).block_ids)

    def lookup_prefix(self, token_ids: Sequence[int]) -> PrefixHit:
        """Exact committed prefix a fresh allocation of ``token_ids`` would reuse now."""
        match = self._match(token_ids, len(token_ids) - 1)
        num_blocks_cached = len(match.block_ids)
        return PrefixHit(len(token_ids), num_blocks_cached * self._block_size, num_blocks_cached)

    # --------------------------------------------------------------- allocate

    def can_allocate(self, token_ids: Sequence[int] | None = None, *,
                     num_rows: int | None = None) -> bool:
        rows = _num_rows_of(token_ids, num_rows)
        match = self._match(token_ids, rows - 1) if token_ids is not None else _NO_MATCH
        return self._shortfall(self._num_blocks_for(rows) - len(match.block_ids), match) is None

    def allocate(self, key: RequestKey, token_ids: Sequence[int] | None = None, *,
                 num_rows: int | None = None) -> AllocationResult:
        """Back ``token_ids`` (or ``num_rows`` anonymous rows) with blocks, reusing cached prefixes.

        Rows given by token ids can be prefix-cached once committed; anonymous
        rows never are. Prefix-hit rows count as committed immediately.
        """
        if key in self._resident or key in self._swapped:
            raise DuplicateRequestError(f"{key} already holds blocks")
        rows = _num_rows_of(token_ids, num_rows)
        match = self._match(token_ids, rows - 1) if token_ids is not None else _NO_MATCH
        num_new_blocks = self._num_blocks_for(rows) - len(match.block_ids)
        failed = self._shortfall(num_new_blocks, match)
        if failed is not None:
            return AllocationFailed(key, FailureReason.DEVICE_BLOCKS_EXHAUSTED, *failed)
        for block_id in match.block_ids:
            self._device.acquire(block_id)
        block_ids = list(match.block_ids)
        block_ids.extend(self._device.take_fresh() for _ in range(num_new_blocks))
        num_cached_rows = len(match.block_ids) * self._block_size
        tokens = list(token_ids) if token_ids is not None else None
        self._resident[key] = _Resident(block_ids, rows, num_cached_rows, tokens,
                                        match.new_chain())
        return AllocationGranted(key, rows, num_cached_rows, num_new_blocks, len(block_ids))

    def claim_prefix(self, key: RequestKey, token_ids: Sequence[int]) -> PrefixClaimed:
        """Hold the verified cached prefix of ``token_ids`` for ``key`` (0x0E:
        U = S - H_hit), taking no fresh block. Blocks a live request holds are
        shared; evictable cached ones are reclaimed for ``key`` (they leave
        the available pool, counted in ``num_reclaimed_blocks``), so the hit
        is proven available as well as identical. The hit rows count as
        committed, and later rows append as usual."""
        if key in self._resident or key in self._swapped:
            raise DuplicateRequestError(f"{key} already holds blocks")
        match = self._match(token_ids, len(token_ids) - 1)
        if not match.block_ids:
            return PrefixClaimed(key, 0)
        reclaimed = tuple(b for b in match.block_ids if self._device.ref_count(b) == 0)
        for block_id in match.block_ids:
            self._device.acquire(block_id)
        num_rows = len(match.block_ids) * self._block_size
        self._resident[key] = _Resident(list(match.block_ids), num_rows, num_rows,
                                        list(token_ids[:num_rows]), match.new_chain())
        return PrefixClaimed(key, num_rows, reclaimed)

    # -------------------------------------------------------------- extension

    def begin_release(self, key: RequestKey) -> None:
        """Record that ``key``'s release is in flight (an asynchronous free,
        a copy still reading the blocks): they stay held until
        :meth:`release`, and count as pending release meanwhile."""
        self._get_resident(key)
        self._releasing.add(key)

    @property
    def num_blocks_pending_release(self) -> int:
        """Device blocks that return to the pool when the releases in flight
        complete: those every reference of which is a releasing request's.
        O(blocks of releasing requests); 0 at once when none is in flight."""
        if not self._releasing:
            return 0
        refs: dict[int, int] = {}
        for key in self._releasing:
            for block_id in self._resident[key].block_ids:
                refs[block_id] = refs.get(block_id, 0) + 1
        return sum(count == self._device.ref_count(block_id) for block_id, count in refs.items())

    def extension_status(self, key: RequestKey, num_rows: int) -> ExtensionResult:
        """What :meth:`extend` would answer now for growing ``key`` to
        ``num_rows`` rows (0x06), changing nothing."""
        resident = self._get_resident(key)
        needed = max(0, self._num_blocks_for(num_rows) - len(resident.block_ids))
        available = self._device.num_blocks_available
        if needed <= available:
            return ExtensionResult(key, ExtensionStatus.GRANTED, needed, available, 0)
        pending = self.num_blocks_pending_release
        status = (ExtensionStatus.TEMPORARILY_UNAVAILABLE if needed <= available + pending
                  else ExtensionStatus.FAILED)
        return ExtensionResult(key, status, needed, available, pending)

    def extend(self, key: RequestKey, num_rows: int,
               token_ids: Sequence[int] | None = None) -> ExtensionResult:
        """Grow a running request to ``num_rows`` rows (0x06's extension):
        GRANTED takes the blocks (``token_ids``: the new rows' tokens, as
        :meth:`grow_to`); TEMPORARILY_UNAVAILABLE and FAILED change nothing."""
        answer = self.extension_status(key, num_rows)
        if answer.status is ExtensionStatus.GRANTED:
            grown = self.grow_to(key, num_rows, token_ids)
            if isinstance(grown, AllocationFailed):
                raise KvInvariantError(f"{key}: a granted extension failed to allocate")
        return answer

    def can_append(self, key: RequestKey, num_rows: int) -> bool:
        resident = self._get_resident(key)
        rows = _num_rows_of(None, num_rows)
        needed = self._num_blocks_for(resident.num_rows + rows) - len(resident.block_ids)
        return needed <= self._device.num_blocks_available

    def append_rows(self, key: RequestKey, token_ids: Sequence[int] | None = None, *,
                    num_rows: int | None = None) -> AllocationResult:
        """Grow a resident request by decode rows; atomic on failure.

        A request allocated by token ids must append token ids (they become its
        cache identity); an anonymous one must append ``num_rows``.
        """
        resident = self._get_resident(key)
        rows = _num_rows_of(token_ids, num_rows)
        if (token_ids is None) != (resident.token_ids is None):
            raise RequestStateError(f"{key}: append must match how it was allocated")
        needed = self._num_blocks_for(resident.num_rows + rows) - len(resident.block_ids)
        if needed > self._device.num_blocks_available:
            return AllocationFailed(key, FailureReason.DEVICE_BLOCKS_EXHAUSTED, needed,
                                    self._device.num_blocks_available)
        for _ in range(needed):
            resident.block_ids.append(self._device.take_fresh())
        resident.num_rows += rows
        if resident.token_ids is not None and token_ids is not None:
            resident.token_ids.extend(token_ids)
        return AllocationGranted(key, resident.num_rows, 0, needed, len(resident.block_ids))

    def grow_to(self, key: RequestKey, num_rows: int,
                token_ids: Sequence[int] | None = None) -> int | AllocationFailed:
        """The executor's per-interval path: grow a request holding blocks to
        ``num_rows`` rows and return its committed rows (a failure when the
        pool is short). ``token_ids`` end at row ``num_rows``; the missing
        rows' tokens are their tail (None: anonymous rows). The same checks
        and effects as ``num_rows`` + ``append_rows`` + ``num_committed_rows``;
        one table lookup and no allocation unless a block boundary is crossed."""
        resident = self._resident.get(key)
        if resident is None or (token_ids is None) != (resident.token_ids is None):
            return self._grow_general(key, num_rows, token_ids)
        grow = num_rows - resident.num_rows
        if grow <= 0:
            return resident.num_committed_rows
        if token_ids is not None and len(token_ids) < grow:
            return self._grow_general(key, num_rows, token_ids)
        needed = blocks_for(num_rows, self._block_size) - len(resident.block_ids)
        if needed > 0:
            device = self._device
            if needed > device.num_blocks_available:
                return AllocationFailed(key, FailureReason.DEVICE_BLOCKS_EXHAUSTED, needed,
                                        device.num_blocks_available)
            for _ in range(needed):
                resident.block_ids.append(device.take_fresh())
        resident.num_rows = num_rows
        if token_ids is not None and resident.token_ids is not None:
            resident.token_ids.extend(token_ids[len(token_ids) - grow:])
        return resident.num_committed_rows

    def grow_and_commit(self, key: RequestKey, num_rows: int,
                        token_ids: Sequence[int] | None = None) -> AllocationFailed | None:
        """:meth:`grow_to` then :meth:`commit_to` ``num_rows``: an executor
        that writes the rows as soon as they are backed (the simulator).
        None on success; on failure nothing changed."""
        resident = self._resident.get(key)
        if resident is not None and token_ids is None and resident.token_ids is None:
            # anonymous rows: no cache identity to advance (the common simulated case)
            if num_rows > resident.num_rows:
                held = resident.block_ids
                # within the blocks held nothing opens (most decode rows): no count
                needed = (0 if num_rows <= len(held) * self._block_size
                          else blocks_for(num_rows, self._block_size) - len(held))
                if needed > 0:
                    device = self._device
                    if needed > device.num_blocks_available:
                        return AllocationFailed(key, FailureReason.DEVICE_BLOCKS_EXHAUSTED,
                                                needed, device.num_blocks_available)
                    for _ in range(needed):
                        resident.block_ids.append(device.take_fresh())
                resident.num_rows = num_rows
            if num_rows > resident.num_committed_rows:
                resident.num_committed_rows = num_rows
            return None
        grown = self.grow_to(key, num_rows, token_ids)
        if isinstance(grown, AllocationFailed):
            return grown
        self.commit_to(key, num_rows)
        return None

    def grow_and_commit_rows(self, keys: Sequence[RequestKey],
                             nums_rows: Sequence[int]) -> list[bool]:
        """:meth:`grow_and_commit` of anonymous rows (no token ids) to
        ``nums_rows[i]`` for each of ``keys`` in order: whether each
        succeeded (a failure changes nothing of its key). The simulator's
        batch of decode rows: the common case (a resident request without
        token ids) is :meth:`grow_and_commit`'s fast path, written again
        here in one loop, because a method call per row cost about as much
        as the row's accounting; any other key takes that method."""
        resident_of, device, block_size = self._resident.get, self._device, self._block_size
        grown = []
        for key, num_rows in zip(keys, nums_rows, strict=True):
            resident = resident_of(key)
            if resident is None or resident.token_ids is not None:
                grown.append(self.grow_and_commit(key, num_rows) is None)
                continue
            if num_rows > resident.num_rows:
                held = resident.block_ids
                if num_rows > len(held) * block_size:  # within the blocks held nothing opens
                    needed = blocks_for(num_rows, block_size) - len(held)
                    if needed > device.num_blocks_available:
                        grown.append(False)
                        continue
                    for _ in range(needed):
                        held.append(device.take_fresh())
                resident.num_rows = num_rows
            if num_rows > resident.num_committed_rows:
                resident.num_committed_rows = num_rows
            grown.append(True)
        return grown

    def _grow_general(self, key: RequestKey, num_rows: int,
                      token_ids: Sequence[int] | None) -> int | AllocationFailed:
        grow = num_rows - self.num_rows(key)
        if grow > 0:
            tail = None if token_ids is None else token_ids[len(token_ids) - grow:]
            result = self.append_rows(key, tail, num_rows=None if tail else grow)
            if isinstance(result, AllocationFailed):
                return result
        return self.num_committed_rows(key)

    def commit_to(self, key: RequestKey, num_committed_rows: int) -> None:
        """:meth:`commit` when ``num_committed_rows`` exceeds the committed
        rows (nothing otherwise); the executor's per-interval path."""
        resident = self._resident.get(key)
        if resident is None or num_committed_rows > resident.num_rows:
            if num_committed_rows > self.num_committed_rows(key):
                self.commit(key, num_committed_rows)  # the general path and its errors
            return
        if num_committed_rows > resident.num_committed_rows:
            resident.num_committed_rows = num_committed_rows
            self._advance_chain(resident)

    def commit(self, key: RequestKey, num_committed_rows: int) -> CommitResult:
        """Record that K/V rows ``[0, num_committed_rows)`` are written; cache full blocks."""
        resident = self._get_resident(key)
        if not resident.num_committed_rows <= num_committed_rows <= resident.num_rows:
            raise RequestStateError(
                f"{key}: commit to {num_committed_rows} outside "
                f"[{resident.num_committed_rows}, {resident.num_rows}]")
        resident.num_committed_rows = num_committed_rows
        return CommitResult(key, num_committed_rows, self._advance_chain(resident))

    # ------------------------------------------------------------------- free

    def release(self, key: RequestKey) -> ReleasedBlocks:
        """Release a generation's blocks wherever they are (finish, cancel, recompute)."""
        swapped = self._swapped.pop(key, None)
        if swapped is not None:
            for host_block_id in swapped.host_block_ids:
                self._host.release(host_block_id)
            return ReleasedBlocks(key, 0, 0, 0, len(swapped.host_block_ids))
        resident = self._resident.pop(key, None)
        if resident is None:
            raise UnknownRequestError(f"{key} holds no blocks")
        self._releasing.discard(key)
        num_reclaimed = num_retained = 0
        for block_id in reversed(resident.block_ids):  # tail first: evicted first (LRU)
            if self._device.release(block_id):
                num_reclaimed += 1
                num_retained += self._device.is_cached(block_id)
        num_shared = len(resident.block_ids) - num_reclaimed
        return ReleasedBlocks(key, num_reclaimed, num_retained, num_shared, 0)

    # ------------------------------------------------------------------- swap

    def can_swap_out(self, key: RequestKey) -> bool:
        return len(self._get_resident(key).block_ids) <= self._host.num_blocks_free

    def swap_out(self, key: RequestKey) -> SwapResult:
        """Preserve a resident request on the host and release its device blocks."""
        resident = self._get_resident(key)
        needed = len(resident.block_ids)
        if needed > self._host.num_blocks_free:
            return SwapFailed(key, SwapDirection.OUT, FailureReason.HOST_BLOCKS_EXHAUSTED,
                              needed, self._host.num_blocks_free)
        copy_pairs = tuple((block_id, self._host.take()) for block_id in resident.block_ids)
        self.release(key)
        self._swapped[key] = _Swapped([host for _, host in copy_pairs], resident.num_rows,
                                      resident.num_committed_rows, resident.token_ids)
        return SwapGranted(key, SwapDirection.OUT, copy_pairs, resident.num_rows, 0)

    def can_swap_in(self, key: RequestKey) -> bool:
        swapped = self._get_swapped(key)
        match = self._swap_in_match(swapped)
        return self._shortfall(len(swapped.host_block_ids) - len(match.block_ids), match) is None

    def swap_in(self, key: RequestKey) -> SwapResult:
        """Restore a swapped request; blocks still cached on device are reused, not copied."""
        swapped = self._get_swapped(key)
        match = self._swap_in_match(swapped)
        num_reused = len(match.block_ids)
        failed = self._shortfall(len(swapped.host_block_ids) - num_reused, match)
        if failed is not None:
            return SwapFailed(key, SwapDirection.IN, FailureReason.DEVICE_BLOCKS_EXHAUSTED, *failed)
        del self._swapped[key]
        for block_id in match.block_ids:
            self._device.acquire(block_id)
        copy_pairs = tuple((self._device.take_fresh(), host_block_id)
                           for host_block_id in swapped.host_block_ids[num_reused:])
        for host_block_id in swapped.host_block_ids:
            self._host.release(host_block_id)
        block_ids = list(match.block_ids) + [device for device, _ in copy_pairs]
        resident = _Resident(block_ids, swapped.num_rows, swapped.num_committed_rows,
                             swapped.token_ids, match.new_chain())
        self._resident[key] = resident
        self._advance_chain(resident)
        return SwapGranted(key, SwapDirection.IN, copy_pairs, swapped.num_rows, num_reused)

    # ------------------------------------------------------------------ audit

    def audit(self) -> PoolUsage:
        """O(total) cross-check of pools, tables and counters; for tests and debugging."""
        self._device.audit()
        self._host.audit()
        expected_refs: dict[int, int] = {}
        for resident in self._resident.values():
            for block_id in resident.block_ids:
                expected_refs[block_id] = expected_refs.get(block_id, 0) + 1
        for block_id in range(self._device.num_blocks_total):
            if self._device.ref_count(block_id) != expected_refs.get(block_id, 0):
                raise KvInvariantError(f"block {block_id} refcount disagrees with block tables")
        if not self._releasing <= self._resident.keys():
            raise KvInvariantError("a releasing request holds no device blocks")
        num_host = sum(len(s.host_block_ids) for s in self._swapped.values())
        if num_host != self._host.num_host_blocks_swapped:
            raise KvInvariantError("host blocks leaked")
        return self.usage()

    # -------------------------------------------------------------- internals

    def _num_blocks_for(self, num_rows: int) -> int:
        return blocks_for(num_rows, self._block_size)

    def _match(self, token_ids: Sequence[int] | None, max_rows: int) -> _Match:
        """Verified cached chain over the full blocks of ``token_ids[:max_rows]``."""
        if token_ids is None or not self._config.enable_prefix_caching:
            return _NO_MATCH
        block_ids: list[int] = []
        parent_hash, parent_entry, num_reclaimable = ROOT_HASH, ROOT_ENTRY, 0
        size = self._block_size
        for start in range(0, max_rows - size + 1, size):
            block_tokens = token_ids[start:start + size]
            block_hash = self._hasher(parent_hash, block_tokens)
            block_id = self._device.find(block_hash, block_tokens, parent_entry)
            if block_id is None:
                break
            block_ids.append(block_id)
            num_reclaimable += self._device.ref_count(block_id) == 0
            parent_hash, parent_entry = block_hash, self._device.entry_of(block_id)
        return _Match(tuple(block_ids), parent_hash, parent_entry, num_reclaimable)

    def _swap_in_match(self, swapped: _Swapped) -> _Match:
        return self._match(swapped.token_ids, swapped.num_committed_rows)

    def _shortfall(self, num_new_blocks: int, match: _Match) -> tuple[int, int] | None:
        """``(needed, available)`` when the pool cannot supply the blocks, else None."""
        available = self._device.num_blocks_available - match.num_reclaimable_hits
        return None if num_new_blocks <= available else (num_new_blocks, available)

    def _advance_chain(self, resident: _Resident) -> int:
        """Give committed full blocks a cache identity; returns how many were registered."""
        chain = resident.chain
        if resident.token_ids is None or not self._config.enable_prefix_caching:
            return 0
        size, num_registered = self._block_size, 0
        while chain.entry is not None and (chain.num_blocks + 1) * size <= resident.num_committed_rows:
            index = chain.num_blocks
            block_tokens = resident.token_ids[index * size:(index + 1) * size]
            block_hash = self._hasher(chain.block_hash, block_tokens)
            block_id = resident.block_ids[index]
            existing = self._device.find(block_hash, block_tokens, chain.entry)
            if existing is not None:  # our own hit, or identical content already cached
                entry = self._device.entry_of(existing)
            elif self._device.is_hash_taken(block_hash):
                chain.entry = None  # collision with other content: stop caching this request
                break
            else:
                entry = self._device.register(block_id, block_hash, block_tokens, chain.entry)
                num_registered += 1
            chain.num_blocks, chain.block_hash, chain.entry = index + 1, block_hash, entry
        return num_registered

    def _get_resident(self, key: RequestKey) -> _Resident:
        resident = self._resident.get(key)
        if resident is None:
            if key in self._swapped:
                raise RequestStateError(f"{key} is swapped out, not resident")
            raise UnknownRequestError(f"{key} holds no blocks")
        return resident

    def _get_swapped(self, key: RequestKey) -> _Swapped:
        swapped = self._swapped.get(key)
        if swapped is None:
            if key in self._resident:
                raise RequestStateError(f"{key} is resident, not swapped out")
            raise UnknownRequestError(f"{key} holds no blocks")
        return swapped

    def _get_any(self, key: RequestKey) -> _Resident | _Swapped:
        found: _Resident | _Swapped | None = self._resident.get(key)
        if found is None:
            found = self._swapped.get(key)
        if found is None:
            raise UnknownRequestError(f"{key} holds no blocks")
        return found


_NO_MATCH = _Match((), ROOT_HASH, ROOT_ENTRY, 0)


def _num_rows_of(token_ids: Sequence[int] | None, num_rows: int | None) -> int:
    if (token_ids is None) == (num_rows is None):
        raise ValueError("give exactly one of token_ids or num_rows")
    rows = len(token_ids) if token_ids is not None else num_rows
    assert rows is not None
    if rows <= 0:
        raise ValueError(f"need at least one row, got {rows}")
    return rows
