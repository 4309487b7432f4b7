"""The layer loop as one native call (csrc/decoder_layers.cpp) computes the
Python loop's bits: the same kernels in the same order on the same tensors."""

from __future__ import annotations

import random

import pytest
import torch
from model_helpers import BlockHandout, random_tokens, run_segments

from iterserve.model.loader import load_model
from iterserve.model.projection import packing_pays

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not packing_pays(torch.bfloat16, torch.device("cpu")),
                       reason="this CPU's oneDNN has no native bf16"),
]


def _run(model, segments_by_step, one_call: bool):
    """Each step's logits and the K/V pools after the last, one path forced."""
    weights = model._native_layers
    if not one_call:
        model._native_layers = None
    calls = []
    native = model._layers_in_one_call

    def counted(*args, **kwargs):
        calls.append(1)
        return native(*args, **kwargs)

    model._layers_in_one_call = counted
    try:
        cache = model.allocate_cache(num_blocks=64, block_size=4)
        handout = BlockHandout(64, 4, seed=3)
        logits = [run_segments(model, cache, handout, segments) for segments in segments_by_step]
    finally:
        model._native_layers = weights
        del model._layers_in_one_call
    return logits, [pool.clone() for pool in cache.key_pools + cache.value_pools], len(calls)


def _steps(model, seed: int) -> list[list[tuple[str, list[int], int, bool]]]:
    """A prefill step of five requests, then four decode steps as they leave."""
    rng = random.Random(seed)
    vocab = model.config.vocab_size
    prompts = {f"r{i}": random_tokens(rng, n, vocab) for i, n in enumerate((5, 11, 3, 17, 9))}
    steps = [[(rid, tokens, 0, True) for rid, tokens in prompts.items()]]
    for step in range(4):  # decode rows: 5 (a bucket of 8) and fewer as requests leave
        steps.append([(rid, random_tokens(rng, 1, vocab), len(tokens) + step, True)
                      for rid, tokens in list(prompts.items())[: 5 - step]])
    return steps


def _assert_same_bits(model) -> None:
    steps = _steps(model, 7)
    one_call, one_call_pools, num_calls = _run(model, steps, one_call=True)
    loop, loop_pools, num_loop_calls = _run(model, steps, one_call=False)
    assert num_loop_calls == 0 and num_calls >= 4  # every decode step went native
    assert all(torch.equal(a, b) for a, b in zip(one_call, loop, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(one_call_pools, loop_pools, strict=True))


def test_one_call_layers_give_the_loop_s_logits_and_cache(tiny_dir, paged_decode_kernel) -> None:
    model = load_model(tiny_dir, dtype=torch.bfloat16)
    assert model._native_layers is not None  # the tiny Llama fits the native loop
    _assert_same_bits(model)


@pytest.mark.parametrize("kind", ["qwen2", "qwen3", "mistral", "llama3"])
def test_biases_windows_and_scaled_rope_go_native_with_the_same_bits(
        kind: str, tmp_path, paged_decode_kernel) -> None:
    """Qwen2's q/k/v biases and per-layer windows, Qwen3's per-head q/k norm
    (and biases), Mistral's window and Llama 3's scaled RoPE (the tiny
    checkpoints of test_architectures)."""
    from test_architectures import _build

    _build(kind, tmp_path)
    model = load_model(tmp_path, dtype=torch.bfloat16)
    native = model._native_layers
    assert native is not None
    if kind == "qwen2":
        assert native.biases[0] is not None and native.biases[1] is None
        assert sorted(set(native.windows)) == [0, 3]  # a window on some layers only
    if kind == "qwen3":
        assert native.qk_norms[0] is not None and native.qk_norms[1] is not None
    if kind == "mistral":
        assert set(native.windows) == {4}
    _assert_same_bits(model)


@pytest.mark.parametrize("kind", ["gemma", "gemma3", "gemma3_multimodal", "phi3", "phi4_mini"])
def test_gemma_and_phi3_go_native_with_the_same_bits(kind: str, tmp_path,
                                                      paged_decode_kernel) -> None:
    """Gemma's GeGLU, Gemma 3's sandwich norms, local RoPE tables and
    query_pre_attn_scalar, Phi-3's split fused tensors, Phi-4 mini's partial
    rotary (family_checkpoints)."""
    from family_checkpoints import build

    model = load_model(build(kind, tmp_path), dtype=torch.bfloat16)
    native = model._native_layers
    assert native is not None and native.gelu == kind.startswith("gemma")
    if kind.startswith("gemma3"):
        assert native.local_rope == [1, 0, 1] and native.sandwich_norms[0] is not None
    _assert_same_bits(model)


@pytest.mark.parametrize("kind", ["gemma2", "qwen3_moe", "mixtral"])
def test_soft_capped_and_routed_models_keep_the_python_loop(kind: str, tmp_path) -> None:
    from family_checkpoints import build

    assert load_model(build(kind, tmp_path), dtype=torch.bfloat16)._native_layers is None


def test_models_the_native_loop_does_not_fit_keep_the_python_loop(tiny_dir) -> None:
    assert load_model(tiny_dir, dtype=torch.float32)._native_layers is None  # not packed
    assert load_model(tiny_dir, dtype=torch.bfloat16, prepack=False)._native_layers is None
    assert load_model(tiny_dir, dtype=torch.bfloat16,
                      attention_backend="torch")._native_layers is None
