"""The batched paged attention path (one call per layer over the packed batch)
against the per-request reference path: its mask, its per-tile block lists
(what a compiled kernel visits), its output, and the whole model's logits."""

from __future__ import annotations

import random
import warnings

import numpy as np
import pytest
import torch

from iterserve.model.attention import AttentionMetadata, paged_attention
from iterserve.model.batched_attention import (
    QUERY_TILE_ROWS,
    FlexLayout,
    batched_paged_attention,
    host_layout,
)
from iterserve.model.packing import SegmentSpec, pack
from iterserve.model.staging import HostStaging, aligned_offsets, layout_for, pack_batched

NUM_POOL_BLOCKS, BLOCK_SIZE, KV_HEADS, HEADS, HEAD_DIM = 96, 4, 2, 4, 8


@pytest.fixture(autouse=True)
def _quiet_eager_flex():
    with warnings.catch_warnings():  # flex_attention warns that it runs uncompiled on CPU
        warnings.simplefilter("ignore")
        yield


def random_specs(seed: int, share_prefix: bool = False) -> list[SegmentSpec]:
    """Decode rows and prefill chunks over shuffled blocks; with
    `share_prefix`, two segments share their first block (a prefix-cache hit)."""
    rng = random.Random(seed)
    free = list(range(NUM_POOL_BLOCKS))
    rng.shuffle(free)
    specs = []
    for _ in range(rng.randint(3, 9)):
        num_rows = 1 if rng.random() < 0.5 else rng.randint(2, 37)
        start = rng.randint(0, 40)
        end = start + num_rows
        table = [free.pop() for _ in range(-(-end // BLOCK_SIZE))]
        specs.append(SegmentSpec([1] * num_rows, start, table, rng.random() < 0.8))
    if share_prefix:
        first, second = specs[0], specs[1]
        specs[1] = SegmentSpec(second.token_ids, max(second.start, BLOCK_SIZE),
                               (first.block_ids[0], *second.block_ids[1:], free.pop()),
                               second.sample)
    return specs


def layout_of(batch) -> FlexLayout:
    return layout_for(batch, NUM_POOL_BLOCKS)


def reference_visibility(batch, window) -> torch.Tensor:
    """[Q, slots] from the per-request view: row (segment s, position p) sees
    slot table_s[j] * bs + o iff j * bs + o <= p (and within the window)."""
    visible = torch.zeros(batch.num_rows, NUM_POOL_BLOCKS * BLOCK_SIZE, dtype=torch.bool)
    for segment, (begin, end) in enumerate(zip(batch.request_offsets[:-1].tolist(),
                                               batch.request_offsets[1:].tolist(), strict=True)):
        table = batch.block_tables[segment, : batch.num_blocks[segment]].tolist()
        for row in range(begin, end):
            position = batch.starts[segment] + row - begin
            for key_position in range(position + 1):
                if window is not None and key_position <= position - window:
                    continue
                block, offset = table[key_position // BLOCK_SIZE], key_position % BLOCK_SIZE
                visible[row, block * BLOCK_SIZE + offset] = True
    return visible


def dense_mask(layout: FlexLayout, num_rows: int, window) -> torch.Tensor:
    rows = torch.arange(num_rows)[:, None]
    slots = torch.arange(NUM_POOL_BLOCKS * BLOCK_SIZE)[None, :]
    zero = torch.zeros((), dtype=torch.long)
    return layout.mask_mod(window)(zero, zero, rows, slots)


def listed_slots(layout: FlexLayout, num_rows: int) -> torch.Tensor:
    """[Q, slots]: whether the row's query tile lists the slot's block."""
    listed = torch.zeros(num_rows, NUM_POOL_BLOCKS * BLOCK_SIZE, dtype=torch.bool)
    for row in range(num_rows):
        tile = row // QUERY_TILE_ROWS
        for block in layout.kv_indices[tile, : int(layout.kv_num_blocks[tile])].tolist():
            listed[row, block * BLOCK_SIZE: (block + 1) * BLOCK_SIZE] = True
    return listed


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("window", [None, 6])
def test_mask_is_the_per_request_visibility(seed: int, window) -> None:
    batch = pack(random_specs(seed, share_prefix=seed % 2 == 1), BLOCK_SIZE)
    layout = layout_of(batch)
    assert torch.equal(dense_mask(layout, batch.num_rows, window),
                       reference_visibility(batch, window))


@pytest.mark.parametrize("seed", range(6))
def test_tile_lists_cover_every_visible_slot_once(seed: int) -> None:
    batch = pack(random_specs(seed, share_prefix=True), BLOCK_SIZE)
    layout = layout_of(batch)
    visible = reference_visibility(batch, None)
    assert not (visible & ~listed_slots(layout, batch.num_rows)).any()
    for tile in range(layout.kv_num_blocks.shape[0]):
        listed = layout.kv_indices[tile, : int(layout.kv_num_blocks[tile])].tolist()
        assert len(listed) == len(set(listed))  # a block listed twice would count twice


def test_tile_lists_stop_at_the_causal_frontier() -> None:
    """A long chunk's first tile does not list the blocks its later rows need."""
    table = list(range(20))
    batch = pack([SegmentSpec([1] * 64, 0, table[:16], True)], BLOCK_SIZE)
    layout = layout_of(batch)
    assert layout.kv_num_blocks.tolist() == [4, 8, 12, 16]


def test_a_block_at_two_logical_indices_is_refused() -> None:
    specs = [SegmentSpec([1], 5, (3, 4), True), SegmentSpec([1], 5, (4, 7), True)]
    with pytest.raises(ValueError, match="block 4 appears at two logical indices"):
        layout_of(pack(specs, BLOCK_SIZE))


def sparse_emulation(query, key_pool, value_pool, layout: FlexLayout, window) -> torch.Tensor:
    """What a block-sparse kernel computes: per query tile, only the listed
    blocks, masked by mask_mod inside them (the eager path is dense)."""
    num_rows = query.shape[0]
    keys = key_pool.flatten(0, 1).repeat_interleave(HEADS // KV_HEADS, dim=1)
    values = value_pool.flatten(0, 1).repeat_interleave(HEADS // KV_HEADS, dim=1)
    allowed = dense_mask(layout, num_rows, window) & listed_slots(layout, num_rows)
    scores = torch.einsum("qhd,khd->hqk", query, keys) * HEAD_DIM ** -0.5
    weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    return torch.einsum("hqk,khd->qhd", weights, values).reshape(num_rows, -1)


def reference_attention(batch, query, key_pool, value_pool, window) -> torch.Tensor:
    new_keys = key_pool.view(-1, KV_HEADS, HEAD_DIM)[batch.slot_mapping]
    new_values = value_pool.view(-1, KV_HEADS, HEAD_DIM)[batch.slot_mapping]
    metadata = AttentionMetadata.build(batch, [window], 8, None)
    return paged_attention(query, new_keys, new_values, key_pool, value_pool, metadata, window)


def random_inputs(seed: int, num_rows: int, dtype: torch.dtype):
    generator = torch.Generator().manual_seed(seed)
    shape = (NUM_POOL_BLOCKS, BLOCK_SIZE, KV_HEADS, HEAD_DIM)
    return (torch.randn(num_rows, HEADS, HEAD_DIM, generator=generator).to(dtype),
            torch.randn(shape, generator=generator).to(dtype),
            torch.randn(shape, generator=generator).to(dtype))


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("window", [None, 6])
def test_batched_attention_matches_the_per_request_path(seed: int, window) -> None:
    batch = pack(random_specs(seed, share_prefix=seed % 2 == 0), BLOCK_SIZE)
    query, key_pool, value_pool = random_inputs(seed, batch.num_rows, torch.float32)
    layout = layout_of(batch)
    expected = reference_attention(batch, query, key_pool, value_pool, window)
    got = batched_paged_attention(query, key_pool, value_pool, layout, window)
    torch.testing.assert_close(got, expected, rtol=0, atol=2e-6)
    torch.testing.assert_close(sparse_emulation(query, key_pool, value_pool, layout, window),
                               expected, rtol=0, atol=2e-6)


def test_batched_attention_soft_caps_like_the_per_request_path() -> None:
    batch = pack(random_specs(7), BLOCK_SIZE)
    query, key_pool, value_pool = random_inputs(7, batch.num_rows, torch.float32)
    query = query * 8  # scores large enough for the cap to bite
    new_keys = key_pool.view(-1, KV_HEADS, HEAD_DIM)[batch.slot_mapping]
    new_values = value_pool.view(-1, KV_HEADS, HEAD_DIM)[batch.slot_mapping]
    metadata = AttentionMetadata.build(batch, [None], 8, None)
    expected = paged_attention(query, new_keys, new_values, key_pool, value_pool, metadata,
                               None, softcap=5.0)
    got = batched_paged_attention(query, key_pool, value_pool, layout_of(batch), None,
                                  softcap=5.0)
    torch.testing.assert_close(got, expected, rtol=0, atol=2e-6)


def test_pack_batched_equals_pack_plus_layout() -> None:
    specs = random_specs(3, share_prefix=True)
    staging = HostStaging("cpu")
    batched = pack_batched(specs, BLOCK_SIZE, NUM_POOL_BLOCKS, staging)
    plain = pack(specs, BLOCK_SIZE)
    for name in ("token_ids", "positions", "request_offsets", "block_tables", "slot_mapping",
                 "context_lens", "sample_rows"):
        assert torch.equal(getattr(batched, name), getattr(plain, name)), name
    assert (batched.query_lens, batched.starts, batched.sample_segments) == (
        plain.query_lens, plain.starts, plain.sample_segments)
    assert batched.flex is not None
    expected = layout_of(plain)
    for name in ("segment_of_row", "positions", "tables", "block_logical", "kv_num_blocks",
                 "kv_indices"):
        assert torch.equal(getattr(batched.flex, name), getattr(expected, name)), name


def test_staging_offsets_keep_every_array_aligned() -> None:
    arrays = [np.zeros(3, np.int32), np.zeros(5, np.int64), np.zeros(0, np.int64),
              np.zeros((2, 3), np.int32)]
    offsets = aligned_offsets(arrays)
    assert offsets == [0, 16, 64, 64, 96]
    assert all(offset % 16 == 0 for offset in offsets)


def test_host_layout_pads_rows_to_whole_tiles_that_see_nothing() -> None:
    layout = host_layout(np.array([3]), np.array([0]), np.array([[5]]), np.array([1]), 4)
    assert layout.segment_of_row.shape == (QUERY_TILE_ROWS,)
    assert layout.positions[:4].tolist() == [0, 1, 2, -1]


def test_config_backend_names_are_the_kernels_backends() -> None:
    from iterserve.config import ATTENTION_BACKEND_NAMES, EngineConfig
    from iterserve.model.kernels import ATTENTION_BACKENDS

    assert ATTENTION_BACKEND_NAMES == ATTENTION_BACKENDS
    with pytest.raises(ValueError, match="attention_backend must be one of"):
        EngineConfig(attention_backend="triton")


def test_auto_selects_the_batched_path_off_the_cpu_only() -> None:
    from iterserve.model.kernels import uses_batched_attention

    assert not uses_batched_attention("auto", torch.device("cpu"))
    assert uses_batched_attention("auto", torch.device("cuda"))
    assert uses_batched_attention("flex", torch.device("cpu"))
    assert not uses_batched_attention("torch", torch.device("cuda"))


@pytest.fixture(scope="module")
def tiny_pair(tiny_dir):
    """The tiny checkpoint on the batched path and on the per-request reference path."""
    from iterserve.model.loader import load_model

    batched = load_model(tiny_dir, attention_backend="flex")
    reference = load_model(tiny_dir, attention_backend="torch")
    assert batched.batched_attention and not reference.batched_attention
    return batched, reference


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(3))
def test_model_logits_match_the_per_request_path(tiny_pair, seed: int) -> None:
    """Steps mixing prefill chunks (at 0 and over history) and decode rows:
    the same K/V is written and the same logits come out (fp32)."""
    from model_helpers import BlockHandout, random_tokens

    batched, reference = tiny_pair
    rng = random.Random(seed)
    vocab, block_size = batched.config.vocab_size, 4
    sequences = {f"r{i}": random_tokens(rng, rng.randint(3, 30), vocab) for i in range(5)}
    caches = [model.allocate_cache(64, block_size) for model in (batched, reference)]
    handout = BlockHandout(64, block_size, seed=seed)
    staging = HostStaging("cpu")
    frontier = dict.fromkeys(sequences, 0)
    while any(frontier[n] < len(s) for n, s in sequences.items()):
        specs = []
        for name, tokens in sequences.items():
            start = frontier[name]
            if start == len(tokens):
                continue
            end = min(len(tokens), start + rng.choice([1, 1, 2, 7, 19]))
            specs.append(SegmentSpec(tokens[start:end], start,
                                     handout.table(name, end), end > start))
            frontier[name] = end
        got = batched.forward(pack_batched(specs, block_size, 64, staging), caches[0])
        expected = reference.forward(pack(specs, block_size), caches[1])
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
    torch.testing.assert_close(caches[0].key_pools[1], caches[1].key_pools[1], rtol=0, atol=1e-5)


@pytest.mark.slow
def test_executor_greedy_tokens_match_the_per_request_path(tiny_dir) -> None:
    from iterserve.llm import LLM
    from iterserve.records.sampling_params import SamplingParams

    prompts = [[5, 9, 13, 2] * 5, [7, 3], [11] * 23, [4, 8, 15, 16, 23, 42]]
    # request 0 wants prompt logprobs: its rows take the every-row-logits forward
    params = [SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True,
                             num_top_logprobs=2, prompt_logprobs=i == 0)
              for i in range(len(prompts))]
    outputs = {}
    logprobs = {}
    for backend in ("flex", "torch"):
        llm = LLM(tiny_dir, num_kv_blocks=64, block_size=4, attention_backend=backend,
                  max_num_batched_tokens=16)
        try:
            results = llm.generate(prompts, params)
            outputs[backend] = [o.token_ids for o in results]
            logprobs[backend] = [o.logprobs for o in results]
            if backend == "flex":
                assert llm.executor.model.batched_attention
                assert llm.executor._staging is not None
                assert llm.executor._staging.num_uploads > 0
        finally:
            llm.close()
    assert outputs["flex"] == outputs["torch"]
    for got, expected in zip(logprobs["flex"], logprobs["torch"], strict=True):
        assert got == pytest.approx(expected, abs=1e-4)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("window", [None, 6])
def test_varlen_arguments_describe_the_per_request_attention(seed: int, window) -> None:
    """The varlen kernel runs on CUDA only; on the CPU its arguments, read
    the way flash attention reads them (end-aligned causal, paged keys),
    must give the per-request path's output."""
    from iterserve.model.varlen_attention import VarlenLayout, reference_varlen

    batch = pack(random_specs(seed, share_prefix=seed % 2 == 0), BLOCK_SIZE)
    query, key_pool, value_pool = random_inputs(seed, batch.num_rows, torch.float32)
    layout = VarlenLayout.from_batch(batch)
    assert layout.cu_seq_q.dtype == layout.seqused_k.dtype == layout.block_table.dtype == (
        torch.int32)
    assert layout.cu_seq_k.tolist()[-1] == sum(
        s + q for s, q in zip(batch.starts, batch.query_lens, strict=True))
    expected = reference_attention(batch, query, key_pool, value_pool, window)
    got = reference_varlen(query, key_pool, value_pool, layout, window)
    torch.testing.assert_close(got, expected, rtol=0, atol=2e-6)


def test_varlen_is_refused_off_cuda(tiny_dir) -> None:
    from iterserve.model.loader import load_model

    with pytest.raises(ValueError, match="'varlen' runs on CUDA only"):
        load_model(tiny_dir, attention_backend="varlen")
