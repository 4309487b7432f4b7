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

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from iterserve.config import DTYPE_NAMES, EngineConfig
from iterserve.engine.observer import EngineObserver
from iterserve.engine.online import Submission
from iterserve.engine.streams import BlockingOutputStream
from iterserve.model.runtime import DTYPES
from iterserve.records.plan import IterationPlan
from iterserve.records.result import IterationResult
from iterserve.records.sampling_params import SamplingParams
from iterserve.records.state import SchedulerState
from iterserve.records.time_units import s_to_ms
from iterserve.records.vocabulary import warn_renamed
from iterserve.runtime import load_runtime

__all__ = ["DTYPES", "DTYPE_NAMES", "LLM", "CompletionOutput", "EngineConfig", "RequestMetrics",
           "RequestOutput", "SamplingParams"]


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
Conversation = Sequence[Mapping[str, str]]


class LLM:
    """A local checkpoint behind the iterserve online engine (offline batch API).

    Each ``generate`` call submits its prompts as one batch (one arrival
    instant, in prompt order) to the engine thread and waits for every
    stream; the engine is the one the server runs.
    """

    def __init__(self, model: str | Path, config: EngineConfig | None = None,
                 **overrides: object) -> None:
        config = config or EngineConfig()
        overrides = _with_current_names(overrides)
        if overrides:
            config = dataclasses.replace(config, **overrides)  # type: ignore[arg-type]
        self.config = config
        self._steps = _StepRelay()
        self.runtime = load_runtime(model, config, observers=[self._steps])
        self.engine = self.runtime.engine
        self.executor = self.runtime.executor
        self.tokenizer = self.runtime.tokenizer
        self.max_model_len = self.runtime.max_model_len

    def close(self) -> None:
        """Stop the engine thread (it also stops with the process)."""
        self.engine.shutdown(0.0)

    def generate(
        self,
        prompts: Prompt | Sequence[Prompt],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        on_step: Callable[[int, int], None] | None = None,
        use_tqdm: bool = False,
        decision_log: IO[str] | None = None,
    ) -> list[RequestOutput]:
        """Generate for every prompt (text, or token ids); outputs in prompt order.

        One string (or one list of token ids) is one request. ``on_step(num_finished,
        num_total)`` is called after every iteration (on the engine thread);
        ``use_tqdm`` shows a progress bar. ``decision_log``, an open text
        stream, receives the engine's decision log once the batch is done
        (executor ``torch``; every request this LLM has run so far): replay
        re-derives its plans and checks its results against the digest chain.
        Raises :class:`iterserve.plan.feasibility.InfeasibleRun` before any of
        the batch runs when the policy has no preemption path and the KV pool
        cannot hold its worst running set.
        """
        batch = [self._ids(prompt) for prompt in _as_prompts(prompts)]
        params_list = _expand(sampling_params, len(batch))
        sizes = [(len(ids), p.max_tokens) for ids, p in zip(batch, params_list, strict=True)]
        for num_prompt_tokens, max_tokens in sizes:
            self.engine.check_request(num_prompt_tokens, max_tokens)
        self.engine.check_batch(sizes)
        if use_tqdm:
            outputs = self._generate_with_bar(batch, params_list, on_step)
        else:
            outputs = self._run(batch, params_list, on_step)
        if decision_log is not None:
            self.engine.wait_idle(60.0)
            decision_log.write(self.engine.decision_log())
        return outputs

    def chat(self, messages: Conversation | Sequence[Conversation],
             sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
             use_tqdm: bool = False) -> list[RequestOutput]:
        """One conversation (a list of messages) or a list of conversations,
        each rendered with the tokenizer's chat template: one output per
        conversation, in order (as vLLM's ``LLM.chat``)."""
        conversations = _as_conversations(messages)
        batch = [self.tokenizer.apply_chat_template(c) for c in conversations]
        return self.generate(batch, sampling_params, use_tqdm=use_tqdm)

    def _ids(self, prompt: Prompt) -> list[int]:
        ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else [int(t) for t in prompt]
        if not ids:
            raise ValueError("a prompt must have at least one token")
        return ids

    def _generate_with_bar(self, batch: list[list[int]], params_list: list[SamplingParams],
                           on_step: Callable[[int, int], None] | None) -> list[RequestOutput]:
        from rich.progress import Progress

        with Progress(transient=True) as progress:
            task = progress.add_task("generating", total=len(batch))

            def step(done: int, total: int) -> None:
                progress.update(task, completed=done)
                if on_step is not None:
                    on_step(done, total)

            return self._run(batch, params_list, step)

    def _run(self, batch: list[list[int]], params_list: list[SamplingParams],
             on_step: Callable[[int, int], None] | None) -> list[RequestOutput]:
        streams = [BlockingOutputStream("") for _ in batch]
        submissions = [Submission(ids, p, stream)
                       for ids, p, stream in zip(batch, params_list, streams, strict=True)]
        with self._steps.relay(on_step, len(batch)):
            request_ids, arrival_ms = self.engine.add_requests(submissions)
            outputs = [_collect(rid, ids, stream, arrival_ms)
                       for rid, ids, stream in zip(request_ids, batch, streams, strict=True)]
        error = self.engine.take_error()
        if error is not None:
            raise error
        return outputs


