"""Quantized checkpoints: FP8 weights dequantized at load, every other method refused.

A checkpoint declares its quantization in `config.json` under
`quantization_config`. Three writers store FP8 (e4m3) linear weights the same
way, a float8 `<module>.weight` beside a float32 (or bf16) scale, and differ
only in the scale's name and granularity:

- `quant_method: "fp8"` (transformers' FineGrainedFP8, vLLM, AutoFP8): with
  `weight_block_size: [bm, bn]` the scale is `<module>.weight_scale_inv`
  holding one factor per [bm, bn] block, grid [ceil(out / bm), ceil(in / bn)];
  without it, `<module>.weight_scale` holds one factor for the tensor.
- `quant_method: "fbgemm_fp8"`: `<module>.weight_scale` of shape [out, 1],
  one factor per output channel.
- `quant_method: "compressed-tensors"` with `format: "float-quantized"` (or
  `"mixed-precision"` with every group float-quantized) and 8-bit float weights: `<module>.weight_scale` per tensor ([1]), per channel
  ([out, 1]) or per block (`block_structure`), as `strategy` says.

In every case the real weight is `weight.float() * scale` (the `_inv` suffix
names the inverse of the quantizing factor, which is what is multiplied).
The dequantized float32 tensor then takes the run dtype like any other
weight, so the packed forward, the native kernels and the KV cache see an
ordinary checkpoint. Activation scales (`input_scale`) and KV-cache scales
are not used: activations and the KV cache stay in the run dtype, which is
at least as precise as the static FP8 they describe.

Which tensors are quantized is read off their dtype, not off the config's
ignore lists: a module left unquantized (`lm_head`, the embeddings, norms)
is stored in a float dtype and passes through unchanged. A float8 tensor
without a declared FP8 method, a float8 weight without its scale and an
integer tensor where a float weight is expected are all refused: reading
one as plain numbers would give wrong output without a word.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from iterserve.model.errors import CheckpointError
from iterserve.model.weights import TensorSource

#: The quant_method values whose FP8 weights are dequantized at load.
FP8_METHODS = ("fp8", "fbgemm_fp8", "compressed-tensors")
#: Float8 dtypes safetensors stores for weights; `.float()` reads their values exactly.
FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)
#: Scale tensor suffixes, in the order a weight's scale is looked up.
SCALE_SUFFIXES = ("_scale_inv", "_scale")
#: Dtypes a weight may have in an unquantized checkpoint.
PLAIN_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)
COMPRESSED_TENSORS_STRATEGIES = ("tensor", "channel", "block")
#: compressed-tensors formats: FP8 stored as float8 tensors; per-group formats.
FLOAT_QUANTIZED, MIXED_PRECISION = "float-quantized", "mixed-precision"


class UnsupportedQuantizationError(CheckpointError):
    """`quantization_config` names a method (or variant) that is not implemented."""

    def __init__(self, method: str, detail: str = "") -> None:
        self.method = method
        suffix = f" ({detail})" if detail else ""
        super().__init__(
            f"config.json: quantization_config quant_method={method!r}{suffix} is not "
            f"supported; iterserve loads unquantized and FP8 checkpoints "
            f"(quant_method {', '.join(repr(m) for m in FP8_METHODS)} with 8-bit float weights)"
        )


@dataclass(frozen=True, slots=True)
class Fp8Scheme:
    """An FP8 checkpoint's weight layout: the method and, if any, the block size
    [rows, columns] of its block-wise scales."""

    method: str
    weight_block_size: tuple[int, int] | None = None


def read_scheme(raw_config: Mapping[str, Any]) -> Fp8Scheme | None:
    """The FP8 scheme `config.json` declares; None when it declares no quantization.
    Raises UnsupportedQuantizationError naming any other method."""
    settings = raw_config.get("quantization_config")
    if settings is None:
        return None
    if not isinstance(settings, Mapping):
        raise CheckpointError(f"config.json: quantization_config must be an object, "
                              f"got {settings!r}")
    method = str(settings.get("quant_method", "<none>"))
    if method == "compressed-tensors":
        return Fp8Scheme(method, _compressed_tensors_block_size(settings))
    if method not in ("fp8", "fbgemm_fp8"):
        raise UnsupportedQuantizationError(method)
    fmt = settings.get("fmt", "e4m3")
    if fmt != "e4m3":
        raise UnsupportedQuantizationError(method, f"fmt={fmt!r}")
    return Fp8Scheme(method, _block_size(settings.get("weight_block_size"), method))


def _block_size(value: Any, method: str) -> tuple[int, int] | None:
    if value is None:
        return None
    if (not isinstance(value, list | tuple) or len(value) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in value)):
        raise UnsupportedQuantizationError(method, f"weight block size {value!r} is not "
                                                   "two positive integers")
    return int(value[0]), int(value[1])


def _compressed_tensors_block_size(settings: Mapping[str, Any]) -> tuple[int, int] | None:
    """The block size of a compressed-tensors FP8 checkpoint (None: per tensor or
    channel); any other compressed-tensors scheme is refused, naming what it is."""
    method = "compressed-tensors"
    fmt = settings.get("format")
    if fmt not in (FLOAT_QUANTIZED, MIXED_PRECISION):
        raise UnsupportedQuantizationError(method, f"format={fmt!r}")
    if settings.get("sparsity_config"):
        raise UnsupportedQuantizationError(method, "sparsity_config")
    groups = settings.get("config_groups")
    if not isinstance(groups, Mapping) or not groups:
        raise UnsupportedQuantizationError(method, "no config_groups")
    block_sizes = {_group_block_size(name, group, fmt) for name, group in groups.items()}
    if len(block_sizes) > 1:
        raise UnsupportedQuantizationError(method, "config_groups with different block sizes")
    return block_sizes.pop()


def _group_block_size(name: str, group: Any, fmt: str) -> tuple[int, int] | None:
    method = "compressed-tensors"
    weights = group.get("weights") if isinstance(group, Mapping) else None
    if not isinstance(weights, Mapping):
        raise UnsupportedQuantizationError(method, f"config group {name!r} has no weights scheme")
    group_format = group.get("format") or fmt  # a group's own format overrides (mixed-precision)
    if group_format != FLOAT_QUANTIZED:
        raise UnsupportedQuantizationError(method, f"config group {name!r} "
                                                   f"format={group_format!r}")
    kind = (weights.get("type"), weights.get("num_bits"))
    if kind != ("float", 8):
        raise UnsupportedQuantizationError(
            method, f"config group {name!r} weights type={kind[0]!r} num_bits={kind[1]!r}")
    strategy = weights.get("strategy")
    if strategy not in COMPRESSED_TENSORS_STRATEGIES:
        raise UnsupportedQuantizationError(method, f"config group {name!r} strategy={strategy!r}")
    if weights.get("symmetric") is False:
        raise UnsupportedQuantizationError(method, f"config group {name!r} is asymmetric")
    if strategy != "block":
        return None
    return _block_size(weights.get("block_structure"), method)


def dequantizing(get: TensorSource, scheme: Fp8Scheme | None) -> TensorSource:
    """`get` whose float8 weights come back dequantized to float32; float tensors
    pass through. Refuses float8 tensors when `scheme` is None, a float8 weight
    without its scale, and integer tensors (CheckpointError naming the tensor)."""

    def get_plain(name: str) -> torch.Tensor | None:
        tensor = get(name)
        if tensor is None or tensor.dtype in PLAIN_DTYPES:
            return tensor
        if tensor.dtype not in FP8_DTYPES:
            raise CheckpointError(f"tensor {name!r} has dtype {_dtype_name(tensor)}, not a float "
                                  "weight; quantized integer weights are not supported")
        if scheme is None:
            raise CheckpointError(
                f"tensor {name!r} is {_dtype_name(tensor)} but config.json declares no "
                "quantization_config; without its scales the weights would be read wrong")
        return dequantize(name, tensor, _scale_of(get, name), scheme.weight_block_size)

    return get_plain


def _scale_of(get: TensorSource, name: str) -> torch.Tensor:
    for suffix in SCALE_SUFFIXES:
        scale = get(name + suffix)
        if scale is not None:
            return scale
    looked_for = " or ".join(repr(name + suffix) for suffix in SCALE_SUFFIXES)
    raise CheckpointError(f"FP8 tensor {name!r} has no scale (looked for {looked_for})")


def dequantize(name: str, weight: torch.Tensor, scale: torch.Tensor,
               block_size: tuple[int, int] | None) -> torch.Tensor:
    """`weight * scale` in float32, the scale broadcast per tensor, per output
    channel or per [rows, columns] block (edge blocks cut to the weight's shape)."""
    values = weight.float()
    factors = scale.float()
    if factors.numel() == 1:
        return values * factors.reshape(())
    if values.dim() != 2:
        raise CheckpointError(f"FP8 tensor {name!r} of shape {tuple(values.shape)} has "
                              f"non-scalar scale of shape {tuple(factors.shape)}")
    rows, cols = values.shape
    if tuple(factors.shape) in ((rows,), (rows, 1)):
        return values * factors.reshape(rows, 1)
    if block_size is not None:
        block_rows, block_cols = block_size
        grid = (-(-rows // block_rows), -(-cols // block_cols))
        if tuple(factors.shape) == grid:
            expanded = factors.repeat_interleave(block_rows, 0).repeat_interleave(block_cols, 1)
            return values * expanded[:rows, :cols]
    blocks = "" if block_size is None else f" or the {list(block_size)} block grid"
    raise CheckpointError(
        f"FP8 tensor {name!r} of shape {(rows, cols)} has a scale of shape "
        f"{tuple(factors.shape)}; expected one value, one per row{blocks}")


def _dtype_name(tensor: torch.Tensor) -> str:
    return str(tensor.dtype).removeprefix("torch.")
