"""One-control sensitivity on the 0x0E base fixture (F68-F71).

The base fixture (0x0E): prompt S=16, chunk C=4, D=4 ready decodes,
B_tok=8, B_seq=8, 131072-byte K/V rows, a reservation ledger of 8 rows used
of 28 with a forecast of 5 rows per request, priorities low=4 / high=0 with
aging quantum 2, clients A=8 / B=4 offered events.

Each case changes exactly one control and runs the real code path: the
``sarathi`` policy on the simulated executor (chunks, causal pairs, history
exposure and piggybacked decode rows come from the run trace and the 0x09
chunk ledger) and the 0x06 admission planner with a point forecast
(reservation intents). iterserve has no aging policy, so the aging
crossover is the 0x09A formula alone, stated as such. The hidden-output
case changes only realized output lengths and must leave every online plan
of the prefill unchanged (0x06 metamorphic check). This is a shape
ledger on a synthetic fixture, not a serving benchmark.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from iterserve.admission.estimators import PointEstimator
from iterserve.admission.planner import plan_admission
from iterserve.admission.records import (
    AdmissionCandidate,
    AdmissionDecision,
    OutputForecast,
    ReservationBudget,
)
from iterserve.cost import default_cost_model
from iterserve.engine.observer import EngineObserver
from iterserve.metrics.chunk_ledger import ledger_from_starts
from iterserve.policies.registry import make_policy
from iterserve.records.plan import IterationPlan
from iterserve.records.result import IterationResult
from iterserve.records.state import SchedulerState
from iterserve.records.view import WorkKind
from iterserve.records.workload import parse_workload
from iterserve.sim.report import RunConfig, run_simulation

LONG_ID = "prompt"
LONG_ARRIVAL = 1  # iterations: the decodes are ready when the prompt arrives


@dataclass(frozen=True, slots=True)
class SensitivityFixture:
    """One point of the one-control surface; the defaults are the 0x0E base."""

    prompt_tokens: int = 16  # S
    chunk_size: int = 4  # C
    num_decodes: int = 4  # D
    max_num_batched_tokens: int = 8  # B_tok
    max_num_seqs: int = 8  # B_seq
    bytes_per_row: int = 131072
    reservation_ceiling_rows: int = 28  # H
    reserved_rows: int = 8  # R_live
    forecast_rows: int = 5  # r_hat
    low_priority: int = 4
    high_priority: int = 0
    aging_quantum: int = 2
    client_events: tuple[int, int] = (8, 4)  # A, B (declared; no ledger reads them)
    hidden_output_tokens: int = 4  # the prompt's realized output length (hidden truth)


BASE = SensitivityFixture()

#: (axis, control, value) one-control cases, each against BASE
CASES: tuple[tuple[str, str, int], ...] = (
    ("chunk size", "chunk_size", 2),
    ("chunk size", "chunk_size", 8),
    ("token budget", "max_num_batched_tokens", 6),
    ("sequence budget", "max_num_seqs", 3),
    ("reservation forecast", "forecast_rows", 4),
    ("hidden output", "hidden_output_tokens", 1),
    ("hidden output", "hidden_output_tokens", 8),
)


@dataclass(frozen=True, slots=True)
class Ledgers:
    num_chunks: int  # F68 M
    causal_pairs: int  # F69 P_causal
    history_rows: int  # F69 R_hist
    exposure_bytes: int  # R_hist x bytes per row (logical proxy)
    piggyback_decode_rows: int  # F70 D_piggy
    reservation_intents: int  # F71 A_intent
    aging_crossover_tick: int


LEDGER_NAMES = tuple(f.name for f in dataclasses.fields(Ledgers))


def formula_ledgers(f: SensitivityFixture) -> Ledgers:
    """F68-F71 evaluated directly (the oracle the runs must agree with)."""
    s, c = f.prompt_tokens, f.chunk_size
    starts = range(0, s, c)
    room = min(f.num_decodes, max(f.max_num_batched_tokens - min(c, s), 0),
               max(f.max_num_seqs - 1, 0))
    return Ledgers(math.ceil(s / c), s * (s + 1) // 2, sum(starts), sum(starts) * f.bytes_per_row,
                   room, (f.reservation_ceiling_rows - f.reserved_rows) // f.forecast_rows,
                   aging_crossover_tick(f))


def aging_crossover_tick(f: SensitivityFixture) -> int:
    """First tick at which the aged low-priority request ranks with the high
    one: low - floor(t / quantum) <= high (lower value is more urgent)."""
    return (f.low_priority - f.high_priority) * f.aging_quantum


class _PlanLog(EngineObserver):
    def __init__(self) -> None:
        self.plans: list[IterationPlan] = []

    def on_step(self, state: SchedulerState, plan: IterationPlan, result: IterationResult,
                successor: SchedulerState) -> None:
        self.plans.append(plan)


def workload_document(f: SensitivityFixture) -> dict[str, Any]:
    decodes = [{"request_id": f"decode-{i}", "arrival": 0, "prompt_tokens": 1,
                "max_output_tokens": 64, "client_id": "A", "priority": f.high_priority}
               for i in range(f.num_decodes)]
    prompt = {"request_id": LONG_ID, "arrival": LONG_ARRIVAL, "prompt_tokens": f.prompt_tokens,
              "max_output_tokens": 16, "client_id": "B", "priority": f.low_priority}
    return {
        "workload_id": "0x0E-sensitivity", "clock": "iteration",
        "capacity": {"max_num_batched_tokens": f.max_num_batched_tokens,
                     "max_num_seqs": f.max_num_seqs},
        "requests": [*decodes, prompt],
        "fixture_only_hidden_truth": {"realized_output_tokens": {
            LONG_ID: f.hidden_output_tokens, **{d["request_id"]: 64 for d in decodes}}},
    }


@dataclass(frozen=True, slots=True)
class Observed:
    ledgers: Ledgers
    prefill_plans: tuple[IterationPlan, ...]  # every plan up to the prompt's last chunk


def observe(f: SensitivityFixture) -> Observed:
    """The ledgers from the real scheduler run and the real admission planner."""
    manifest = parse_workload(workload_document(f))
    plans = _PlanLog()
    policy = make_policy("sarathi", chunk_size=f.chunk_size)
    run = run_simulation(manifest, RunConfig(policy, default_cost_model("iteration")),
                         extra_observers=[plans])
    starts = run.trace.prefill_chunk_starts[LONG_ID]
    ledger = ledger_from_starts(starts, f.prompt_tokens, f.bytes_per_row)
    first = next(i for i, plan in enumerate(plans.plans) if _prefills(plan))
    last = max(i for i, plan in enumerate(plans.plans) if _prefills(plan))
    piggyback = sum(1 for item in plans.plans[first].work if item.request_id != LONG_ID)
    return Observed(
        Ledgers(len(starts), ledger.total_pairs, ledger.history_rows,
                ledger.history_bytes_proxy or 0, piggyback, reservation_intents(f),
                aging_crossover_tick(f)),
        tuple(plans.plans[:last + 1]))


def _prefills(plan: IterationPlan) -> bool:
    return any(item.request_id == LONG_ID and item.kind is WorkKind.PREFILL_CHUNK
               for item in plan.work)


def reservation_intents(f: SensitivityFixture) -> int:
    """ADMIT intents of the 0x06 planner for equal point forecasts of
    ``forecast_rows`` (running candidates: A_hat = G_hat - E)."""
    forecast = OutputForecast("sensitivity", f.forecast_rows + 1)
    candidates = [AdmissionCandidate(f"c{i}", 0, 0, 1, 0, 1, f.forecast_rows + 1, forecast)
                  for i in range(f.reservation_ceiling_rows)]
    budget = ReservationBudget(f.reserved_rows, f.reservation_ceiling_rows, f.bytes_per_row, 0)
    plan = plan_admission(candidates, PointEstimator(), budget)
    return sum(i.decision is AdmissionDecision.ADMIT for i in plan.intents)


@dataclass(frozen=True, slots=True)
class SensitivityRow:
    axis: str
    control: str
    value: int
    ledgers: Ledgers
    formula: Ledgers
    moved: tuple[str, ...]  # ledgers that differ from the base run
    online_plans_unchanged: bool  # the prefill's plans equal the base run's


def sensitivity_table() -> list[SensitivityRow]:
    base = observe(BASE)
    rows = [SensitivityRow("base", "-", 0, base.ledgers, formula_ledgers(BASE), (), True)]
    for axis, control, value in CASES:
        fixture = dataclasses.replace(BASE, **{control: value})  # type: ignore[arg-type]
        seen = observe(fixture)
        moved = tuple(name for name in LEDGER_NAMES
                      if getattr(seen.ledgers, name) != getattr(base.ledgers, name))
        rows.append(SensitivityRow(axis, control, value, seen.ledgers, formula_ledgers(fixture),
                                   moved, seen.prefill_plans == base.prefill_plans))
    return rows
