"""Weights of the families of model/families.py in the fused layout of model/weights.py.

Each family is the Llama assembly (`assemble_weights`) over a tensor source
that presents its checkpoint under Llama names, plus what only it has:

- Phi-3 stores q/k/v as one `qkv_proj` and gate/up as one `gate_up_proj`,
  already in the fused order: they are split into the Llama names here (and
  fused again by the assembly);
- Gemma's RMSNorm multiplies by (1 + weight): the 1 is added to every norm
  weight in float32 at load, so the forward's RMSNorm is the plain one; its
  pre/post feed-forward norms are read beside the Llama layer;
- a multimodal checkpoint's language model (Gemma 3) is found under its prefix;
- a mixture-of-experts layer's per-expert gate/up/down and router are stacked
  into ExpertWeights; the layer's dense MLP is left empty.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from iterserve.model.config import ModelConfig
from iterserve.model.errors import CheckpointError
from iterserve.model.families import TEXT_PARTS
from iterserve.model.weights import (
    ExpertWeights,
    LayerWeights,
    ModelWeights,
    TensorSource,
    assemble_weights,
    expected_shape,
)

Place = Callable[[torch.Tensor], torch.Tensor]


def assemble(config: ModelConfig, get: TensorSource, dtype: torch.dtype,
             device: torch.device | str) -> ModelWeights:
    """ModelWeights for any supported family (see the module docstring)."""

    def place(tensor: torch.Tensor) -> torch.Tensor:
        return tensor.to(device=device, dtype=dtype).contiguous()

    variant = config.variant
    source = _phi3_source(config, get) if config.architecture == "Phi3ForCausalLM" else get
    prefixes = [prefix for text, _, prefix in TEXT_PARTS.values() if text == config.architecture]
    if prefixes:
        source = _prefixed(config, source, prefixes[0])
    if variant.norm_weight_offset:
        source = _offset_norms(source, variant.norm_weight_offset)
    if variant.moe is not None:
        source = _without_dense_mlp(config, source)
    weights = assemble_weights(config, source, dtype, device)
    if variant.sandwich_norms:
        weights = _with_layers(weights, lambda i, layer: _feedforward_norms(i, layer, source, place))
    if variant.moe is not None:
        weights = _with_layers(weights, lambda i, layer: _experts(config, i, layer, get, place))
    return weights


def _with_layers(weights: ModelWeights,
                 change: Callable[[int, LayerWeights], LayerWeights]) -> ModelWeights:
    layers = tuple(change(i, layer) for i, layer in enumerate(weights.layers))
    return dataclasses.replace(weights, layers=layers)


def _required(get: TensorSource, name: str) -> torch.Tensor:
    tensor = get(name)
    if tensor is None:
        raise CheckpointError(f"checkpoint has no tensor {name!r}")
    return tensor


def _phi3_source(config: ModelConfig, get: TensorSource) -> TensorSource:
    """`get` that also answers the Llama q/k/v and gate/up names from Phi-3's fused tensors."""
    q_size = config.num_heads * config.head_dim
    kv_size = config.num_kv_heads * config.head_dim
    attention_sizes = {"q": (0, q_size), "k": (q_size, kv_size), "v": (q_size + kv_size, kv_size)}
    inter = config.intermediate_size
    mlp_sizes = {"gate": (0, inter), "up": (inter, inter)}

    def split(fused_name: str, begin: int, size: int, total: int) -> torch.Tensor:
        fused = _required(get, fused_name)
        if tuple(fused.shape) != (total, config.hidden_size):
            raise CheckpointError(f"tensor {fused_name!r} has shape {tuple(fused.shape)}, "
                                  f"config.json implies {(total, config.hidden_size)}")
        return fused[begin:begin + size]

    def source(name: str) -> torch.Tensor | None:
        stored = get(name)
        prefix, _, leaf = name.rpartition(".")
        module, _, projection = prefix.rpartition(".")
        kind = projection.removesuffix("_proj")
        if stored is not None or leaf != "weight":
            return stored
        if module.endswith(".self_attn") and kind in attention_sizes:
            return split(f"{module}.qkv_proj.weight", *attention_sizes[kind],
                         q_size + 2 * kv_size)
        if module.endswith(".mlp") and kind in mlp_sizes:
            return split(f"{module}.gate_up_proj.weight", *mlp_sizes[kind], 2 * inter)
        return None

    return source


def _prefixed(config: ModelConfig, get: TensorSource, prefix: str) -> TensorSource:
    """`get` that also finds a name under `prefix` (a multimodal checkpoint's
    language model), checked against the shape its plain name implies."""
    def source(name: str) -> torch.Tensor | None:
        tensor = get(name)
        if tensor is not None:
            return tensor
        tensor = get(prefix + name)
        expected = expected_shape(config, name)
        if tensor is not None and expected is not None and tuple(tensor.shape) != expected:
            raise CheckpointError(f"tensor {prefix + name!r} has shape {tuple(tensor.shape)}, "
                                  f"config.json implies {expected}")
        return tensor

    return source


