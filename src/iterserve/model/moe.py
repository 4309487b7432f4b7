"""Packed forward of a mixture-of-experts decoder: Qwen3-MoE, Qwen2-MoE, Mixtral
(model/families.py).

The Llama layer with the MLP of its sparse layers replaced by routed experts
(`DecoderVariant.moe`). Routing is row-wise, so it runs once over the packed
axis like every other row-wise stage (spec 0x04): each row's router picks its
top-k experts; then the rows are grouped by expert (one stable sort of the
row x choice pairs), and every expert that some row chose runs one SwiGLU
over exactly its gathered rows, its outputs weighted and scattered back
(index_add) onto those rows. Experts no row chose cost nothing. Qwen2-MoE's
shared expert then runs on every row, scaled by its sigmoid gate.

The native one-call layer loop runs the plain layer only, so these run op by
op, the projections unpacked (experts are stacked 3-D tensors).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from iterserve.model.attention import MAX_DECODE_GROUPS
from iterserve.model.config import ModelConfig
from iterserve.model.llama import PackedCausalLM
from iterserve.model.projection import linear
from iterserve.model.variant import MoeSpec
from iterserve.model.variant_ops import gated
from iterserve.model.weights import ExpertWeights, LayerWeights, ModelWeights


class PackedMoeLM(PackedCausalLM):
    """PackedCausalLM whose sparse layers route each row to its top-k experts."""

    def __init__(self, config: ModelConfig, weights: ModelWeights,
                 max_decode_groups: int = MAX_DECODE_GROUPS, prepack: bool = True,
                 attention_backend: str = "auto", layers_in_one_call: bool = True) -> None:
        """As PackedCausalLM, never prepacked: the sparse layers' dense MLP
        matrices are empty and the experts are 3-D (`prepack` is ignored)."""
        assert config.variant.moe is not None
        super().__init__(config, weights, max_decode_groups, prepack=False,
                         attention_backend=attention_backend,
                         layers_in_one_call=layers_in_one_call)

    def _mlp(self, layer: LayerWeights, normed: torch.Tensor) -> torch.Tensor:
        if layer.experts is None:
            return super()._mlp(layer, normed)
        moe = self.config.variant.moe
        assert moe is not None
        return routed_experts(normed, layer.experts, moe, self.config.variant.activation)


def routed_experts(rows: torch.Tensor, experts: ExpertWeights, moe: MoeSpec,
                   activation: str) -> torch.Tensor:
    """The experts' weighted sum for each of `rows` [N, d] (see the module docstring)."""
    top_k = moe.num_experts_per_token
    weights, chosen = route(linear(rows, experts.router), moe)  # [N, k] each
    order = chosen.flatten().argsort(stable=True)  # (row, choice) pairs grouped by expert
    row_of = order // top_k
    weight_of = weights.flatten().index_select(0, order)
    counts = torch.bincount(chosen.flatten(), minlength=moe.num_experts).tolist()
    out = torch.zeros_like(rows)
    begin = 0
    for expert, count in enumerate(counts):
        if not count:
            continue
        group = row_of[begin:begin + count]
        hidden = F.linear(rows.index_select(0, group), experts.gate_up_proj[expert])
        expert_out = F.linear(gated(hidden, activation), experts.down_proj[expert])
        out.index_add_(0, group, (expert_out * weight_of[begin:begin + count, None]).to(rows.dtype))
        begin += count
    if experts.shared_gate_up_proj is None:
        return out
    return out + _shared_expert(rows, experts, activation)


def _shared_expert(rows: torch.Tensor, experts: ExpertWeights, activation: str) -> torch.Tensor:
    """Qwen2-MoE's shared expert on every row, scaled by its sigmoid gate."""
    assert experts.shared_gate_up_proj is not None and experts.shared_down_proj is not None
    assert experts.shared_gate is not None
    hidden = linear(gated(linear(rows, experts.shared_gate_up_proj), activation),
                    experts.shared_down_proj)
    return torch.sigmoid(linear(rows, experts.shared_gate)) * hidden


def route(router_logits: torch.Tensor, moe: MoeSpec) -> tuple[torch.Tensor, torch.Tensor]:
    """(weights [N, k] in the logits' dtype, expert ids [N, k]): the top-k of the
    float32 softmax, renormalised over the chosen experts when the family does."""
    probabilities = torch.softmax(router_logits.float(), dim=-1)
    weights, chosen = torch.topk(probabilities, moe.num_experts_per_token, dim=-1)
    if moe.normalize_top_k:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights.to(router_logits.dtype), chosen
