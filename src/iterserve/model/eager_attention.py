"""SDPA with soft-capped scores (Gemma 2), in transformers' eager form.

`torch.nn.functional.scaled_dot_product_attention` has no soft cap, so a
soft-capped model's attention (model/attention.py) computes the scores,
caps them, masks and takes a float32 softmax itself; without a cap it is SDPA.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from iterserve.model.variant_ops import softcapped


def sdpa(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
         mask: torch.Tensor, scale: float | None, softcap: float | None) -> torch.Tensor:
    """SDPA, or with `softcap` its eager form with soft-capped scores (transformers'
    eager attention: scores capped before the mask, softmax in float32)."""
    if softcap is None:
        return F.scaled_dot_product_attention(query, keys, values, attn_mask=mask, scale=scale)
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    scores = softcapped(torch.matmul(query, keys.transpose(-1, -2)) * scale, softcap)
    is_bool = mask.dtype == torch.bool
    scores = scores.masked_fill(~mask, float("-inf")) if is_bool else scores + mask
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    return torch.matmul(weights, values)


def causal_mask(num_rows: int, device: torch.device) -> torch.Tensor:
    """The plain causal mask of a chunk starting at position 0 (bool, [q, q])."""
    return torch.ones(num_rows, num_rows, dtype=torch.bool, device=device).tril()