def _offset_norms(get: TensorSource, offset: float) -> TensorSource:
    def source(name: str) -> torch.Tensor | None:
        tensor = get(name)
        if tensor is None or not name.endswith("norm.weight"):
            return tensor
        return tensor.float() + offset

    return source


def _feedforward_norms(index: int, layer: LayerWeights, get: TensorSource,
                       place: Place) -> LayerWeights:
    prefix = f"model.layers.{index}"
    return dataclasses.replace(
        layer,
        pre_feedforward_norm=place(_required(get, f"{prefix}.pre_feedforward_layernorm.weight")),
        post_feedforward_norm=place(_required(get, f"{prefix}.post_feedforward_layernorm.weight")),
    )


def _without_dense_mlp(config: ModelConfig, get: TensorSource) -> TensorSource:
    """`get` answering a sparse layer's dense MLP names with empty matrices."""
    assert config.variant.moe is not None
    sparse = config.variant.moe.sparse_layers
    hidden = config.hidden_size
    empty = {"gate_proj": (0, hidden), "up_proj": (0, hidden), "down_proj": (hidden, 0)}

    def source(name: str) -> torch.Tensor | None:
        parts = name.split(".")
        if (len(parts) == 6 and parts[:2] == ["model", "layers"] and parts[3] == "mlp"
                and parts[4] in empty and sparse[int(parts[2])]):
            return torch.empty(empty[parts[4]])
        return get(name)

    return source


def _experts(config: ModelConfig, index: int, layer: LayerWeights, get: TensorSource,
             place: Place) -> LayerWeights:
    moe = config.variant.moe
    assert moe is not None
    if not moe.sparse_layers[index]:
        return layer
    hidden, inter = config.hidden_size, moe.expert_intermediate_size
    if config.architecture == "MixtralForCausalLM":
        block = f"model.layers.{index}.block_sparse_moe"
        names = {"gate": "w1", "up": "w3", "down": "w2"}
    else:
        block = f"model.layers.{index}.mlp"
        names = {"gate": "gate_proj", "up": "up_proj", "down": "down_proj"}
    shapes = {"gate": (inter, hidden), "up": (inter, hidden), "down": (hidden, inter)}

    def expert(number: int, kind: str) -> torch.Tensor:
        name = f"{block}.experts.{number}.{names[kind]}.weight"
        tensor = _required(get, name)
        if tuple(tensor.shape) != shapes[kind]:
            raise CheckpointError(f"tensor {name!r} has shape {tuple(tensor.shape)}, "
                                  f"config.json implies {shapes[kind]}")
        return tensor

    router = _required(get, f"{block}.gate.weight")
    if tuple(router.shape) != (moe.num_experts, hidden):
        raise CheckpointError(f"tensor '{block}.gate.weight' has shape {tuple(router.shape)}, "
                              f"config.json implies {(moe.num_experts, hidden)}")
    experts = range(moe.num_experts)
    gate_up = torch.stack([torch.cat([expert(e, "gate"), expert(e, "up")]) for e in experts])
    down = torch.stack([expert(e, "down") for e in experts])
    stacked = ExpertWeights(router=place(router), gate_up_proj=place(gate_up),
                            down_proj=place(down))
    if moe.shared_expert_intermediate_size:
        stacked = _with_shared_expert(stacked, block, config, get, place)
    return dataclasses.replace(layer, experts=stacked)


def _with_shared_expert(experts: ExpertWeights, block: str, config: ModelConfig,
                        get: TensorSource, place: Place) -> ExpertWeights:
    """Qwen2-MoE's shared expert (a SwiGLU on every row) and its sigmoid gate."""
    assert config.variant.moe is not None
    hidden, inter = config.hidden_size, config.variant.moe.shared_expert_intermediate_size
    shapes = {"gate_proj": (inter, hidden), "up_proj": (inter, hidden),
              "down_proj": (hidden, inter)}

    def tensor(name: str, shape: tuple[int, ...]) -> torch.Tensor:
        found = _required(get, name)
        if tuple(found.shape) != shape:
            raise CheckpointError(f"tensor {name!r} has shape {tuple(found.shape)}, "
                                  f"config.json implies {shape}")
        return found

    shared = {kind: tensor(f"{block}.shared_expert.{kind}.weight", shape)
              for kind, shape in shapes.items()}
    return dataclasses.replace(
        experts,
        shared_gate_up_proj=place(torch.cat([shared["gate_proj"], shared["up_proj"]])),
        shared_down_proj=place(shared["down_proj"]),
        shared_gate=place(tensor(f"{block}.shared_expert_gate.weight", (1, hidden))))
