"""Chunk ledger (0x09): causal pairs and cross-invocation history exposure.

For a prompt of S positions split at 0 = s_0 < s_1 < ... < s_M = S with chunk
widths c_m = s_{m+1} - s_m:

    P_m    = c_m * s_m + c_m * (c_m + 1) / 2     (pairs of chunk m; F-registry)
    sum P  = S * (S + 1) / 2                      (telescopes: nothing missing or extra)
    R_hist = sum_m s_m                            (prior rows re-exposed to later calls)
    B_hist_proxy = R_hist * bytes_per_row

B_hist_proxy is a logical exposure proxy: NOT measured HBM traffic, cache-line
transactions or kernel traffic (0x09).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

PROXY_LABEL = "cross-invocation KV exposure proxy; not measured memory traffic"


@dataclass(frozen=True, slots=True)
class ChunkLedger:
    chunk_starts: tuple[int, ...]
    chunk_sizes: tuple[int, ...]
    causal_pairs: tuple[int, ...]
    total_pairs: int
    history_rows: int  # R_hist
    history_bytes_proxy: int | None  # R_hist * bytes_per_row, when bytes_per_row is known

    @property
    def num_positions(self) -> int:
        return sum(self.chunk_sizes)


def chunk_pairs(start: int, size: int) -> int:
    """P_m = c_m * s_m + c_m (c_m + 1) / 2."""
    return size * start + size * (size + 1) // 2


def ledger_from_sizes(sizes: Sequence[int], bytes_per_row: int | None = None) -> ChunkLedger:
    if not sizes or any(size <= 0 for size in sizes):
        raise ValueError(f"chunk sizes must be positive, got {list(sizes)}")
    starts = []
    position = 0
    for size in sizes:
        starts.append(position)
        position += size
    return ledger_from_starts(starts, position, bytes_per_row)


def ledger_from_starts(starts: Sequence[int], num_positions: int,
                       bytes_per_row: int | None = None, *, first_row: int = 0) -> ChunkLedger:
    """``first_row``: rows a planned prefix hit held before the first chunk (0x0E)."""
    bounds = list(starts) + [num_positions]
    if bounds[0] != first_row or any(b <= a for a, b in zip(bounds, bounds[1:], strict=False)):
        raise ValueError(f"chunk boundaries must rise strictly from {first_row} to {num_positions}")
    sizes = tuple(b - a for a, b in zip(bounds, bounds[1:], strict=False))
    pairs = tuple(chunk_pairs(s, c) for s, c in zip(starts, sizes, strict=True))
    history = sum(starts)
    return ChunkLedger(
        chunk_starts=tuple(starts), chunk_sizes=sizes, causal_pairs=pairs,
        total_pairs=sum(pairs), history_rows=history,
        history_bytes_proxy=None if bytes_per_row is None else history * bytes_per_row,
    )
