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

Other families change this layer through `config.variant` (model/variant.py):
the shared steps here honour its activation, embedding scale, softmax scale
and soft caps; model/gemma.py and model/moe.py override the layer loop and
the MLP where the family's layer differs in shape.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import flex_attention

from iterserve.model.attention import (
    MAX_DECODE_GROUPS,
    AttentionMetadata,
    InPlaceRows,
    paged_attention,
)
from iterserve.model.batched_attention import (
    QUERY_TILE_ROWS,
    FlexCall,
    FlexLayout,
    batched_paged_attention,
)
from iterserve.model.config import ModelConfig
from iterserve.model.kernels import resolve_in_place_decode, uses_batched_attention
from iterserve.model.kv_cache import PagedKVCache
from iterserve.model.packing import PackedBatch
from iterserve.model.projection import (
    bucketed_rows,
    linear,
    pack_weights,
    packing_pays,
    warm,
    warm_row_counts,
)
from iterserve.model.rope import (
    RotaryTables,
    apply_rotary,
    model_inverse_frequencies,
    rotary_tables,
)
from iterserve.model.staging import layout_for
from iterserve.model.variant_ops import gated, scaled_embedding, softcapped
from iterserve.model.varlen_attention import VarlenLayout, varlen_paged_attention
from iterserve.model.weights import LayerWeights, ModelWeights


@dataclass(frozen=True, slots=True)
class _NativeLayers:
    """csrc/decoder_layers.cpp's per-model arguments: per layer the input
    norm, qkv, o, post-attention norm, gate_up and down weights, the qkv and
    o biases, the per-head q and k norms (Qwen3), the norms of the attention
    and MLP outputs (Gemma's sandwich), the sliding window (0: none) and
    whether it rotates with the local RoPE tables (Gemma 3); whether the MLP
    is GeGLU."""

    weights: list[torch.Tensor]
    biases: list[torch.Tensor | None]
    qk_norms: list[torch.Tensor | None]
    windows: list[int]
    sandwich_norms: list[torch.Tensor | None]
    local_rope: list[int]
    gelu: bool


