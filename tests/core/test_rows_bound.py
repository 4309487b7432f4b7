"""The rows bound the transitions carry (records/rows_bound) stands in for
the builder's full pass over every view: at every cut of runs with
arrivals, recompute preemptions, aborts of requests that outgrow the pool
and cancellations, it belongs to the cut's views, it is at least the full
maximum of ``p + e``, and it fits the pool exactly when the full maximum
does (so the builder's abort pass runs exactly when it did)."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest

from iterserve.cost import parse_cost_model
from iterserve.engine.loop import Engine
from iterserve.engine.observer import EngineObserver
from iterserve.policies.registry import policy_for
from iterserve.records.plan import IntentKind, IterationPlan
from iterserve.records.result import IterationResult
from iterserve.records.rows_bound import bound_of, max_rows_through_next_emission
from iterserve.records.state import SchedulerState
from iterserve.sim.generators import generate_workload
from iterserve.sim.report import costed_executor
from iterserve.sim.workload_spec import parse_spec

from .test_state_digest_incremental import SPEC


def _check_cut(cut: SchedulerState) -> None:
    assert cut.rows_bound is not None and cut.rows_bound.views is cut.views
    exact = max_rows_through_next_emission(cut.views)
    bound = bound_of(cut.views, cut.rows_bound)
    assert bound >= exact
    total = cut.capacity.num_blocks_total
    if total is not None:
        pool_rows = total * cut.capacity.block_size
        assert (bound <= pool_rows) == (exact <= pool_rows)


@dataclasses.dataclass
class _BoundChecker(EngineObserver):
    num_checked: int = 0
    intents: set[IntentKind] = dataclasses.field(default_factory=set)

    def on_step(self, state: SchedulerState, plan: IterationPlan, result: IterationResult,
                successor: SchedulerState) -> None:
        _check_cut(state)
        _check_cut(successor)
        self.intents.update(intent.kind for intent in plan.intents)
        self.num_checked += 1

    def on_cancel(self, request_id: str, state: SchedulerState,
                  successor: SchedulerState) -> None:
        _check_cut(successor)


def _run(spec: dict[str, Any], cancel_every: int) -> tuple[_BoundChecker, int]:
    manifest = generate_workload(parse_spec(spec))
    model = parse_cost_model("linear:8,0.02,0.1")
    checker = _BoundChecker()
    engine = Engine(manifest.online, policy_for("vllm", manifest.online, cost_model=model),
                    costed_executor(manifest, model), [checker], gate=None)
    num_cancelled = num_steps = 0
    while engine.step():
        num_steps += 1
        live = engine.state.waiting + engine.state.running
        if cancel_every and num_steps % cancel_every == 0 and live:
            engine.cancel(live[len(live) // 2])
            num_cancelled += 1
    assert engine.is_done
    return checker, num_cancelled


def test_the_bound_holds_at_every_cut_of_a_preempting_run() -> None:
    checker, _ = _run(SPEC, cancel_every=0)
    assert checker.num_checked > 200 and IntentKind.PREEMPT_RECOMPUTE in checker.intents


@pytest.mark.parametrize("cancel_every", [0, 7])
def test_the_bound_holds_when_requests_outgrow_the_pool_and_are_cancelled(
        cancel_every: int) -> None:
    spec = copy.deepcopy(SPEC)
    spec["kv"]["num_kv_blocks"] = 20  # 320 rows: p + e up to 360 outgrows it
    checker, num_cancelled = _run(spec, cancel_every)
    assert checker.num_checked > 100 and IntentKind.ABORT in checker.intents
    assert num_cancelled > 5 or not cancel_every
