"""The code paths each one-control sensitivity ledger is read from (0x0E).

Each ledger has one owner and is observed where that owner runs, never
recomputed here from its formula:

- chunk ledgers and piggyback room: ``sarathi`` on the simulated executor
  (the run trace's chunk starts and the first prefill plan);
- reservation intents: the 0x06 admission planner with point forecasts;
- the aging crossover: ``priority-aging`` on the simulated executor, the
  tick at which the low-priority request is first planned while a fresh
  high-priority request arrives every tick (F61);
- the client mix: completed requests per client of a ``vtc`` run;
- uncached prompt rows: the block manager's exact prefix lookup (F72);
- eligibility: the engine's readiness board, a prompt that requires remote
  K/V is planned only once the foreign owner published READY (0x0C).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from iterserve.admission.estimators import PointEstimator
from iterserve.admission.planner import plan_admission
from iterserve.admission.readiness import (
    ReadinessFact,
    ReadinessKind,
    ReadinessRequirement,
    ReadinessStatus,
)
from iterserve.admission.records import (
    AdmissionCandidate,
    AdmissionDecision,
    OutputForecast,
    ReservationBudget,
)
from iterserve.cost import default_cost_model
from iterserve.engine.loop import Engine
from iterserve.engine.observer import EngineObserver
from iterserve.kv.block_manager import BlockManager
from iterserve.kv.config import BlockManagerConfig
from iterserve.kv.results import RequestKey
from iterserve.policies.registry import make_policy
from iterserve.records.plan import IterationPlan
from iterserve.records.receipts import binding_of
from iterserve.records.result import IterationResult
from iterserve.records.state import SchedulerState
from iterserve.records.view import Lifecycle, WorkKind
from iterserve.records.workload import parse_workload
from iterserve.sim.report import RunConfig, costed_executor, run_simulation

if TYPE_CHECKING:
    from iterserve.lab.sensitivity import SensitivityFixture

LONG_ID = "prompt"
LONG_ARRIVAL = 1  # iterations: the decodes are ready when the prompt arrives
AGING_LOW_ID = "low"
PREFIX_BLOCK_ROWS = 4  # the prefix probe's block size: a hit counts in whole blocks
READINESS_HORIZON_STEPS = 6  # long enough for a READY prompt to be planned


class PlanLog(EngineObserver):
    def __init__(self) -> None:
        self.plans: list[IterationPlan] = []
        self.nows: list[float] = []

    def on_step(self, state: SchedulerState, plan: IterationPlan, result: IterationResult,
                successor: SchedulerState) -> None:
        self.plans.append(plan)
        self.nows.append(state.now)


def chunk_document(f: SensitivityFixture) -> dict[str, Any]:
    """D one-token decodes at tick 0 and the S-token prompt at tick 1."""
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


def chunk_run(f: SensitivityFixture) -> tuple[tuple[int, ...], list[IterationPlan]]:
    """The prompt's chunk starts and every plan of the sarathi run."""
    plans = PlanLog()
    policy = make_policy("sarathi", chunk_size=f.chunk_size)
    run = run_simulation(parse_workload(chunk_document(f)),
                         RunConfig(policy, default_cost_model("iteration")),
                         extra_observers=[plans])
    return tuple(run.trace.prefill_chunk_starts[LONG_ID]), plans.plans


def prefills_prompt(plan: IterationPlan) -> bool:
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


def aging_document(f: SensitivityFixture, num_ticks: int) -> dict[str, Any]:
    """One sequence slot; the low request at tick 0 and a fresh one-token
    high request every tick, so the head of the high class always has
    p_eff = high and the low request runs once its own p_eff reaches it."""
    def one_token(rid: str, arrival: int, priority: int, client: str) -> dict[str, Any]:
        return {"request_id": rid, "arrival": arrival, "prompt_tokens": 1,
                "max_output_tokens": 1, "client_id": client, "priority": priority}
    highs = [one_token(f"high-{t:03d}", t, f.high_priority, "A") for t in range(num_ticks)]
    return {"workload_id": "0x0E-aging", "clock": "iteration",
            "capacity": {"max_num_batched_tokens": 1, "max_num_seqs": 1},
            "requests": [*highs, one_token(AGING_LOW_ID, 0, f.low_priority, "B")]}


