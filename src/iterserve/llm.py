"""Offline API: ``LLM(model=..., policy=...).generate(prompts, sampling_params)``.

Every prompt becomes a request on the real engine loop: the named policy
plans, the contract validates, the TorchExecutor runs exactly the planned
intervals. Results carry text, token ids, finish reason and per-request
timings on the engine clock (milliseconds since the generate call began),
also as vLLM spells them (``out.outputs[0].text``, ``out.metrics``). A
request that could never run (prompt + max_tokens past ``max_model_len`` or
the KV pool) is refused when it is submitted, before anything runs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from iterserve.engine.loop import Engine
from iterserve.engine.torch_executor import TorchExecutor
from iterserve.engine.trace import RunTrace
from iterserve.model.loader import load_model
from iterserve.model.params import SamplingParams
from iterserve.model.tokenizer import load_tokenizer
from iterserve.policies.registry import make_policy
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
    enable_prefix_caching: bool = True
    dtype: str = "float32"
    device: str = "cpu"
    max_model_len: int | None = None  # None: the checkpoint's max_position_embeddings
    admission: str = "none"  # kv reservation estimate (see ``iterserve.admission``)
    overload: str = "accept-all"  # arrival gate: accept-all | bounded | slo-feasible
    max_live: int | None = None  # the bounded gate's cap on live requests
    cost_model: str | None = None  # the slo-feasible gate's cost model (NAME:params)

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {self.dtype!r}")
        for name in ("token_budget", "max_num_seqs", "kv_blocks", "block_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ValueError("max_model_len must be >= 2")

    def capacity(self) -> Capacity:
        return Capacity(
            token_budget=self.token_budget, sequence_budget=self.max_num_seqs,
            max_num_seqs=self.max_num_seqs, chunk_size=self.chunk_size, tau=self.tau,
            long_prefill_token_threshold=self.long_prefill_token_threshold,
        )


@dataclass(frozen=True, slots=True)
class CompletionOutput:
    """One generated sequence (vLLM's ``RequestOutput.outputs[i]``)."""

    index: int
    text: str
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    finish_reason: str | None


@dataclass(frozen=True, slots=True)
class RequestMetrics:
    """Engine-clock times of one request, in ms since the generate call began."""

    arrival_ms: float
    first_token_ms: float | None
    finish_ms: float | None


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

    @property
    def outputs(self) -> list[CompletionOutput]:
        return [CompletionOutput(0, self.text, self.token_ids, self.logprobs, self.finish_reason)]

    @property
    def metrics(self) -> RequestMetrics:
        return RequestMetrics(self.arrival_ms, self.first_token_ms, self.finish_ms)


Prompt = str | Sequence[int]


class LLM:
    """A local checkpoint behind the iterserve engine (offline batch API)."""

    def __init__(self, model: str | Path, config: EngineConfig | None = None,
                 **overrides: object) -> None:
        config = config or EngineConfig()
        if overrides:
            config = dataclasses.replace(config, **overrides)  # type: ignore[arg-type]
        self.config = config
        make_policy(config.policy)  # fail fast on an unknown name
        self.tokenizer = load_tokenizer(model)
        loaded = load_model(model, dtype=DTYPES[config.dtype], device=config.device)
        self.max_model_len = config.max_model_len or loaded.config.max_position_embeddings
        self.executor = TorchExecutor(
            loaded, config.kv_blocks, config.block_size, self.tokenizer,
            num_host_blocks=config.num_host_blocks,
            enable_prefix_caching=config.enable_prefix_caching,
        )
        self._num_requests = 0

    def generate(
        self,
        prompts: Prompt | Sequence[Prompt],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        on_step: Callable[[int, int], None] | None = None,
        use_tqdm: bool = False,
    ) -> list[RequestOutput]:
        """Generate for every prompt (text, or token ids); outputs in prompt order.

        One string (or one list of token ids) is one request. ``on_step(num_finished,
        num_total)`` is called after every iteration; ``use_tqdm`` shows a progress bar.
        """
        batch = _as_prompts(prompts)
        params_list = _expand(sampling_params, len(batch))
        for prompt_ids, p in zip(batch, params_list, strict=True):
            self._check(prompt_ids, p)
        if use_tqdm:
            return self._generate_with_bar(batch, params_list, on_step)
        return self._run(batch, params_list, on_step)

    def chat(self, messages: Sequence[Mapping[str, str]],
             sampling_params: SamplingParams | None = None,
             use_tqdm: bool = False) -> list[RequestOutput]:
        """One conversation, rendered with the tokenizer's chat template."""
        ids = self.tokenizer.apply_chat_template(messages)
        return self.generate([ids], sampling_params, use_tqdm=use_tqdm)

    def _generate_with_bar(self, batch: list[Prompt], params_list: list[SamplingParams],
                           on_step: Callable[[int, int], None] | None) -> list[RequestOutput]:
        from rich.progress import Progress

        with Progress(transient=True) as progress:
            task = progress.add_task("generating", total=len(batch))

            def step(done: int, total: int) -> None:
                progress.update(task, completed=done)
                if on_step is not None:
                    on_step(done, total)

            return self._run(batch, params_list, step)

    def _check(self, prompt: Prompt, params: SamplingParams) -> None:
        """Refuse at submission what could never run (not a stall mid-run)."""
        num_prompt = len(self.tokenizer.encode(prompt)) if isinstance(prompt, str) \
            else len(prompt)
        total = num_prompt + params.max_tokens
        if total > self.max_model_len:
            raise ValueError(f"prompt ({num_prompt} tokens) + max_tokens ({params.max_tokens}) "
                             f"= {total} exceeds max_model_len {self.max_model_len}")
        num_blocks = -(-total // self.config.block_size)
        if num_blocks > self.config.kv_blocks:
            raise ValueError(f"prompt + max_tokens needs {num_blocks} KV blocks; the pool has "
                             f"{self.config.kv_blocks}")

    def _run(self, prompts: list[Prompt], params_list: list[SamplingParams],
             on_step: Callable[[int, int], None] | None) -> list[RequestOutput]:
        specs = [self._register(prompt, p) for prompt, p in zip(prompts, params_list, strict=True)]
        workload = OnlineWorkload("offline", "ms", self.config.capacity(), tuple(specs))
        trace = RunTrace()
        self.executor.reset_clock()
        engine = Engine(workload, make_policy(self.config.policy), self.executor, [trace])
        while not engine.is_done:
            engine.step()
            if on_step is not None:
                done = sum(1 for r in trace.requests.values() if r.finish_time is not None)
                on_step(done, len(specs))
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


def _as_prompts(prompts: Prompt | Sequence[Prompt]) -> list[Prompt]:
    """One string or one flat list of token ids is one prompt, not many."""
    if isinstance(prompts, str):
        return [prompts]
    items = list(prompts)
    if items and all(isinstance(t, int) for t in items):
        return [[int(t) for t in items]]  # type: ignore[arg-type]
    return items  # type: ignore[return-value]


def _expand(params: SamplingParams | Sequence[SamplingParams] | None,
            num_prompts: int) -> list[SamplingParams]:
    if params is None:
        return [SamplingParams()] * num_prompts
    if isinstance(params, SamplingParams):
        return [params] * num_prompts
    if len(params) != num_prompts:
        raise ValueError(f"{len(params)} sampling params for {num_prompts} prompts")
    return list(params)
