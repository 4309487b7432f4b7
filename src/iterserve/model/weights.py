"""Model weights in the fused layout the packed forward consumes.

q/k/v projections are concatenated into one [(H + 2 KV) * D, d] matrix and
gate/up into one [2 I, d] matrix, so each row-wise stage is a single matmul
over the packed axis (spec 0x04: token-wise operations share the packed axis).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from iterserve.model.config import ModelConfig
from iterserve.model.errors import CheckpointError


@dataclass(frozen=True, slots=True, eq=False)
class ExpertWeights:
    """A layer's routed experts (model/moe.py): the router and each expert's
    fused gate/up and down matrices, stacked along a leading expert axis."""

    router: torch.Tensor  # [E, d]
    gate_up_proj: torch.Tensor  # [E, 2 I_e, d]
    down_proj: torch.Tensor  # [E, d, I_e]
    shared_gate_up_proj: torch.Tensor | None = None  # [2 I_s, d] the shared expert (Qwen2-MoE)
    shared_down_proj: torch.Tensor | None = None  # [d, I_s]
    shared_gate: torch.Tensor | None = None  # [1, d] its sigmoid gate


@dataclass(frozen=True, slots=True, eq=False)
class LayerWeights:
    input_norm: torch.Tensor  # [d]
    qkv_proj: torch.Tensor  # [(H + 2 KV) * D, d]
    qkv_bias: torch.Tensor | None  # [(H + 2 KV) * D] (Qwen2) or None
    o_proj: torch.Tensor  # [d, H * D]
    o_bias: torch.Tensor | None
    post_attention_norm: torch.Tensor  # [d]
    gate_up_proj: torch.Tensor  # [2 I, d]
    down_proj: torch.Tensor  # [d, I]
    q_norm: torch.Tensor | None = None  # [D] per-head RMSNorm of q before RoPE (Qwen3)
    k_norm: torch.Tensor | None = None  # [D] per-head RMSNorm of k before RoPE (Qwen3)
    pre_feedforward_norm: torch.Tensor | None = None  # [d] RMSNorm before the MLP (Gemma)
    post_feedforward_norm: torch.Tensor | None = None  # [d] RMSNorm of the MLP output (Gemma)
    #: set: the MLP is these routed experts, and gate_up_proj / down_proj are empty
    experts: ExpertWeights | None = None


@dataclass(frozen=True, slots=True, eq=False)
class ModelWeights:
    embed_tokens: torch.Tensor  # [V, d]
    layers: tuple[LayerWeights, ...]
    final_norm: torch.Tensor  # [d]
    lm_head: torch.Tensor  # [V, d]; the embedding itself when tied


TensorSource = Callable[[str], torch.Tensor | None]


def expected_shape(config: ModelConfig, name: str) -> tuple[int, ...] | None:
    """The shape ``config.json`` implies for a Hugging Face weight name (None: unchecked)."""
    hidden, inter = config.hidden_size, config.intermediate_size
    q_size = config.num_heads * config.head_dim
    kv_size = config.num_kv_heads * config.head_dim
    if ".experts." in name or ".shared_expert." in name:  # experts have their own width,
        return None  # checked where they are stacked (model/family_weights.py)
    suffix = name.rsplit(".", 2)[-2:] if name.startswith("model.layers.") else [name]
    shapes = {
        "model.embed_tokens.weight": (config.vocab_size, hidden),
        "lm_head.weight": (config.vocab_size, hidden),
        "model.norm.weight": (hidden,),
        "input_layernorm": (hidden,), "post_attention_layernorm": (hidden,),
        "q_proj": (q_size, hidden), "k_proj": (kv_size, hidden), "v_proj": (kv_size, hidden),
        "o_proj": (hidden, q_size), "gate_proj": (inter, hidden), "up_proj": (inter, hidden),
        "down_proj": (hidden, inter),
        "q_norm": (config.head_dim,), "k_norm": (config.head_dim,),
        "pre_feedforward_layernorm": (hidden,), "post_feedforward_layernorm": (hidden,),
    }
    if len(suffix) == 2 and suffix[1] == "weight":
        return shapes.get(suffix[0])
    return shapes.get(name)


def assemble_weights(
    config: ModelConfig, get: TensorSource, dtype: torch.dtype, device: torch.device | str
) -> ModelWeights:
    """Fuse Hugging Face-named tensors into ModelWeights.

    `get(name)` returns the tensor or None when the checkpoint lacks it; a
    missing required tensor raises CheckpointError naming it.
    """

    def place(tensor: torch.Tensor) -> torch.Tensor:
        return tensor.to(device=device, dtype=dtype).contiguous()

    def required(name: str) -> torch.Tensor:
        tensor = get(name)
        if tensor is None:
            raise CheckpointError(f"checkpoint has no tensor {name!r}")
        return tensor

    layers = tuple(
        _layer(f"model.layers.{i}", required, get, place, config.qk_norm)
        for i in range(config.num_layers)
    )
    embed = place(required("model.embed_tokens.weight"))
    lm_head = get("lm_head.weight")
    if lm_head is None and not config.tie_word_embeddings:
        raise CheckpointError(
            "checkpoint has no tensor 'lm_head.weight' and tie_word_embeddings=false"
        )
    return ModelWeights(
        embed_tokens=embed,
        layers=layers,
        final_norm=place(required("model.norm.weight")),
        lm_head=embed if lm_head is None or config.tie_word_embeddings else place(lm_head),
    )


def _layer(
    prefix: str,
    required: Callable[[str], torch.Tensor],
    get: TensorSource,
    place: Callable[[torch.Tensor], torch.Tensor],
    qk_norm: bool,
) -> LayerWeights:
    attn, mlp = f"{prefix}.self_attn", f"{prefix}.mlp"
    q_norm = place(required(f"{attn}.q_norm.weight")) if qk_norm else None
    k_norm = place(required(f"{attn}.k_norm.weight")) if qk_norm else None
    qkv = torch.cat([required(f"{attn}.{p}_proj.weight") for p in "qkv"])
    biases = [get(f"{attn}.{p}_proj.bias") for p in "qkv"]
    if any(b is not None for b in biases) and any(b is None for b in biases):
        raise CheckpointError(f"{attn}: q/k/v biases must be all present or all absent")
    qkv_bias = None if biases[0] is None else torch.cat([b for b in biases if b is not None])
    o_bias = get(f"{attn}.o_proj.bias")
    gate_up = torch.cat([required(f"{mlp}.gate_proj.weight"), required(f"{mlp}.up_proj.weight")])
    return LayerWeights(
        input_norm=place(required(f"{prefix}.input_layernorm.weight")),
        qkv_proj=place(qkv),
        qkv_bias=None if qkv_bias is None else place(qkv_bias),
        o_proj=place(required(f"{attn}.o_proj.weight")),
        o_bias=None if o_bias is None else place(o_bias),
        post_attention_norm=place(required(f"{prefix}.post_attention_layernorm.weight")),
        gate_up_proj=place(gate_up),
        down_proj=place(required(f"{mlp}.down_proj.weight")),
        q_norm=q_norm,
        k_norm=k_norm,
    )
