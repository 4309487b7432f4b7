"""Deterministic chained block hashes for exact prefix caching (0x0A).

A full block's hash is ``H(parent_hash, token_ids)`` where ``parent_hash`` is
the previous full block's hash (``ROOT_HASH`` for the first block), so equal
hashes name equal token prefixes *up to collision*. The hash only finds a
candidate; :mod:`iterserve.kv.device_pool` verifies every hit by token ids and
by chain identity, so a collision can cost a cache miss but never a wrong hit.

Python's ``hash()`` is salted per process and must never be used here: block
hashes are replayable facts.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable, Sequence

BlockHasher = Callable[[bytes, Sequence[int]], bytes]
"""``(parent_hash, block_token_ids) -> block_hash``; must be deterministic."""

ROOT_HASH = b""
"""Parent hash of a request's first block."""

_DIGEST_SIZE_BYTES = 16


def blake2b_block_hash(parent_hash: bytes, token_ids: Sequence[int]) -> bytes:
    """Default :data:`BlockHasher`: BLAKE2b-128 over parent hash and int64 tokens."""
    payload = struct.pack(f"<B{len(parent_hash)}s{len(token_ids)}q", len(parent_hash),
                          parent_hash, *token_ids)
    return hashlib.blake2b(payload, digest_size=_DIGEST_SIZE_BYTES).digest()
