"""Batched paged attention through torch's varlen flash-attention entry point
(`torch.nn.attention.varlen.varlen_attn` with a block table): the second
candidate for the accelerator path, CUDA only (docs/cuda.md). The device
check measures it against the FlexAttention path
(model/batched_attention.py); whichever wins becomes `auto` on CUDA.

The pool layout [num_blocks, block_size, KV, D] is exactly the paged layout
the kernel reads, so the arguments are the packed batch's own:

    cu_seq_q   = request_offsets               (segment i owns rows [o_i, o_{i+1}))
    seqused_k  = starts + query_lens           (keys [0, end_i) of segment i)
    cu_seq_k   = [0, cumsum(seqused_k)]        (the same lengths, cumulated)
    block_table = block_tables                 (int32)
    window     = (-1, 0) causal, or (W - 1, 0) for a sliding window of W

Flash attention's causal mask is aligned to the end of each key sequence, so
query row r of a segment of q rows over end keys sees keys [0, end - q + r]:
the 0x04 predicate u <= p with p = start + r. A sliding window (left W - 1)
keeps u >= p - (W - 1), i.e. u > p - W, as model/attention.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from iterserve.model.packing import PackedBatch

Window = int | None


@dataclass(frozen=True, slots=True, eq=False)
class VarlenLayout:
    """The kernel's per-forward arguments (shared by every layer)."""

    cu_seq_q: torch.Tensor  # [N + 1] int32
    cu_seq_k: torch.Tensor  # [N + 1] int32
    seqused_k: torch.Tensor  # [N] int32
    block_table: torch.Tensor  # [N, max_num_blocks] int32
    max_q: int
    max_k: int

    @classmethod
    def from_batch(cls, batch: PackedBatch) -> VarlenLayout:
        """From the batch's device tensors and host copies: no device-to-host sync."""
        ends = batch.context_lens + (batch.request_offsets[1:] - batch.request_offsets[:-1])
        cu_seq_k = torch.zeros(len(batch.query_lens) + 1, dtype=torch.int32,
                               device=ends.device)
        cu_seq_k[1:] = torch.cumsum(ends, 0)
        return cls(
            cu_seq_q=batch.request_offsets.to(torch.int32),
            cu_seq_k=cu_seq_k,
            seqused_k=ends.to(torch.int32),
            block_table=batch.block_tables.to(torch.int32),
            max_q=max(batch.query_lens),
            max_k=max(s + q for s, q in zip(batch.starts, batch.query_lens, strict=True)),
        )


def window_size(window: Window) -> tuple[int, int]:
    """flash attention's (left, right) for the 0x04 predicate (see module doc)."""
    return (-1, 0) if window is None else (window - 1, 0)


def varlen_paged_attention(query: torch.Tensor, key_pool: torch.Tensor,
                           value_pool: torch.Tensor, layout: VarlenLayout, window: Window,
                           scale: float | None = None) -> torch.Tensor:
    """Attend query [Q, H, D] over the pools in one call; returns [Q, H * D].
    The batch's new K/V rows must already be written into the pools."""
    from torch.nn.attention.varlen import varlen_attn

    out = varlen_attn(query, key_pool, value_pool, layout.cu_seq_q, layout.cu_seq_k,
                      layout.max_q, layout.max_k, scale=scale, window_size=window_size(window),
                      enable_gqa=True, seqused_k=layout.seqused_k,
                      block_table=layout.block_table)
    assert isinstance(out, torch.Tensor)
    return out.reshape(query.shape[0], -1)


def reference_varlen(query: torch.Tensor, key_pool: torch.Tensor, value_pool: torch.Tensor,
                     layout: VarlenLayout, window: Window,
                     scale: float | None = None) -> torch.Tensor:
    """What the kernel computes from these arguments, per segment in plain
    torch (the CPU check of the argument mapping; slow, tests only)."""
    num_heads, head_dim = query.shape[1], query.shape[2]
    block_size = key_pool.shape[1]
    out = torch.empty(query.shape[0], num_heads * head_dim, dtype=query.dtype,
                      device=query.device)
    left, _ = window_size(window)
    for i in range(layout.seqused_k.shape[0]):
        begin, end = int(layout.cu_seq_q[i]), int(layout.cu_seq_q[i + 1])
        num_keys = int(layout.seqused_k[i])
        blocks = layout.block_table[i, : -(-num_keys // block_size)].long()
        keys = key_pool[blocks].flatten(0, 1)[:num_keys]
        values = value_pool[blocks].flatten(0, 1)[:num_keys]
        groups = num_heads // keys.shape[1]
        keys, values = keys.repeat_interleave(groups, 1), values.repeat_interleave(groups, 1)
        rows = torch.arange(end - begin)[:, None] + num_keys - (end - begin)  # end-aligned
        key_positions = torch.arange(num_keys)[None, :]
        allowed = key_positions <= rows
        if left >= 0:
            allowed &= key_positions >= rows - left
        scores = torch.einsum("qhd,khd->hqk", query[begin:end], keys)
        scores = scores * (head_dim ** -0.5 if scale is None else scale)
        weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
        out[begin:end] = torch.einsum("hqk,khd->qhd", weights, values).reshape(end - begin, -1)
    return out
