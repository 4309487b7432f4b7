"""Scheduling policies and their registry. A policy orders and chooses; the
shared mechanism (ledgers, passes, preemption) lives in :mod:`iterserve.plan`."""

from iterserve.policies.registry import POLICIES, UnknownPolicy, make_policy, policy_names

__all__ = ["POLICIES", "UnknownPolicy", "make_policy", "policy_names"]
