"""What transformers' resolved config adds for the families of model/families.py.

`refine` runs after model/hf_config.py has resolved head_dim and the RoPE
frequencies: it sets the family's DecoderVariant and per-layer sliding windows
from the same config object, gives Gemma 3 its two RoPE tables (global layers
from `rope_parameters["full_attention"]`, sliding ones from
`["sliding_attention"]`, the local base), and bounds a LongRoPE model's length.

LongRoPE: transformers rotates every position with the short factors while
the sequence is within `original_max_position_embeddings` and re-rotates the
whole sequence with the long factors once it grows past it. A paged KV cache
keeps keys rotated when they were written, so it can follow the reference
only up to that length: the model's maximum length is capped there (the
short factors, the reference's frequencies for every length served).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from iterserve.model import families
from iterserve.model.config import SUPPORTED_ROPE_TYPES, ModelConfig
from iterserve.model.errors import CheckpointError, UnsupportedConfigError

logger = logging.getLogger(__name__)

#: Families whose RoPE parameters are given per layer type.
LAYER_TYPED_ROPE = ("Gemma3ForCausalLM",)


def refine(config: ModelConfig, hf_config: Any) -> ModelConfig:
    """`config` with the family's variant, windows and RoPE tables, and a
    LongRoPE model's length bound; a value transformers let through but the
    forward cannot use is a CheckpointError naming it."""
    try:
        return _refine(config, hf_config)
    except (TypeError, ValueError, KeyError, AttributeError, ArithmeticError) as exc:
        if isinstance(exc, CheckpointError):
            raise
        raise CheckpointError(f"config.json: bad value ({type(exc).__name__}: {exc})") from None


def _refine(config: ModelConfig, hf_config: Any) -> ModelConfig:
    if config.architecture in families.ARCHITECTURES:
        config = replace(
            config,
            variant=families.variant(config.architecture, hf_config, config.variant),
            sliding_windows=families.sliding_windows(hf_config, config.num_layers),
            tie_word_embeddings=bool(getattr(hf_config, "tie_word_embeddings",
                                             config.tie_word_embeddings)),
        )
    if config.architecture in LAYER_TYPED_ROPE:
        config = _layer_typed_rope(config, hf_config)
    if config.rope_type == "longrope":
        config = _longrope_bound(config, hf_config)
    return config


def _layer_typed_rope(config: ModelConfig, hf_config: Any) -> ModelConfig:
    global_freq, global_scaling = _frequencies(hf_config, "full_attention", config.head_dim)
    local_freq, local_scaling = _frequencies(hf_config, "sliding_attention", config.head_dim)
    if local_scaling != global_scaling:
        raise UnsupportedConfigError(
            f"rope_parameters scale cos/sin by {global_scaling} on full-attention layers and "
            f"{local_scaling} on sliding ones; one factor for both is implemented")
    rope = hf_config.rope_parameters["full_attention"]
    return replace(config, rope_type=str(rope["rope_type"]), rope_theta=float(rope["rope_theta"]),
                   rope_inv_freq=global_freq, rope_attention_scaling=global_scaling,
                   variant=replace(config.variant, local_rope_inv_freq=local_freq,
                                   local_rope_layers=_local_layers(hf_config, config.num_layers)))


def _local_layers(hf_config: Any, num_layers: int) -> tuple[bool, ...]:
    layer_types = list(hf_config.layer_types)
    if len(layer_types) != num_layers:
        raise UnsupportedConfigError(
            f"layer_types has {len(layer_types)} entries for {num_layers} layers")
    return tuple(kind == "sliding_attention" for kind in layer_types)


def _frequencies(hf_config: Any, layer_type: str, head_dim: int
                 ) -> tuple[tuple[float, ...], float]:
    """Inverse frequencies and cos/sin factor of one layer type, as transformers computes them."""
    import torch
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    rope = hf_config.rope_parameters[layer_type]
    rope_type = str(rope["rope_type"])
    if rope_type not in SUPPORTED_ROPE_TYPES:
        raise UnsupportedConfigError(
            f"rope_parameters[{layer_type!r}] with rope_type={rope_type!r} is not implemented; "
            f"supported: {', '.join(SUPPORTED_ROPE_TYPES)}")
    if rope_type == "default":
        exponents = torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim
        inv_freq, scaling = 1.0 / (float(rope["rope_theta"]) ** exponents), 1.0
    else:
        try:
            inv_freq, scaling = ROPE_INIT_FUNCTIONS[rope_type](hf_config, "cpu",
                                                                layer_type=layer_type)
        except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
            raise UnsupportedConfigError(
                f"config.json: rope_parameters[{layer_type!r}] for {rope_type!r} are incomplete "
                f"({type(exc).__name__}: {exc})") from None
    return tuple(float(f) for f in inv_freq.tolist()), float(scaling)


def _longrope_bound(config: ModelConfig, hf_config: Any) -> ModelConfig:
    rope = getattr(hf_config, "rope_parameters", None) or {}
    original = rope.get("original_max_position_embeddings") or getattr(
        hf_config, "original_max_position_embeddings", None)
    if original is None or int(original) >= config.max_position_embeddings:
        return config
    logger.warning("LongRoPE: serving up to original_max_position_embeddings=%d tokens of %d "
                   "(past it the reference re-rotates every cached key with the long factors)",
                   int(original), config.max_position_embeddings)
    return replace(config, max_position_embeddings=int(original))
