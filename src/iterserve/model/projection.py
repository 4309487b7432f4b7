"""The projection matmuls of the packed forward: x @ W^T (+ bias) per kernel choice.

Two CPU choices, both measured on the project's machines (interleaved, thread
CPU time, small-preset layer shapes):

- bfloat16 where oneDNN runs it natively (AVX-512 BF16 / AMX): each weight is
  reordered once at load into oneDNN's blocked layout
  (`torch.ops.mkldnn._reorder_linear_weight`) and applied with
  `torch.ops.mkldnn._linear_pointwise`: 0.84x the time of the next best path
  at 16 and 64 rows, 0.62x at 100 rows, 0.80x at 312 rows on the Xeon, and
  bit-identical to `F.linear` on those shapes (tests/model/test_projection.py
  checks the forward). The reorder hint is 64 rows (decode-sized; 256 was
  within noise of it).
- otherwise, below SMALL_BATCH_ROWS rows a CPU GEMM runs as (W @ X^T)^T, which
  the CPU BLAS handles far better than a thin left operand (1.3-2.5x for
  fp32 at 8..64 rows on the AVX2 machine; on the Xeon in bf16 still
  0.6-0.9x of `F.linear` up to 96 rows, equal at 96-160).
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

from iterserve.model.weights import ModelWeights

#: Below this many rows a dense CPU GEMM is faster as W @ X^T.
SMALL_BATCH_ROWS = 96
#: Rows oneDNN is told to expect when it reorders a weight.
PACK_HINT_ROWS = 64


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None
           ) -> torch.Tensor:
    """x [rows, in] @ weight^T (+ bias); `weight` dense [out, in] or packed (see pack_weights)."""
    if weight.is_mkldnn:
        return torch.ops.mkldnn._linear_pointwise(x.contiguous(), weight, bias, "none", [], "")
    if x.shape[0] >= SMALL_BATCH_ROWS or x.device.type != "cpu" or x.dim() != 2:
        return F.linear(x, weight, bias)
    out = torch.mm(weight, x.t()).t().contiguous()
    return out if bias is None else out + bias


def packing_pays(dtype: torch.dtype, device: torch.device) -> bool:
    """True where pack_weights is the measured faster path: bf16 on a CPU whose
    oneDNN runs bf16 natively."""
    if device.type != "cpu" or dtype != torch.bfloat16 or not torch.backends.mkldnn.is_available():
        return False
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a torch build without these ops
        return False


def pack_weights(weights: ModelWeights) -> ModelWeights:
    """`weights` with every layer's projection matrices in oneDNN's layout.

    The lm_head stays dense when it is the embedding (tied): packing it would
    keep a second copy of the largest matrix for a handful of sampled rows.
    """
    layers = tuple(
        dataclasses.replace(layer, qkv_proj=_packed(layer.qkv_proj), o_proj=_packed(layer.o_proj),
                            gate_up_proj=_packed(layer.gate_up_proj),
                            down_proj=_packed(layer.down_proj))
        for layer in weights.layers
    )
    tied = weights.lm_head is weights.embed_tokens
    return dataclasses.replace(weights, layers=layers,
                               lm_head=weights.lm_head if tied else _packed(weights.lm_head))


def _packed(weight: torch.Tensor) -> torch.Tensor:
    if weight.is_mkldnn:  # already packed (weights shared by two models)
        return weight
    return torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(), PACK_HINT_ROWS)


