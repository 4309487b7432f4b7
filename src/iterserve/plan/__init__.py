"""The shared plan mechanism, between admission and policies (DESIGN layers).

``PlanBuilder`` holds every ledger (tokens, sequences, KV blocks, the
running cap); ``victims`` chooses whom to preempt and takes the preemption
step; ``passes`` holds the running / resume / waiting loops policies share.
A policy orders and chooses through these; it never counts a budget.
"""

from iterserve.plan.builder import PlanBuilder, views_of
from iterserve.plan.contract import Policy, PolicyContract

__all__ = ["PlanBuilder", "Policy", "PolicyContract", "views_of"]
