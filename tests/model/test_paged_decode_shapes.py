"""The paged attention kernel's decode rows against a float64 reference over
the shapes its code paths split on: the AMX tile scores (bf16, head sizes of
a multiple of 32, up to 16 queries per kv head), the vector steps (other head
sizes of a multiple of 16, float32, float16), the portable loops (any other
head size); key counts on and off multiples of 16 and of the 128-key span,
blocks read in place (consecutive) and scattered, windows, GQA ratios 1..16."""

from __future__ import annotations

import itertools
import random

import pytest
import torch

from iterserve.model import kernels

CONTEXTS = (0, 14, 15, 16, 17, 31, 33, 127, 128, 129, 300)
TOLERANCES = {torch.float32: 2e-6, torch.bfloat16: 2e-2, torch.float16: 2e-3}


def _decode_case(seed: int, num_heads: int, num_kv_heads: int, head_dim: int, block_size: int,
                 dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """query [B, H, D], pools, block tables: the even sequences on consecutive
    blocks, the odd ones on shuffled blocks."""
    rng = random.Random(seed)
    needs = [-(-(n + 1) // block_size) for n in CONTEXTS]
    tables = torch.zeros(len(CONTEXTS), max(needs), dtype=torch.long)
    start = 0
    scattered = list(range(sum(needs[1::2])))
    rng.shuffle(scattered)
    scattered = [sum(needs[0::2]) + block for block in scattered]
    for i, need in enumerate(needs):
        if i % 2 == 0:
            tables[i, :need] = torch.arange(start, start + need)
            start += need
        else:
            tables[i, :need] = torch.tensor([scattered.pop() for _ in range(need)])
    generator = torch.Generator().manual_seed(seed)
    shape = (sum(needs), block_size, num_kv_heads, head_dim)
    key_pool, value_pool = (torch.randn(shape, generator=generator).to(dtype) for _ in range(2))
    query = torch.randn(len(CONTEXTS), num_heads, head_dim, generator=generator).to(dtype)
    return query, key_pool, value_pool, tables


def _reference(query: torch.Tensor, key_pool: torch.Tensor, value_pool: torch.Tensor,
               tables: torch.Tensor, window: int) -> torch.Tensor:
    """Row i attends keys [max(0, c_i + 1 - window), c_i] of its sequence, float64."""
    _, block_size, num_kv_heads, head_dim = key_pool.shape
    group = query.shape[1] // num_kv_heads
    rows = []
    for i, context in enumerate(CONTEXTS):
        slots = [int(tables[i, u // block_size]) * block_size + u % block_size
                 for u in range(context + 1)]
        if window:
            slots = slots[max(0, context + 1 - window):]
        keys, values = (pool.reshape(-1, num_kv_heads, head_dim)[slots].double()
                        .repeat_interleave(group, dim=1) for pool in (key_pool, value_pool))
        scores = torch.einsum("hd,khd->hk", query[i].double(), keys) * head_dim ** -0.5
        rows.append(torch.einsum("hk,khd->hd", scores.softmax(-1), values))
    return torch.stack(rows)


@pytest.mark.usefixtures("paged_decode_kernel")
@pytest.mark.parametrize("dtype", list(TOLERANCES))
@pytest.mark.parametrize(("num_heads", "num_kv_heads", "head_dim"),
                         [(4, 4, 64), (16, 4, 64), (16, 2, 128), (16, 1, 64), (8, 2, 48),
                          (8, 2, 40)])
@pytest.mark.parametrize("block_size", [1, 5, 16])
@pytest.mark.parametrize("window", [0, 37])
def test_decode_rows_equal_a_float64_reference(dtype: torch.dtype, num_heads: int,
                                               num_kv_heads: int, head_dim: int,
                                               block_size: int, window: int) -> None:
    query, key_pool, value_pool, tables = _decode_case(
        num_heads + head_dim + block_size, num_heads, num_kv_heads, head_dim, block_size, dtype)
    ops = kernels.load_paged_decode()
    got = ops.paged_attention(query, key_pool, value_pool, tables,
                              torch.arange(len(CONTEXTS) + 1),
                              torch.tensor(CONTEXTS), window, head_dim ** -0.5)
    expected = _reference(query, key_pool, value_pool, tables, window)
    tolerance = TOLERANCES[dtype]
    torch.testing.assert_close(got.double(), expected, atol=tolerance, rtol=5 * tolerance)


@pytest.mark.usefixtures("paged_decode_kernel")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_one_and_two_threads_agree(dtype: torch.dtype) -> None:
    """The same rows whichever thread runs them (tasks split by cost)."""
    query, key_pool, value_pool, tables = _decode_case(7, 16, 4, 64, 16, dtype)
    ops = kernels.load_paged_decode()
    before = torch.get_num_threads()
    outputs = []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            outputs.append(ops.paged_attention(query, key_pool, value_pool, tables,
                                               torch.arange(len(CONTEXTS) + 1),
                                               torch.tensor(CONTEXTS), 0, 0.125))
    finally:
        torch.set_num_threads(before)
    assert torch.equal(outputs[0], outputs[1])


#: (start, rows) of the chunk cases: short and long chunks from 0 and past it,
#: tiles cut mid-chunk (64 rows per AMX task at G = 4, 256 / G in general),
#: key counts on and off the 128-key span and the 32-key pairs of the P . V tiles.
CHUNKS = ((0, 2), (0, 31), (5, 17), (0, 150), (77, 70), (130, 33), (0, 65), (300, 3), (60, 69))


def _chunk_case(seed: int, num_heads: int, num_kv_heads: int, head_dim: int,
                dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """query [Q, H, D] of the CHUNKS rows in order, pools on shuffled 16-row blocks, tables."""
    block_size, rng = 16, random.Random(seed)
    needs = [-(-(start + rows) // block_size) for start, rows in CHUNKS]
    free = list(range(sum(needs)))
    rng.shuffle(free)
    tables = torch.zeros(len(CHUNKS), max(needs), dtype=torch.long)
    for i, need in enumerate(needs):
        tables[i, :need] = torch.tensor([free.pop() for _ in range(need)])
    generator = torch.Generator().manual_seed(seed)
    shape = (sum(needs), block_size, num_kv_heads, head_dim)
    key_pool, value_pool = (torch.randn(shape, generator=generator).to(dtype) for _ in range(2))
    num_rows = sum(rows for _, rows in CHUNKS)
    query = torch.randn(num_rows, num_heads, head_dim, generator=generator).to(dtype)
    return query, key_pool, value_pool, tables


def _chunk_reference(query: torch.Tensor, key_pool: torch.Tensor, value_pool: torch.Tensor,
                     tables: torch.Tensor, window: int) -> torch.Tensor:
    """Each chunk row at position p attends keys [max(0, p + 1 - window), p], float64."""
    _, block_size, num_kv_heads, head_dim = key_pool.shape
    group = query.shape[1] // num_kv_heads
    rows, row = [], 0
    for i, (start, num_rows) in enumerate(CHUNKS):
        slots = [int(tables[i, u // block_size]) * block_size + u % block_size
                 for u in range(start + num_rows)]
        keys, values = (pool.reshape(-1, num_kv_heads, head_dim)[slots].double()
                        .repeat_interleave(group, dim=1) for pool in (key_pool, value_pool))
        for position in range(start, start + num_rows):
            low = max(0, position + 1 - window) if window else 0
            scores = torch.einsum("hd,khd->hk", query[row].double(),
                                  keys[low:position + 1]) * head_dim ** -0.5
            rows.append(torch.einsum("hk,khd->hd", scores.softmax(-1), values[low:position + 1]))
            row += 1
    return torch.stack(rows)


@pytest.mark.usefixtures("paged_decode_kernel")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize(("num_heads", "num_kv_heads", "head_dim"),
                         [(16, 4, 64), (4, 4, 64), (16, 2, 128), (16, 1, 32), (8, 8, 256),
                          (6, 2, 224), (6, 3, 96)])
@pytest.mark.parametrize("window", [0, 37])
def test_chunk_rows_equal_a_float64_reference(dtype: torch.dtype, num_heads: int,
                                              num_kv_heads: int, head_dim: int,
                                              window: int) -> None:
    """Multi-row chunks: in bf16 with heads of 32..256 (not 224) on the AMX tile
    unit where the CPU has it (kernels' chunk_tiles), elsewhere the vector steps."""
    query, key_pool, value_pool, tables = _chunk_case(num_heads + head_dim, num_heads,
                                                      num_kv_heads, head_dim, dtype)
    offsets = torch.tensor([0, *itertools.accumulate(rows for _, rows in CHUNKS)])
    ops = kernels.load_paged_decode()
    got = ops.paged_attention(query, key_pool, value_pool, tables, offsets,
                              torch.tensor([start for start, _ in CHUNKS]), window,
                              head_dim ** -0.5)
    expected = _chunk_reference(query, key_pool, value_pool, tables, window)
    tolerance = TOLERANCES[dtype]
    torch.testing.assert_close(got.double(), expected, atol=tolerance, rtol=5 * tolerance)