def aging_crossover_tick(f: SensitivityFixture, num_ticks: int = 64) -> int | None:
    """The tick at which ``priority-aging`` first plans the low request;
    None when it is not planned while high requests keep arriving."""
    plans = PlanLog()
    policy = make_policy("priority-aging", q_age=f.aging_quantum)
    run_simulation(parse_workload(aging_document(f, num_ticks)),
                   RunConfig(policy, default_cost_model("iteration")), extra_observers=[plans])
    for now, plan in zip(plans.nows, plans.plans, strict=True):
        if now >= num_ticks:
            break
        if any(item.request_id == AGING_LOW_ID for item in plan.work):
            return int(now)
    return None


def client_document(f: SensitivityFixture) -> dict[str, Any]:
    offered = {"A": f.client_a_events, "B": f.client_b_events}
    requests = [{"request_id": f"{client}-{i}", "arrival": 0, "prompt_tokens": 1,
                 "max_output_tokens": 1, "client_id": client}
                for client, count in offered.items() for i in range(count)]
    return {"workload_id": "0x0E-client-mix", "clock": "iteration",
            "capacity": {"max_num_batched_tokens": f.max_num_batched_tokens,
                         "max_num_seqs": f.max_num_seqs},
            "requests": requests}


class FinishLog(EngineObserver):
    """Requests finished per client, counted as each step finishes them."""

    def __init__(self) -> None:
        self.finished: Counter[str] = Counter()

    def on_step(self, state: SchedulerState, plan: IterationPlan, result: IterationResult,
                successor: SchedulerState) -> None:
        for item in plan.work:
            view = successor.views.get(item.request_id)
            if view is not None and view.lifecycle is Lifecycle.FINISHED:
                self.finished[view.client_id] += 1


def client_completed_requests(f: SensitivityFixture) -> tuple[int, int]:
    """Finished requests of clients A and B over a ``vtc`` run of the mix."""
    done = FinishLog()
    run_simulation(parse_workload(client_document(f)),
                   RunConfig(make_policy("vtc"), default_cost_model("iteration")),
                   extra_observers=[done])
    return done.finished["A"], done.finished["B"]


def uncached_prompt_rows(f: SensitivityFixture) -> int:
    """U = S - H_hit as the block manager's exact prefix lookup finds it,
    after an earlier request committed the first ``prefix_hit_rows`` prompt
    tokens (and one other token) and finished."""
    prompt = [100 + i for i in range(f.prompt_tokens)]
    manager = BlockManager(BlockManagerConfig(num_device_blocks=64,
                                              block_size_rows=PREFIX_BLOCK_ROWS))
    if f.prefix_hit_rows:
        earlier = RequestKey("earlier", 0)
        tokens = [*prompt[:f.prefix_hit_rows], 7]
        manager.allocate(earlier, tokens)
        manager.commit(earlier, len(tokens))
        manager.release(earlier)
    return manager.lookup_prefix(prompt).num_uncached_rows


def prompt_planned_under_readiness(f: SensitivityFixture) -> bool:
    """Whether the engine plans the prompt, which requires remote K/V, once
    the foreign owner reports READY (``foreign_ready``) or PENDING for it."""
    manifest = parse_workload(chunk_document(f))
    plans = PlanLog()
    policy = make_policy("sarathi", chunk_size=f.chunk_size)
    engine = Engine(manifest.online, policy,
                    costed_executor(manifest, default_cost_model("iteration")), [plans])
    engine.require(LONG_ID, [ReadinessRequirement(ReadinessKind.REMOTE_KV)])
    status = ReadinessStatus.READY if f.foreign_ready else ReadinessStatus.PENDING
    published = False
    for _ in range(READINESS_HORIZON_STEPS):
        engine.step()
        view = engine.state.views.get(LONG_ID)
        if view is not None and not published:
            engine.publish_fact(ReadinessFact(ReadinessKind.REMOTE_KV, binding_of(view), status))
            published = True
    return any(prefills_prompt(plan) for plan in plans.plans)
