"""Packed forward of Gemma 2 and Gemma 3 (text) decoders (model/families.py).

The Llama loop of model/llama.py with Gemma's sandwich norms:

    per layer: RMSNorm -> attention -> RMSNorm -> + residual
               -> RMSNorm -> GeGLU MLP -> RMSNorm -> + residual

Every norm multiplies by (1 + weight), folded into the weights at load
(model/family_weights.py); the embedding scale, the softmax scale
(query_pre_attn_scalar), the soft-capping and GeGLU are the variant's data,
applied by the shared steps of model/llama.py. Gemma 3's sliding-window
layers rotate with their own RoPE base (`DecoderVariant.local_rope_inv_freq`).

Gemma 3 runs through the native one-call layer loop where it applies (bf16
with oneDNN-packed projections; csrc/decoder_layers.cpp takes the sandwich
norms, the local tables and GeGLU); Gemma 2's soft-capped attention runs op
by op on the torch path (the native attention kernel does not soft-cap).
"""

from __future__ import annotations

import torch

from iterserve.model.kv_cache import PagedKVCache
from iterserve.model.llama import Attending, PackedCausalLM, _rms_norm
from iterserve.model.packing import PackedBatch
from iterserve.model.projection import linear
from iterserve.model.rope import RotaryTables, rotary_tables
from iterserve.model.weights import LayerWeights


class PackedGemmaLM(PackedCausalLM):
    """PackedCausalLM with Gemma's layer (see the module docstring)."""

    def _layers(self, residual: torch.Tensor, batch: PackedBatch, cache: PagedKVCache,
                metadata: Attending, tables: RotaryTables
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        config = self.config
        eps, local_layers = config.rms_norm_eps, config.variant.local_rope_layers
        local_tables = self._local_tables(batch) or tables
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

    def _fits_native_loop(self) -> bool:
        return self.config.variant.attn_logit_softcap is None  # the kernel does not soft-cap

    def _native_layer_weights(self, layer: LayerWeights
                              ) -> tuple[list[torch.Tensor], list[torch.Tensor | None]]:
        """The norm before the MLP takes the plain layer's post-attention slot (it
        is the one added to the residual); the attention and MLP outputs' norms
        are the sandwich."""
        assert layer.pre_feedforward_norm is not None
        return [layer.input_norm, layer.qkv_proj, layer.o_proj, layer.pre_feedforward_norm,
                layer.gate_up_proj, layer.down_proj], [layer.post_attention_norm,
                                                       layer.post_feedforward_norm]

    def _local_tables(self, batch: PackedBatch) -> RotaryTables | None:
        """RoPE tables of the sliding-window layers (Gemma 3's local base)."""
        if not self.config.variant.local_rope_layers:
            return None
        inv_freq = torch.tensor(self.config.variant.local_rope_inv_freq, dtype=torch.float32,
                                device=self.device)
        return rotary_tables(batch.positions, inv_freq, self.dtype,
                             self.config.rope_attention_scaling)
