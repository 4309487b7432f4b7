"""Hypothesis state machine for the block manager (0x0A, 0x0C).

The machine plays the executor too: a fake K/V store records which token each
row slot holds. Committing rows writes them; swap mappings copy them in call
order. After every step every committed row of every live request must still
hold its own token, so a false prefix hit (hash collision), a block reused
while referenced, or a wrong copy mapping is caught by content, not only by
counters. Hashers that collide on purpose prove hits are verified by token ids
and by chain identity.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from iterserve.kv import (
    AllocationGranted,
    BlockManager,
    BlockManagerConfig,
    RequestKey,
    SwapGranted,
    UnknownRequestError,
    blake2b_block_hash,
)


def _constant_hash(parent_hash: bytes, token_ids: Sequence[int]) -> bytes:
    return b"x"


def _parent_blind_hash(parent_hash: bytes, token_ids: Sequence[int]) -> bytes:
    return hashlib.blake2b(bytes(token_ids), digest_size=8).digest()


HASHERS = {"exact": blake2b_block_hash, "constant": _constant_hash,
           "parent_blind": _parent_blind_hash}
TOKENS = st.lists(st.integers(0, 2), min_size=1, max_size=10)

Slot = tuple[object, ...]


def _causal_rows(token_ids: Sequence[int]) -> list[Slot]:
    """Row i's K/V depends on every token up to i, as in a causal transformer."""
    return [("tok", *token_ids[: i + 1]) for i in range(len(token_ids))]


