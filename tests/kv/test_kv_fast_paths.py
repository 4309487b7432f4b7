"""The executor's one-lookup paths (``grow_to``, ``commit_to``,
``grow_and_commit``) against the general calls they replace: the same
results, the same errors, the same pools and block tables, step by step."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iterserve.kv import (
    AllocationFailed,
    BlockManager,
    BlockManagerConfig,
    RequestKey,
    RequestStateError,
    UnknownRequestError,
)


def _reference_grow(manager: BlockManager, key: RequestKey, num_rows: int,
                    token_ids: list[int] | None) -> int | AllocationFailed:
    """What ``KvResidency.prepare`` did before the fast path."""
    grow = num_rows - manager.num_rows(key)
    if grow > 0:
        tail = None if token_ids is None else token_ids[len(token_ids) - grow:]
        result = manager.append_rows(key, tail, num_rows=None if tail else grow)
        if isinstance(result, AllocationFailed):
            return result
    return manager.num_committed_rows(key)


def _reference_commit(manager: BlockManager, key: RequestKey, num_rows: int) -> None:
    if num_rows > manager.num_committed_rows(key):
        manager.commit(key, num_rows)


def _same(fast: BlockManager, slow: BlockManager, keys: list[RequestKey]) -> None:
    assert fast.audit() == slow.audit()
    for key in keys:
        assert fast.block_table(key) == slow.block_table(key)
        assert fast.num_rows(key) == slow.num_rows(key)
        assert fast.num_committed_rows(key) == slow.num_committed_rows(key)


def _pair(num_blocks: int, block_size: int) -> tuple[BlockManager, BlockManager]:
    config = BlockManagerConfig(num_blocks, block_size, 4, True)
    return BlockManager(config), BlockManager(config)


STEPS = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 6), st.booleans()), max_size=30)


@settings(max_examples=60, deadline=None)
@given(block_size=st.integers(1, 4), num_blocks=st.integers(2, 12), steps=STEPS,
       tokens=st.booleans())
def test_fast_paths_match_the_general_calls(block_size: int, num_blocks: int,
                                            steps: list[tuple[int, int, bool]],
                                            tokens: bool) -> None:
    fast, slow = _pair(num_blocks, block_size)
    keys = [RequestKey(f"r{i}", 0) for i in range(3)]
    written: dict[RequestKey, list[int]] = {}
    for key in keys:  # one row each; tokens make the rows cacheable
        ids = [1] if tokens else None
        assert type(fast.allocate(key, ids, num_rows=None if ids else 1)) is type(
            slow.allocate(key, ids, num_rows=None if ids else 1))
        written[key] = [1]
    live = [key for key in keys if fast.is_resident(key)]
    for index, grow, combined in steps:
        if not live:
            break
        key = live[index % len(live)]
        end = fast.num_rows(key) + grow
        ids = None
        if tokens:  # the tokens at positions [committed, end), as the simulator passes them
            written[key] = written[key] + [(len(written[key]) + k) % 3 for k in range(grow)]
            ids = written[key][fast.num_committed_rows(key):end]
        if combined:
            failed = fast.grow_and_commit(key, end, ids)
            expected = _reference_grow(slow, key, end, ids)
            assert isinstance(failed, AllocationFailed) == isinstance(expected, AllocationFailed)
            if failed is None:
                _reference_commit(slow, key, end)
        else:
            got = fast.grow_to(key, end, ids)
            expected = _reference_grow(slow, key, end, ids)
            assert got == expected
            if not isinstance(got, AllocationFailed):
                fast.commit_to(key, end)
                _reference_commit(slow, key, end)
        if isinstance(expected, AllocationFailed):
            written[key] = written[key][:slow.num_rows(key)]
        _same(fast, slow, live)


def test_fast_paths_refuse_what_the_general_calls_refuse() -> None:
    fast, _ = _pair(8, 4)
    key = RequestKey("r", 0)
    fast.allocate(key, num_rows=3)
    fast.commit(key, 3)
    assert fast.swap_out(key)
    assert fast.grow_to(key, 3) == 3  # no growth: the committed rows, swapped or not
    with pytest.raises(RequestStateError):
        fast.grow_to(key, 5)
    with pytest.raises(RequestStateError):
        fast.grow_and_commit(key, 5)
    with pytest.raises(RequestStateError):
        fast.commit_to(key, 5)


ROW_BATCHES = st.lists(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 6)), max_size=6),
                       max_size=12)


@settings(max_examples=60, deadline=None)
@given(block_size=st.integers(1, 4), num_blocks=st.integers(3, 12), batches=ROW_BATCHES,
       cached=st.booleans())
def test_grow_and_commit_rows_is_grow_and_commit_of_each(
        block_size: int, num_blocks: int, batches: list[list[tuple[int, int]]],
        cached: bool) -> None:
    """The batch of anonymous rows against ``grow_and_commit`` called per
    row in order: the same successes, pools and block tables, a shortfall
    in the middle of a batch included. Key 3 is never allocated (the general
    path's error), and with ``cached`` key 0 holds token ids (the general
    path, not the anonymous fast path)."""
    fast, slow = _pair(num_blocks, block_size)
    keys = [RequestKey(f"r{i}", 0) for i in range(3)]
    for number, key in enumerate(keys):
        ids = [7] if cached and number == 0 else None
        for manager in (fast, slow):
            manager.allocate(key, ids, num_rows=None if ids else 1)
            manager.commit(key, 1)
    missing = RequestKey("r3", 0)
    for batch in batches:
        batch_keys = [keys[index] if index < 3 else missing for index, _ in batch]
        ends = [(fast.num_rows(key) if key != missing else 0) + grow
                for key, (_, grow) in zip(batch_keys, batch, strict=True)]
        if cached and keys[0] in batch_keys:
            return  # a cached request's rows need their token ids: not this method's rows
        if missing in batch_keys:
            with pytest.raises(UnknownRequestError):
                fast.grow_and_commit_rows(batch_keys, ends)
            return
        got = fast.grow_and_commit_rows(batch_keys, ends)
        expected = [slow.grow_and_commit(key, end) is None
                    for key, end in zip(batch_keys, ends, strict=True)]
        assert got == expected
        _same(fast, slow, keys)
