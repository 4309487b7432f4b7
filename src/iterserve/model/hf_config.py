"""Per-family defaults and RoPE frequencies through transformers' own config code.

`parse_model_config` checks the raw `config.json`; this module hands the same
mapping to `transformers.AutoConfig.for_model` (nothing is read from a hub and
no remote code runs), so a key a checkpoint leaves out takes that family's
default (Qwen3's head_dim 128, each family's rope_theta), and the RoPE
frequencies come from transformers' `ROPE_INIT_FUNCTIONS` (linear, dynamic,
yarn, llama3) exactly as its reference models compute them.

Transformers is imported only when it can change the result: a Llama config
with default RoPE that states its rope_theta gets head_dim and rope_theta
exactly as `parse_model_config` read them (Llama's head_dim default is
hidden_size / num_attention_heads, which the parser applies too), so
`resolve` returns it as parsed, and start-up skips importing transformers,
one of its largest costs (the built-in presets are such configs).

Dynamic NTK: transformers recomputes the frequencies for the whole sequence
once it grows past max_position_embeddings, which would re-rotate keys already
in the KV cache; here the frequencies are fixed at load (the original length),
identical to the reference for sequences within max_position_embeddings.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from iterserve.model import families, family_config
from iterserve.model.config import ModelConfig
from iterserve.model.errors import CheckpointError

MODEL_TYPES = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    **families.MODEL_TYPES,
}


def resolve(config: ModelConfig, raw: Mapping[str, Any]) -> ModelConfig:
    """`config` with what transformers derives, consulting it only when needed."""
    return resolve_with_transformers(config, raw) if needs_transformers(config, raw) else config


def needs_transformers(config: ModelConfig, raw: Mapping[str, Any]) -> bool:
    """False only where transformers would return head_dim and rope_theta as parsed."""
    states_theta = "rope_theta" in raw or "rope_theta" in (raw.get("rope_parameters") or {})
    return not (config.architecture == "LlamaForCausalLM" and config.rope_type == "default"
                and states_theta)


def resolve_with_transformers(config: ModelConfig, raw: Mapping[str, Any]) -> ModelConfig:
    """`config` with head_dim, rope_theta and the RoPE tables that transformers derives
    (and what it adds for the families of model/families.py, see model/family_config.py)."""
    hf_config = _hf_config(config.architecture, raw)
    return family_config.refine(_resolve_rope(config, hf_config), hf_config)


def _resolve_rope(config: ModelConfig, hf_config: Any) -> ModelConfig:
    head_dim = int(getattr(hf_config, "head_dim", None) or config.head_dim)
    rope = dict(getattr(hf_config, "rope_parameters", None) or {})
    theta = float(rope.get("rope_theta", config.rope_theta))
    resolved = replace(config, head_dim=head_dim, rope_theta=theta)
    if config.rope_type == "default":
        return resolved
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    try:
        inv_freq, scaling = ROPE_INIT_FUNCTIONS[config.rope_type](hf_config, "cpu")
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
        raise CheckpointError(
            f"config.json: rope_parameters for {config.rope_type!r} are incomplete "
            f"({type(exc).__name__}: {exc})"
        ) from None
    return replace(resolved, rope_inv_freq=tuple(float(f) for f in inv_freq.tolist()),
                   rope_attention_scaling=float(scaling))


def _hf_config(architecture: str, raw: Mapping[str, Any]) -> Any:
    from transformers import AutoConfig

    model_type = MODEL_TYPES[architecture]
    settings = {key: value for key, value in raw.items() if key != "model_type"}
    try:
        return AutoConfig.for_model(model_type, **settings)
    except Exception as exc:  # transformers raises assorted types for a bad config
        message = " ".join(str(exc).split())[:200]
        raise CheckpointError(
            f"config.json: transformers refuses it as {model_type!r} ({message})"
        ) from None
