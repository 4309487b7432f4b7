"""A checkpoint's config checked against itself, its weights and the serving
flags, before any text is generated: a config that disagrees with its
weights, a non-finite constant or a token id outside the vocabulary would
otherwise load and generate wrong text with exit status 0.

Each check raises :class:`ConfigMismatch` (a ``CheckpointError``: one line
through the CLI, exit 2) naming the key and both sides.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from iterserve.model.config import ModelConfig
from iterserve.model.errors import CheckpointError

_LAYER_NAME = re.compile(r"^model\.layers\.(\d+)\.")
#: tensors a checkpoint may hold that no forward reads (older Llama writers saved RoPE's buffer)
_IGNORABLE = re.compile(r"(^|\.)rotary_emb\.inv_freq$")


class ConfigMismatch(CheckpointError):
    """config.json disagrees with the weights, or a flag with the model."""


def check_constants(config: ModelConfig) -> None:
    """Finite positive ``rope_theta`` and ``rms_norm_eps``; special token ids
    inside the vocabulary."""
    for key, value in (("rope_theta", config.rope_theta), ("rms_norm_eps", config.rms_norm_eps)):
        if not (math.isfinite(value) and value > 0):
            raise ConfigMismatch(f"config.json: {key} must be a finite number > 0, got {value}")
    named = [("bos_token_id", config.bos_token_id)] + [
        ("eos_token_id", token_id) for token_id in config.eos_token_ids]
    for key, token_id in named:
        if token_id is None:
            continue
        if isinstance(token_id, bool) or not isinstance(token_id, int) or \
                not 0 <= token_id < config.vocab_size:
            raise ConfigMismatch(f"config.json: {key} {token_id!r} is outside the vocabulary "
                                 f"(vocab_size {config.vocab_size})")


def check_layer_names(config: ModelConfig, tensor_names: Iterable[str]) -> None:
    """The weights hold exactly ``num_hidden_layers`` layers: a layer past
    them would be silently dropped (a missing one is named by the loader)."""
    indices = {int(match.group(1)) for name in tensor_names
               if (match := _LAYER_NAME.match(name)) is not None}
    if indices and max(indices) >= config.num_layers:
        raise ConfigMismatch(
            f"config.json: num_hidden_layers is {config.num_layers} but the weights hold "
            f"{max(indices) + 1} layers (model.layers.{max(indices)}.*)")


def check_unused_tensors(tensor_names: Iterable[str], read_names: set[str]) -> None:
    """Every tensor of the weights is read by the forward config.json
    describes: one left unread (a q_norm in a checkpoint labelled as a family
    without it) means the config does not describe these weights."""
    unused = sorted(name for name in tensor_names
                    if name not in read_names and not _IGNORABLE.search(name))
    if unused:
        raise ConfigMismatch(
            f"the weights hold {len(unused)} tensor(s) that the architecture config.json "
            f"declares does not use, e.g. {unused[0]!r}: the config does not describe them")


def max_positions(config: ModelConfig, raw: Mapping[str, Any]) -> int:
    """The longest sequence the model's positions serve: ``max_position_embeddings``,
    or what a RoPE scaling the config declares extends it to (its ``factor``
    times ``original_max_position_embeddings``, else times the declared length)."""
    declared = config.max_position_embeddings
    rope = raw.get("rope_parameters") or raw.get("rope_scaling") or {}
    if config.rope_type == "default" or not isinstance(rope, Mapping):
        return declared
    factor = rope.get("factor")
    if isinstance(factor, bool) or not isinstance(factor, int | float) or \
            not math.isfinite(factor) or factor <= 1:
        return declared
    original = rope.get("original_max_position_embeddings", declared)
    if isinstance(original, bool) or not isinstance(original, int) or original < 1:
        original = declared
    return max(declared, int(original * factor))


def check_max_model_len(config: ModelConfig, raw: Mapping[str, Any],
                        max_model_len: int | None) -> None:
    """``--max-model-len`` within :func:`max_positions`: positions past it were
    never trained (RoPE extrapolates into noise) unless a scaling says so."""
    if max_model_len is None:
        return
    limit = max_positions(config, raw)
    if max_model_len > limit:
        scaling = "" if limit == config.max_position_embeddings else \
            f" (with its {config.rope_type} RoPE scaling)"
        raise ConfigMismatch(
            f"--max-model-len {max_model_len} exceeds the model's {limit} positions{scaling}; "
            f"use --max-model-len {limit} or less")
