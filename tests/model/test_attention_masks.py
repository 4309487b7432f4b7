"""Additive masks built once per forward attend exactly as boolean masks do."""

from __future__ import annotations

import random

import pytest
import torch

from iterserve.model.attention import AttentionMetadata, paged_attention
from iterserve.model.packing import SegmentSpec, pack


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("window", [None, 24])
def test_additive_masks_match_boolean_masks_exactly(dtype: torch.dtype, window) -> None:
    rng, block_size, per_request, num_decode = random.Random(3), 4, 40, 20
    generator = torch.Generator().manual_seed(3)
    pool_shape = ((num_decode + 1) * per_request, block_size, 2, 16)
    key_pool = torch.randn(pool_shape, generator=generator).to(dtype)
    value_pool = torch.randn(pool_shape, generator=generator).to(dtype)
    specs = [SegmentSpec([1], rng.randint(1, 150), range(i * per_request, (i + 1) * per_request),
                         True) for i in range(num_decode)]
    tail = range(num_decode * per_request, (num_decode + 1) * per_request)
    specs.insert(4, SegmentSpec([1] * 9, 30, tail, True))  # a chunk over history
    batch = pack(specs, block_size)
    query = torch.randn(batch.num_rows, 8, 16, generator=generator).to(dtype)
    new_rows = torch.randn(batch.num_rows, 2, 16, generator=generator).to(dtype)
    boolean, additive = (
        AttentionMetadata.build(batch, [window], 8, mask_dtype) for mask_dtype in (None, dtype))
    assert len(boolean.decode_groups) > 1 and boolean.chunks
    assert additive.decode_groups[0].masks[window].dtype == dtype
    expected = paged_attention(query, new_rows, new_rows, key_pool, value_pool, boolean, window)
    got = paged_attention(query, new_rows, new_rows, key_pool, value_pool, additive, window)
    assert torch.equal(got, expected)
