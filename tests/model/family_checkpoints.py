"""Tiny random checkpoints of the families beyond Llama, written by transformers itself.

Each family's config exercises what sets it apart: soft-capping tight enough
to bend the scores and logits (Gemma 2), alternating sliding windows, a local
RoPE base and linear-scaled global RoPE (Gemma 3, also as the language model
of an image-text checkpoint), LongRoPE factors that move
every frequency (Phi-3; Phi-4 mini rotating 3/4 of each head, tied embeddings), experts of their own width, a dense layer among
sparse ones and renormalised top-k (Qwen3-MoE), Mixtral's block_sparse_moe.
Weights are drawn wider than transformers' default (initializer_range 0.2)
so that scores reach the soft caps, and every parameter transformers starts
constant (norms, biases, routers) is perturbed so the loader must read it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
from model_helpers import TINY_SHAPE

COMMON = {
    **TINY_SHAPE,
    "head_dim": 16,
    "initializer_range": 0.2,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
}

FAMILIES = ("gemma", "gemma2", "gemma3", "gemma3_multimodal", "phi3", "phi4_mini", "qwen3_moe",
            "qwen2_moe", "mixtral")


def _config(kind: str):
    import transformers

    if kind == "gemma":
        return transformers.GemmaForCausalLM, transformers.GemmaConfig(**COMMON)
    if kind == "gemma2":
        return transformers.Gemma2ForCausalLM, transformers.Gemma2Config(
            **COMMON, query_pre_attn_scalar=24, sliding_window=4, attn_logit_softcapping=2.0,
            final_logit_softcapping=3.0)
    if kind == "gemma3":
        rope = {"full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e6},
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}
        # transformers applies the final cap and ignores the attention one in Gemma 3 text
        # (and the final one too in the image-text model)
        return transformers.Gemma3ForCausalLM, transformers.Gemma3TextConfig(
            **COMMON, query_pre_attn_scalar=24, sliding_window=4, rope_parameters=rope,
            layer_types=["sliding_attention", "full_attention", "sliding_attention"],
            attn_logit_softcapping=2.0, final_logit_softcapping=3.0)
    if kind == "gemma3_multimodal":  # the language model of a Gemma 3 image-text checkpoint
        _, text = _config("gemma3")
        vision = transformers.SiglipVisionConfig(
            hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
            image_size=28, patch_size=14)
        return transformers.Gemma3ForConditionalGeneration, transformers.Gemma3Config(
            text_config=text.to_dict(), vision_config=vision.to_dict(), mm_tokens_per_image=4,
            image_token_index=300, boi_token_index=301, eoi_token_index=302)
    if kind in ("phi3", "phi4_mini"):  # Phi-4 mini: Phi-3's layer, 3/4 of each head rotated
        partial = 0.75 if kind == "phi4_mini" else 1.0
        half = int(COMMON["head_dim"] * partial) // 2
        rope = {"rope_type": "longrope", "rope_theta": 10000.0,
                "short_factor": [1.0 + 0.25 * i for i in range(half)],
                "long_factor": [2.0 + 0.5 * i for i in range(half)],
                "original_max_position_embeddings": 64, "partial_rotary_factor": partial}
        settings = {key: value for key, value in COMMON.items() if key != "head_dim"}
        return transformers.Phi3ForCausalLM, transformers.Phi3Config(
            **settings, rope_parameters=rope, original_max_position_embeddings=64,
            tie_word_embeddings=kind == "phi4_mini")
    if kind == "qwen3_moe":
        return transformers.Qwen3MoeForCausalLM, transformers.Qwen3MoeConfig(
            **COMMON, num_experts=6, num_experts_per_tok=2, moe_intermediate_size=48,
            mlp_only_layers=[1], norm_topk_prob=True)
    if kind == "qwen2_moe":  # q/k/v biases, a gated shared expert, top-k not renormalised
        settings = {key: value for key, value in COMMON.items() if key != "head_dim"}
        return transformers.Qwen2MoeForCausalLM, transformers.Qwen2MoeConfig(
            **settings, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=48,
            shared_expert_intermediate_size=80, mlp_only_layers=[2], norm_topk_prob=False)
    if kind == "mixtral":
        return transformers.MixtralForCausalLM, transformers.MixtralConfig(
            **COMMON, num_local_experts=4, num_experts_per_tok=2)
    raise ValueError(f"unknown family {kind!r}; known: {FAMILIES}")


def build(kind: str, out_dir: Path, tokenizer_dir: Path | None = None) -> Path:
    """Write the tiny `kind` checkpoint to `out_dir` (and the tokenizer files of
    `tokenizer_dir`, for the engine); returns `out_dir`."""
    model_class, config = _config(kind)
    torch.manual_seed(0)  # transformers initialises weights from the global RNG
    model = model_class(config).eval()
    generator = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for parameter in model.parameters():
            flat = parameter.flatten()
            if bool((flat == flat[0]).all()):  # a constant start: norms, biases, routers
                parameter.add_(0.1 * torch.randn(parameter.shape, generator=generator))
    model.save_pretrained(out_dir)
    if tokenizer_dir is not None:
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(tokenizer_dir / name, out_dir / name)
    return out_dir


def reference(model_dir: Path, dtype: torch.dtype = torch.float32):
    """transformers' model of `model_dir` in `dtype`, eager attention (soft-capping)."""
    import transformers

    return transformers.AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=dtype, attn_implementation="eager").eval()
