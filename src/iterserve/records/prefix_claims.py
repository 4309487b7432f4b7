"""Prefix hits the allocator claims for waiting requests before a plan (0x0E).

``U = S - H_hit`` holds only after the memory owner proves the hit's
identity and availability. A hit proves both when the claim holds its
blocks: blocks a live request already holds (shared, no capacity moves)
and evictable cached blocks (refcount 0) that the claim reclaims for the
request. The published capacity facts still count a reclaimed block as
free (the facts are the previous result's), so the plan charges it to the
claimer's first interval, and the engine releases every claim its plan does
not schedule before execution: the capacity the facts promised is then
exactly what the allocator has.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class PrefixClaims:
    """``rows``: request id -> cached rows held for it (block-aligned, > 0);
    ``reclaimed_blocks``: request id -> how many of those blocks the claim
    took from the evictable cache (absent when none)."""

    rows: Mapping[str, int] = field(default_factory=dict)
    reclaimed_blocks: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for rid, blocks in self.reclaimed_blocks.items():
            if rid not in self.rows or blocks <= 0:
                raise ValueError(f"{rid}: reclaimed blocks {blocks} without a claim of rows")

    def __bool__(self) -> bool:
        return bool(self.rows)


NO_CLAIMS = PrefixClaims()


def reclaimed_blocks_of(reclaimed: Mapping[str, int], request_ids: Iterable[str]) -> int:
    """Blocks the plan must charge for scheduling ``request_ids``: each
    claimer's reclaimed blocks (0 for everyone else)."""
    if not reclaimed:
        return 0
    return sum(reclaimed.get(rid, 0) for rid in request_ids)
