"""Zeroed host memory for the K/V pools (model/host_memory.py)."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import pytest
import torch

from iterserve.model.config import ModelConfig
from iterserve.model.host_memory import HUGE_PAGE_BYTES, prefault, zeroed_bytes
from iterserve.model.kv_cache import PagedKVCache


@pytest.mark.parametrize("num_bytes", [0, 100, HUGE_PAGE_BYTES - 1, 3 * HUGE_PAGE_BYTES + 7])
@pytest.mark.parametrize("huge_pages", [True, False])
def test_zeroed_bytes_are_zero_writable_and_sized(num_bytes: int, huge_pages: bool) -> None:
    array = zeroed_bytes(num_bytes, huge_pages=huge_pages)
    assert array.shape == (num_bytes,) and not array.any()
    array[:] = 7
    assert int(array.sum()) == 7 * num_bytes


def test_a_large_buffer_is_huge_page_aligned_and_outlives_its_mapping_name() -> None:
    tensor = torch.from_numpy(zeroed_bytes(2 * HUGE_PAGE_BYTES))
    gc.collect()
    assert tensor.data_ptr() % HUGE_PAGE_BYTES == 0
    tensor.view(torch.bfloat16).fill_(1.5)
    assert tensor.view(torch.bfloat16).float().sum().item() == 1.5 * HUGE_PAGE_BYTES


def test_negative_size_is_refused() -> None:
    with pytest.raises(ValueError, match="num_bytes must be >= 0"):
        zeroed_bytes(-1)


def test_cache_pools_are_zero_and_independent() -> None:
    config = ModelConfig(architecture="LlamaForCausalLM", vocab_size=32, hidden_size=64,
                         intermediate_size=128, num_layers=2, num_heads=4, num_kv_heads=2,
                         head_dim=16, rms_norm_eps=1e-5, rope_theta=10000.0,
                         max_position_embeddings=64, tie_word_embeddings=False,
                         sliding_windows=(None, None))
    cache = PagedKVCache.allocate(config, num_blocks=4096, block_size=16, dtype=torch.bfloat16)
    pools = (*cache.key_pools, *cache.value_pools)
    assert all(not pool.any() for pool in pools)
    pools[0][3, 2].fill_(1.0)
    assert all(not pool.any() for pool in pools[1:]) and pools[0].sum().item() == 2 * 16


STATM = Path("/proc/self/statm")
MIB = 1 << 20


def _resident_bytes() -> int:
    return int(STATM.read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not STATM.exists(), reason="needs /proc/self/statm (Linux)")
def test_prefault_makes_the_leading_bytes_resident_and_leaves_the_rest() -> None:
    array = zeroed_bytes(64 * MIB)
    before = _resident_bytes()
    prefault(array, 24 * MIB)
    grown = _resident_bytes() - before
    assert 24 * MIB <= grown < 40 * MIB  # the prefix (in whole pages), not the 64 MiB
    assert not array.any()


def test_prefault_refuses_a_negative_size() -> None:
    with pytest.raises(ValueError, match="num_bytes must be >= 0"):
        prefault(zeroed_bytes(10), -1)


@pytest.mark.skipif(not STATM.exists(), reason="needs /proc/self/statm (Linux)")
@pytest.mark.parametrize("commit", [False, True])
def test_a_committed_cache_is_resident_in_every_pool(commit: bool) -> None:
    config = ModelConfig(architecture="LlamaForCausalLM", vocab_size=32, hidden_size=64,
                         intermediate_size=128, num_layers=2, num_heads=4, num_kv_heads=2,
                         head_dim=16, rms_norm_eps=1e-5, rope_theta=10000.0,
                         max_position_embeddings=64, tie_word_embeddings=False,
                         sliding_windows=(None, None))
    before = _resident_bytes()
    cache = PagedKVCache.allocate(config, num_blocks=32768, block_size=16, dtype=torch.bfloat16,
                                  commit=commit)
    grown = _resident_bytes() - before
    assert cache.num_bytes == 128 * MIB
    if commit:
        assert 128 * MIB <= grown < 144 * MIB
    else:
        assert grown < 16 * MIB


@pytest.mark.skipif(not STATM.exists(), reason="needs /proc/self/statm (Linux)")
@pytest.mark.parametrize("commit", [False, True])
def test_a_models_committed_cache_is_resident_whole(tiny_model, commit: bool) -> None:
    before = _resident_bytes()
    cache = tiny_model.allocate_cache(1024, 16, commit=commit)
    grown = _resident_bytes() - before
    assert (grown >= cache.num_bytes) is commit
    assert all(not pool.any() for pool in (*cache.key_pools, *cache.value_pools))
