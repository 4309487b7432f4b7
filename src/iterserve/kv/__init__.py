"""KV layer: paged block pool, block tables, exact prefix cache, swap (0x05, 0x0A, 0x0C).

Mechanism only: it publishes capacity facts and never decides who runs.
"""

from iterserve.kv.block_hash import BlockHasher, blake2b_block_hash
from iterserve.kv.block_manager import BlockManager
from iterserve.kv.config import BlockManagerConfig
from iterserve.kv.errors import (
    DuplicateRequestError,
    KvError,
    KvInvariantError,
    RequestStateError,
    UnknownRequestError,
)
from iterserve.kv.results import (
    AllocationFailed,
    AllocationGranted,
    AllocationResult,
    CommitResult,
    ExtensionResult,
    ExtensionStatus,
    FailureReason,
    PoolUsage,
    PrefixClaimed,
    PrefixHit,
    ReleasedBlocks,
    RequestKey,
    SwapDirection,
    SwapFailed,
    SwapGranted,
    SwapResult,
)

__all__ = [
    "AllocationFailed", "AllocationGranted", "AllocationResult", "BlockHasher", "BlockManager",
    "BlockManagerConfig", "CommitResult", "DuplicateRequestError", "ExtensionResult",
    "ExtensionStatus", "FailureReason", "ReleasedBlocks",
    "KvError", "KvInvariantError", "PoolUsage", "PrefixClaimed", "PrefixHit", "RequestKey",
    "RequestStateError", "SwapDirection", "SwapFailed", "SwapGranted", "SwapResult",
    "UnknownRequestError", "blake2b_block_hash",
]
