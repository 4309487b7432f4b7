"""Physical K/V storage for the packed forward: one preallocated pool per layer.

The pool holds physical rows only. Which block belongs to which request, and
when a block is free, is decided by the kv layer's block manager (spec 0x0A:
continuous batching is not PagedAttention); the forward only writes new rows
at the slots a PackedBatch names and reads rows through block tables.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from iterserve.model.config import ModelConfig
from iterserve.model.host_memory import prefault, zeroed_bytes


@dataclass(frozen=True, slots=True, eq=False)
class PagedKVCache:
    """Per-layer key and value pools shaped [num_blocks, block_size, num_kv_heads, head_dim].

    A pool slot is `block_id * block_size + offset`; the flat views used for
    writes and block gathers share storage with the pools.
    """

    key_pools: tuple[torch.Tensor, ...]
    value_pools: tuple[torch.Tensor, ...]
    block_size: int

    @classmethod
    def allocate(
        cls,
        config: ModelConfig,
        num_blocks: int,
        block_size: int = 16,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
        commit: bool = False,
    ) -> PagedKVCache:
        """Preallocate `num_blocks` blocks per layer, zero-filled (see _zeros);
        with `commit`, every pool faulted in now."""
        if num_blocks < 1 or block_size < 1:
            raise ValueError(
                f"need num_blocks >= 1 and block_size >= 1, got {num_blocks}, {block_size}"
            )
        shape = (num_blocks, block_size, config.num_kv_heads, config.head_dim)
        keys = tuple(_zeros(shape, dtype, device, commit) for _ in range(config.num_layers))
        values = tuple(_zeros(shape, dtype, device, commit) for _ in range(config.num_layers))
        return cls(key_pools=keys, value_pools=values, block_size=block_size)

    @classmethod
    def allocate_for_budget(
        cls,
        config: ModelConfig,
        max_bytes: int,
        block_size: int = 16,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> PagedKVCache:
        """Preallocate as many whole blocks as fit in `max_bytes` across all layers."""
        num_blocks = max_bytes // bytes_per_block(config, block_size, dtype)
        if num_blocks < 1:
            raise ValueError(f"a budget of {max_bytes} bytes holds no {block_size}-row block")
        return cls.allocate(config, num_blocks, block_size, dtype, device)

    @property
    def num_blocks(self) -> int:
        return self.key_pools[0].shape[0]

    @property
    def num_layers(self) -> int:
        return len(self.key_pools)

    @property
    def num_bytes(self) -> int:
        pool = self.key_pools[0]
        return 2 * self.num_layers * pool.numel() * pool.element_size()

    def write(
        self, layer_index: int, slot_mapping: torch.Tensor, keys: torch.Tensor, values: torch.Tensor
    ) -> None:
        """Store new rows [Q, num_kv_heads, head_dim] of one layer at their pool slots."""
        key_pool, value_pool = self.key_pools[layer_index], self.value_pools[layer_index]
        flat_shape = (-1, *key_pool.shape[2:])
        key_pool.view(flat_shape).index_copy_(0, slot_mapping, keys)
        value_pool.view(flat_shape).index_copy_(0, slot_mapping, values)

    def copy_blocks(self, source_ids: torch.Tensor, target_ids: torch.Tensor) -> None:
        """Copy whole blocks source_ids[i] -> target_ids[i] in every layer (copy-on-write)."""
        for pool in (*self.key_pools, *self.value_pools):
            pool.index_copy_(0, target_ids, pool.index_select(0, source_ids))


def _zeros(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device | str,
           commit: bool = False) -> torch.Tensor:
    """A zero tensor. On the host its pages come zeroed from the OS (on huge
    pages where offered: model/host_memory.py): with `commit` they are
    faulted in now, else each stays untouched until a row is written, so a
    pool sized for the worst case costs resident memory only for the rows the
    run uses (in 2 MiB steps), and no start-up time."""
    if torch.device(device).type != "cpu":
        return torch.zeros(shape, dtype=dtype, device=device)
    num_bytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    raw = zeroed_bytes(num_bytes)
    if commit:
        prefault(raw, num_bytes)
    return torch.from_numpy(raw).view(dtype).view(shape)


def bytes_per_block(config: ModelConfig, block_size: int, dtype: torch.dtype) -> int:
    """All-layer K plus V bytes of one block."""
    element_bytes = torch.empty((), dtype=dtype).element_size()
    rows = config.num_layers * 2 * block_size
    return rows * config.num_kv_heads * config.head_dim * element_bytes
