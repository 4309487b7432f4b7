"""Value objects the block manager publishes (0x06, 0x0A, 0x0C).

Every block-manager call answers with one of these frozen records. They are
facts of the memory owner (M5.3): the scheduler may read counts from them but
never block ids; only :meth:`BlockManager.block_table` and the swap copy
mappings expose ids, and those are for the executor.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import NamedTuple


class _RequestKeyFields(NamedTuple):
    request_id: str
    generation: int


class RequestKey(_RequestKeyFields):
    """One request generation: cancellation publishes a successor generation (0x0C).

    A tuple (immutable, like a frozen dataclass) so that hashing it, once
    per interval the block manager backs, runs in C; checked on construction.
    """

    __slots__ = ()

    def __new__(cls, request_id: str, generation: int) -> RequestKey:
        if not request_id:
            raise ValueError("request_id must be non-empty")
        if generation < 0:
            raise ValueError(f"generation must be >= 0, got {generation}")
        return super().__new__(cls, request_id, generation)

    def __str__(self) -> str:
        return f"{self.request_id}:{self.generation}"


class FailureReason(enum.Enum):
    """Why a capacity request was not granted; the pool state is unchanged."""

    DEVICE_BLOCKS_EXHAUSTED = "device_blocks_exhausted"
    HOST_BLOCKS_EXHAUSTED = "host_blocks_exhausted"


class SwapDirection(enum.Enum):
    """Copy direction of a swap mapping."""

    OUT = "device_to_host"
    IN = "host_to_device"


@dataclass(frozen=True, slots=True)
class PrefixHit:
    """Exact cached prefix found by :meth:`BlockManager.lookup_prefix`.

    A hit is not residency: the blocks may be evicted before the request is
    allocated. Only an :class:`AllocationGranted` makes blocks the request's.
    ``num_uncached_rows`` is the U of 0x05's new-request estimate.
    """

    num_query_rows: int
    num_cached_rows: int
    num_blocks_cached: int

    @property
    def num_uncached_rows(self) -> int:
        return self.num_query_rows - self.num_cached_rows


@dataclass(frozen=True, slots=True)
class PrefixClaimed:
    """A verified cached prefix now held for a request (0x0E: U = S - H_hit).

    ``num_rows`` rows (whole blocks; 0: nothing claimed) count as committed;
    ``reclaimed_block_ids`` of their blocks were evictable (refcount 0) and
    left the available pool for this claim (for the executor side only: ids
    never reach the scheduler); the rest were already held and are shared.
    """

    request_key: RequestKey
    num_rows: int
    reclaimed_block_ids: tuple[int, ...] = ()

    @property
    def num_reclaimed_blocks(self) -> int:
        return len(self.reclaimed_block_ids)


@dataclass(frozen=True, slots=True)
class AllocationGranted:
    """Blocks now back ``num_rows`` rows of the request (allocate or append).

    ``num_cached_rows`` rows were prefix-cache hits (already committed, need no
    compute); ``num_new_blocks`` fresh blocks were taken from the pool.
    """

    request_key: RequestKey
    num_rows: int
    num_cached_rows: int
    num_new_blocks: int
    num_blocks: int


@dataclass(frozen=True, slots=True)
class AllocationFailed:
    """Not enough device blocks; nothing was allocated or evicted."""

    request_key: RequestKey
    reason: FailureReason
    num_blocks_needed: int
    num_blocks_available: int


AllocationResult = AllocationGranted | AllocationFailed


class ExtensionStatus(enum.Enum):
    """The allocator's answer to growing a running request's blocks (0x06:
    OPEN_UNDER_RESERVATION -> extension request -> one of three facts)."""

    GRANTED = "granted"  # the blocks are the request's now
    # short now, but blocks whose release is in flight cover the need: wait
    TEMPORARILY_UNAVAILABLE = "temporarily_unavailable"
    FAILED = "failed"  # short even after every pending release: preempt, reject or abort


@dataclass(frozen=True, slots=True)
class ExtensionResult:
    """One extension answer. ``num_blocks_needed`` new blocks were asked
    for, ``num_blocks_available`` could be taken at once and
    ``num_blocks_pending_release`` return when in-flight releases complete.
    Only GRANTED changes the pools."""

    request_key: RequestKey
    status: ExtensionStatus
    num_blocks_needed: int
    num_blocks_available: int
    num_blocks_pending_release: int

    @property
    def failure_reason(self) -> str:
        """The work failure an executor publishes for an extension not granted."""
        return f"extension_{self.status.value}"


@dataclass(frozen=True, slots=True)
class CommitResult:
    """Rows whose K/V the executor has written; full blocks below become cacheable."""

    request_key: RequestKey
    num_committed_rows: int
    num_blocks_cached: int


@dataclass(frozen=True, slots=True)
class ReleasedBlocks:
    """What releasing a request generation returned to the pools.

    ``num_reclaimed_blocks`` device blocks dropped to refcount 0; of those,
    ``num_retained_cached_blocks`` stay in the prefix cache (evictable, still
    reusable). ``num_shared_blocks`` remain referenced by other requests.
    """

    request_key: RequestKey
    num_reclaimed_blocks: int
    num_retained_cached_blocks: int
    num_shared_blocks: int
    num_reclaimed_host_blocks: int


@dataclass(frozen=True, slots=True)
class SwapGranted:
    """A swap was accounted; the executor must perform the copies.

    ``copy_pairs`` holds ``(device_block_id, host_block_id)`` pairs in both
    directions; ``direction`` says which side is the source. Copies must run
    in the order the swap calls were made and before the next forward pass,
    because a block released by one call may be reused by a later one.
    ``num_reused_blocks`` swap-in blocks were still cached on device and need
    no copy.
    """

    request_key: RequestKey
    direction: SwapDirection
    copy_pairs: tuple[tuple[int, int], ...]
    num_rows: int
    num_reused_blocks: int


@dataclass(frozen=True, slots=True)
class SwapFailed:
    """The destination pool lacks blocks; the request stays where it was."""

    request_key: RequestKey
    direction: SwapDirection
    reason: FailureReason
    num_blocks_needed: int
    num_blocks_available: int


SwapResult = SwapGranted | SwapFailed


@dataclass(frozen=True, slots=True)
class PoolUsage:
    """Block counts at one instant (O(1) to produce).

    Device: ``num_blocks_free + num_blocks_used + num_blocks_cached ==
    num_blocks_total`` where *used* means referenced and *cached* means
    unreferenced but reusable until evicted. Host: ``num_host_blocks_free +
    num_host_blocks_swapped == num_host_blocks_total``.
    """

    num_blocks_total: int
    num_blocks_free: int
    num_blocks_used: int
    num_blocks_cached: int
    num_host_blocks_total: int
    num_host_blocks_free: int
    num_host_blocks_swapped: int

    @property
    def num_blocks_available(self) -> int:
        """Blocks an allocation may take: free plus evictable cached."""
        return self.num_blocks_free + self.num_blocks_cached