#: older keyword names of :class:`LLM` (read with a deprecation warning)
_RENAMED_OVERRIDES = {"token_budget": "max_num_batched_tokens", "kv_blocks": "num_kv_blocks"}


def _with_current_names(overrides: dict[str, object]) -> dict[str, object]:
    out = dict(overrides)
    for old, new in _RENAMED_OVERRIDES.items():
        if old in out:
            if new in out:
                raise TypeError(f"LLM() got {old} and {new}, which are one setting; keep {new}")
            warn_renamed(f"LLM({old}=...)", f"{new}=...")
            out[new] = out.pop(old)
    return out


class _StepRelay(EngineObserver):
    """Calls the current ``generate`` call's ``on_step(done, total)`` after
    every executed plan (on the engine thread, before the streams hear of it)."""

    def __init__(self) -> None:
        self._callback: Callable[[int, int], None] | None = None
        self._num_total = 0
        self._num_done = 0

    @contextlib.contextmanager
    def relay(self, callback: Callable[[int, int], None] | None,
              num_total: int) -> Iterator[None]:
        self._callback, self._num_total, self._num_done = callback, num_total, 0
        try:
            yield
        finally:
            self._callback = None

    def on_step(self, state: SchedulerState, plan: IterationPlan, result: IterationResult,
                successor: SchedulerState) -> None:
        self._num_done += sum(1 for item in result.completed if item.finish_reason is not None)
        callback = self._callback
        if callback is not None:
            callback(self._num_done, self._num_total)


def _collect(request_id: str, prompt_ids: list[int], stream: BlockingOutputStream,
             arrival_ms: float) -> RequestOutput:
    tokens: list[int] = []
    logprobs: list[float] = []
    times_ms: list[float] = []
    text = ""
    reason: str | None = None
    for event in stream:
        tokens.extend(event.token_ids)
        logprobs.extend(event.logprobs)
        times_ms.extend(s_to_ms(t) - arrival_ms for t in event.token_times_s)
        text += event.text
        reason = event.finish_reason or reason
    return RequestOutput(request_id, tuple(prompt_ids), text, tuple(tokens), tuple(logprobs),
                         reason, 0.0, times_ms[0] if times_ms else None,
                         times_ms[-1] if times_ms else None)


def _as_prompts(prompts: Prompt | Sequence[Prompt]) -> list[Prompt]:
    """One string or one flat list of token ids is one prompt, not many."""
    if isinstance(prompts, str):
        return [prompts]
    items = list(prompts)
    if items and all(isinstance(t, int) for t in items):
        return [[int(t) for t in items]]  # type: ignore[arg-type]
    return items  # type: ignore[return-value]


def _as_conversations(messages: Conversation | Sequence[Conversation]) -> list[Conversation]:
    """A list of messages is one conversation; a list of such lists is many."""
    items = list(messages)
    if not items:
        raise ValueError("chat needs at least one message")
    if all(isinstance(m, Mapping) for m in items):
        return [items]  # type: ignore[list-item]
    if all(isinstance(c, Sequence) and not isinstance(c, str) for c in items):
        return items  # type: ignore[return-value]
    raise ValueError("chat takes a list of messages or a list of conversations, not a mix")


def _expand(params: SamplingParams | Sequence[SamplingParams] | None,
            num_prompts: int) -> list[SamplingParams]:
    if params is None:
        return [SamplingParams()] * num_prompts
    if isinstance(params, SamplingParams):
        return [params] * num_prompts
    if len(params) != num_prompts:
        raise ValueError(f"{len(params)} sampling params for {num_prompts} prompts")
    return list(params)
