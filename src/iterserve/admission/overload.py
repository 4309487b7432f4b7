"""Overload contracts as arrival gates (0x07 "One Burst, Two Overload Contracts").

A gate screens each arrival against the published state and either lets it
into the waiting queue (None) or rejects it with a reason. A rejection is a
user-visible outcome that the engine reports to its observers (N_rej),
never free SLO success and never a silent drop.

- ``accept-all``: every arrival waits; overload shows up as misses and
  queueing. It is the engine's default, so :func:`engine_gate` hands the
  engine no gate at all (ungated and accept-all runs publish identical states).
- ``bounded``: at most ``max_live`` live requests (waiting + running +
  suspended); an arrival beyond it is rejected with ``max_live``. The
  four-live cap of the 0x07 burst is a fixture, not a recommended controller.
- ``slo-feasible``: rejects with ``slo_infeasible`` when the request's
  predicted first-token slack at the cut that publishes it is already
  negative under the named cost model (0x07 exclusive-service lower bound).
  Positive slack admits without any guarantee.

``gate_id`` and ``params()`` go into the decision-log header, and
:func:`make_gate` rebuilds the same gate from them for replay.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol

from iterserve.admission.gate import ArrivalGate
from iterserve.cost import IterationCostModel, parse_cost_model, seconds_per_clock_unit
from iterserve.metrics.slack import predicted_slack
from iterserve.metrics.slo import SloConfig
from iterserve.records.spec import RequestSpec
from iterserve.records.state import SchedulerState

_QUANTUM_DIGITS = 9  # slack compared at 1 ns, as the deadline policies do


class OverloadConfigError(ValueError):
    """An unknown overload contract or bad parameters; the message says which."""


class OverloadGate(ArrivalGate, Protocol):
    def params(self) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class AcceptAll:
    gate_id = "accept-all"

    def screen(self, spec: RequestSpec, state: SchedulerState) -> str | None:
        return None

    def params(self) -> dict[str, Any]:
        return {}


@dataclass(frozen=True, slots=True)
class BoundedLive:
    max_live: int
    gate_id = "bounded"

    def __post_init__(self) -> None:
        if isinstance(self.max_live, bool) or not isinstance(self.max_live, int) \
                or self.max_live < 1:
            raise OverloadConfigError(f"bounded: max_live must be an integer >= 1, "
                                      f"got {self.max_live!r}")

    def screen(self, spec: RequestSpec, state: SchedulerState) -> str | None:
        return "max_live" if state.num_live >= self.max_live else None

    def params(self) -> dict[str, Any]:
        return {"max_live": self.max_live}


@dataclass(frozen=True, slots=True)
class SloFeasible:
    cost_model: IterationCostModel
    clock: str
    gate_id = "slo-feasible"

    def __post_init__(self) -> None:
        seconds_per_clock_unit(self.clock, self.cost_model)  # refuses a misfit early

    def screen(self, spec: RequestSpec, state: SchedulerState) -> str | None:
        slo = spec.slo
        if slo is None or slo.ttft_ms is None:
            return None
        seconds = seconds_per_clock_unit(self.clock, self.cost_model)
        estimate = predicted_slack(
            state.now * seconds, arrival_s=spec.arrival * seconds, last_emission_s=None,
            num_outputs_emitted=0, num_prompt_rows_remaining=spec.num_prompt_tokens,
            slo=SloConfig(ttft_ms=slo.ttft_ms), cost_model=self.cost_model,
            max_prefill_rows_per_iteration=state.max_num_batched_tokens,
        )
        return "slo_infeasible" if round(estimate.slack_s, _QUANTUM_DIGITS) < 0 else None

    def params(self) -> dict[str, Any]:
        return {"cost_model": self.cost_model.spec, "clock": self.clock}


def _bounded(params: Mapping[str, Any]) -> OverloadGate:
    return BoundedLive(params["max_live"])


def _slo_feasible(params: Mapping[str, Any]) -> OverloadGate:
    return SloFeasible(parse_cost_model(str(params["cost_model"])), str(params["clock"]))


_PARAMS: Mapping[str, frozenset[str]] = MappingProxyType({
    "accept-all": frozenset(),
    "bounded": frozenset({"max_live"}),
    "slo-feasible": frozenset({"cost_model", "clock"}),
})
GATES: Mapping[str, Callable[[Mapping[str, Any]], OverloadGate]] = MappingProxyType({
    "accept-all": lambda params: AcceptAll(),
    "bounded": _bounded,
    "slo-feasible": _slo_feasible,
})


def gate_names() -> list[str]:
    return sorted(GATES)


def make_gate(name: str, params: Mapping[str, Any] | None = None) -> OverloadGate:
    """The named overload contract; unknown names and parameters fail loudly."""
    factory = GATES.get(name)
    if factory is None:
        raise OverloadConfigError(
            f"unknown overload contract {name!r}; valid contracts: {', '.join(gate_names())}")
    given = dict(params or {})
    expected = _PARAMS[name]
    if set(given) != expected:
        wanted = ", ".join(sorted(expected)) or "no parameters"
        raise OverloadConfigError(f"overload contract {name!r} takes {wanted}, got "
                                  f"{', '.join(sorted(given)) or 'none'}")
    return factory(given)


def engine_gate(gate: OverloadGate | None) -> ArrivalGate | None:
    """What the engine gets: accept-all is the engine's own default (None)."""
    return None if gate is None or isinstance(gate, AcceptAll) else gate
