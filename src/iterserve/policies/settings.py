"""Policy settings: errors and lookup."""

from __future__ import annotations

from iterserve.records.spec import OnlineWorkload


class PolicyConfigError(ValueError):
    """A policy needs a capacity knob the workload did not set."""


def require_knob(workload: OnlineWorkload, policy_id: str, name: str) -> int:
    value = getattr(workload.capacity, name)
    if value is None:
        raise PolicyConfigError(f"policy {policy_id!r} needs capacity.{name} in the workload")
    return int(value)
