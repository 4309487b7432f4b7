"""Policy registry: names to factories. Unknown names fail loudly (STYLE 7)."""

from __future__ import annotations

from collections.abc import Callable

from iterserve.plan import Policy
from iterserve.policies.bounded import BoundedDecodeFirst
from iterserve.policies.decode_first import DecodeFirst
from iterserve.policies.edf import EarliestDeadlineFirst
from iterserve.policies.least_slack import LeastSlack
from iterserve.policies.orca import Orca
from iterserve.policies.prefill_first import PrefillFirst
from iterserve.policies.refill import IterationRefill
from iterserve.policies.sarathi import Sarathi
from iterserve.policies.sarathi_serve import SarathiServe
from iterserve.policies.static import StaticBatching
from iterserve.policies.vllm import VllmFrontier, VllmPriority

POLICIES: dict[str, Callable[[], Policy]] = {
    "static": StaticBatching,
    "refill": IterationRefill,
    "orca": Orca,
    "vllm": VllmFrontier,
    "vllm-priority": VllmPriority,
    "sarathi": Sarathi,
    "sarathi-serve": SarathiServe,
    "decode-first": DecodeFirst,
    "prefill-first": PrefillFirst,
    "decode-first-bounded": BoundedDecodeFirst,
    "edf": EarliestDeadlineFirst,
    "least-slack": LeastSlack,
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
