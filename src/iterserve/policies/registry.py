"""Policy registry: names to factories. Unknown names fail loudly (STYLE 7)."""

from __future__ import annotations

from collections.abc import Callable

from iterserve.policies.base import Policy
from iterserve.policies.decode_first import DecodeFirst
from iterserve.policies.refill import IterationRefill
from iterserve.policies.static import StaticBatching

POLICIES: dict[str, Callable[[], Policy]] = {
    "static": StaticBatching,
    "refill": IterationRefill,
    "decode-first": DecodeFirst,
}


class UnknownPolicy(KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


def policy_names() -> list[str]:
    return sorted(POLICIES)


def make_policy(name: str) -> Policy:
    factory = POLICIES.get(name)
    if factory is None:
        raise UnknownPolicy(f"unknown policy {name!r}; valid policies: {', '.join(policy_names())}")
    return factory()
