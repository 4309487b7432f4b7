"""What a decoder family changes in the Llama-shaped layer, as data.

`ModelConfig.variant` holds it; the default (every field at rest) is the
plain Llama/Qwen2/Qwen3/Mistral decoder. The shared steps of model/llama.py
read the fields that change a step (activation, scales, soft caps, rotary
width); a layer of another shape has its own module (model/gemma.py's
sandwich norms, model/moe.py's routed experts). Which of them the native
layer loop also runs: PackedCausalLM._fits_native_loop. model/families.py
maps a `config.json` to these fields.
"""

from __future__ import annotations

from dataclasses import dataclass

from iterserve.model.errors import UnsupportedConfigError

#: Gated activations of the MLP: SwiGLU's SiLU, GeGLU's tanh-approximated GELU.
ACTIVATIONS = ("silu", "gelu_tanh")


@dataclass(frozen=True, slots=True)
class MoeSpec:
    """A sparse MLP: every token's router picks `num_experts_per_token` of
    `num_experts` SwiGLU experts (width `expert_intermediate_size`) and adds
    their outputs weighted by the router's softmax probabilities (renormalised
    over the chosen experts when `normalize_top_k`). `sparse_layers[i]` says
    whether layer i has experts (the others keep a dense MLP). A shared
    expert of width `shared_expert_intermediate_size` (0: none, Qwen2-MoE)
    runs on every row, its output scaled by a sigmoid gate, and is added."""

    num_experts: int
    num_experts_per_token: int
    expert_intermediate_size: int
    normalize_top_k: bool
    sparse_layers: tuple[bool, ...]
    shared_expert_intermediate_size: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.num_experts_per_token <= self.num_experts:
            raise UnsupportedConfigError(
                f"num_experts_per_tok={self.num_experts_per_token} must be in "
                f"[1, num_experts={self.num_experts}]")
        if self.expert_intermediate_size < 1:
            raise UnsupportedConfigError(
                f"the experts' intermediate size {self.expert_intermediate_size} must be positive")


@dataclass(frozen=True, slots=True)
class DecoderVariant:
    """Departures from the plain decoder layer; the defaults depart from nothing.

    `norm_weight_offset`: RMSNorm multiplies by (offset + weight); Gemma's
    1.0 is folded into the weights at load. `sandwich_norms`: an RMSNorm on
    the attention output before the residual add, and one before and one
    after the MLP (Gemma 2/3). `attention_scale`: the softmax scale (None:
    head_dim ** -0.5). `attn_logit_softcap` / `final_logit_softcap`: scores
    and logits pass through cap * tanh(x / cap). `local_rope_inv_freq`: the
    RoPE frequencies of the sliding-window layers when they differ from the
    global ones (Gemma 3), and `local_rope_layers` the layers that use them;
    empty: every layer uses the model's. `rotary_dim`: partial rotary (Phi-4
    mini's 0.75 of each head; the rest passes through unrotated).
    """

    activation: str = "silu"
    embedding_multiplier: float = 1.0
    norm_weight_offset: float = 0.0
    sandwich_norms: bool = False
    attention_scale: float | None = None
    attn_logit_softcap: float | None = None
    final_logit_softcap: float | None = None
    local_rope_inv_freq: tuple[float, ...] = ()
    local_rope_layers: tuple[bool, ...] = ()  # per layer: rotates with local_rope_inv_freq
    rotary_dim: int | None = None  # RoPE on this many leading dims of a head (None: all)
    moe: MoeSpec | None = None

    def __post_init__(self) -> None:
        if self.activation not in ACTIVATIONS:
            raise UnsupportedConfigError(
                f"activation {self.activation!r} is not implemented; supported: "
                f"{', '.join(ACTIVATIONS)}")
        for name in ("attn_logit_softcap", "final_logit_softcap", "attention_scale"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise UnsupportedConfigError(f"{name}={value!r} must be positive")
