"""Offline API: ``LLM(model_dir, policy=...).generate(prompts, params)``.

Every prompt becomes a request on the real engine loop: the named policy
plans, the contract validates, the TorchExecutor runs exactly the planned
intervals. Results carry text, token ids, finish reason and per-request
timings on the engine clock (milliseconds since the generate call began).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import torch

from iterserve.engine.decision_log import DecisionLogWriter
from iterserve.engine.loop import Engine, bind_policy
from iterserve.engine.torch_executor import TorchExecutor
from iterserve.engine.trace import RunTrace
from iterserve.model.loader import load_model
from iterserve.model.params import SamplingParams
from iterserve.model.tokenizer import load_tokenizer
from iterserve.policies.registry import make_policy, settings_for
from iterserve.policies.settings import settings_of
from iterserve.records.spec import Capacity, OnlineWorkload, RequestSpec

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Scheduler and memory knobs of a real run (validated on construction)."""

    policy: str = "vllm"
    token_budget: int = 512
    max_num_seqs: int = 64
    kv_blocks: int = 1024
    block_size: int = 16
    num_host_blocks: int = 0
    chunk_size: int | None = None
    tau: int | None = None
    long_prefill_token_threshold: int | None = None
    extra_policy_settings: tuple[tuple[str, object], ...] = ()  # NAME=VALUE flags, checked strictly
    enable_prefix_caching: bool = True
    dtype: str = "float32"
    device: str = "cpu"

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {self.dtype!r}")
        for name in ("token_budget", "max_num_seqs", "kv_blocks", "block_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")

    def capacity(self) -> Capacity:
        return Capacity(token_budget=self.token_budget, sequence_budget=self.max_num_seqs)

    def policy_settings(self) -> dict[str, int]:
        """The knobs the policy takes (each policy keeps the ones it has)."""
        knobs = {"max_num_seqs": self.max_num_seqs, "chunk_size": self.chunk_size,
                 "tau": self.tau, "long_prefill_token_threshold": self.long_prefill_token_threshold}
        return {name: value for name, value in knobs.items() if value is not None}


@dataclass(frozen=True, slots=True)
class RequestOutput:
    request_id: str
    prompt_token_ids: tuple[int, ...]
    text: str
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    finish_reason: str | None
    arrival_ms: float
    first_token_ms: float | None
    finish_ms: float | None


class LLM:
    """A local checkpoint behind the iterserve engine (offline batch API)."""

    def __init__(self, model_dir: str | Path, config: EngineConfig | None = None,
                 **overrides: object) -> None:
        config = config or EngineConfig()
        if overrides:
            config = dataclasses.replace(config, **overrides)  # type: ignore[arg-type]
        self.config = config
        # made once and validated here: a bad name or setting fails before any model work
        settings = settings_for(config.policy, None, config.policy_settings(), strict=False)
        settings.update(dict(config.extra_policy_settings))
        self.policy = make_policy(config.policy, **settings)
        self.tokenizer = load_tokenizer(model_dir)
        model = load_model(model_dir, dtype=DTYPES[config.dtype], device=config.device)
        self.executor = TorchExecutor(
            model, config.kv_blocks, config.block_size, self.tokenizer,
            num_host_blocks=config.num_host_blocks,
            enable_prefix_caching=config.enable_prefix_caching,
        )
        self._num_requests = 0

    def generate(
        self,
        prompts: Sequence[str | Sequence[int]],
        params: SamplingParams | Sequence[SamplingParams] | None = None,
        on_step: Callable[[int, int], None] | None = None,
        decision_log: IO[str] | None = None,
    ) -> list[RequestOutput]:
        """Generate for every prompt (text, or token ids); outputs in prompt order.

        ``on_step(num_finished, num_total)`` is called after every iteration
        (progress bars). ``decision_log``, an open text stream, receives the
        run's decision log (executor ``torch``: replay re-derives its plans
        and checks its results against the digest chain).
        """
        params_list = _expand(params, len(prompts))
        specs = [self._register(prompt, p) for prompt, p in zip(prompts, params_list, strict=True)]
        workload = OnlineWorkload("offline", "ms", self.config.capacity(), tuple(specs))
        trace = RunTrace()
        self.executor.reset_clock()
        writer = None if decision_log is None else DecisionLogWriter(
            decision_log, bind_policy(workload, self.policy), self.executor.capacity(),
            policy_settings=settings_of(self.policy), executor="torch")
        engine = Engine(workload, self.policy, self.executor,
                        [trace] + ([writer] if writer else []))
        while not engine.is_done:
            engine.step()
            if on_step is not None:
                done = sum(1 for r in trace.requests.values() if r.finish_time is not None)
                on_step(done, len(specs))
        if writer is not None:
            writer.close(engine.state)
        return [self._output(spec, trace) for spec in specs]

    def _register(self, prompt: str | Sequence[int], params: SamplingParams) -> RequestSpec:
        ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else [int(t) for t in prompt]
        if not ids:
            raise ValueError("a prompt must have at least one token")
        request_id = f"req-{self._num_requests}"
        self._num_requests += 1
        seed = params.seed if params.seed is not None else self._num_requests
        self.executor.add_request(request_id, ids, params, seed)
        return RequestSpec(request_id, 0.0, len(ids), params.max_tokens,
                           prompt_token_ids=tuple(ids))

    def _output(self, spec: RequestSpec, trace: RunTrace) -> RequestOutput:
        stream = self.executor.streams.pop(spec.request_id)
        record = trace.requests[spec.request_id]
        return RequestOutput(
            spec.request_id, stream.prompt_token_ids, stream.text,
            tuple(stream.output_token_ids), tuple(stream.logprobs), record.finish_reason,
            spec.arrival, record.first_token_time, record.finish_time,
        )


def _expand(params: SamplingParams | Sequence[SamplingParams] | None,
            num_prompts: int) -> list[SamplingParams]:
    if params is None:
        return [SamplingParams()] * num_prompts
    if isinstance(params, SamplingParams):
        return [params] * num_prompts
    if len(params) != num_prompts:
        raise ValueError(f"{len(params)} sampling params for {num_prompts} prompts")
    return list(params)
