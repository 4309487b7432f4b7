"""Architecture description parsed from a Hugging Face `config.json`.

`ModelConfig` is the only view of the checkpoint config the forward uses. It
covers the Llama, Qwen2, Qwen3 and Mistral families, which share one decoder
shape: RMSNorm -> GQA attention with RoPE -> RMSNorm -> SwiGLU MLP. Their
differences are data, not code: Qwen2 has q/k/v biases, Qwen3 RMS-normalises
each head of q and k before RoPE, Mistral and Qwen2 may declare a sliding
window per layer, Llama 3.x scales its RoPE frequencies. Gemma 1/2/3, Phi-3,
Qwen3-MoE and Mixtral change more of the layer; `ModelConfig.variant` says
how (model/families.py, model/variant.py).

`parse_model_config` checks the raw JSON; `model.hf_config` then resolves the
per-family defaults and the RoPE frequencies through transformers' AutoConfig
and rope initialisation functions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from iterserve.model import families
from iterserve.model.errors import (
    CheckpointError,
    UnsupportedArchitectureError,
    UnsupportedConfigError,
)
from iterserve.model.variant import DecoderVariant

SUPPORTED_ARCHITECTURES: tuple[str, ...] = (
    "LlamaForCausalLM",
    "MistralForCausalLM",
    "Qwen2ForCausalLM",
    "Qwen3ForCausalLM",
    *families.ARCHITECTURES,
)
#: What an unsupported architecture's refusal lists: the above, and the
#: multimodal checkpoints whose language model loads (model/families.py).
LOADABLE_ARCHITECTURES: tuple[str, ...] = (*SUPPORTED_ARCHITECTURES, *families.TEXT_PARTS)
#: RoPE variants whose frequencies transformers' ROPE_INIT_FUNCTIONS compute at load.
SUPPORTED_ROPE_TYPES: tuple[str, ...] = ("default", "linear", "dynamic", "yarn", "llama3",
                                         "longrope")
#: Older names of a RoPE variant (Phi-3's first configs say "su" for longrope).
ROPE_TYPE_ALIASES = families.LEGACY_ROPE_TYPES
#: Architectures that RMS-normalise every q and k head before RoPE (Qwen3).
QK_NORM_ARCHITECTURES: tuple[str, ...] = ("Qwen3ForCausalLM", *families.QK_NORM_ARCHITECTURES)
QWEN_ARCHITECTURES: tuple[str, ...] = ("Qwen2ForCausalLM", "Qwen3ForCausalLM")
DEFAULT_ROPE_THETA = 10000.0


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """Shapes and constants of one decoder-only checkpoint.

    `sliding_windows` holds one entry per layer: None for full causal attention,
    or W meaning a query at position p sees keys at positions (p - W, p].
    """

    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    sliding_windows: tuple[int | None, ...]
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()
    qk_norm: bool = False
    torch_dtype: str | None = None  # the checkpoint's declared dtype name, if any
    rope_type: str = "default"
    #: inverse frequencies [head_dim / 2] from transformers' rope init (empty: default RoPE
    #: from rope_theta) and the factor that scales cos/sin (yarn's mscale; 1.0 otherwise)
    rope_inv_freq: tuple[float, ...] = ()
    rope_attention_scaling: float = 1.0
    #: what the family changes in the layer (model/variant.py); the default changes nothing
    variant: DecoderVariant = DecoderVariant()

    def __post_init__(self) -> None:
        if self.num_heads % self.num_kv_heads:
            raise UnsupportedConfigError(
                f"num_attention_heads={self.num_heads} is not a multiple of "
                f"num_key_value_heads={self.num_kv_heads}"
            )
        if len(self.sliding_windows) != self.num_layers:
            raise UnsupportedConfigError("sliding_windows needs one entry per layer")
        if any(window is not None and window < 1 for window in self.sliding_windows):
            raise UnsupportedConfigError(
                f"sliding_window must be a positive number of tokens, got "
                f"{sorted({w for w in self.sliding_windows if w is not None})[0]}")
        if self.head_dim % 2:
            raise UnsupportedConfigError(f"head_dim={self.head_dim} must be even for RoPE")
        rotary_dim = self.rotary_dim
        if rotary_dim % 2 or not 0 < rotary_dim <= self.head_dim:
            raise UnsupportedConfigError(
                f"rotary dimension {rotary_dim} must be even and in (0, head_dim={self.head_dim}]")
        if self.rope_inv_freq and len(self.rope_inv_freq) != rotary_dim // 2:
            raise UnsupportedConfigError(
                f"rope gives {len(self.rope_inv_freq)} frequencies for rotary dimension "
                f"{rotary_dim}")

    @property
    def rotary_dim(self) -> int:
        """How many leading dimensions of each q/k head RoPE rotates (all but
        where the family's partial_rotary_factor says fewer)."""
        return self.variant.rotary_dim or self.head_dim

    @property
    def num_queries_per_kv(self) -> int:
        return self.num_heads // self.num_kv_heads


REQUIRED_KEYS = ("num_hidden_layers", "num_attention_heads", "hidden_size",
                 "intermediate_size", "vocab_size")
MAX_DIMENSION = 1 << 20  # any shape past this is a damaged config, not a model


def parse_model_config(raw: Mapping[str, Any]) -> ModelConfig:
    """Validate a `config.json` mapping and build a `ModelConfig`.

    Raises UnsupportedArchitectureError for any family outside
    SUPPORTED_ARCHITECTURES, UnsupportedConfigError for features the packed
    forward does not implement (unknown rope types, activations other than SiLU and GeGLU) and
    CheckpointError naming the key for a missing or ill-typed value.
    """
    _architecture(raw)  # an unsupported family is named before any key it lacks
    for key in REQUIRED_KEYS:
        _check_dimension(raw, key, required=True)
    for key in ("num_key_value_heads", "head_dim", "max_position_embeddings"):
        _check_dimension(raw, key, required=False)
    try:
        return _parse(raw)
    except (TypeError, ValueError, KeyError, AttributeError, ArithmeticError) as exc:
        if isinstance(exc, CheckpointError):
            raise
        raise CheckpointError(f"config.json: bad value ({type(exc).__name__}: {exc})") from None


def _check_dimension(raw: Mapping[str, Any], key: str, *, required: bool) -> None:
    value = raw.get(key)
    if value is None and not required:
        return
    if key not in raw:
        raise CheckpointError(f"config.json: missing key {key!r}")
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_DIMENSION:
        raise CheckpointError(
            f"config.json: {key} must be an integer in [1, {MAX_DIMENSION}], got {value!r}")


def _parse(raw: Mapping[str, Any]) -> ModelConfig:
    architecture = _architecture(raw)
    _reject_unsupported_features(raw, architecture)
    variant = DecoderVariant(activation=families.activation(architecture, raw))
    num_layers = int(raw["num_hidden_layers"])
    num_heads = int(raw["num_attention_heads"])
    hidden_size = int(raw["hidden_size"])
    if not raw.get("head_dim") and hidden_size % num_heads:
        raise UnsupportedConfigError(
            f"hidden_size={hidden_size} is not a multiple of num_attention_heads={num_heads}")
    head_dim = raw.get("head_dim") or hidden_size // num_heads
    return ModelConfig(
        architecture=architecture,
        vocab_size=int(raw["vocab_size"]),
        hidden_size=hidden_size,
        intermediate_size=int(raw["intermediate_size"]),
        num_layers=num_layers,
        num_heads=num_heads,
        num_kv_heads=int(raw.get("num_key_value_heads") or num_heads),
        head_dim=int(head_dim),
        rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
        rope_theta=_rope_theta(raw),
        max_position_embeddings=int(raw.get("max_position_embeddings", 4096)),
        tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
        sliding_windows=_sliding_windows(raw, architecture, num_layers),
        bos_token_id=raw.get("bos_token_id"),
        eos_token_ids=_token_ids(raw.get("eos_token_id")),
        qk_norm=architecture in QK_NORM_ARCHITECTURES,
        torch_dtype=_dtype_name(raw),
        rope_type=_rope_type(raw),
        variant=_with_rotary_dim(variant, raw, int(head_dim)),
    )


def _architecture(raw: Mapping[str, Any]) -> str:
    architectures = raw.get("architectures") or []
    if not isinstance(architectures, list):
        raise CheckpointError(f"config.json: architectures must be a list, got {architectures!r}")
    if not architectures:
        raise UnsupportedArchitectureError(
            f"<none declared; model_type={raw.get('model_type')!r}>", LOADABLE_ARCHITECTURES
        )
    architecture = str(architectures[0])
    if architecture not in SUPPORTED_ARCHITECTURES:
        raise UnsupportedArchitectureError(architecture, LOADABLE_ARCHITECTURES)
    return architecture


def _reject_unsupported_features(raw: Mapping[str, Any], architecture: str) -> None:
    if raw.get("mlp_bias"):
        raise UnsupportedConfigError("mlp_bias=true is not implemented")
    for key in ("rope_scaling", "rope_parameters"):
        rope = raw.get(key)
        if rope is not None and not isinstance(rope, Mapping):
            raise UnsupportedConfigError(f"{key} must be an object or null, got {rope!r}")
        rope_type = _rope_type_name(rope or {})
        if rope_type not in SUPPORTED_ROPE_TYPES:
            raise UnsupportedConfigError(
                f"{key} with rope_type={rope_type!r} is not implemented; "
                f"supported: {', '.join(SUPPORTED_ROPE_TYPES)}"
            )
    factor = _partial_rotary_factor(raw)
    if factor != 1.0 and architecture not in families.PARTIAL_ROTARY_ARCHITECTURES:
        raise UnsupportedConfigError(
            f"partial_rotary_factor={factor!r} is not implemented for {architecture}")


def _partial_rotary_factor(raw: Mapping[str, Any]) -> float:
    """The key at the top level, or inside the rope parameters (transformers 5 writes it there)."""
    rope = raw.get("rope_parameters") or raw.get("rope_scaling") or {}
    return float(raw.get("partial_rotary_factor", rope.get("partial_rotary_factor", 1.0)))


def _with_rotary_dim(variant: DecoderVariant, raw: Mapping[str, Any],
                     head_dim: int) -> DecoderVariant:
    """`variant` rotating int(head_dim * partial_rotary_factor) dimensions, as
    transformers sizes them (None: the whole head)."""
    factor = _partial_rotary_factor(raw)
    if factor == 1.0:
        return variant
    return replace(variant, rotary_dim=int(head_dim * factor))


def _rope_type(raw: Mapping[str, Any]) -> str:
    return _rope_type_name(raw.get("rope_parameters") or raw.get("rope_scaling") or {})


def _rope_type_name(rope: Mapping[str, Any]) -> str:
    name = str(rope.get("rope_type", rope.get("type", "default")))
    return ROPE_TYPE_ALIASES.get(name, name)


def _dtype_name(raw: Mapping[str, Any]) -> str | None:
    """`dtype` (transformers 5) or `torch_dtype` (older writers), without a `torch.` prefix."""
    value = raw.get("dtype") or raw.get("torch_dtype")
    return None if value is None else str(value).removeprefix("torch.")


def _rope_theta(raw: Mapping[str, Any]) -> float:
    rope_parameters = raw.get("rope_parameters") or {}
    theta = rope_parameters.get("rope_theta", raw.get("rope_theta", DEFAULT_ROPE_THETA))
    return float(theta)


def _sliding_windows(
    raw: Mapping[str, Any], architecture: str, num_layers: int
) -> tuple[int | None, ...]:
    """Per-layer window, following each family's config semantics."""
    window = raw.get("sliding_window")
    if architecture == "LlamaForCausalLM" or window is None:
        return (None,) * num_layers
    if architecture in QWEN_ARCHITECTURES and not raw.get("use_sliding_window", False):
        return (None,) * num_layers
    layer_types = raw.get("layer_types")
    if layer_types is None and architecture in QWEN_ARCHITECTURES:
        first_sliding = int(raw.get("max_window_layers", num_layers))
        layer_types = [
            "sliding_attention" if i >= first_sliding else "full_attention"
            for i in range(num_layers)
        ]
    if layer_types is None:
        return (int(window),) * num_layers
    return tuple(int(window) if kind == "sliding_attention" else None for kind in layer_types)


def _token_ids(value: Any) -> tuple[int, ...]:
    if value is None:
        return ()
    if isinstance(value, list | tuple):
        return tuple(int(v) for v in value)
    return (int(value),)
