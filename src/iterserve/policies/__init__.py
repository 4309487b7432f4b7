"""Scheduling policies and their registry. A policy orders and chooses; the
shared mechanism (budgets, legal intervals, validation) lives elsewhere."""

from iterserve.policies.base import PlanBuilder, Policy, PolicyContract
from iterserve.policies.registry import POLICIES, UnknownPolicy, make_policy, policy_names

__all__ = [
    "POLICIES", "PlanBuilder", "Policy", "PolicyContract", "UnknownPolicy", "make_policy",
    "policy_names",
]