class BlockManagerMachine(RuleBasedStateMachine):
    """Random allocate / share-prefix / commit / append / swap / resume / cancel sequences."""

    @initialize(block_size=st.integers(1, 4), num_blocks=st.integers(1, 20),
                num_host=st.integers(0, 12), hasher=st.sampled_from(sorted(HASHERS)),
                caching=st.booleans())
    def setup(self, block_size: int, num_blocks: int, num_host: int, hasher: str,
              caching: bool) -> None:
        config = BlockManagerConfig(num_blocks, block_size, num_host, caching)
        self.manager = BlockManager(config, HASHERS[hasher])
        self.block_size = block_size
        self.device_kv: dict[int, list[Slot | None]] = {}
        self.host_kv: dict[int, list[Slot | None]] = {}
        self.rows: dict[RequestKey, list[Slot]] = {}  # what each row must hold once committed
        self.tokens: dict[RequestKey, list[int]] = {}
        self.anonymous: set[RequestKey] = set()
        self.committed: dict[RequestKey, int] = {}
        self.resident: set[RequestKey] = set()
        self.swapped: set[RequestKey] = set()
        self.freed: list[RequestKey] = []
        self.next_id = 0

    # ---------------------------------------------------------------- helpers

    def _new_key(self) -> RequestKey:
        self.next_id += 1
        return RequestKey(f"r{self.next_id}", 0)

    def _allocate(self, key: RequestKey, token_ids: list[int] | None, num_rows: int) -> None:
        before = self.manager.usage()
        if token_ids is not None:
            can = self.manager.can_allocate(token_ids)
            hit = self.manager.lookup_prefix(token_ids)
            result = self.manager.allocate(key, token_ids)
        else:
            can = self.manager.can_allocate(num_rows=num_rows)
            result = self.manager.allocate(key, num_rows=num_rows)
        assert can == isinstance(result, AllocationGranted)
        if not isinstance(result, AllocationGranted):
            assert self.manager.usage() == before
            return
        if token_ids is not None:
            assert result.num_cached_rows == hit.num_cached_rows
            event(f"allocation prefix hit: {result.num_cached_rows > 0}")
            self.tokens[key] = list(token_ids)
            self.rows[key] = _causal_rows(token_ids)
        else:
            assert result.num_cached_rows == 0
            self.rows[key] = [("anon", key, i) for i in range(num_rows)]
            self.anonymous.add(key)
        assert result.num_cached_rows % self.block_size == 0
        assert result.num_cached_rows < result.num_rows
        self.committed[key] = result.num_cached_rows
        self.resident.add(key)

    def _slot(self, key: RequestKey, row: int) -> tuple[int, int]:
        table = self.manager.block_table(key)
        return table[row // self.block_size], row % self.block_size

    def _write_and_commit(self, key: RequestKey, target: int) -> None:
        for row in range(self.committed[key], target):  # the executor writes K/V
            block_id, offset = self._slot(key, row)
            self.device_kv.setdefault(block_id, [None] * self.block_size)[offset] = \
                self.rows[key][row]
        result = self.manager.commit(key, target)
        assert result.num_committed_rows == target
        self.committed[key] = target

    def _forget(self, key: RequestKey) -> None:
        self.resident.discard(key)
        self.swapped.discard(key)
        self.anonymous.discard(key)
        self.tokens.pop(key, None)
        del self.rows[key], self.committed[key]
        self.freed.append(key)

    # ------------------------------------------------------------------ rules

    @rule(token_ids=TOKENS)
    def allocate_tokens(self, token_ids: list[int]) -> None:
        self._allocate(self._new_key(), token_ids, len(token_ids))

    @rule(num_rows=st.integers(1, 10))
    def allocate_anonymous(self, num_rows: int) -> None:
        self._allocate(self._new_key(), None, num_rows)

    @precondition(lambda self: any(k not in self.anonymous for k in self.rows))
    @rule(data=st.data(), suffix=st.lists(st.integers(0, 2), max_size=4))
    def share_prefix(self, data: st.DataObject, suffix: list[int]) -> None:
        sources = sorted((k for k in self.rows if k not in self.anonymous), key=str)
        source = data.draw(st.sampled_from(sources))
        cut = data.draw(st.integers(1, len(self.tokens[source])))
        self._allocate(self._new_key(), self.tokens[source][:cut] + suffix, cut + len(suffix))

    @precondition(lambda self: bool(self.resident))
    @rule(data=st.data())
    def commit(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.resident, key=str)))
        self._write_and_commit(key, data.draw(st.integers(self.committed[key],
                                                          len(self.rows[key]))))

    @precondition(lambda self: any(k not in self.anonymous for k in self.resident))
    @rule(data=st.data(), suffix=st.lists(st.integers(0, 2), max_size=3))
    def commit_then_share(self, data: st.DataObject, suffix: list[int]) -> None:
        """A (possibly chunked, unfinished) prefill is shared by a new request.

        Only the committed part may hit: rows not yet written must never be reused.
        """
        key = data.draw(st.sampled_from(sorted(self.resident - self.anonymous, key=str)))
        num_rows = len(self.rows[key])
        finished = data.draw(st.booleans())
        self._write_and_commit(key, num_rows if finished else data.draw(
            st.integers(self.committed[key], num_rows)))
        tokens = list(self.tokens[key])
        self._allocate(self._new_key(), tokens + suffix, len(tokens) + len(suffix))

    @precondition(lambda self: bool(self.resident))
    @rule(data=st.data(), extra=st.lists(st.integers(0, 2), min_size=1, max_size=3))
    def append(self, data: st.DataObject, extra: list[int]) -> None:
        key = data.draw(st.sampled_from(sorted(self.resident, key=str)))
        before = self.manager.usage()
        start = len(self.rows[key])
        if key in self.anonymous:
            result = self.manager.append_rows(key, num_rows=len(extra))
            new_rows: list[Slot] = [("anon", key, start + i) for i in range(len(extra))]
        else:
            result = self.manager.append_rows(key, extra)
            self.tokens[key].extend(extra)
            new_rows = _causal_rows(self.tokens[key])[start:]
        if isinstance(result, AllocationGranted):
            self.rows[key].extend(new_rows)
            assert result.num_rows == len(self.rows[key])
        else:
            if key not in self.anonymous:
                del self.tokens[key][start:]
            assert self.manager.usage() == before

    @precondition(lambda self: bool(self.resident))
    @rule(data=st.data())
    def preempt_swap_out(self, data: st.DataObject) -> None:
        self.preempt_swap_out_key(data.draw(st.sampled_from(sorted(self.resident, key=str))))

    def preempt_swap_out_key(self, key: RequestKey) -> None:
        table = self.manager.block_table(key)
        result = self.manager.swap_out(key)
        if isinstance(result, SwapGranted):
            assert [device for device, _ in result.copy_pairs] == list(table)
            for device, host in result.copy_pairs:
                self.host_kv[host] = list(self.device_kv.get(device, [None] * self.block_size))
            self.resident.remove(key)
            self.swapped.add(key)
        else:
            assert self.manager.is_resident(key)

    @precondition(lambda self: bool(self.resident))
    @rule(data=st.data())
    def preserve_then_resume(self, data: st.DataObject) -> None:
        """PRESERVE_EXACT round trip; blocks still cached on device are reused, not copied."""
        key = data.draw(st.sampled_from(sorted(self.resident, key=str)))
        self._write_and_commit(key, len(self.rows[key]))
        self.preempt_swap_out_key(key)
        if key in self.swapped:
            self.swap_in_key(key)

    @precondition(lambda self: bool(self.swapped))
    @rule(data=st.data())
    def swap_in(self, data: st.DataObject) -> None:
        self.swap_in_key(data.draw(st.sampled_from(sorted(self.swapped, key=str))))

    def swap_in_key(self, key: RequestKey) -> None:
        can = self.manager.can_swap_in(key)
        result = self.manager.swap_in(key)
        assert can == isinstance(result, SwapGranted)
        if isinstance(result, SwapGranted):
            event(f"swap-in reused cached blocks: {result.num_reused_blocks > 0}")
            for device, host in result.copy_pairs:
                self.device_kv[device] = list(self.host_kv[host])
            self.swapped.remove(key)
            self.resident.add(key)

    @precondition(lambda self: bool(self.resident))
    @rule(data=st.data())
    def preempt_recompute_and_resume(self, data: st.DataObject) -> None:
        """RECOMPUTE preemption: free, then re-allocate; hits may shorten the rebuild."""
        key = data.draw(st.sampled_from(sorted(self.resident, key=str)))
        num_rows, tokens = len(self.rows[key]), self.tokens.get(key)
        self.manager.release(key)
        self._forget(key)
        self._allocate(key, tokens, num_rows)

    @precondition(lambda self: bool(self.rows))
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.rows, key=str)))
        result = self.manager.release(key)
        if key in self.swapped:
            assert result.num_reclaimed_host_blocks > 0 and result.num_reclaimed_blocks == 0
        self._forget(key)

    @precondition(lambda self: bool(self.freed))
    @rule(data=st.data())
    def double_free_is_refused(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(self.freed))
        if key in self.rows:
            return  # re-allocated by a recompute resume
        before = self.manager.usage()
        try:
            self.manager.release(key)
        except UnknownRequestError:
            pass
        else:
            raise AssertionError("double free accepted")
        assert self.manager.usage() == before

    # ------------------------------------------------------------- invariants

    @invariant()
    def accounting_is_exact(self) -> None:
        if not hasattr(self, "manager"):
            return
        usage = self.manager.audit()
        assert usage.num_blocks_free + usage.num_blocks_used + usage.num_blocks_cached == \
            usage.num_blocks_total
        assert usage.num_host_blocks_free + usage.num_host_blocks_swapped == usage.num_host_blocks_total
        assert min(usage.num_blocks_free, usage.num_blocks_used, usage.num_blocks_cached) >= 0
        tables = [self.manager.block_table(k) for k in self.resident]
        assert usage.num_blocks_used == len({b for table in tables for b in table})

    @invariant()
    def committed_rows_hold_their_own_tokens(self) -> None:
        if not hasattr(self, "manager"):
            return
        size = self.block_size
        for key in self.resident:
            table = self.manager.block_table(key)
            assert len(table) == -(-len(self.rows[key]) // size)
            for row in range(self.committed[key]):
                held = self.device_kv[table[row // size]][row % size]
                assert held == self.rows[key][row], (key, row)
        for key in self.swapped:
            assert not self.manager.is_resident(key) and self.manager.is_swapped(key)


TestBlockManagerMachine = BlockManagerMachine.TestCase
TestBlockManagerMachine.settings = settings(
    max_examples=100, stateful_step_count=35, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
