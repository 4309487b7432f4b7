"""Rotary position embedding indexed by request-local position (spec 0x04).

RoPE is row-local: a row's rotation depends only on its own position, so it
runs once over the packed axis. The frequencies follow the Hugging Face Llama
reference exactly (float32 angles, cast to the activation dtype). Scaled
variants (linear, dynamic, yarn, llama3) bring their own inverse frequencies
and cos/sin factor, computed at load by transformers (see model.hf_config).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from iterserve.model.config import ModelConfig


@dataclass(frozen=True, slots=True, eq=False)
class RotaryTables:
    """cos [Q, 1, D] and signed sin [Q, 1, D] for the rows of one forward.

    `signed_sin` is [-sin, sin] over the two halves, so that
    x * cos + swap_halves(x) * signed_sin == x * cos + rotate_half(x) * sin.
    """

    cos: torch.Tensor
    signed_sin: torch.Tensor


def model_inverse_frequencies(config: ModelConfig, device: torch.device) -> torch.Tensor:
    """float32 [rotary_dim / 2]: the config's resolved frequencies, or default RoPE's
    (rotary_dim: head_dim, or the part of it a partial-rotary family rotates)."""
    if config.rope_inv_freq:
        return torch.tensor(config.rope_inv_freq, dtype=torch.float32, device=device)
    return inverse_frequencies(config.rotary_dim, config.rope_theta, device)


def inverse_frequencies(head_dim: int, rope_theta: float, device: torch.device) -> torch.Tensor:
    exponents = torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim
    return 1.0 / (rope_theta**exponents)


def rotary_tables(
    positions: torch.Tensor, inv_freq: torch.Tensor, dtype: torch.dtype, scaling: float = 1.0
) -> RotaryTables:
    """Tables for packed rows at `positions` [Q]; `scaling` multiplies cos and sin (yarn)."""
    angles = positions.to(torch.float32)[:, None] * inv_freq[None, :]
    cos, sin = angles.cos(), angles.sin()
    if scaling != 1.0:
        cos, sin = cos * scaling, sin * scaling
    full_cos = torch.cat((cos, cos), dim=-1).to(dtype)
    signed_sin = torch.cat((-sin, sin), dim=-1).to(dtype)
    return RotaryTables(cos=full_cos[:, None, :], signed_sin=signed_sin[:, None, :])


def apply_rotary(x: torch.Tensor, tables: RotaryTables) -> torch.Tensor:
    """Rotate x [Q, num_heads, D]; returns a new contiguous tensor."""
    half = x.shape[-1] // 2
    swapped = torch.cat((x[..., half:], x[..., :half]), dim=-1)
    return torch.addcmul(x * tables.cos, swapped, tables.signed_sin)