class PackedCausalLM:
    """A decoder-only LM whose forward consumes PackedBatch over a PagedKVCache."""

    def __init__(self, config: ModelConfig, weights: ModelWeights,
                 max_decode_groups: int = MAX_DECODE_GROUPS, prepack: bool = True,
                 attention_backend: str = "auto", layers_in_one_call: bool = True) -> None:
        """`prepack`: reorder the projection weights for oneDNN where that is
        the faster path (see model.projection); the forward is the same.
        `attention_backend`: one of kernels.ATTENTION_BACKENDS: the native
        kernels (in-place paged attention, fused add + RMSNorm, SiLU-and-mul)
        or plain torch (gather + SDPA, torch element-wise ops).
        `layers_in_one_call`: run the layer loop natively where the model fits
        it (see _one_call_arguments); the same ops on the same tensors."""
        self.config = config
        embed = weights.embed_tokens
        self.weights = pack_weights(weights) if prepack and packing_pays(
            embed.dtype, embed.device) else weights
        self.max_decode_groups = max_decode_groups  # see attention.decode_groups
        self._inv_freq = model_inverse_frequencies(config, self.device)
        if config.variant.attn_logit_softcap is not None:  # the native kernels do not soft-cap
            if attention_backend == "cpp":
                raise ValueError("attention_backend 'cpp' cannot soft-cap attention scores "
                                 f"({config.architecture}); use 'auto' or 'torch'")
            if attention_backend == "varlen":
                raise ValueError("attention_backend 'varlen' cannot soft-cap attention scores "
                                 f"({config.architecture}); use 'auto', 'flex' or 'torch'")
            if attention_backend != "flex":
                attention_backend = "torch"
        if attention_backend == "varlen" and self.device.type != "cuda":
            raise ValueError("attention_backend 'varlen' runs on CUDA only")
        #: torch's varlen flash attention over the block tables (model/varlen_attention.py)
        self.varlen_attention = attention_backend == "varlen"
        #: One attention call per layer for the whole batch (model/batched_attention.py).
        self.batched_attention = uses_batched_attention(attention_backend, self.device)
        self._flex_call = flex_call(self.device) if self.batched_attention else None
        self.native_ops = resolve_in_place_decode(attention_backend, self.dtype, self.device)
        #: Multi-row chunks to the kernel too: where it runs them on the AMX tile
        #: unit (bf16), one call per layer for the whole batch beats SDPA per chunk.
        self.chunks_in_place = (self.native_ops is not None and self.dtype == torch.bfloat16
                                and bool(self.native_ops.chunk_tiles(config.head_dim)))
        #: Packed projections run decode-sized inputs at bucketed row counts
        #: (model.projection): the forward then carries that many rows end to end.
        self._buckets_rows = bool(self.weights.layers) and self.weights.layers[0].qkv_proj.is_mkldnn
        #: The layer loop as one native call (csrc/decoder_layers.cpp) where
        #: the model fits it; a batch attended wholly in place then runs it.
        self._native_layers = self._one_call_arguments() if layers_in_one_call else None

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

    def warm(self, max_num_seqs: int, max_num_batched_tokens: int | None) -> int:
        """Prepare the projections for the batch sizes a run with these
        budgets takes most (see model.projection.warm) before its first
        request; returns how many products that ran."""
        return warm(self.weights, warm_row_counts(max_num_seqs, max_num_batched_tokens))

    def allocate_cache(self, num_blocks: int, block_size: int = 16, *,
                       commit: bool = False) -> PagedKVCache:
        """A zeroed cache in this model's dtype and device; with `commit`, all
        of its memory faulted in now (model/host_memory.py)."""
        return PagedKVCache.allocate(self.config, num_blocks, block_size, self.dtype, self.device,
                                     commit=commit)

    def forward(self, batch: PackedBatch, cache: PagedKVCache) -> torch.Tensor:
        """Run all layers over the packed rows; returns logits [S, V] (float32) for
        `batch.sample_rows`, in that order. Writes the batch's K/V rows into `cache`."""
        self._check_batch(batch, cache)
        with torch.inference_mode():
            metadata = self._attention_metadata(batch, cache)
            tables = rotary_tables(batch.positions, self._inv_freq, self.dtype,
                                   self.config.rope_attention_scaling)
            residual = scaled_embedding(
                F.embedding(self._row_padded(batch.token_ids), self.weights.embed_tokens),
                self.config.variant.embedding_multiplier)
            in_place = metadata.in_place if isinstance(metadata, AttentionMetadata) else None
            update: torch.Tensor | None  # the last sublayer's output, not yet added
            if (self._native_layers is not None and in_place is not None
                    and in_place.rows is None):
                update = self._layers_in_one_call(residual, batch, cache, in_place, tables)
            else:
                residual, update = self._layers(residual, batch, cache, metadata, tables)
            sampled = residual.index_select(0, batch.sample_rows)
            if update is not None:
                sampled = sampled + update.index_select(0, batch.sample_rows)
            sampled = _rms_norm(sampled, self.weights.final_norm, self.config.rms_norm_eps)
            logits = linear(sampled, self.weights.lm_head)
            return softcapped(logits, self.config.variant.final_logit_softcap).float()

    __call__ = forward

    def _attention_metadata(self, batch: PackedBatch, cache: PagedKVCache) -> Attending:
        """The per-forward attention descriptors: the batched layout (built by
        the packer, else here) or the per-request path's metadata."""
        if self.varlen_attention:
            return VarlenLayout.from_batch(batch)
        if self.batched_attention:
            return batch.flex if batch.flex is not None else layout_for(batch, cache.num_blocks)
        return AttentionMetadata.build(batch, self.config.sliding_windows,
                                       self.max_decode_groups, self.dtype,
                                       self.native_ops, self.chunks_in_place)

    def _layers(self, residual: torch.Tensor, batch: PackedBatch, cache: PagedKVCache,
                metadata: Attending, tables: RotaryTables
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The layer loop, op by op: the residual stream and the last MLP
        output, not yet added (None without layers)."""
        update: torch.Tensor | None = None  # the last sublayer's output, not yet added
        for index, layer in enumerate(self.weights.layers):
            normed, residual = self._add_norm(update, residual, layer.input_norm)
            attended = self._attention(index, layer, normed, batch, cache, metadata, tables)
            normed, residual = self._add_norm(linear(attended, layer.o_proj, layer.o_bias),
                                              residual, layer.post_attention_norm)
            update = self._mlp(layer, normed)
        return residual, update

    def _one_call_arguments(self) -> _NativeLayers | None:
        """What csrc/decoder_layers.cpp takes besides the batch, or None where
        the model does not fit it: it needs the native kernels with that op,
        oneDNN-packed projections (bucketed rows)."""
        ops, layers = self.native_ops, self.weights.layers
        if ops is None or not self._buckets_rows or not hasattr(ops, "decoder_layers"):
            return None
        if not self._fits_native_loop():
            return None
        weights: list[torch.Tensor] = []
        biases: list[torch.Tensor | None] = []
        qk_norms: list[torch.Tensor | None] = []
        sandwich_norms: list[torch.Tensor | None] = []
        for layer in layers:
            if not all(weight.is_mkldnn for weight in (
                    layer.qkv_proj, layer.o_proj, layer.gate_up_proj, layer.down_proj)):
                return None
            layer_weights, layer_sandwich = self._native_layer_weights(layer)
            weights += layer_weights
            sandwich_norms += layer_sandwich
            biases += [layer.qkv_bias, layer.o_bias]
            qk_norms += ([layer.q_norm, layer.k_norm] if layer.q_norm is not None
                         and layer.k_norm is not None else [None, None])
        config = self.config
        windows = [window or 0 for window in config.sliding_windows]
        local_rope = [int(is_local) for is_local in config.variant.local_rope_layers] or [0] * len(
            layers)
        return _NativeLayers(weights, biases, qk_norms, windows, sandwich_norms, local_rope,
                             config.variant.activation == "gelu_tanh")

    def _fits_native_loop(self) -> bool:
        """Whether csrc/decoder_layers.cpp computes this model's layer: the
        plain one, GeGLU allowed (Gemma's embedding scale and final soft cap
        lie outside the loop); model/gemma.py widens it to Gemma's layer."""
        variant = self.config.variant
        return (variant.attn_logit_softcap is None and variant.moe is None
                and not variant.sandwich_norms and not variant.local_rope_layers)

    def _native_layer_weights(self, layer: LayerWeights
                              ) -> tuple[list[torch.Tensor], list[torch.Tensor | None]]:
        """`layer`'s six weights for csrc/decoder_layers.cpp and its two sandwich norms."""
        return [layer.input_norm, layer.qkv_proj, layer.o_proj, layer.post_attention_norm,
                layer.gate_up_proj, layer.down_proj], [None, None]

    def _local_tables(self, batch: PackedBatch) -> RotaryTables | None:
        """RoPE tables of the layers that rotate with their own (None: none do)."""
        return None

    def _layers_in_one_call(self, residual: torch.Tensor, batch: PackedBatch,
                            cache: PagedKVCache, in_place: InPlaceRows,
                            tables: RotaryTables) -> torch.Tensor:
        """The layer loop of :meth:`forward` as one native call: updates
        ``residual`` in place and returns the last MLP output, as the loop
        leaves them (the same kernels in the same order)."""
        assert self.native_ops is not None and self._native_layers is not None
        config, native = self.config, self._native_layers
        local = self._local_tables(batch)
        scale = config.variant.attention_scale
        return self.native_ops.decoder_layers(
            residual, batch.num_rows, native.weights, native.biases, native.qk_norms,
            native.sandwich_norms, native.windows, native.local_rope,
            cache.key_pools, cache.value_pools, batch.slot_mapping, tables.cos,
            tables.signed_sin, None if local is None else local.cos,
            None if local is None else local.signed_sin, in_place.block_tables,
            in_place.request_offsets, in_place.context_lens, config.num_heads,
            config.num_kv_heads, config.head_dim, config.rms_norm_eps,
            config.head_dim ** -0.5 if scale is None else scale, native.gelu)

    def _row_padded(self, token_ids: torch.Tensor) -> torch.Tensor:
        """The batch's token ids, padded (with id 0) to the row count its packed
        projections run at: the row-wise stages then carry those rows from the
        embedding on, and no projection pads its input (a copy per projection,
        split over threads at MLP width). Only attention and the K/V write see
        the batch's own rows; the padding rows are never sampled."""
        num_rows = token_ids.shape[0]
        width = bucketed_rows(num_rows) if self._buckets_rows else num_rows
        return token_ids if width == num_rows else F.pad(token_ids, (0, width - num_rows))

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

    def _add_norm(self, update: torch.Tensor | None, residual: torch.Tensor,
                  weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(RMSNorm(residual + update), residual + update); `update` None adds
        nothing. With the native ops it is one pass, in place on both tensors
        (fresh ones of this forward: the embedding and projection outputs)."""
        eps = self.config.rms_norm_eps
        if update is None:
            return _rms_norm(residual, weight, eps), residual
        if self.native_ops is None:
            residual = residual + update
            return _rms_norm(residual, weight, eps), residual
        self.native_ops.fused_add_rms_norm(update, residual, weight, eps)
        return update, residual

    def _mlp(self, layer: LayerWeights, normed: torch.Tensor) -> torch.Tensor:
        """SwiGLU: down(silu(gate) * up), the gate/up product fused natively when it can
        be; GeGLU where the family's activation is GELU (model/variant.py)."""
        gate_up = linear(normed, layer.gate_up_proj)
        activation = self.config.variant.activation
        if self.native_ops is None or activation != "silu":
            return linear(gated(gate_up, activation), layer.down_proj)
        return linear(self.native_ops.silu_and_mul(gate_up), layer.down_proj)

    def _attention(
        self,
        index: int,
        layer: LayerWeights,
        normed: torch.Tensor,
        batch: PackedBatch,
        cache: PagedKVCache,
        metadata: Attending,
        tables: RotaryTables,
    ) -> torch.Tensor:
        """QKV projection, RoPE, K/V written to the pool, attention: [Q, H * D]
        (`normed`'s rows: the batch's, then the padding rows of _row_padded)."""
        config = self.config
        width, num_rows = normed.shape[0], batch.num_rows
        qkv = linear(normed, layer.qkv_proj, layer.qkv_bias)
        qkv = qkv.view(width, config.num_heads + 2 * config.num_kv_heads, config.head_dim)
        qkv = qkv[:num_rows]  # the batch's own rows (see _row_padded)
        rotated = _qk_normed(qkv, layer, config)
        rotary_dim = config.rotary_dim  # partial rotary: the rest of each head passes through
        if self.native_ops is None and rotary_dim == config.head_dim:
            rotated = apply_rotary(rotated, tables)
        elif self.native_ops is None:
            rotated = torch.cat((apply_rotary(rotated[..., :rotary_dim], tables),
                                 rotated[..., rotary_dim:]), dim=-1)
        else:  # in place on qkv (or on the q/k norm's fresh output)
            self.native_ops.rotary_in_place(rotated[..., :rotary_dim], tables.cos,
                                            tables.signed_sin)
        query, keys = rotated[:, : config.num_heads], rotated[:, config.num_heads :]
        values = qkv[:, config.num_heads + config.num_kv_heads :]
        if self.native_ops is None:
            cache.write(index, batch.slot_mapping, keys, values)
        else:  # one call on one thread: no thread hand-off for a few rows, unlike index_copy_
            self.native_ops.write_kv(cache.key_pools[index], cache.value_pools[index],
                                     batch.slot_mapping, keys, values)
        if isinstance(metadata, VarlenLayout):
            attended = varlen_paged_attention(query, cache.key_pools[index],
                                              cache.value_pools[index], metadata,
                                              config.sliding_windows[index],
                                              config.variant.attention_scale)
        elif isinstance(metadata, FlexLayout):
            assert self._flex_call is not None
            attended = batched_paged_attention(
                query, cache.key_pools[index], cache.value_pools[index], metadata,
                config.sliding_windows[index], config.variant.attention_scale,
                config.variant.attn_logit_softcap, self._flex_call,
                flex_kernel_options(self.device, metadata.block_size))
        else:
            attended = paged_attention(query, keys, values, cache.key_pools[index],
                                       cache.value_pools[index], metadata,
                                       config.sliding_windows[index],
                                       config.variant.attention_scale,
                                       config.variant.attn_logit_softcap)
        return attended if width == num_rows else F.pad(attended, (0, 0, 0, width - num_rows))


#: what the layers attend with: the batched layout or the per-request metadata
Attending = AttentionMetadata | FlexLayout | VarlenLayout


def flex_call(device: torch.device) -> FlexCall:
    """flex_attention compiled for an accelerator (its eager form
    materialises every score and is for the CPU tests only); the compiled
    function is the model's own, compiled on first use."""
    if device.type == "cpu":
        return flex_attention
    return torch.compile(flex_attention, dynamic=True)


def flex_kernel_options(device: torch.device, block_size: int) -> dict[str, int | bool] | None:
    """Tile sizes of the compiled kernel: its row tile is the layout's query
    tile and its key tile one cache block, as the block mask is cut. Always
    the main kernel: the flex-decoding one (chosen for under 128 query rows)
    takes all rows as one query block, and ours differ per 16-row tile."""
    if device.type == "cpu":
        return None
    return {"BLOCK_M": QUERY_TILE_ROWS, "BLOCK_N": block_size, "FORCE_USE_FLEX_ATTENTION": True}


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
