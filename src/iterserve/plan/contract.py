"""What a policy is to the mechanism: its identity, its declared tie-break
key, its paper contract (0x0E) and one pure ``choose``. Lives below
``policies/`` so the plan mechanism and the engine depend on the protocol,
never on a concrete policy."""

from __future__ import annotations

import dataclasses
import textwrap
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

    @classmethod
    def parse(cls, text: str, base: PolicyContract | None = None) -> PolicyContract:
        """A contract from ``field: value`` lines, the form ``iterserve
        policies`` prints; a more indented line continues the value above
        (joined by one space). ``exact_runtime_reproduction`` may be given
        as ``True`` or ``False`` (default False). Fields not given come from
        ``base`` (what a family of policies shares, stated once)."""
        values: dict[str, str] = {}
        if base is not None:
            values = {f.name: str(getattr(base, f.name)) for f in dataclasses.fields(base)}
        name = ""
        given: set[str] = set()
        for line in textwrap.dedent(text).strip("\n").splitlines():
            if line[:1].isspace():
                values[name] += " " + line.strip()
                continue
            name, sep, value = line.partition(": ")
            if not sep or name not in _FIELD_NAMES or name in given:
                raise ValueError(f"contract line {line!r}: expected one 'field: value' per field")
            values[name] = value.strip()
            given.add(name)
        exact = values.pop("exact_runtime_reproduction", "False")
        if exact not in ("True", "False"):
            raise ValueError(f"exact_runtime_reproduction: True or False, got {exact!r}")
        return cls(**values, exact_runtime_reproduction=exact == "True")


_FIELD_NAMES = frozenset(f.name for f in dataclasses.fields(PolicyContract))


class Policy(Protocol):
    """Chooses one plan from one state; pure and deterministic (DESIGN rule 6)."""

    policy_id: str
    policy_version: str
    tie_break_key: tuple[str, ...]
    contract: PolicyContract

    def choose(self, state: SchedulerState) -> IterationPlan: ...

