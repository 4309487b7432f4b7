"""The decoder families beyond the Llama shape, as config data (model/variant.py).

Gemma: GeGLU, (1 + weight) RMSNorm, embeddings scaled by sqrt(hidden), in
the Llama layer. Gemma 2 and Gemma 3 (text): GeGLU, (1 + weight) RMSNorm, sandwich norms,
embeddings scaled by sqrt(hidden), query_pre_attn_scalar, logit soft-capping
(Gemma 2), alternating sliding-window layers, a local RoPE base for the
sliding layers and per-head q/k norms (Gemma 3). Phi-3: the Llama layer with
fused q/k/v and gate/up tensors (split at load, model/family_weights.py) and
LongRoPE. Qwen3-MoE, Qwen2-MoE (with its gated shared expert) and Mixtral:
top-k routed SwiGLU experts. The language
model of a Gemma 3 multimodal checkpoint loads as Gemma 3 text (`text_part`).

Everything a family's config leaves out takes transformers' default: the
variant is read off the config object `transformers.AutoConfig.for_model`
builds (model/hf_config.py), never off hard-coded copies of those defaults.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from iterserve.model.errors import UnsupportedConfigError
from iterserve.model.variant import DecoderVariant, MoeSpec

GEMMA_ARCHITECTURES = ("GemmaForCausalLM", "Gemma2ForCausalLM", "Gemma3ForCausalLM")
MOE_ARCHITECTURES = ("Qwen3MoeForCausalLM", "Qwen2MoeForCausalLM", "MixtralForCausalLM")
#: transformers' model_type of each architecture this module adds.
MODEL_TYPES = {
    "GemmaForCausalLM": "gemma",
    "Gemma2ForCausalLM": "gemma2",
    "Gemma3ForCausalLM": "gemma3_text",
    "Phi3ForCausalLM": "phi3",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "Qwen2MoeForCausalLM": "qwen2_moe",
    "MixtralForCausalLM": "mixtral",
}
ARCHITECTURES = tuple(MODEL_TYPES)
#: Multimodal checkpoints whose language model loads alone: its architecture
#: and model_type, and the prefix of its tensor names (vision tower ignored).
TEXT_PARTS = {"Gemma3ForConditionalGeneration": ("Gemma3ForCausalLM", "gemma3_text",
                                                 "language_model.")}
#: Architectures whose transformers code soft-caps attention scores / final logits.
ATTENTION_SOFTCAP = ("Gemma2ForCausalLM",)
FINAL_SOFTCAP = ("Gemma2ForCausalLM", "Gemma3ForCausalLM")
#: Architectures whose transformers code rotates only partial_rotary_factor of each head.
PARTIAL_ROTARY_ARCHITECTURES = ("Phi3ForCausalLM",)
#: Architectures whose per-head q and k are RMS-normalised before RoPE.
QK_NORM_ARCHITECTURES = ("Gemma3ForCausalLM", "Qwen3MoeForCausalLM")
#: Config activation names -> DecoderVariant.activation.
ACTIVATION_NAMES = {"silu": "silu", "gelu_pytorch_tanh": "gelu_tanh"}


#: Older names of a RoPE variant that transformers reads only under the new one
#: (Phi-3's first configs say "su" for longrope).
LEGACY_ROPE_TYPES = {"su": "longrope"}


def canonical_config(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    """`raw` as the loader reads it: the language model's config of a
    multimodal checkpoint (`text_part`), legacy RoPE type names renamed."""
    raw = text_part(raw)
    rope = raw.get("rope_scaling")
    if isinstance(rope, Mapping) and rope.get("type") in LEGACY_ROPE_TYPES:
        rope = {**rope, "type": LEGACY_ROPE_TYPES[rope["type"]]}
        return {**raw, "rope_scaling": rope}
    return raw


def unloaded_parts(raw: Mapping[str, Any]) -> str | None:
    """For a multimodal checkpoint of TEXT_PARTS, the prefix of the tensors
    that are loaded (its language model's); the others (the vision tower,
    the projector) are left unread on purpose. None for any other checkpoint."""
    architectures = raw.get("architectures")
    if isinstance(architectures, list) and architectures and architectures[0] in TEXT_PARTS:
        return TEXT_PARTS[architectures[0]][2]
    return None


def text_part(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    """`raw` itself, or for a multimodal checkpoint of TEXT_PARTS its language
    model's config: `text_config` completed with transformers' defaults (a
    hub text_config states only what differs from them), under the text
    architecture; the checkpoint's declared dtype and token ids carry over."""
    architectures = raw.get("architectures")
    if not isinstance(architectures, list) or not architectures:
        return raw
    if architectures[0] not in TEXT_PARTS:
        return raw
    architecture, model_type, _ = TEXT_PARTS[architectures[0]]
    text = raw.get("text_config")
    if not isinstance(text, Mapping):
        raise UnsupportedConfigError(f"{architectures[0]}: config.json has no text_config object")
    from transformers import AutoConfig

    settings = {key: value for key, value in text.items() if key != "model_type"}
    try:
        completed = AutoConfig.for_model(model_type, **settings).to_dict()
    except Exception as exc:  # transformers raises assorted types for a bad config
        message = " ".join(str(exc).split())[:200]
        raise UnsupportedConfigError(
            f"config.json: transformers refuses text_config as {model_type!r} ({message})"
        ) from None
    dtype = raw.get("dtype") or raw.get("torch_dtype")
    declared = {} if dtype is None or completed.get("dtype") else {"dtype": dtype}
    # the checkpoint's own token ids (Gemma 3's end-of-turn 106 beside EOS 1) over the defaults
    declared.update({key: raw[key] for key in ("bos_token_id", "eos_token_id") if key in raw})
    # the image-text model computes its logits without the text model's final soft cap
    declared["final_logit_softcapping"] = None
    return {**completed, **declared, "architectures": [architecture]}


