"""Workloads for the 0x07 integration tests, run through the REAL simulator.

Nothing here builds an event log by hand: the engine, the registered policy
code, the overload gate and the simulated executor produce every fact, and
:class:`iterserve.engine.events.EventRecorder` turns them into the log the
evaluator reads.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from iterserve.admission.overload import OverloadGate, make_gate
from iterserve.cost import FixedIterationCost
from iterserve.metrics import ObservationWindow, Report, SloConfig, evaluate
from iterserve.policies.deadline import bind_cost_model
from iterserve.policies.registry import make_policy
from iterserve.records.spec import (
    Capacity,
    HiddenTruth,
    OnlineWorkload,
    RequestSpec,
    SloTargets,
    WorkloadManifest,
)
from iterserve.sim.report import RunConfig, SimulationRun, run_simulation

TICK_MS = 10.0
BURST_SLO = SloConfig(ttft_ms=30.0, tbt_ms=20.0)
BURST_COST = FixedIterationCost(TICK_MS)


def two_row_workload(arrivals_ms: Iterable[tuple[str, float]], *, realized: int = 2,
                     workload_id: str = "burst-0x07") -> WorkloadManifest:
    """1-token prompts, 2 rows per 10 ms iteration, TTFT 30 ms / TBT 20 ms.

    ``realized`` outputs are hidden truth (the 0x07 burst: 1 first-token unit
    + 1 next-token unit = 2); the online cap is larger so the policy cannot
    read the realized length from it.
    """
    targets = SloTargets(BURST_SLO.ttft_ms, BURST_SLO.tbt_ms)
    requests = tuple(RequestSpec(rid, arrival, 1, 8, slo=targets) for rid, arrival in arrivals_ms)
    online = OnlineWorkload(workload_id, "ms", Capacity(max_num_batched_tokens=2, max_num_seqs=2),
                            requests)
    return WorkloadManifest(online, HiddenTruth({r.request_id: realized for r in requests}))


BURST = two_row_workload((rid, 0.0) for rid in "ABCDEF")


def saturation_workload() -> WorkloadManifest:
    """240 two-row requests, two per 10 ms tick over ticks 0..119."""
    return two_row_workload(((f"r{2 * tick + slot:03d}", tick * TICK_MS)
                             for tick in range(120) for slot in range(2)),
                            workload_id="saturation-0x07")


def gate(name: str, **params: Any) -> OverloadGate:
    return make_gate(name, params)


def simulate(manifest: WorkloadManifest, overload: OverloadGate, policy: str = "least-slack",
             cost: FixedIterationCost = BURST_COST) -> SimulationRun:
    config = RunConfig(bind_cost_model(make_policy(policy), cost), cost, overload)
    return run_simulation(manifest, config)


def evaluate_run(run: SimulationRun, window: ObservationWindow, label: str,
                 slo: SloConfig = BURST_SLO) -> Report:
    return evaluate(run.recorder.log(), slo, window, label=label)


def emission_ms(run: SimulationRun) -> dict[str, list[float]]:
    """Output times per request, in ms, from the recorded event log."""
    out: dict[str, list[float]] = {}
    for event in run.recorder.log():
        if event.kind in ("first_token", "token"):
            out.setdefault(event.request_id, []).append(round(event.time_s * 1000, 6))
    return out


def closes(report: Report) -> bool:
    c = report.outcomes
    return c.num_offered == c.num_slo_valid + c.num_completed_miss + c.num_rejected \
        + c.num_unfinished


def write_workload(path: Path, manifest: WorkloadManifest,
                   extra_requests: Sequence[dict[str, Any]] = ()) -> Path:
    """The manifest as a workload file (hidden truth included, for the CLI)."""
    online = manifest.online
    requests = [{"request_id": r.request_id, "arrival": r.arrival,
                 "prompt_tokens": r.num_prompt_tokens, "max_output_tokens": r.max_output_tokens,
                 "client_id": r.client_id,
                 **({"slo": {"ttft_ms": r.slo.ttft_ms, "tbt_ms": r.slo.tbt_ms}} if r.slo else {})}
                for r in online.requests]
    raw = {
        "workload_id": online.workload_id, "clock": online.clock,
        "capacity": {"max_num_batched_tokens": online.capacity.max_num_batched_tokens,
                     "max_num_seqs": online.capacity.max_num_seqs},
        "requests": requests + list(extra_requests),
        "fixture_only_hidden_truth": {
            "realized_output_tokens": dict(manifest.hidden.realized_output_tokens)},
    }
    path.write_text(json.dumps(raw))
    return path
