"""Policy registry: names to factories. Unknown names fail loudly (STYLE 7)."""

from __future__ import annotations

from collections.abc import Callable

from iterserve.policies.base import Policy
from iterserve.policies.bounded import BoundedDecodeFirst
from iterserve.policies.decode_first import DecodeFirst
from iterserve.policies.edf import EarliestDeadlineFirst
from iterserve.policies.least_service import LeastService
from iterserve.policies.least_slack import LeastSlack
from iterserve.policies.mlfq import Mlfq
from iterserve.policies.orca import Orca
from iterserve.policies.prefill_first import PrefillFirst
from iterserve.policies.prefix_quota import PrefixGreedy, PrefixQuota
from iterserve.policies.priority import StaticPriority
from iterserve.policies.priority_aging import PriorityAging
from iterserve.policies.refill import IterationRefill
from iterserve.policies.sarathi import Sarathi
from iterserve.policies.sarathi_serve import SarathiServe
from iterserve.policies.starvation_guard import StarvationGuard
from iterserve.policies.static import StaticBatching
from iterserve.policies.vllm import VllmFrontier, VllmPriority
from iterserve.policies.vtc import Vtc
from iterserve.policies.vtc_completed import VtcCompleted
from iterserve.records.spec import FairnessSpec

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
    "least-service": LeastService,
    "vtc": Vtc,
    "vtc-completed": VtcCompleted,
    "priority": StaticPriority,
    "priority-aging": PriorityAging,
    "mlfq": Mlfq,
    "prefix-quota": PrefixQuota,
    "prefix-greedy": PrefixGreedy,
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


def bind_fairness(policy: Policy, fairness: FairnessSpec | None) -> Policy:
    """``policy`` charging the run's declared service weights when it keeps a
    client ledger (0x09A), under the starvation guard when the run declares
    a horizon; otherwise ``policy`` itself."""
    if fairness is None:
        return policy
    with_fairness = getattr(policy, "with_fairness", None)
    if with_fairness is not None:
        policy = with_fairness(fairness)
    if fairness.starvation_horizon is not None:
        return StarvationGuard(policy, fairness.starvation_horizon)
    return policy
