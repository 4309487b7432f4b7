"""pack() row routes (spec 0x04) and the paged K/V pools."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from iterserve.model.config import ModelConfig
from iterserve.model.kv_cache import PagedKVCache, bytes_per_block
from iterserve.model.packing import SegmentSpec, pack

CONFIG = ModelConfig(
    architecture="LlamaForCausalLM",
    vocab_size=100,
    hidden_size=32,
    intermediate_size=64,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=8,
    rms_norm_eps=1e-5,
    rope_theta=10000.0,
    max_position_embeddings=64,
    tie_word_embeddings=False,
    sliding_windows=(None, None),
)

segment_specs = st.lists(
    st.tuples(st.integers(0, 20), st.integers(1, 6), st.booleans()), min_size=1, max_size=6
)


@settings(max_examples=100, deadline=None)
@given(specs=segment_specs, block_size=st.integers(1, 5))
def test_pack_routes_every_row(specs, block_size: int) -> None:
    """o_{i+1} = o_i + q_i; positions = range(start, end); slots follow each block table."""
    segments, next_block = [], 0
    for start, length, sample in specs:
        num_blocks = -(-(start + length) // block_size)
        blocks = list(
            range(next_block + num_blocks - 1, next_block - 1, -1)
        )  # reversed: non-contiguous order
        next_block += num_blocks
        segments.append(SegmentSpec(list(range(length)), start, blocks, sample))
    batch = pack(segments, block_size)
    offsets = batch.request_offsets.tolist()
    assert offsets[0] == 0 and len(offsets) == len(segments) + 1
    slots = set()
    for i, segment in enumerate(segments):
        rows = slice(offsets[i], offsets[i + 1])
        assert offsets[i + 1] - offsets[i] == len(segment.token_ids)
        assert batch.positions[rows].tolist() == list(range(segment.start, segment.end))
        for position, slot in zip(
            range(segment.start, segment.end), batch.slot_mapping[rows].tolist(), strict=True
        ):
            assert (
                slot
                == segment.block_ids[position // block_size] * block_size + position % block_size
            )
            slots.add(slot)
    assert len(slots) == batch.num_rows  # no two rows share a pool slot
    expected_sample_rows = [offsets[i + 1] - 1 for i, s in enumerate(segments) if s.sample]
    assert batch.sample_rows.tolist() == expected_sample_rows
    assert batch.context_lens.tolist() == [s.start for s in segments]


def test_pack_rejects_bad_inputs() -> None:
    with pytest.raises(ValueError, match="at least one segment"):
        pack([], 4)
    with pytest.raises(ValueError, match="need 2 blocks"):
        pack([SegmentSpec([1, 2], 3, [0], True)], 4)
    with pytest.raises(ValueError, match="at least one token"):
        SegmentSpec([], 0, [0], True)
    with pytest.raises(ValueError, match="start"):
        SegmentSpec([1], -1, [0], True)


def test_cache_shapes_and_budget() -> None:
    cache = PagedKVCache.allocate(CONFIG, num_blocks=10, block_size=4)
    assert len(cache.key_pools) == len(cache.value_pools) == 2
    assert cache.key_pools[0].shape == (10, 4, 2, 8)
    per_block = bytes_per_block(CONFIG, 4, torch.float32)
    assert per_block == 2 * 2 * 4 * 2 * 8 * 4
    assert cache.num_bytes == 10 * per_block
    budget = PagedKVCache.allocate_for_budget(CONFIG, max_bytes=7 * per_block + 1, block_size=4)
    assert budget.num_blocks == 7
    with pytest.raises(ValueError):
        PagedKVCache.allocate_for_budget(CONFIG, max_bytes=per_block - 1, block_size=4)


def test_cache_write_lands_at_slots() -> None:
    cache = PagedKVCache.allocate(CONFIG, num_blocks=4, block_size=2)
    keys = torch.arange(3 * 2 * 8, dtype=torch.float32).view(3, 2, 8)
    cache.write(1, torch.tensor([5, 0, 2]), keys, -keys)
    assert torch.equal(cache.key_pools[1][2, 1], keys[0])
    assert torch.equal(cache.key_pools[1][0, 0], keys[1])
    assert torch.equal(cache.value_pools[1][1, 0], -keys[2])
    assert cache.key_pools[0].abs().sum() == 0


def test_copy_blocks_copies_every_layer() -> None:
    cache = PagedKVCache.allocate(CONFIG, num_blocks=4, block_size=2)
    cache.write(0, torch.tensor([0, 1]), torch.ones(2, 2, 8), torch.full((2, 2, 8), 2.0))
    cache.write(1, torch.tensor([1]), torch.full((1, 2, 8), 3.0), torch.full((1, 2, 8), 4.0))
    cache.copy_blocks(torch.tensor([0]), torch.tensor([3]))
    for layer in range(2):
        assert torch.equal(cache.key_pools[layer][3], cache.key_pools[layer][0])
        assert torch.equal(cache.value_pools[layer][3], cache.value_pools[layer][0])
    assert cache.value_pools[1][3, 1].unique().tolist() == [4.0]


def test_pack_records_host_bounds() -> None:
    batch = pack([SegmentSpec([5, 9], 0, [3], True), SegmentSpec([2], 4, [0, 7], False)], 4)
    assert (batch.max_block_id, batch.max_token_id) == (7, 9)


def test_pack_reads_any_segment_record_and_rejects_empty_rows() -> None:
    """The executor hands pack its own records (packing.SegmentRows): same batch."""

    @dataclass(frozen=True)
    class Rows:
        token_ids: tuple[int, ...]
        start: int
        block_ids: tuple[int, ...]
        sample: bool

    specs = [SegmentSpec([5, 9, 4], 0, [3], False), SegmentSpec([2], 6, [0, 7], True)]
    records = [Rows(tuple(s.token_ids), s.start, tuple(s.block_ids), s.sample) for s in specs]
    expected, batch = pack(specs, 4), pack(records, 4)
    for name in ("token_ids", "positions", "request_offsets", "block_tables", "slot_mapping",
                 "context_lens", "sample_rows"):
        assert torch.equal(getattr(batch, name), getattr(expected, name)), name
    assert batch.slot_mapping.tolist() == [12, 13, 14, 30]
    with pytest.raises(ValueError, match="segment 1 has no token rows"):
        pack([records[0], Rows((), 2, (1,), True)], 4)
    with pytest.raises(ValueError, match="segment 1: block ids must be >= 0"):
        pack([records[0], Rows((1,), 2, (-1,), True)], 4)
