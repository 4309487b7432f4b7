"""Errors the KV layer raises for misuse (0x0A).

Capacity shortfalls are *facts* returned as value objects
(:class:`iterserve.kv.results.AllocationFailed`, ``SwapFailed``); the
exceptions here mean the caller broke the block manager's contract.
"""

from __future__ import annotations


class KvError(Exception):
    """Base class of every KV-layer contract error."""


class UnknownRequestError(KvError, KeyError):
    """The request key holds no device or host blocks (e.g. a double free)."""


class DuplicateRequestError(KvError):
    """The request key already holds blocks; allocate it once per generation."""


class RequestStateError(KvError):
    """The call does not apply to the request's residency (e.g. swap in a resident request)."""


class KvInvariantError(KvError, AssertionError):
    """An audit found the pool's accounting broken; this is always a bug."""
