"""Block manager configuration: a small frozen record validated on construction."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BlockManagerConfig:
    """Sizes of the paged KV pools, in blocks of ``block_size_rows`` rows.

    ``num_host_blocks`` is the host swap pool for PRESERVE_EXACT preemption
    (0x0C); 0 disables swapping (every swap-out then fails as a fact).
    """

    num_device_blocks: int
    block_size_rows: int
    num_host_blocks: int = 0
    enable_prefix_caching: bool = True

    def __post_init__(self) -> None:
        if self.num_device_blocks <= 0:
            raise ValueError(f"num_device_blocks must be > 0, got {self.num_device_blocks}")
        if self.block_size_rows <= 0:
            raise ValueError(f"block_size_rows must be > 0, got {self.block_size_rows}")
        if self.num_host_blocks < 0:
            raise ValueError(f"num_host_blocks must be >= 0, got {self.num_host_blocks}")
