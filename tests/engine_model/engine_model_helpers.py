"""Helpers for the engine-with-a-real-model tests: prompts, engine runs, observers."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from iterserve.engine.loop import Engine
from iterserve.engine.observer import EngineObserver
from iterserve.engine.trace import RunTrace
from iterserve.llm import LLM, RequestOutput
from iterserve.model.executor import TorchExecutor
from iterserve.policies.registry import policy_for
from iterserve.records.plan import IntentKind, IterationPlan
from iterserve.records.result import IterationResult
from iterserve.records.sampling_params import SamplingParams
from iterserve.records.spec import Capacity, KvSpec, OnlineWorkload, RequestSpec
from iterserve.records.state import SchedulerState

FIRST_PLAIN_TOKEN = 4  # ids below are special tokens in the tiny tokenizer
LOGPROB_ATOL = 1e-4  # float32, same model, different batch shapes
GREEDY = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)


def make_prompts(lengths: Sequence[int], vocab_size: int, seed: int = 0) -> list[list[int]]:
    """Token-id prompts of the given lengths, plain tokens only (no BOS/EOS/pad)."""
    rng = random.Random(seed)
    return [[rng.randrange(FIRST_PLAIN_TOKEN, vocab_size) for _ in range(n)] for n in lengths]


def token_ids(outputs: Sequence[RequestOutput]) -> list[tuple[int, ...]]:
    return [out.token_ids for out in outputs]


def run_alone(model_dir: Path, prompts: Sequence[Sequence[int]],
              params: SamplingParams = GREEDY) -> list[RequestOutput]:
    """Each prompt on its own engine run: no batching, no prefix cache, no pressure."""
    llm = LLM(model_dir, policy="vllm", block_size=4, enable_prefix_caching=False)
    return [llm.generate([prompt], params)[0] for prompt in prompts]


def assert_same_outputs(got: Sequence[RequestOutput], want: Sequence[RequestOutput]) -> None:
    """Identical greedy tokens and finish reasons; logprobs within float32 noise."""
    assert token_ids(got) == token_ids(want)
    assert [o.finish_reason for o in got] == [o.finish_reason for o in want]
    for g, w in zip(got, want, strict=True):
        assert max(abs(a - b) for a, b in zip(g.logprobs, w.logprobs, strict=True)) < LOGPROB_ATOL


@dataclass
class PreemptionLog(EngineObserver):
    """Every preemption intent with the victim's emitted-token count at that moment."""

    preempted: list[tuple[str, IntentKind, int]] = field(default_factory=list)

    def on_step(self, state: SchedulerState, plan: IterationPlan, result: IterationResult,
                successor: SchedulerState) -> None:
        for intent in plan.intents:
            if intent.kind in (IntentKind.PREEMPT_RECOMPUTE, IntentKind.PREEMPT_PRESERVE_EXACT):
                view = state.views[intent.request_id]
                self.preempted.append((intent.request_id, intent.kind, view.num_emitted))


@dataclass(frozen=True)
class EngineRun:
    outputs: list[tuple[int, ...]]
    logprobs: list[tuple[float, ...]]
    finish_reasons: list[str | None]
    executor: TorchExecutor
    trace: RunTrace
    preemptions: PreemptionLog
    prompt_logprobs: list[list[tuple[float, tuple[tuple[int, float], ...]]]] = field(
        default_factory=list)  # per request, when its params asked


def run_engine(
    executor: TorchExecutor,
    prompts: Sequence[Sequence[int]],
    policy: str,
    kv: KvSpec | None = None,
    params: SamplingParams = GREEDY,
    capacity: Capacity | None = None,
    settings: dict[str, int] | None = None,
) -> EngineRun:
    """Drive the Engine directly (LLM builds its workload without a kv section,
    so this is the way to run a preemption mode other than recompute)."""
    specs = []
    for index, prompt in enumerate(prompts):
        request_id = f"r{index}"
        executor.add_request(request_id, prompt, params, seed=index)
        specs.append(RequestSpec(request_id, 0.0, len(prompt), params.max_tokens,
                                 prompt_token_ids=tuple(prompt)))
    capacity = capacity or Capacity(max_num_batched_tokens=512, max_num_seqs=64)
    settings = {"max_num_seqs": 64, **(settings or {})}
    workload = OnlineWorkload("engine-model-test", "ms", capacity, tuple(specs), kv=kv)
    trace, log = RunTrace(), PreemptionLog()
    Engine(workload, policy_for(policy, workload, settings, strict=False), executor,
           [trace, log]).run()
    streams = [executor.streams.pop(spec.request_id) for spec in specs]
    return EngineRun(
        [tuple(s.output_token_ids) for s in streams],
        [tuple(s.logprobs) for s in streams],
        [trace.requests[spec.request_id].finish_reason for spec in specs],
        executor,
        trace,
        log,
        [list(s.prompt_logprobs) for s in streams],
    )
