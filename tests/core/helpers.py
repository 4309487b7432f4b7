"""Shared builders for the core-loop conformance tests (0x00B, 0x01A, 0x02).

Everything here goes through the real code path: records, policies, the
engine and the simulated executor. Records may be frozen dataclasses or
NamedTuples (0x01A allows packed hot-path records), so :func:`replace`
handles both.
"""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path
from typing import Any

from iterserve.engine.loop import Engine, bind_policy
from iterserve.engine.observer import EngineObserver
from iterserve.policies.registry import make_policy, policy_for
from iterserve.records.plan import IterationPlan
from iterserve.records.result import IterationResult
from iterserve.records.spec import Capacity, OnlineWorkload, RequestSpec
from iterserve.records.state import SchedulerState
from iterserve.records.view import FinishReason, Lifecycle, RequestView
from iterserve.sim.factory import make_simulated_executor

REPO_ROOT = Path(__file__).resolve().parents[2]
ABC_FIXTURE = REPO_ROOT / "examples" / "abc_fixture.json"


def replace(record: Any, **changes: Any) -> Any:
    """A copy of a frozen record (dataclass or NamedTuple) with ``changes``."""
    if hasattr(record, "_replace"):
        return record._replace(**changes)
    return dataclasses.replace(record, **changes)


class Recorder(EngineObserver):
    """An engine observer keeping every (state, plan, result, successor)."""

    def __init__(self) -> None:
        self.steps: list[tuple[SchedulerState, IterationPlan, IterationResult, SchedulerState]] = []
        self.cancels: list[tuple[str, SchedulerState, SchedulerState]] = []

    def on_step(self, state, plan, result, successor) -> None:  # noqa: ANN001
        self.steps.append((state, plan, result, successor))

    def on_cancel(self, request_id, state, successor) -> None:  # noqa: ANN001
        self.cancels.append((request_id, state, successor))

    @property
    def plans(self) -> list[IterationPlan]:
        return [plan for _, plan, _, _ in self.steps]

    @property
    def results(self) -> list[IterationResult]:
        return [result for _, _, result, _ in self.steps]

    def at_cut(self, now: float) -> tuple[SchedulerState, IterationPlan, IterationResult, SchedulerState]:
        matches = [step for step in self.steps if step[0].now == now and step[1].work]
        assert len(matches) == 1, f"expected one iteration at cut {now}, got {len(matches)}"
        return matches[0]


# --- the Loop 2 fixture of 0x01A ------------------------------------------------
LOOP2_DECISION = 5
LOOP2_STATE_VERSION = 7


def loop2_views() -> dict[str, RequestView]:
    """req-A..E at the Loop 2 cut.

    req-D's arrival order is *ahead* of req-A's, so only its readiness fact
    (not the budget) keeps it out of the plan.
    """
    return {
        "req-A": RequestView(
            "req-A", 0, 3, "client-alpha", 0, 1.0, 1, 4, 8,
            num_emitted=0, num_computed=0, num_committed=0, lifecycle=Lifecycle.WAITING,
        ),
        "req-B": RequestView(
            "req-B", 2, 9, "client-alpha", 0, 2.0, 2, 3, 8,
            num_emitted=1, num_computed=3, num_committed=3, lifecycle=Lifecycle.RUNNING,
            first_token_time=4.0, last_output_time=4.0,
        ),
        "req-C": RequestView(
            "req-C", 1, 6, "client-beta", 0, 3.0, 3, 2, 8,
            num_emitted=2, num_computed=3, num_committed=3, lifecycle=Lifecycle.RUNNING,
            first_token_time=4.0, last_output_time=5.0,
        ),
        "req-D": RequestView(
            "req-D", 0, 0, "client-gamma", 0, 0.0, 0, 2, 8, lifecycle=Lifecycle.WAITING,
            is_ready=False,
        ),
        "req-E": RequestView(
            "req-E", 4, 11, "client-beta", 0, 0.5, 4, 2, 8,
            num_emitted=3, num_computed=4, num_committed=4, lifecycle=Lifecycle.FINISHED,
            first_token_time=2.0, last_output_time=5.0, finish_reason=FinishReason.STOP,
        ),
    }


def loop2_state(**changes: Any) -> SchedulerState:
    fields: dict[str, Any] = dict(
        decision_id=LOOP2_DECISION,
        state_version=LOOP2_STATE_VERSION,
        now=5.0,
        waiting=("req-D", "req-A"),
        running=("req-B", "req-C"),
        suspended=(),
        finished=("req-E",),
        views=loop2_views(),
        max_num_batched_tokens=4,
        max_num_seqs=3,
        service={},
    )
    fields.update(changes)
    return SchedulerState(**fields)


def loop2_workload() -> OnlineWorkload:
    """The Loop 2 declarations, bound to the decode-first policy identity."""
    requests = tuple(
        RequestSpec(v.request_id, v.arrival, v.num_prompt_tokens, v.max_output_tokens,
                    client_id=v.client_id, priority=v.priority)
        for v in sorted(loop2_views().values(), key=lambda v: v.arrival_order)
    )
    online = OnlineWorkload("m5-2-loop2", "iteration", Capacity(4, 3), requests)
    return bind_policy(online, make_policy("decode-first"))


# --- workloads ---------------------------------------------------------------------
def random_workload_json(seed: int, num_requests: int = 10) -> dict[str, Any]:
    """A deterministic, varied workload: chunked prefill, several clients,
    priorities, staggered arrivals and hidden lengths on both sides of the cap.
    Every registered policy can run it to completion."""
    rng = random.Random(seed)
    requests = []
    realized = {}
    for i in range(num_requests):
        rid = f"r{i:02d}"
        requests.append({
            "request_id": rid,
            "arrival": rng.randint(0, 6),
            "prompt_tokens": rng.randint(1, 6),
            "max_output_tokens": rng.randint(2, 9),
            "client_id": rng.choice(["client-a", "client-b", "client-c"]),
            "priority": rng.randint(0, 2),
        })
        realized[rid] = rng.randint(1, 11)
    return {
        "workload_id": f"random-{seed}",
        "clock": "iteration",
        # prompts never exceed the token budget, so whole-prompt policies (orca)
        # can always run; chunk_size serves the chunked-prefill policies
        "capacity": {"max_num_batched_tokens": 6, "max_num_seqs": 3, "chunk_size": 3},
        "requests": requests,
        "fixture_only_hidden_truth": {"realized_output_tokens": realized},
    }


def write_json(path: Path, obj: Any) -> Path:
    path.write_text(json.dumps(obj, indent=1))
    return path


def run_engine(manifest, policy_name: str) -> tuple[Engine, Recorder]:  # noqa: ANN001
    """The CLI's run: the workload's own simulated executor, the real engine."""
    recorder = Recorder()
    engine = Engine(manifest.online_projection(), policy_for(policy_name, manifest.online),
                    make_simulated_executor(manifest), [recorder])
    engine.run()
    return engine, recorder
