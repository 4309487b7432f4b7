"""KV pool sizing (0x05): explicit blocks, --kv-cache-memory bytes, or a default
from the memory available after loading, capped by the scheduler's worst case."""

from __future__ import annotations

from pathlib import Path

import pytest

from iterserve.kv.pool_size import (
    DEFAULT_MEMORY_FRACTION,
    KvPoolRequest,
    KvPoolSizeError,
    available_host_bytes,
    num_pool_blocks,
)

PER_BLOCK = 1000


def _request(blocks=None, memory=None, seqs=4, model_len=100, block_size=10) -> KvPoolRequest:
    return KvPoolRequest(blocks, memory, seqs, model_len, block_size)


def test_explicit_blocks_win() -> None:
    assert num_pool_blocks(_request(blocks=7), PER_BLOCK, 10**12) == 7


def test_memory_bytes_hold_whole_blocks() -> None:
    assert num_pool_blocks(_request(memory=10 * PER_BLOCK + 999), PER_BLOCK, None) == 10
    with pytest.raises(KvPoolSizeError, match="--kv-cache-memory 999 holds no block"):
        num_pool_blocks(_request(memory=999), PER_BLOCK, None)


def test_default_is_a_share_of_free_memory_capped_by_the_worst_case() -> None:
    worst_case = 4 * 10  # 4 sequences of 100 rows in 10-row blocks
    assert num_pool_blocks(_request(), PER_BLOCK, 10**12) == worst_case
    free = 20 * PER_BLOCK
    assert num_pool_blocks(_request(), PER_BLOCK, free) == int(free * DEFAULT_MEMORY_FRACTION
                                                              ) // PER_BLOCK
    assert num_pool_blocks(_request(), PER_BLOCK, None) == worst_case
    with pytest.raises(KvPoolSizeError, match="default KV memory"):
        num_pool_blocks(_request(), PER_BLOCK, PER_BLOCK)


def test_blocks_and_bytes_together_are_refused() -> None:
    with pytest.raises(KvPoolSizeError, match="not both"):
        _request(blocks=1, memory=1)


def test_available_host_bytes_reads_meminfo(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 100 kB\nMemAvailable:   2048 kB\n")
    assert available_host_bytes(meminfo) == 2048 * 1024
    assert available_host_bytes(tmp_path / "absent") is None
