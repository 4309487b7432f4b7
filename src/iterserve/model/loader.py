"""Loads a local Hugging Face checkpoint into a PackedCausalLM.

Safety and scope: weights are read from safetensors only (a pickle-based
`*.bin` checkpoint is refused, never unpickled), no remote code runs, nothing
is downloaded. Supported families: see config.SUPPORTED_ARCHITECTURES. FP8
checkpoints are dequantized at load; other quantization methods are refused
(model/quantization.py).
"""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from iterserve.model.checkpoint_check import (
    check_constants,
    check_layer_names,
    check_max_model_len,
    check_unused_tensors,
)
from iterserve.model.config import ModelConfig, parse_model_config
from iterserve.model.errors import CheckpointError, MissingCheckpointFileError
from iterserve.model.families import canonical_config, unloaded_parts
from iterserve.model.family_models import assemble, model_class
from iterserve.model.hf_config import resolve
from iterserve.model.llama import PackedCausalLM
from iterserve.model.quantization import dequantizing, read_scheme
from iterserve.model.weights import expected_shape

CONFIG_FILE = "config.json"
SINGLE_WEIGHTS_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
DTYPES_BY_NAME = {"float32": torch.float32, "bfloat16": torch.bfloat16,
                  "float16": torch.float16}
AUTO_DTYPE = "auto"


def load_model(
    model_dir: Path | str,
    dtype: torch.dtype | str = torch.float32,
    device: torch.device | str = "cpu",
    prepack: bool = True,
    attention_backend: str = "auto",
) -> PackedCausalLM:
    """Load config and weights from `model_dir`; raises a CheckpointError subclass
    naming the missing file, the unsupported architecture or the bad config.
    `dtype` is a torch dtype, one of DTYPES_BY_NAME, or "auto" (see resolve_dtype);
    `prepack` and `attention_backend` as in PackedCausalLM."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise CheckpointError(f"{model_dir}: not a checkpoint directory")
    raw = _read_json(model_dir / CONFIG_FILE)
    scheme = read_scheme(raw)  # refuses what it cannot load
    loaded_prefix = unloaded_parts(raw)
    config = load_config(model_dir)
    dtype = resolve_dtype(dtype, config)
    with ExitStack() as stack:
        handles = {path: _open_safetensors(stack, path) for path in _shard_paths(model_dir)}
        shard_of = {name: (path, handle) for path, handle in handles.items()
                    for name in handle.keys()}  # noqa: SIM118
        check_layer_names(config, shard_of)
        requested: set[str] = set()

        def get(name: str) -> torch.Tensor | None:
            requested.add(name)
            if name not in shard_of:
                return None
            path, handle = shard_of[name]
            try:
                tensor = handle.get_tensor(name)
            except Exception as exc:  # safetensors raises its own error types
                raise CheckpointError(f"{path}: tensor {name!r} unreadable ({exc})") from None
            expected = expected_shape(config, name)
            if expected is not None and tuple(tensor.shape) != expected:
                raise CheckpointError(f"{path}: tensor {name!r} has shape {tuple(tensor.shape)}, "
                                      f"config.json implies {expected}")
            return tensor

        weights = assemble(config, dequantizing(get, scheme), dtype, device)
        check_unused_tensors(shard_of if loaded_prefix is None else
                             [name for name in shard_of if name.startswith(loaded_prefix)],
                             requested)
    return model_class(config)(config, weights, prepack=prepack,
                               attention_backend=attention_backend)


def _open_safetensors(stack: ExitStack, path: Path) -> Any:
    """A safetensors handle; a truncated or corrupt file is a CheckpointError naming it."""
    try:
        return stack.enter_context(safe_open(str(path), framework="pt", device="cpu"))
    except Exception as exc:  # SafetensorError, OSError: the file is damaged
        message = " ".join(str(exc).split())
        raise CheckpointError(f"{path}: not a readable safetensors file ({message})") from None


def load_config(model_dir: Path) -> ModelConfig:
    """The checked config, with per-family defaults and RoPE resolved by transformers
    where they need it (see hf_config.resolve)."""
    raw = canonical_config(_read_json(Path(model_dir) / CONFIG_FILE))
    config = resolve(parse_model_config(raw), raw)
    check_constants(config)
    return config


def check_model_len(model_dir: Path | str, max_model_len: int | None) -> None:
    """``max_model_len`` within the checkpoint's positions (RoPE scaling counted)."""
    raw = canonical_config(_read_json(Path(model_dir) / CONFIG_FILE))
    check_max_model_len(load_config(Path(model_dir)), raw, max_model_len)


def resolve_dtype(dtype: torch.dtype | str, config: ModelConfig) -> torch.dtype:
    """A torch dtype for the weights; "auto" is the checkpoint's declared dtype
    (`dtype` / `torch_dtype` in config.json), float32 when it declares none."""
    if isinstance(dtype, str):
        name = (config.torch_dtype or "float32") if dtype == AUTO_DTYPE else dtype
        if name not in DTYPES_BY_NAME:
            raise ValueError(f"dtype {name!r} not supported; use one of "
                             f"{[AUTO_DTYPE, *DTYPES_BY_NAME]}")
        dtype = DTYPES_BY_NAME[name]
    if dtype not in SUPPORTED_DTYPES:
        raise ValueError(f"dtype {dtype} not supported; use one of {SUPPORTED_DTYPES}")
    return dtype


def _shard_paths(model_dir: Path) -> list[Path]:
    """The safetensors files holding the weights: every shard named by the index, or the single file."""
    index_path = model_dir / INDEX_FILE
    if index_path.is_file():
        weight_map = _read_json(index_path).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise CheckpointError(f"{index_path} has no weight_map")
        shards = sorted({model_dir / str(shard) for shard in weight_map.values()})
        for shard in shards:
            if not shard.is_file():
                raise MissingCheckpointFileError(str(shard), f"listed in {INDEX_FILE}")
        return shards
    single = model_dir / SINGLE_WEIGHTS_FILE
    if not single.is_file():
        _refuse_pickle(model_dir)
        raise MissingCheckpointFileError(str(single), f"or {INDEX_FILE} for a sharded checkpoint")
    return [single]


def _refuse_pickle(model_dir: Path) -> None:
    pickles = sorted(p.name for p in model_dir.glob("*.bin")) + sorted(
        p.name for p in model_dir.glob("*.pt")
    )
    if pickles:
        raise CheckpointError(
            f"{model_dir} holds only pickle weights ({', '.join(pickles)}); "
            "iterserve loads safetensors only and never unpickles; convert the "
            "checkpoint to model.safetensors first"
        )


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise MissingCheckpointFileError(str(path))
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise CheckpointError(f"{path} is not valid JSON: {error}") from error
    except (UnicodeDecodeError, OSError, RecursionError, ValueError) as error:
        raise CheckpointError(f"{path} is unreadable: {type(error).__name__}") from None
    if not isinstance(payload, dict):
        raise CheckpointError(f"{path} must hold a JSON object")
    return payload
