"""The projection matmuls of the packed forward: x @ W^T (+ bias) per kernel choice.

Two CPU choices, each picked by measurement on small-preset layer shapes
(benchmarks/bench_projection_rows.py, benchmarks/bench_row_padding.py):

- bfloat16 where oneDNN runs it natively (AVX-512 BF16 / AMX): each weight is
  reordered once at load into oneDNN's blocked layout
  (`torch.ops.mkldnn._reorder_linear_weight`) and applied with
  `torch.ops.mkldnn._linear_pointwise`: faster than the other paths at decode
  and prefill row counts, and bit-identical to `F.linear` on those shapes
  (tests/model/test_projection.py checks the forward). The reorder hint is
  decode-sized (64 rows); a larger hint measured no different.
- otherwise, below SMALL_BATCH_ROWS rows a CPU GEMM runs as (W @ X^T)^T, which
  the CPU BLAS handles better than a thin left operand (in float32 and, on
  CPUs without native bf16, in bf16 too).

oneDNN builds (JIT-compiles) a primitive for each new row count it sees, per
weight shape, milliseconds each (benchmarks/bench_projection_rows.py). A
decode batch shrinks one row count at a time as requests finish, so an
unbucketed run builds dozens of primitives per shape mid-run. The
packed path therefore pads decode-sized inputs to a multiple of
DECODE_ROW_BUCKET rows (bandwidth-bound there: the padding rows cost little,
and the valid rows come out as they would unpadded, give or take the last
bf16 bit where oneDNN picks another kernel), and `warm` builds the
primitives of the row counts a run will use before its first request.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import torch
import torch.nn.functional as F

from iterserve.model.weights import ModelWeights

#: Below this many rows a dense CPU GEMM is faster as W @ X^T.
SMALL_BATCH_ROWS = 96
#: Rows oneDNN is told to expect when it reorders a weight.
PACK_HINT_ROWS = 64
#: Packed-path inputs of at most MAX_BUCKETED_ROWS rows are padded to a
#: multiple of this many rows (one oneDNN primitive per bucket, not per count).
DECODE_ROW_BUCKET = 8
MAX_BUCKETED_ROWS = 64


def bucketed_rows(num_rows: int) -> int:
    """The row count the packed path runs `num_rows` rows as."""
    if num_rows > MAX_BUCKETED_ROWS:
        return num_rows
    return -(-num_rows // DECODE_ROW_BUCKET) * DECODE_ROW_BUCKET


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None
           ) -> torch.Tensor:
    """x [rows, in] @ weight^T (+ bias); `weight` dense [out, in] or packed (see pack_weights)."""
    if weight.is_mkldnn:
        return _packed_linear(x, weight, bias)
    if x.shape[0] >= SMALL_BATCH_ROWS or x.device.type != "cpu" or x.dim() != 2:
        return F.linear(x, weight, bias)
    out = torch.mm(weight, x.t()).t().contiguous()
    return out if bias is None else out + bias


def _packed_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
                   ) -> torch.Tensor:
    num_rows = x.shape[0]
    padded = bucketed_rows(num_rows)
    if padded == num_rows:
        return torch.ops.mkldnn._linear_pointwise(x.contiguous(), weight, bias, "none", [], "")
    x = F.pad(x, (0, 0, 0, padded - num_rows))
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")[:num_rows]


def warm_row_counts(max_num_seqs: int, max_num_batched_tokens: int | None) -> list[int]:
    """The row counts worth building before the first request: every decode
    bucket up to ``max_num_seqs`` rows and a batch filling the token budget
    (the common size of a step that carries a prefill chunk)."""
    top = min(max_num_seqs, MAX_BUCKETED_ROWS)
    counts = set(range(DECODE_ROW_BUCKET, top + DECODE_ROW_BUCKET, DECODE_ROW_BUCKET))
    if max_num_batched_tokens is not None and max_num_batched_tokens > 0:
        counts.add(bucketed_rows(max_num_batched_tokens))
    return sorted(counts)


def warm(weights: ModelWeights, row_counts: Iterable[int]) -> int:
    """Build the oneDNN primitives of every packed weight shape at each of
    `row_counts` (bucketed) now, so no request waits for one; returns how many
    distinct (shape, rows) products ran. Nothing to do for dense weights."""
    shapes: dict[tuple[int, ...], torch.Tensor] = {}
    for layer in weights.layers:
        for weight in (layer.qkv_proj, layer.o_proj, layer.gate_up_proj, layer.down_proj):
            shapes.setdefault(tuple(weight.shape), weight)
    shapes.setdefault(tuple(weights.lm_head.shape), weights.lm_head)
    packed = [weight for weight in shapes.values() if weight.is_mkldnn]
    rows = sorted({bucketed_rows(count) for count in row_counts if count > 0})
    with torch.inference_mode():
        for weight in packed:
            for num_rows in rows:
                _packed_linear(torch.zeros(num_rows, weight.shape[1], dtype=weight.dtype),
                               weight, None)
    return len(packed) * len(rows)


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


