"""Policy registry: names to policy classes, each with its config type.
Unknown names fail loudly (STYLE 7); settings are validated when the policy
is made (:func:`make_policy`), never mid-run."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from iterserve.plan import Policy
from iterserve.policies.bounded import BoundedDecodeFirst
from iterserve.policies.decode_first import DecodeFirst
from iterserve.policies.edf import EarliestDeadlineFirst
from iterserve.policies.least_service import LeastService
from iterserve.policies.least_slack import LeastSlack
from iterserve.policies.mlfq import Mlfq
from iterserve.policies.orca import Orca
from iterserve.policies.policy import PolicyBase
from iterserve.policies.prefill_first import PrefillFirst
from iterserve.policies.prefix_aware import PrefixAware
from iterserve.policies.prefix_quota import PrefixGreedy, PrefixQuota
from iterserve.policies.priority import StaticPriority
from iterserve.policies.priority_aging import PriorityAging
from iterserve.policies.refill import IterationRefill
from iterserve.policies.sarathi import Sarathi
from iterserve.policies.sarathi_serve import SarathiServe
from iterserve.policies.settings import (
    PolicyConfigError,
    build_config,
    setting_names,
)
from iterserve.policies.starvation_guard import StarvationGuard
from iterserve.policies.static import StaticBatching
from iterserve.policies.vllm import VllmFrontier, VllmPriority
from iterserve.policies.vtc import Vtc
from iterserve.policies.vtc_completed import VtcCompleted
from iterserve.records.spec import FairnessSpec, OnlineWorkload
from iterserve.records.state import RunRules

POLICIES: dict[str, type[PolicyBase]] = {
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
    "prefix-aware": PrefixAware,
}


class UnknownPolicy(KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


def policy_names() -> list[str]:
    return sorted(POLICIES)


def policy_class(name: str) -> type[PolicyBase]:
    cls = POLICIES.get(name)
    if cls is None:
        raise UnknownPolicy(f"unknown policy {name!r}; valid policies: {', '.join(policy_names())}")
    return cls


def make_policy(name: str, **settings: Any) -> Policy:
    """The policy ``name`` with ``settings``; raises :class:`UnknownPolicy` or
    :class:`PolicyConfigError` (one line naming the field) before any run."""
    cls = policy_class(name)
    policy: Policy = cls(build_config(name, cls.config_type, settings))
    return policy


def describe_policy(name: str) -> Policy:
    """The policy with its default settings, for listing its identity and
    contract; a policy with a required setting is described by its class."""
    cls = policy_class(name)
    try:
        return make_policy(name)
    except PolicyConfigError:
        return cls  # type: ignore[return-value]  # class attributes carry the identity


def all_setting_names() -> frozenset[str]:
    return frozenset(n for cls in POLICIES.values() for n in setting_names(cls.config_type))


def settings_for(name: str, workload: OnlineWorkload | None = None,
                 overrides: Mapping[str, Any] | None = None, *,
                 strict: bool = True) -> dict[str, Any]:
    """The settings ``name`` takes from ``workload`` (its ``policy_settings``
    and the legacy ``capacity.kv_rows``) and ``overrides`` (which win). A
    name no policy takes is an error; a name only other policies take is an
    error in ``overrides`` when ``strict`` (one policy run) and is left out
    otherwise (a sweep hands one flag list to every policy)."""
    takes = set(setting_names(policy_class(name).config_type))
    known = all_setting_names()
    suggested: dict[str, Any] = {}
    if workload is not None:
        suggested.update(workload.policy_settings)
        if workload.capacity.kv_rows is not None:
            suggested.setdefault("kv_rows", workload.capacity.kv_rows)
    chosen: dict[str, Any] = {}
    for source, values in (("the workload's policy_settings", suggested), ("", overrides or {})):
        for key, value in values.items():
            if key not in known:
                where = f" in {source}" if source else ""
                raise PolicyConfigError(f"no policy takes setting {key!r}{where}; settings: "
                                        f"{', '.join(sorted(known))}")
            if key in takes or (not source and strict):
                chosen[key] = value
    return chosen


def policy_for(name: str, workload: OnlineWorkload | None = None,
               overrides: Mapping[str, Any] | None = None, *, strict: bool = True,
               **bound: Any) -> Policy:
    """:func:`make_policy` with :func:`settings_for`; ``bound`` are run-level
    objects a policy takes when its config has them (a cost model). With a
    workload, the policy also checks the run's rules now, not mid-run."""
    cls = policy_class(name)
    settings = settings_for(name, workload, overrides, strict=strict)
    takes = setting_names(cls.config_type)
    settings.update({key: value for key, value in bound.items() if key in takes})
    policy = cls(build_config(name, cls.config_type, settings))
    if workload is not None:
        policy.check_rules(RunRules.of(workload))
    return policy


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
