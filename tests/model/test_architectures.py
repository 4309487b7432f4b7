"""Qwen2 (q/k/v bias, per-layer sliding window), Qwen3 (per-head q/k norm,
family default head_dim), Mistral (sliding window, explicit head_dim, custom
rope_theta) and Llama 3.x with each scaled RoPE (llama3, linear, dynamic, yarn)
checkpoints built here load and match the transformers reference on random
packed mixes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from model_helpers import TINY_SHAPE, assert_random_mix_matches

from iterserve.model.loader import load_model

pytestmark = pytest.mark.slow

COMMON = TINY_SHAPE


#: Short original lengths so that every variant moves the frequencies the
#: 2..14-token test sequences use (yarn also scales cos/sin by its mscale).
ROPE_SCALINGS = {
    "llama3": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
               "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 16},
    "linear": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0},
    "dynamic": {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0},
    "yarn": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
             "original_max_position_embeddings": 64},
}


def _save_random(model, out_dir: Path) -> Path:
    """Perturb zero biases and unit norms so the loader must read them, then save."""
    generator = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                parameter.add_(0.1 * torch.randn(parameter.shape, generator=generator))
    model.save_pretrained(out_dir)
    return out_dir


def _build(kind: str, out_dir: Path):
    import transformers

    torch.manual_seed(0)  # transformers initialises weights from the global RNG
    if kind in ROPE_SCALINGS:
        config = transformers.LlamaConfig(
            **COMMON, head_dim=24, rope_parameters=ROPE_SCALINGS[kind], tie_word_embeddings=True
        )
        model = transformers.LlamaForCausalLM(config)
    elif kind == "qwen3":
        settings = {key: value for key, value in COMMON.items()}
        config = transformers.Qwen3Config(**settings, head_dim=32, attention_bias=True)
        model = transformers.Qwen3ForCausalLM(config)
    elif kind == "qwen2":
        config = transformers.Qwen2Config(
            **COMMON,
            use_sliding_window=True,
            sliding_window=3,
            max_window_layers=1,
            tie_word_embeddings=True,
        )
        model = transformers.Qwen2ForCausalLM(config)
    else:
        config = transformers.MistralConfig(
            **COMMON, sliding_window=4, head_dim=24, rope_theta=50000.0
        )
        model = transformers.MistralForCausalLM(config)
    model = _save_random(model.eval(), out_dir)
    return transformers.AutoModelForCausalLM.from_pretrained(out_dir, dtype=torch.float32).eval()


@pytest.mark.parametrize("kind", ["qwen2", "qwen3", "mistral", *ROPE_SCALINGS])
def test_family_matches_reference(kind: str, tmp_path: Path, test_device: str) -> None:
    reference = _build(kind, tmp_path)
    model = load_model(tmp_path, device=test_device)
    if kind in ROPE_SCALINGS:
        assert model.config.rope_type == kind
        assert model.weights.lm_head is model.weights.embed_tokens  # tied
        if kind != "dynamic":  # dynamic NTK equals default RoPE within the original length
            assert model.config.rope_inv_freq
        assert (model.config.rope_attention_scaling != 1.0) == (kind == "yarn")
    elif kind == "qwen3":
        assert model.weights.layers[0].q_norm is not None
        assert model.config.head_dim == 32
    elif kind == "qwen2":
        assert model.weights.layers[0].qkv_bias is not None
        assert model.config.sliding_windows == (None, 3, 3)
    else:
        assert model.config.head_dim == 24
        assert model.config.rope_theta == 50000.0
        assert model.config.sliding_windows == (4, 4, 4)
    for seed in range(3):
        assert_random_mix_matches(model, reference, seed=seed, block_size=4)
