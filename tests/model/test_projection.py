"""Projection kernels: oneDNN-packed bf16 weights compute what F.linear does,
and the packing applies only where it is the measured faster path."""

from __future__ import annotations

import dataclasses
import random

import pytest
import torch
import torch.nn.functional as F
from model_helpers import BlockHandout, random_tokens, run_segments

from iterserve.model.loader import load_model
from iterserve.model.projection import (
    bucketed_rows,
    linear,
    pack_weights,
    packing_pays,
    warm_row_counts,
)
from iterserve.model.weights import ModelWeights


def _prompt_logits(model, prompt: list[int]) -> torch.Tensor:
    cache = model.allocate_cache(num_blocks=48, block_size=4)
    return run_segments(model, cache, BlockHandout(48, 4), [("r", prompt, 0, True)])[0]


needs_packing = pytest.mark.skipif(
    not packing_pays(torch.bfloat16, torch.device("cpu")),
    reason="this CPU's oneDNN has no native bf16",
)


@needs_packing
@pytest.mark.parametrize("num_rows", [1, 7, 64, 100, 300])
def test_packed_linear_matches_f_linear(num_rows: int) -> None:
    generator = torch.Generator().manual_seed(num_rows)
    weight = torch.randn(96, 80, generator=generator).to(torch.bfloat16)
    bias = torch.randn(96, generator=generator).to(torch.bfloat16)
    x = torch.randn(num_rows, 80, generator=generator).to(torch.bfloat16)
    packed = torch.ops.mkldnn._reorder_linear_weight(weight, 64)
    torch.testing.assert_close(linear(x, packed), F.linear(x, weight), atol=1e-2, rtol=1e-2)
    torch.testing.assert_close(linear(x, packed, bias), F.linear(x, weight, bias),
                               atol=1e-2, rtol=1e-2)


def test_float32_and_non_cpu_are_never_packed(tiny_model) -> None:
    assert not packing_pays(torch.float32, torch.device("cpu"))
    assert not packing_pays(torch.bfloat16, torch.device("meta"))
    assert not any(w.is_mkldnn for layer in tiny_model.weights.layers
                   for w in (layer.qkv_proj, layer.o_proj, layer.gate_up_proj, layer.down_proj))


@needs_packing
@pytest.mark.slow
def test_packed_bf16_forward_matches_the_dense_one(tiny_dir) -> None:
    packed = load_model(tiny_dir, dtype=torch.bfloat16)
    assert packed.weights.layers[0].qkv_proj.is_mkldnn
    assert packed.weights.lm_head.is_mkldnn  # the tiny preset is untied
    dense = load_model(tiny_dir, dtype=torch.bfloat16, prepack=False)
    assert not dense.weights.layers[0].qkv_proj.is_mkldnn
    rng = random.Random(9)
    for length in (1, 6, 40, 130):  # both dense paths: W @ X^T below 96 rows, F.linear above
        prompt = random_tokens(rng, length, packed.config.vocab_size)
        torch.testing.assert_close(_prompt_logits(packed, prompt), _prompt_logits(dense, prompt),
                                   atol=0.05, rtol=0)


@needs_packing
def test_tied_lm_head_stays_the_embedding_and_packing_is_idempotent(tiny_model) -> None:
    weights = tiny_model.weights
    bf16 = ModelWeights(
        embed_tokens=weights.embed_tokens.to(torch.bfloat16),
        layers=tuple(dataclasses.replace(layer, qkv_proj=layer.qkv_proj.to(torch.bfloat16))
                     for layer in weights.layers),
        final_norm=weights.final_norm, lm_head=weights.embed_tokens)
    bf16 = dataclasses.replace(bf16, lm_head=bf16.embed_tokens)
    packed = pack_weights(bf16)
    assert packed.lm_head is packed.embed_tokens and not packed.lm_head.is_mkldnn
    assert packed.layers[0].qkv_proj.is_mkldnn
    again = pack_weights(packed)
    assert again.layers[0].qkv_proj is packed.layers[0].qkv_proj


