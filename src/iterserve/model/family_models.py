"""Which packed forward runs a checkpoint, and how its weights are assembled."""

from __future__ import annotations

from iterserve.model.config import ModelConfig
from iterserve.model.family_weights import assemble
from iterserve.model.gemma import PackedGemmaLM
from iterserve.model.llama import PackedCausalLM
from iterserve.model.moe import PackedMoeLM

__all__ = ["assemble", "model_class"]


def model_class(config: ModelConfig) -> type[PackedCausalLM]:
    """The forward for `config`'s layer: Gemma's sandwich norms, routed experts,
    or the plain layer (which covers Phi-3 once its fused tensors are split)."""
    if config.variant.sandwich_norms:
        return PackedGemmaLM
    if config.variant.moe is not None:
        return PackedMoeLM
    return PackedCausalLM
