"""Packed ragged forward of a Llama/Qwen2/Qwen3/Mistral decoder (spec 0x04, 0x09).

Data flow for one PackedBatch of Q_tot rows:

    embed [Q_tot, d]
    per layer: RMSNorm -> fused QKV (+bias) [-> per-head q/k RMSNorm, Qwen3]
        -> RoPE(position) -> write K/V at
        slot_mapping -> request-local paged attention -> O proj -> residual
        -> RMSNorm -> SwiGLU MLP -> residual        (all but attention row-wise)
    rows at sample points only -> final RMSNorm -> lm_head -> float32 logits

Row-wise stages run once over the packed axis; only attention looks at other
rows, and only rows of the same segment. The forward mutates nothing but the
pool rows named by `slot_mapping`; committing those rows as service progress
is the engine's job after the whole IterationResult validates (0x04 closing
paragraph).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from iterserve.model.attention import MAX_DECODE_GROUPS, AttentionMetadata, paged_attention
from iterserve.model.config import ModelConfig
from iterserve.model.kernels import resolve_in_place_decode
from iterserve.model.kv_cache import PagedKVCache
from iterserve.model.packing import PackedBatch
from iterserve.model.projection import linear, pack_weights, packing_pays
from iterserve.model.rope import (
    RotaryTables,
    apply_rotary,
    model_inverse_frequencies,
    rotary_tables,
)
from iterserve.model.weights import LayerWeights, ModelWeights


class PackedCausalLM:
    """A decoder-only LM whose forward consumes PackedBatch over a PagedKVCache."""

    def __init__(self, config: ModelConfig, weights: ModelWeights,
                 max_decode_groups: int = MAX_DECODE_GROUPS, prepack: bool = True,
                 attention_backend: str = "auto") -> None:
        """`prepack`: reorder the projection weights for oneDNN where that is
        the faster path (see model.projection); the forward is the same.
        `attention_backend`: how segments are attended, one of
        kernels.ATTENTION_BACKENDS (the in-place C++ kernel or gather + SDPA)."""
        self.config = config
        embed = weights.embed_tokens
        self.weights = pack_weights(weights) if prepack and packing_pays(
            embed.dtype, embed.device) else weights
        self.max_decode_groups = max_decode_groups  # see attention.decode_groups
        self._inv_freq = model_inverse_frequencies(config, self.device)
        self.native_ops = resolve_in_place_decode(attention_backend, self.dtype, self.device)

    @property
    def in_place_decode(self) -> bool:
        """Whether the native kernel attends this model's segments in place."""
        return self.native_ops is not None

    @property
    def dtype(self) -> torch.dtype:
        return self.weights.embed_tokens.dtype

    @property
    def device(self) -> torch.device:
        return self.weights.embed_tokens.device

    def allocate_cache(self, num_blocks: int, block_size: int = 16) -> PagedKVCache:
        """A zeroed cache in this model's dtype and device."""
        return PagedKVCache.allocate(self.config, num_blocks, block_size, self.dtype, self.device)

    def forward(self, batch: PackedBatch, cache: PagedKVCache) -> torch.Tensor:
        """Run all layers over the packed rows; returns logits [S, V] (float32) for
        `batch.sample_rows`, in that order. Writes the batch's K/V rows into `cache`."""
        self._check_batch(batch, cache)
        with torch.inference_mode():
            metadata = AttentionMetadata.build(batch, self.config.sliding_windows,
                                               self.max_decode_groups, self.dtype,
                                               self.native_ops)
            tables = rotary_tables(batch.positions, self._inv_freq, self.dtype,
                                   self.config.rope_attention_scaling)
            hidden = F.embedding(batch.token_ids, self.weights.embed_tokens)
            for index, layer in enumerate(self.weights.layers):
                hidden = self._layer(index, layer, hidden, batch, cache, metadata, tables)
            sampled = hidden.index_select(0, batch.sample_rows)
            sampled = _rms_norm(sampled, self.weights.final_norm, self.config.rms_norm_eps)
            return linear(sampled, self.weights.lm_head).float()

    __call__ = forward

    def _check_batch(self, batch: PackedBatch, cache: PagedKVCache) -> None:
        """Bounds checks on host metadata; an out-of-range index on CUDA would be a device assert."""
        if batch.block_size != cache.block_size:
            raise ValueError(f"batch block_size {batch.block_size} != cache {cache.block_size}")
        if batch.max_block_id >= cache.num_blocks:
            raise ValueError(
                f"block id {batch.max_block_id} >= cache num_blocks {cache.num_blocks}"
            )
        if batch.max_token_id >= self.config.vocab_size:
            raise ValueError(
                f"token id {batch.max_token_id} >= vocab_size {self.config.vocab_size}"
            )
        if batch.token_ids.device != self.device:
            raise ValueError(f"batch on {batch.token_ids.device}, model on {self.device}")

    def _layer(
        self,
        index: int,
        layer: LayerWeights,
        hidden: torch.Tensor,
        batch: PackedBatch,
        cache: PagedKVCache,
        metadata: AttentionMetadata,
        tables: RotaryTables,
    ) -> torch.Tensor:
        config = self.config
        num_rows = hidden.shape[0]
        normed = _rms_norm(hidden, layer.input_norm, config.rms_norm_eps)
        qkv = linear(normed, layer.qkv_proj, layer.qkv_bias)
        qkv = qkv.view(num_rows, config.num_heads + 2 * config.num_kv_heads, config.head_dim)
        rotated = apply_rotary(_qk_normed(qkv, layer, config), tables)
        query, keys = rotated[:, : config.num_heads], rotated[:, config.num_heads :]
        values = qkv[:, config.num_heads + config.num_kv_heads :]
        cache.write(index, batch.slot_mapping, keys, values)
        attended = paged_attention(
            query,
            keys,
            values,
            cache.key_pools[index],
            cache.value_pools[index],
            metadata,
            config.sliding_windows[index],
        )
        hidden = hidden + linear(attended, layer.o_proj, layer.o_bias)
        normed = _rms_norm(hidden, layer.post_attention_norm, config.rms_norm_eps)
        gate, up = linear(normed, layer.gate_up_proj).chunk(2, dim=-1)
        return hidden + linear(F.silu(gate) * up, layer.down_proj)


def _qk_normed(qkv: torch.Tensor, layer: LayerWeights, config: ModelConfig) -> torch.Tensor:
    """The q and k heads [Q, H + KV, D] of the fused projection, each head
    RMS-normalised over D first when the family does so (Qwen3)."""
    num_heads = config.num_heads
    qk = qkv[:, : num_heads + config.num_kv_heads]
    if layer.q_norm is None or layer.k_norm is None:
        return qk
    query = _rms_norm(qk[:, :num_heads], layer.q_norm, config.rms_norm_eps)
    keys = _rms_norm(qk[:, num_heads:], layer.k_norm, config.rms_norm_eps)
    return torch.cat((query, keys), dim=1)


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return F.rms_norm(x, weight.shape, weight, eps)
