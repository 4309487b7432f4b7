"""Unit tests for the block manager's value objects and error paths (0x0A, 0x0C)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pytest

from iterserve.kv import (
    AllocationFailed,
    AllocationGranted,
    BlockManager,
    BlockManagerConfig,
    CommitResult,
    DuplicateRequestError,
    FailureReason,
    PoolUsage,
    PrefixHit,
    ReleasedBlocks,
    RequestKey,
    RequestStateError,
    SwapDirection,
    SwapFailed,
    SwapGranted,
    UnknownRequestError,
)

A, B, C = RequestKey("a", 0), RequestKey("b", 0), RequestKey("c", 0)


def _manager(num_blocks: int = 8, block_size: int = 4, num_host: int = 4,
             caching: bool = True) -> BlockManager:
    return BlockManager(BlockManagerConfig(num_blocks, block_size, num_host, caching))


def _granted(result: object) -> AllocationGranted:
    assert isinstance(result, AllocationGranted), result
    return result


def _prefill(manager: BlockManager, key: RequestKey, tokens: Sequence[int]) -> None:
    _granted(manager.allocate(key, tokens))
    manager.commit(key, len(tokens))


# ----------------------------------------------------------------- records


def test_records_are_frozen_and_slotted() -> None:
    record = PrefixHit(num_query_rows=9, num_cached_rows=8, num_blocks_cached=2)
    assert record.num_uncached_rows == 1
    assert not hasattr(record, "__dict__")
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.num_cached_rows = 0  # type: ignore[misc]


@pytest.mark.parametrize("request_id, generation", [("", 0), ("a", -1)])
def test_request_key_validation(request_id: str, generation: int) -> None:
    with pytest.raises(ValueError):
        RequestKey(request_id, generation)


def test_request_key_names_generation() -> None:
    assert str(RequestKey("C", 0)) == "C:0"
    assert RequestKey("a", 0) != RequestKey("a", 1)


@pytest.mark.parametrize("kwargs", [
    {"num_device_blocks": 0, "block_size_rows": 4},
    {"num_device_blocks": 4, "block_size_rows": 0},
    {"num_device_blocks": 4, "block_size_rows": 4, "num_host_blocks": -1},
])
def test_config_validation(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        BlockManagerConfig(**kwargs)


# -------------------------------------------------------------- allocation


def test_allocate_rounds_rows_up_to_blocks() -> None:
    manager = _manager()
    result = _granted(manager.allocate(A, num_rows=9))
    assert result == AllocationGranted(A, num_rows=9, num_cached_rows=0, num_new_blocks=3,
                                       num_blocks=3)
    assert len(manager.block_table(A)) == 3
    assert manager.usage() == PoolUsage(8, 5, 3, 0, 4, 4, 0)


def test_allocation_failure_is_a_fact_and_changes_nothing() -> None:
    manager = _manager(num_blocks=4)
    _granted(manager.allocate(A, num_rows=12))
    before = manager.usage()
    assert not manager.can_allocate(num_rows=5)
    result = manager.allocate(B, num_rows=5)
    assert result == AllocationFailed(B, FailureReason.DEVICE_BLOCKS_EXHAUSTED,
                                      num_blocks_needed=2, num_blocks_available=1)
    assert manager.usage() == before and not manager.is_resident(B)


@pytest.mark.parametrize("kwargs", [{}, {"num_rows": 0}, {"num_rows": 2, "token_ids": [1]}])
def test_allocate_needs_exactly_one_positive_size(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        _manager().allocate(A, **kwargs)  # type: ignore[arg-type]


def test_duplicate_allocation_is_refused() -> None:
    manager = _manager()
    _granted(manager.allocate(A, num_rows=1))
    with pytest.raises(DuplicateRequestError):
        manager.allocate(A, num_rows=1)
    _granted(manager.allocate(RequestKey("a", 1), num_rows=1))  # a successor generation is new


def test_append_grows_only_at_block_boundaries_and_is_atomic() -> None:
    manager = _manager(num_blocks=2)
    _granted(manager.allocate(A, [1, 2, 3]))
    assert _granted(manager.append_rows(A, [4])).num_new_blocks == 0
    assert _granted(manager.append_rows(A, [5])) == AllocationGranted(A, 5, 0, 1, 2)
    assert manager.can_append(A, 3) and not manager.can_append(A, 4)
    failed = manager.append_rows(A, [6, 7, 8, 9])
    assert failed == AllocationFailed(A, FailureReason.DEVICE_BLOCKS_EXHAUSTED, 1, 0)
    assert manager.num_rows(A) == 5


def test_append_must_match_allocation_kind() -> None:
    manager = _manager()
    _granted(manager.allocate(A, [1, 2]))
    _granted(manager.allocate(B, num_rows=2))
    with pytest.raises(RequestStateError):
        manager.append_rows(A, num_rows=1)
    with pytest.raises(RequestStateError):
        manager.append_rows(B, [3])


def test_commit_bounds() -> None:
    manager = _manager()
    _granted(manager.allocate(A, [1, 2, 3, 4, 5]))
    assert manager.commit(A, 4) == CommitResult(A, num_committed_rows=4, num_blocks_cached=1)
    with pytest.raises(RequestStateError):
        manager.commit(A, 3)  # frontiers never move back
    with pytest.raises(RequestStateError):
        manager.commit(A, 6)  # beyond the allocated rows
    assert manager.num_committed_rows(A) == 4


# ---------------------------------------------------------------- prefixes


def test_prefix_hit_reuses_committed_full_blocks() -> None:
    manager = _manager()
    _prefill(manager, A, range(10))
    assert manager.lookup_prefix(list(range(9)) + [99]) == PrefixHit(10, 8, 2)
    result = _granted(manager.allocate(B, list(range(9)) + [99]))
    assert (result.num_cached_rows, result.num_new_blocks) == (8, 1)
    assert manager.block_table(B)[:2] == manager.block_table(A)[:2]
    assert manager.num_committed_rows(B) == 8


def test_uncommitted_blocks_are_never_hits() -> None:
    manager = _manager()
    _granted(manager.allocate(A, range(8)))
    assert manager.lookup_prefix(range(9)).num_cached_rows == 0
    manager.commit(A, 5)
    assert manager.lookup_prefix(range(9)).num_cached_rows == 4


def test_hit_never_covers_the_final_token() -> None:
    """The executor must still compute one row to emit output 1 (0x01A)."""
    manager = _manager()
    _prefill(manager, A, range(8))
    assert manager.lookup_prefix(range(8)) == PrefixHit(8, 4, 1)
    assert manager.lookup_prefix(range(9)) == PrefixHit(9, 8, 2)
    assert _granted(manager.allocate(B, range(8))).num_cached_rows == 4


def test_decode_filled_blocks_become_cacheable() -> None:
    manager = _manager()
    _granted(manager.allocate(A, [1, 2, 3]))
    manager.commit(A, 3)
    _granted(manager.append_rows(A, [4]))
    assert manager.commit(A, 4).num_blocks_cached == 1
    assert manager.lookup_prefix([1, 2, 3, 4, 5]).num_cached_rows == 4


def test_hash_collision_never_produces_a_hit() -> None:
    def constant(parent_hash: bytes, token_ids: Sequence[int]) -> bytes:
        return b"same"

    manager = BlockManager(BlockManagerConfig(8, 2, 0), hasher=constant)
    _prefill(manager, A, [1, 2, 3])
    assert manager.lookup_prefix([1, 2, 9]).num_cached_rows == 2  # true hit
    assert manager.lookup_prefix([7, 7, 9]).num_cached_rows == 0  # same hash, other tokens
    result = _granted(manager.allocate(B, [7, 7, 9]))
    assert result.num_cached_rows == 0 and set(manager.block_table(B)).isdisjoint(
        manager.block_table(A))


def test_parent_blind_collision_is_caught_by_chain_identity() -> None:
    """Same block tokens after a different prefix must not hit (hash ignores parent)."""
    def parent_blind(parent_hash: bytes, token_ids: Sequence[int]) -> bytes:
        return bytes(token_ids)

    manager = BlockManager(BlockManagerConfig(8, 2, 0), hasher=parent_blind)
    _prefill(manager, A, [1, 1, 5, 5, 0])
    _prefill(manager, B, [2, 2, 0])
    assert manager.lookup_prefix([2, 2, 5, 5, 0]).num_cached_rows == 2


def test_caching_disabled_gives_no_hits() -> None:
    manager = _manager(caching=False)
    _prefill(manager, A, range(9))
    assert manager.lookup_prefix(range(9)).num_cached_rows == 0


def test_lookup_is_not_residency() -> None:
    """A hit promises nothing: eviction before allocation shrinks it (0x0C)."""
    manager = _manager(num_blocks=3, block_size=2)
    _prefill(manager, A, [1, 2, 3, 4, 5])
    manager.release(A)
    assert manager.lookup_prefix([1, 2, 3, 4, 5]).num_cached_rows == 4
    assert manager.usage().num_blocks_cached == 2
    _granted(manager.allocate(B, num_rows=4))  # free list first, then evicts the LRU block
    # Freed tail-first, so the tail block was least recently used: the root survives.
    assert manager.lookup_prefix([1, 2, 3, 4, 5]).num_cached_rows == 2


def test_unreferenced_cached_blocks_stay_reusable_until_evicted_lru() -> None:
    manager = _manager(num_blocks=4, block_size=2)
    _prefill(manager, A, [1, 2, 0])
    _prefill(manager, B, [3, 4, 0])
    assert manager.release(A) == ReleasedBlocks(A, 2, 1, 0, 0)
    manager.release(B)
    usage = manager.usage()
    assert (usage.num_blocks_free, usage.num_blocks_cached, usage.num_blocks_used) == (2, 2, 0)
    _granted(manager.allocate(C, num_rows=6))  # 2 free + evicts A's older cached block
    assert manager.lookup_prefix([1, 2, 0]).num_cached_rows == 0
    assert manager.lookup_prefix([3, 4, 0]).num_cached_rows == 2


def test_hits_on_cached_blocks_count_against_availability() -> None:
    manager = _manager(num_blocks=3, block_size=2)
    _prefill(manager, A, [1, 2, 3, 4, 0])
    manager.release(A)  # 2 cached + 1 free
    assert manager.can_allocate([1, 2, 3, 4, 0])
    assert not manager.can_allocate([1, 2, 3, 4, 0, 0, 0])
    result = manager.allocate(B, [1, 2, 3, 4, 0, 0, 0])
    assert result == AllocationFailed(B, FailureReason.DEVICE_BLOCKS_EXHAUSTED, 2, 1)
    assert manager.lookup_prefix([1, 2, 3, 4, 0]).num_cached_rows == 4


# -------------------------------------------------------------------- free


def test_free_counts_shared_blocks_and_refuses_double_free() -> None:
    manager = _manager()
    _prefill(manager, A, range(9))
    _granted(manager.allocate(B, range(9)))
    assert manager.release(A) == ReleasedBlocks(A, num_reclaimed_blocks=1, num_retained_cached_blocks=0,
                                         num_shared_blocks=2, num_reclaimed_host_blocks=0)
    with pytest.raises(UnknownRequestError):
        manager.release(A)
    assert manager.release(B) == ReleasedBlocks(B, 3, 2, 0, 0)
    assert manager.audit() == PoolUsage(8, 6, 0, 2, 4, 4, 0)


# -------------------------------------------------------------------- swap


def test_swap_round_trip_carries_the_copy_mapping() -> None:
    manager = _manager(caching=False)
    _prefill(manager, A, range(6))
    table = manager.block_table(A)
    out = manager.swap_out(A)
    assert isinstance(out, SwapGranted) and out.direction is SwapDirection.OUT
    assert [device for device, _ in out.copy_pairs] == list(table)
    assert manager.is_swapped(A) and manager.usage().num_host_blocks_swapped == 2
    with pytest.raises(RequestStateError):
        manager.block_table(A)
    with pytest.raises(RequestStateError):
        manager.append_rows(A, [1])
    back = manager.swap_in(A)
    assert isinstance(back, SwapGranted) and back.direction is SwapDirection.IN
    assert [host for _, host in back.copy_pairs] == [host for _, host in out.copy_pairs]
    assert manager.block_table(A) == tuple(device for device, _ in back.copy_pairs)
    assert (manager.num_rows(A), manager.num_committed_rows(A)) == (6, 6)
    assert manager.usage() == PoolUsage(8, 6, 2, 0, 4, 4, 0)


def test_swap_in_reuses_blocks_still_cached_on_device() -> None:
    manager = _manager()
    _prefill(manager, A, range(10))
    out = manager.swap_out(A)
    assert isinstance(out, SwapGranted)
    back = manager.swap_in(A)
    assert isinstance(back, SwapGranted)
    assert back.num_reused_blocks == 2 and len(back.copy_pairs) == 1
    assert back.copy_pairs[0][1] == out.copy_pairs[2][1]  # only the partial tail is copied


def test_swap_failures_are_facts() -> None:
    manager = _manager(num_blocks=2, num_host=1, caching=False)
    _prefill(manager, A, range(8))
    assert not manager.can_swap_out(A)
    assert manager.swap_out(A) == SwapFailed(A, SwapDirection.OUT,
                                             FailureReason.HOST_BLOCKS_EXHAUSTED, 2, 1)
    assert manager.is_resident(A)
    manager.release(A)
    _prefill(manager, B, range(4))
    assert isinstance(manager.swap_out(B), SwapGranted)
    _granted(manager.allocate(C, num_rows=8))
    assert not manager.can_swap_in(B)
    assert manager.swap_in(B) == SwapFailed(B, SwapDirection.IN,
                                            FailureReason.DEVICE_BLOCKS_EXHAUSTED, 1, 0)
    assert manager.is_swapped(B)


def test_swap_misuse_is_refused() -> None:
    manager = _manager()
    _prefill(manager, A, range(3))
    with pytest.raises(RequestStateError):
        manager.swap_in(A)
    with pytest.raises(UnknownRequestError):
        manager.swap_out(B)
    manager.swap_out(A)
    with pytest.raises(RequestStateError):
        manager.swap_out(A)


def test_cancel_while_swapped_returns_host_blocks() -> None:
    manager = _manager()
    _prefill(manager, A, range(5))
    manager.swap_out(A)
    assert manager.release(A) == ReleasedBlocks(A, 0, 0, 0, num_reclaimed_host_blocks=2)
    assert manager.audit().num_host_blocks_free == 4


def test_usage_partitions_the_pools() -> None:
    manager = _manager()
    _prefill(manager, A, range(9))
    _granted(manager.allocate(B, range(9)))
    manager.swap_out(B)
    usage = manager.audit()
    assert usage.num_blocks_free + usage.num_blocks_used + usage.num_blocks_cached == 8
    assert usage.num_host_blocks_free + usage.num_host_blocks_swapped == 4
    assert usage.num_blocks_available == usage.num_blocks_free + usage.num_blocks_cached
