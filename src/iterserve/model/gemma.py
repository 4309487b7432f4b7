"""Packed forward of Gemma 2 and Gemma 3 (text) decoders (model/families.py).

The Llama loop of model/llama.py with Gemma's sandwich norms:

    per layer: RMSNorm -> attention -> RMSNorm -> + residual
               -> RMSNorm -> GeGLU MLP -> RMSNorm -> + residual

Every norm multiplies by (1 + weight), folded into the weights at load
(model/family_weights.py); the embedding scale, the softmax scale
(query_pre_attn_scalar), the soft-capping and GeGLU are the variant's data,
applied by the shared steps of model/llama.py. Gemma 3's sliding-window
layers rotate with their own RoPE base (`DecoderVariant.local_rope_inv_freq`).

The native one-call layer loop runs the plain layer only, so these run op by
op; Gemma 2's soft-capped attention runs on the torch path (the native
kernel does not soft-cap), Gemma 3's attends in place where the kernel is built.
"""

from __future__ import annotations

import torch

from iterserve.model.attention import AttentionMetadata
from iterserve.model.kv_cache import PagedKVCache
from iterserve.model.llama import PackedCausalLM, _rms_norm
from iterserve.model.packing import PackedBatch
from iterserve.model.projection import linear
from iterserve.model.rope import RotaryTables, rotary_tables


class PackedGemmaLM(PackedCausalLM):
    """PackedCausalLM with Gemma's layer (see the module docstring)."""

    def _layers(self, residual: torch.Tensor, batch: PackedBatch, cache: PagedKVCache,
                metadata: AttentionMetadata, tables: RotaryTables
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        config = self.config
        eps, local_layers = config.rms_norm_eps, config.variant.local_rope_layers
        local_tables = self._local_tables(batch) if local_layers else tables
        update: torch.Tensor | None = None  # the last sublayer's output, not yet added
        for index, layer in enumerate(self.weights.layers):
            assert layer.pre_feedforward_norm is not None
            assert layer.post_feedforward_norm is not None
            normed, residual = self._add_norm(update, residual, layer.input_norm)
            layer_tables = local_tables if local_layers and local_layers[index] else tables
            attended = self._attention(index, layer, normed, batch, cache, metadata, layer_tables)
            attended = _rms_norm(linear(attended, layer.o_proj, layer.o_bias),
                                 layer.post_attention_norm, eps)
            normed, residual = self._add_norm(attended, residual, layer.pre_feedforward_norm)
            update = _rms_norm(self._mlp(layer, normed), layer.post_feedforward_norm, eps)
        return residual, update

    def _local_tables(self, batch: PackedBatch) -> RotaryTables:
        """RoPE tables of the sliding-window layers (Gemma 3's local base)."""
        inv_freq = torch.tensor(self.config.variant.local_rope_inv_freq, dtype=torch.float32,
                                device=self.device)
        return rotary_tables(batch.positions, inv_freq, self.dtype,
                             self.config.rope_attention_scaling)
