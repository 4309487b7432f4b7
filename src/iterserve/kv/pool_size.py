"""How many KV blocks a real engine preallocates (0x05: bytes per row).

vLLM users size the pool in bytes (`--kv-cache-memory`); the pool holds
floor(bytes / bytes_per_block) blocks, bytes_per_block = block_size x the
model's bytes per row. Without a size the default takes a fraction of the
memory available after the weights are loaded, and never more than the
worst case the scheduler can use (max_num_seqs sequences of max_model_len
rows each). Torch-free: the caller measures the memory and the row bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from iterserve.records.kv_abi import blocks_for

#: Share of the available memory the default pool may take (vLLM's GPU default is 0.9
#: of the device; on a host the weights, activations and other processes share it).
DEFAULT_MEMORY_FRACTION = 0.5


class KvPoolSizeError(ValueError):
    """The requested KV memory holds no block, or no memory is available for one."""


@dataclass(frozen=True, slots=True)
class KvPoolRequest:
    """What decides the pool size: an explicit block count, a byte budget, or neither."""

    num_blocks: int | None  # explicit --kv-blocks / --num-kv-blocks
    memory_bytes: int | None  # explicit --kv-cache-memory
    max_num_seqs: int
    max_model_len: int
    block_size: int

    def __post_init__(self) -> None:
        if self.num_blocks is not None and self.memory_bytes is not None:
            raise KvPoolSizeError("give the KV pool as blocks or as bytes, not both")


def num_pool_blocks(request: KvPoolRequest, bytes_per_block: int,
                    available_bytes: int | None) -> int:
    """The number of blocks to preallocate; raises KvPoolSizeError naming the shortfall."""
    if request.num_blocks is not None:
        return request.num_blocks
    if request.memory_bytes is not None:
        return _blocks_in(request.memory_bytes, bytes_per_block, "--kv-cache-memory")
    worst_case = request.max_num_seqs * blocks_for(request.max_model_len, request.block_size)
    if available_bytes is None:
        return worst_case
    budget = int(available_bytes * DEFAULT_MEMORY_FRACTION)
    return min(worst_case, _blocks_in(budget, bytes_per_block, "the default KV memory"))


def _blocks_in(memory_bytes: int, bytes_per_block: int, what: str) -> int:
    if memory_bytes < bytes_per_block:
        raise KvPoolSizeError(f"{what} {memory_bytes} holds no block ({bytes_per_block} bytes each)")
    return memory_bytes // bytes_per_block


def available_host_bytes(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """MemAvailable from /proc/meminfo in bytes; None where the file is absent (not Linux)."""
    try:
        lines = meminfo.read_text(encoding="ascii").splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return None
