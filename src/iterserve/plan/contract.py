"""What a policy is to the mechanism: its identity, its declared tie-break
key, its paper contract (0x0E) and one pure ``choose``. Lives below
``policies/`` so the plan mechanism and the engine depend on the protocol,
never on a concrete policy."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from iterserve.records.plan import IterationPlan
from iterserve.records.state import SchedulerState


@dataclass(frozen=True, slots=True)
class PolicyContract:
    """A paper contract record (0x0E): what the policy claims and assumes."""

    granularity: str
    protected_identity: str
    visible_state: str
    decision_output: str
    unknown_future: str
    objective: str
    metric: str
    assumptions: str
    foreign_owners: str
    source: str
    exact_runtime_reproduction: bool = False


class Policy(Protocol):
    """Chooses one plan from one state; pure and deterministic (DESIGN rule 6)."""

    policy_id: str
    policy_version: str
    tie_break_key: tuple[str, ...]
    contract: PolicyContract

    def choose(self, state: SchedulerState) -> IterationPlan: ...

