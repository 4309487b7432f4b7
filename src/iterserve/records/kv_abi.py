"""Bytes-per-row ABI and logical KV accounting (0x05).

One committed row is the K and V vectors of one token position in every
layer::

    bytes_per_row = 2 * num_layers * num_kv_heads * head_dim * dtype_bytes

Admission consumes this coefficient (``delta_KV_row``); it never re-derives
architecture. Logical accounting (0x05)::

    M_committed_r = T_r * delta_KV_row
    M_active(t)   = sum_r T_r(t) * delta_KV_row

is logical payload only: physical pages, tail fragmentation and sharing are
the block manager's facts, not these numbers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import floordiv, mod, neg, not_
from typing import Any

DTYPE_BYTES: Mapping[str, int] = {
    "float32": 4,
    "float": 4,
    "float16": 2,
    "half": 2,
    "bfloat16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "int8": 1,
    "uint8": 1,
}
"""Bytes per scalar for the dtype names found in HF configs (``torch.`` prefix allowed)."""


class UnsupportedKvLayoutError(ValueError):
    """The config describes a cache layout this ABI does not model (e.g. MLA latents)."""


@dataclass(frozen=True, slots=True)
class KvRowAbi:
    """The versioned logical-row coefficient of one model profile (0x05)."""

    profile_id: str
    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype_bytes: int

    def __post_init__(self) -> None:
        for name in ("num_layers", "num_kv_heads", "head_dim", "dtype_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")

    @property
    def bytes_per_row(self) -> int:
        return bytes_per_row(self.num_layers, self.num_kv_heads, self.head_dim, self.dtype_bytes)


def bytes_per_row(num_layers: int, num_kv_heads: int, head_dim: int, dtype_bytes: int) -> int:
    """Logical K+V bytes one committed row adds across all layers."""
    return 2 * num_layers * num_kv_heads * head_dim * dtype_bytes


def dtype_num_bytes(dtype_name: str) -> int:
    """Bytes per scalar for an HF ``torch_dtype`` string; raises on unknown names."""
    name = dtype_name.removeprefix("torch.")
    if name not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {dtype_name!r}; known: {sorted(DTYPE_BYTES)}")
    return DTYPE_BYTES[name]


def kv_row_abi_from_hf_config(config: Mapping[str, object], *, profile_id: str,
                              dtype_name: str | None = None) -> KvRowAbi:
    """Derive the row ABI from a Hugging Face ``config.json`` dict.

    ``head_dim`` defaults to ``hidden_size // num_attention_heads`` and
    ``num_key_value_heads`` to ``num_attention_heads`` (MHA). The dtype comes
    from ``dtype_name`` when the runtime overrides it, else ``torch_dtype`` (or
    ``dtype``). Latent (MLA) caches are refused rather than mis-sized.
    """
    if "kv_lora_rank" in config:
        raise UnsupportedKvLayoutError("MLA latent caches are not described by this ABI")
    num_heads = _positive_int(config, "num_attention_heads")
    num_kv_heads = _optional_int(config, "num_key_value_heads") or num_heads
    head_dim = _optional_int(config, "head_dim") or _positive_int(config, "hidden_size") // num_heads
    dtype = dtype_name or config.get("torch_dtype") or config.get("dtype")
    if not isinstance(dtype, str):
        raise ValueError("config names no dtype; pass dtype_name")
    return KvRowAbi(profile_id, _positive_int(config, "num_hidden_layers"), num_kv_heads,
                    head_dim, dtype_num_bytes(dtype))


def committed_bytes(num_committed_rows: int, row_bytes: int) -> int:
    """``M_committed_r = T_r * delta_KV_row`` (0x05)."""
    if num_committed_rows < 0:
        raise ValueError(f"num_committed_rows must be >= 0, got {num_committed_rows}")
    return num_committed_rows * row_bytes


def active_bytes(committed_rows: Iterable[int], row_bytes: int) -> int:
    """``M_active = sum_r T_r * delta_KV_row`` over the active set (0x05)."""
    return sum(committed_bytes(rows, row_bytes) for rows in committed_rows)


def block_bytes(block_size_rows: int, row_bytes: int) -> int:
    """Physical bytes of one paged block (every row slot, used or not)."""
    return block_size_rows * row_bytes


def blocks_for(num_rows: Any, block_size: int) -> Any:
    """Blocks of ``block_size`` rows that hold ``num_rows`` rows: the one
    ceiling division of paged accounting (ints, or numpy/torch arrays
    elementwise)."""
    return -(-num_rows // block_size)


def blocks_opened(num_computed: int, num_rows: int, block_size: int) -> int:
    """Blocks that rows ``[c, c + num_rows)`` open beyond the ``c`` rows
    already held: ``blocks_for(c + n) - blocks_for(c)``, written out for the
    plan builder's per-request path."""
    return (-num_computed // block_size) - (-(num_computed + num_rows) // block_size)


def opens_block(starts: Iterable[int], block_size: int) -> list[bool]:
    """For each one-row interval starting at ``starts[i]``: whether it opens
    a block (``blocks_opened(start, 1, block_size) == 1``: it starts on a
    block boundary), with no Python-level call per row."""
    return list(map(not_, map(mod, starts, repeat(block_size))))


def blocks_opened_total(starts: Sequence[int], ends: Sequence[int], widths: tuple[int, ...],
                        block_size: int) -> int:
    """:func:`blocks_opened` summed over intervals ``[starts[i], ends[i])``,
    in C-level passes (the validator's whole-plan check). A one-row
    interval opens a block exactly when it starts on a block boundary, so
    all-decode work counts those."""
    if widths.count(1) == len(widths):
        return opens_block(starts, block_size).count(True)
    return (sum(map(floordiv, map(neg, starts), repeat(block_size)))
            - sum(map(floordiv, map(neg, ends), repeat(block_size))))


def num_blocks_for_bytes(budget_bytes: int, block_size_rows: int, row_bytes: int) -> int:
    """Whole blocks that fit in a memory budget (for sizing the pool)."""
    return budget_bytes // block_bytes(block_size_rows, row_bytes)


def _optional_int(config: Mapping[str, object], name: str) -> int | None:
    value = config.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"config {name} must be a positive int, got {value!r}")
    return value


def _positive_int(config: Mapping[str, object], name: str) -> int:
    value = _optional_int(config, name)
    if value is None:
        raise ValueError(f"config lacks {name}")
    return value