def activation(architecture: str, raw: Mapping[str, Any]) -> str:
    """The MLP activation `config.json` declares, as a DecoderVariant name;
    refuses one the forward does not implement. Gemma reads `hidden_activation`
    (its `hidden_act` is a legacy key transformers ignores)."""
    if architecture in GEMMA_ARCHITECTURES:
        key, name = "hidden_activation", raw.get("hidden_activation") or "gelu_pytorch_tanh"
    else:
        key, name = "hidden_act", raw.get("hidden_act", "silu")
    if name not in ACTIVATION_NAMES:
        raise UnsupportedConfigError(
            f"{key}={name!r} is not implemented; supported: {', '.join(ACTIVATION_NAMES)}")
    return ACTIVATION_NAMES[name]


def variant(architecture: str, hf_config: Any, base: DecoderVariant) -> DecoderVariant:
    """`base` (the activation) with what the family's resolved config adds."""
    if architecture in GEMMA_ARCHITECTURES:
        return _gemma(architecture, hf_config, base)
    if architecture in MOE_ARCHITECTURES:
        return replace(base, moe=_moe(architecture, hf_config))
    return base


def sliding_windows(hf_config: Any, num_layers: int) -> tuple[int | None, ...]:
    """Per-layer windows as transformers applies them: its resolved
    `sliding_window` (None where the family turns it off), on the layers
    `layer_types` marks sliding, on every layer where it has no layer types."""
    window = getattr(hf_config, "sliding_window", None)
    if window is None:
        return (None,) * num_layers
    layer_types = getattr(hf_config, "layer_types", None)
    if layer_types is None:
        return (int(window),) * num_layers
    return tuple(int(window) if kind == "sliding_attention" else None for kind in layer_types)


def _gemma(architecture: str, hf_config: Any, base: DecoderVariant) -> DecoderVariant:
    if getattr(hf_config, "use_bidirectional_attention", False):
        raise UnsupportedConfigError("use_bidirectional_attention=true is not implemented "
                                     "(a causal decoder only)")
    scalar = getattr(hf_config, "query_pre_attn_scalar", None)  # Gemma 1: none, head_dim's
    if scalar is not None and not float(scalar) > 0:
        raise UnsupportedConfigError(f"query_pre_attn_scalar={scalar!r} must be positive")
    # transformers soft-caps attention in Gemma 2 only (Gemma 3 keeps the key but
    # never passes it on) and the final logits in Gemma 2 and Gemma 3 text
    attn_cap = getattr(hf_config, "attn_logit_softcapping", None)
    final_cap = getattr(hf_config, "final_logit_softcapping", None)
    return replace(
        base,
        embedding_multiplier=math.sqrt(hf_config.hidden_size),
        norm_weight_offset=1.0,
        sandwich_norms=architecture != "GemmaForCausalLM",
        attention_scale=None if scalar is None else float(scalar) ** -0.5,
        attn_logit_softcap=_optional_float(attn_cap if architecture in ATTENTION_SOFTCAP else None),
        final_logit_softcap=_optional_float(final_cap if architecture in FINAL_SOFTCAP else None),
    )


def _moe(architecture: str, hf_config: Any) -> MoeSpec:
    num_layers = int(hf_config.num_hidden_layers)
    if architecture == "MixtralForCausalLM":
        return MoeSpec(int(hf_config.num_local_experts), int(hf_config.num_experts_per_tok),
                       int(hf_config.intermediate_size), True, (True,) * num_layers)
    num_experts = int(hf_config.num_experts)
    step = int(hf_config.decoder_sparse_step)
    if step < 1:
        raise UnsupportedConfigError(f"decoder_sparse_step={step} must be at least 1")
    dense = set(hf_config.mlp_only_layers or ())
    sparse = tuple(i not in dense and num_experts > 0 and (i + 1) % step == 0
                   for i in range(num_layers))
    shared = int(getattr(hf_config, "shared_expert_intermediate_size", 0) or 0)
    return MoeSpec(num_experts, int(hf_config.num_experts_per_tok),
                   int(hf_config.moe_intermediate_size), bool(hf_config.norm_topk_prob), sparse,
                   shared)


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)