def test_decode_sized_row_counts_run_in_buckets_of_eight() -> None:
    assert [bucketed_rows(n) for n in (1, 7, 8, 9, 63, 64)] == [8, 8, 8, 16, 64, 64]
    assert [bucketed_rows(n) for n in (65, 100, 512)] == [65, 100, 512]  # compute-bound: exact


def test_warm_row_counts_cover_the_decode_buckets_and_a_full_budget() -> None:
    assert warm_row_counts(64, 512) == [8, 16, 24, 32, 40, 48, 56, 64, 512]
    assert warm_row_counts(256, 2048) == [8, 16, 24, 32, 40, 48, 56, 64, 2048]
    assert warm_row_counts(4, None) == [8]
    assert warm_row_counts(20, 30) == [8, 16, 24, 32]


@needs_packing
@pytest.mark.parametrize("num_rows", [1, 5, 9, 33, 64])
def test_padded_rows_come_out_as_the_unpadded_product(num_rows: int) -> None:
    generator = torch.Generator().manual_seed(100 + num_rows)
    weight = torch.randn(160, 96, generator=generator).to(torch.bfloat16)
    x = torch.randn(num_rows, 96, generator=generator).to(torch.bfloat16)
    packed = torch.ops.mkldnn._reorder_linear_weight(weight, 64)
    out = linear(x, packed)
    assert out.shape == (num_rows, 160) and out.is_contiguous()
    exact = torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")
    torch.testing.assert_close(out, exact, atol=1e-2, rtol=1e-2)
    out.add_(1.0)  # the fused ops update projection outputs in place
    torch.testing.assert_close(out, exact + 1.0, atol=2e-2, rtol=1e-2)


@needs_packing
def test_warm_runs_each_packed_shape_once_per_row_count(tiny_dir) -> None:
    packed = load_model(tiny_dir, dtype=torch.bfloat16)
    shapes = {tuple(w.shape) for layer in packed.weights.layers
              for w in (layer.qkv_proj, layer.o_proj, layer.gate_up_proj, layer.down_proj)}
    shapes.add(tuple(packed.weights.lm_head.shape))
    assert packed.warm(16, 40) == len(shapes) * 3  # rows 8, 16 and 40
    dense = load_model(tiny_dir, dtype=torch.bfloat16, prepack=False)
    assert dense.warm(16, 40) == 0


@needs_packing
@pytest.mark.slow
def test_rows_padded_from_the_embedding_on_change_no_logit_and_no_cache_row(tiny_dir) -> None:
    """The packed forward carries a decode-sized batch at its bucketed row count
    from the embedding on (llama.PackedCausalLM._row_padded); the logits and
    the K/V pool are bit for bit those of padding inside each projection."""
    model = load_model(tiny_dir, dtype=torch.bfloat16)
    assert model._buckets_rows
    rng = random.Random(4)
    vocab = model.config.vocab_size
    # 5 rows (bucket 8), 9 rows (16), 16 rows (a bucket already): a chunk plus decodes
    for lengths in ((3, 1, 1), (7, 1, 1), (14, 1, 1)):
        segments = [(f"r{i}", random_tokens(rng, n, vocab), 0, True)
                    for i, n in enumerate(lengths)]
        outcomes = []
        for carried in (True, False):
            model._buckets_rows = carried
            cache = model.allocate_cache(num_blocks=48, block_size=4)
            logits = run_segments(model, cache, BlockHandout(48, 4), segments)
            outcomes.append((logits, [pool.clone() for pool in cache.key_pools + cache.value_pools]))
        model._buckets_rows = True
        (padded, padded_pools), (unpadded, unpadded_pools) = outcomes
        assert torch.equal(padded, unpadded)
        assert all(torch.equal(a, b) for a, b in zip(padded_pools, unpadded_pools, strict=True))
