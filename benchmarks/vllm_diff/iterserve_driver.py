"""Drive iterserve's ``vllm`` / ``vllm-priority`` policy on a trace through
the simulator (the real scheduler, plan validation and KV pool)."""

from __future__ import annotations

from typing import Any

from traces import Regime, TraceRequest

from iterserve.cost import default_cost_model
from iterserve.engine.observer import EngineObserver
from iterserve.policies.registry import make_policy
from iterserve.records.plan import IntentKind, IterationPlan
from iterserve.records.workload import parse_workload
from iterserve.sim.report import RunConfig, run_simulation


class _Plans(EngineObserver):
    def __init__(self) -> None:
        self.steps: list[dict[str, Any]] = []

    def on_step(self, state, plan: IterationPlan, result, successor) -> None:  # type: ignore[no-untyped-def]
        tokens: dict[str, int] = {}
        for item in plan.work:
            tokens[item.request_id] = item.end - item.start
        preempted = sorted(i.request_id for i in plan.intents
                           if i.kind is IntentKind.PREEMPT_RECOMPUTE)
        self.steps.append({"tokens": dict(sorted(tokens.items())), "preempted": preempted})


def workload_document(regime: Regime, trace: list[TraceRequest]) -> dict[str, Any]:
    return {
        "workload_id": f"vllm-diff-{regime.name}", "clock": "iteration",
        "capacity": {"max_num_batched_tokens": regime.max_num_batched_tokens,
                     "max_num_seqs": regime.max_num_seqs},
        "kv": {"num_kv_blocks": regime.num_blocks, "block_size": regime.block_size,
               "preemption_mode": "recompute"},
        "requests": [{"request_id": r.request_id, "arrival": 0, "prompt_tokens": r.prompt_tokens,
                      "max_output_tokens": r.output_tokens, "priority": r.priority}
                     for r in trace],
        "fixture_only_hidden_truth": {"realized_output_tokens": {
            r.request_id: r.output_tokens for r in trace}},
    }


def policy_settings(regime: Regime, overrides: dict[str, int] | None = None) -> dict[str, int]:
    """The policy's settings for ``regime``: vLLM's for the same scheduler
    config, everything else at the policy's defaults (vLLM 0.32's), then
    ``overrides`` (e.g. reserve_full_isl=0 to see its effect)."""
    settings: dict[str, int] = {"max_num_seqs": regime.max_num_seqs}
    if regime.long_prefill_token_threshold:
        settings["long_prefill_token_threshold"] = regime.long_prefill_token_threshold
    if regime.adaptive:
        settings["long_prefill_token_threshold_adaptive"] = 1
    return {**settings, **(overrides or {})}


def run_iterserve(regime: Regime, trace: list[TraceRequest],
                  overrides: dict[str, int] | None = None,
                  max_steps: int = 5000) -> list[dict[str, Any]]:
    settings = policy_settings(regime, overrides)
    policy = make_policy("vllm-priority" if regime.priority else "vllm", **settings)
    plans = _Plans()
    manifest = parse_workload(workload_document(regime, trace))
    run_simulation(manifest, RunConfig(policy, default_cost_model("iteration"),
                                       max_iterations=max_steps), extra_observers=[plans])
    return plans.steps
