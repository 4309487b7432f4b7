"""Run fairness fixtures through ``iterserve simulate`` (the real code path),
and the engine through 0x09A's aging trace with a blocked client."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from iterserve.admission.readiness import (
    ReadinessFact,
    ReadinessKind,
    ReadinessRequirement,
    ReadinessStatus,
)
from iterserve.cli.main import main
from iterserve.engine.loop import Engine
from iterserve.engine.observer import EngineObserver
from iterserve.plan import Policy
from iterserve.records import Capacity, HiddenTruth, OnlineWorkload, RequestSpec
from iterserve.records.receipts import ForeignBinding, snapshot_digest
from iterserve.sim.executor import SimulatedExecutor

REMOTE = ReadinessRequirement(ReadinessKind.REMOTE_KV)


def request(rid: str, client: str, arrival: float = 0, prompt: int = 1, max_out: int = 1,
            **extra: Any) -> dict[str, Any]:
    return {"request_id": rid, "arrival": arrival, "prompt_tokens": prompt,
            "max_output_tokens": max_out, "client_id": client, **extra}


def workload(workload_id: str, requests: list[dict[str, Any]], *, max_num_batched_tokens: int = 1,
             max_num_seqs: int = 1, clock: str = "iteration",
             **sections: Any) -> dict[str, Any]:
    return {"workload_id": workload_id, "clock": clock,
            "capacity": {"max_num_batched_tokens": max_num_batched_tokens, "max_num_seqs": max_num_seqs},
            "requests": requests, **sections}


def simulate(tmp: Path, spec: dict[str, Any], policy: str, *flags: str) -> dict[str, Any]:
    """Write ``spec``, run ``iterserve simulate`` on it, return report.json."""
    path = tmp / f"{spec['workload_id']}.json"
    path.write_text(json.dumps(spec))
    out = tmp / f"out-{policy}-{len(list(tmp.iterdir()))}"
    code = main(["simulate", "--workload", str(path), "--policy", policy, "--out", str(out),
                 "--no-plots", *flags])
    assert code == 0
    report: dict[str, Any] = json.loads((out / "report.json").read_text())
    report["_out"] = str(out)
    return report


def two_clients() -> dict[str, Any]:
    """0x09A: A with 8 events, B with 4, all at tick 0; each event is one
    request of one prompt row and one output, 2 weighted units at w_p = w_q = 1."""
    requests = [request(f"A{i}", "A") for i in range(8)]
    requests += [request(f"B{i}", "B") for i in range(4)]
    return workload("two-clients-0x09A", requests,
                    fairness={"prompt_weight": 1, "output_weight": 1})


def run_blocked_low(workload_id: str, policy: Policy, observers: Sequence[EngineObserver],
                    ready_at: float) -> Engine:
    """0x09A's aging trace, one sequence, one row per tick: "low" (priority
    4) arrives at tick 0 needing a REMOTE_KV fact, published READY at the
    first decision at or after ``ready_at``; a "high" request (priority 0)
    arrives every tick 0..15. Runs ``policy`` to the end."""
    requests = [RequestSpec("low", 0.0, 1, 1, client_id="low", priority=4)]
    requests += [RequestSpec(f"high{t:02d}", float(t), 1, 1, client_id="high", priority=0)
                 for t in range(16)]
    workload = OnlineWorkload(workload_id, "iteration", Capacity(1, 1), tuple(requests))
    hidden = HiddenTruth({spec.request_id: 1 for spec in requests})
    engine = Engine(workload, policy, SimulatedExecutor(hidden), list(observers))
    engine.require("low", [REMOTE])
    binding = ForeignBinding("low", 0, snapshot_digest("low", 0, 1, 0), 0)
    published = False
    while not engine.is_done:
        if not published and engine.state.now >= ready_at:
            engine.publish_fact(ReadinessFact(ReadinessKind.REMOTE_KV, binding,
                                              ReadinessStatus.READY))
            published = True
        engine.step()
    return engine
