"""The live clients a ledger run's transitions carry (records/live_clients)
are the ones counted off the queues, at every decision, across readiness
flips, cancellations and rejections."""

from __future__ import annotations

import random

from iterserve.cost import parse_cost_model
from iterserve.engine.loop import Engine
from iterserve.engine.observer import EngineObserver
from iterserve.policies.registry import policy_for
from iterserve.records.live_clients import counted
from iterserve.records.plan import IterationPlan
from iterserve.records.result import IterationResult
from iterserve.records.state import SchedulerState
from iterserve.records.transition import cancel, with_readiness
from iterserve.sim.generators import generate_workload
from iterserve.sim.report import costed_executor
from iterserve.sim.workload_spec import parse_spec


def _expect_carried(state: SchedulerState) -> None:
    live = state.live_clients
    assert live is not None and live.holds_for((state.waiting, state.running, state.suspended))
    full = counted(state.views, (state.waiting, state.running, state.suspended))
    assert dict(live.counts) == dict(full.counts)
    assert dict(live.not_ready) == dict(full.not_ready)
    assert live.blocked() == full.blocked()


class _Checks(EngineObserver):
    def __init__(self) -> None:
        self.num_checked = 0

    def on_step(self, state: SchedulerState, plan: IterationPlan, result: IterationResult,
                successor: SchedulerState) -> None:
        _expect_carried(successor)
        self.num_checked += 1


def test_carried_equals_counted_through_a_fair_run() -> None:
    clients = [{"client_id": f"c{i}", "prompt_tokens": {"kind": "uniform", "min": 8, "max": 64},
                "output_tokens": {"kind": "uniform", "min": 2, "max": 12}} for i in range(4)]
    manifest = generate_workload(parse_spec({
        "workload_id": "live-clients", "seed": 11, "num_requests": 120, "clock": "ms",
        "capacity": {"max_num_batched_tokens": 64, "max_num_seqs": 6},
        "kv": {"num_kv_blocks": 24, "block_size": 8},
        "arrival": {"process": "poisson", "rate_per_s": 400}, "clients": clients}))
    model = parse_cost_model("linear:5,0.05,0.5")
    checks = _Checks()
    engine = Engine(manifest.online, policy_for("vtc", manifest.online, cost_model=model),
                    costed_executor(manifest, model), [checks])
    rng = random.Random(3)
    while engine.step():
        state = engine.state
        if state.ledger is None or not state.waiting:
            continue
        waiting = list(state.waiting)
        flips = {rid: rng.random() < 0.5 for rid in rng.sample(waiting, min(3, len(waiting)))}
        flipped = with_readiness(state, flips)  # a side branch: the run goes on unflipped
        _expect_carried(flipped)
        _expect_carried(with_readiness(flipped, dict.fromkeys(flips, True)))
        _expect_carried(cancel(flipped, waiting[0]))
    assert checks.num_checked > 50 and engine.state.ledger is not None
