"""Element-wise steps some families add to the forward (model/variant.py)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def softcapped(x: torch.Tensor, cap: float | None) -> torch.Tensor:
    """cap * tanh(x / cap) (Gemma 2's attention scores and final logits); x when cap is None."""
    if cap is None:
        return x
    return torch.tanh(x / cap) * cap


def scaled_embedding(embedded: torch.Tensor, multiplier: float) -> torch.Tensor:
    """Embeddings times `multiplier`, rounded to their dtype first as the reference
    does (Gemma's sqrt(hidden) is 55.5, not 55.43, in bfloat16)."""
    if multiplier == 1.0:
        return embedded
    return embedded * torch.tensor(multiplier, dtype=embedded.dtype, device=embedded.device)


def gated(gate_up: torch.Tensor, activation: str) -> torch.Tensor:
    """act(gate) * up over the two halves of the fused gate/up output
    (DecoderVariant.activation: SwiGLU's SiLU or GeGLU's tanh GELU)."""
    gate, up = gate_up.chunk(2, dim=-1)
    if activation == "gelu_tanh":
        return F.gelu(gate, approximate="tanh") * up
    return F.silu(gate) * up
