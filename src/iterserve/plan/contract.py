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
    """A paper contract record (0x0E, K_m = (G, I, S, D, U, O, M, A, F)):
    what the policy claims and assumes. ``metric`` with ``denominator`` is
    M_m; ``assumptions`` with ``premises`` (the theorem premises a claim
    needs) is A_m. ``evidence_class`` says how a figure about this method
    may be known here (simulated / measured here / source-reported);
    ``source_version`` freezes the paper or release the contract reads;
    ``non_claims`` says what the contract does not assert. ``runnable`` is
    False for methods iterserve cites but does not run."""

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
    denominator: str = ""
    premises: str = ""
    evidence_class: str = ""
    source_version: str = ""
    non_claims: str = ""
    runnable: bool = True

    @classmethod
    def parse(cls, text: str, base: PolicyContract | None = None) -> PolicyContract:
        """A contract from ``field: value`` lines, the form ``iterserve
        policies`` prints; a more indented line continues the value above
        (joined by one space). ``exact_runtime_reproduction`` may be given
        as ``True`` or ``False`` (default False), ``runnable`` likewise
        (default True). Fields not given come from
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
        exact = _flag(values, "exact_runtime_reproduction", "False")
        runnable = _flag(values, "runnable", "True")
        return cls(**values, exact_runtime_reproduction=exact, runnable=runnable)


def _flag(values: dict[str, str], name: str, default: str) -> bool:
    text = values.pop(name, default)
    if text not in ("True", "False"):
        raise ValueError(f"{name}: True or False, got {text!r}")
    return text == "True"


_FIELD_NAMES = frozenset(f.name for f in dataclasses.fields(PolicyContract))


class Policy(Protocol):
    """Chooses one plan from one state; pure and deterministic (DESIGN rule 6)."""

    policy_id: str
    policy_version: str
    tie_break_key: tuple[str, ...]
    contract: PolicyContract

    def choose(self, state: SchedulerState) -> IterationPlan: ...

