"""TorchExecutor: runs exactly the intervals of a validated plan on a real
model (0x04), over one preallocated paged KV pool.

Per iteration: apply the plan's memory intents (free, swap), back every
interval with blocks (a prefix hit skips cached rows, never the sampling
row), pack the segments into one PackedBatch, run one forward, sample only
at sampling points (a decode row; the last row of a prefill reaching p),
decide stops, commit rows and free finished requests. The packed layout
never changes the plan's intervals; rebuild rows emit nothing (0x0C).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import torch

from iterserve.engine.kv_residency import KvResidency
from iterserve.engine.result_builder import ResultBuilder
from iterserve.kv.config import BlockManagerConfig
from iterserve.kv.results import SwapDirection
from iterserve.model.kv_cache import PagedKVCache
from iterserve.model.llama import PackedCausalLM
from iterserve.model.packing import PackedBatch, pack
from iterserve.model.sampling import Alternatives, SampledBatch, SampleRow, sample_batch
from iterserve.model.stopping import IncrementalDetokenizer, StopReason, token_stop_reason
from iterserve.model.tokenizer import TextTokenizer
from iterserve.records.frontier import emits
from iterserve.records.plan import IterationPlan, WorkItem
from iterserve.records.result import IterationResult
from iterserve.records.sampling_params import SamplingParams
from iterserve.records.state import CapacityFacts, SchedulerState
from iterserve.records.view import FinishReason, RequestView

_FINISH = {
    StopReason.EOS: FinishReason.STOP,
    StopReason.STOP_TOKEN: FinishReason.STOP,
    StopReason.STOP_STRING: FinishReason.STOP,
    StopReason.MAX_TOKENS: FinishReason.LENGTH,
}


@dataclass(frozen=True, slots=True)
class _Segment:
    """A planned interval's rows to compute (maybe none: all cached); pack
    reads it as it is (packing.SegmentRows)."""

    token_ids: tuple[int, ...]
    start: int
    block_ids: tuple[int, ...]
    sample: bool
    request_id: str = ""
    all_logits: bool = False  # every row's logits (prompt logprobs), not only the sampling row


@dataclass(slots=True)
class RequestStream:
    """One request's token stream and output, owned by the executor."""

    prompt_token_ids: tuple[int, ...]
    params: SamplingParams
    seed: int
    detokenizer: IncrementalDetokenizer | None
    token_ids: list[int] = field(default_factory=list)  # prompt + outputs (the logical stream)
    output_token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    alternatives: list[Alternatives] = field(default_factory=list)  # when params ask for them
    # prompt positions 1.. (position 0 has none): (logprob, alternatives), when params ask
    prompt_logprobs: list[tuple[float, Alternatives]] = field(default_factory=list)
    stop_reason: StopReason | None = None

    @property
    def text(self) -> str:
        return "" if self.detokenizer is None else self.detokenizer.text


class TorchExecutor:
    def __init__(
        self,
        model: PackedCausalLM,
        num_blocks: int,
        block_size: int = 16,
        tokenizer: TextTokenizer | None = None,
        num_host_blocks: int = 0,
        enable_prefix_caching: bool = True,
        time_scale: float = 1000.0,
        timer: Callable[[], float] = time.perf_counter,
        commit_kv: bool = False,
    ) -> None:
        """``time_scale`` converts the timer's seconds to the run's clock (ms by
        default). ``timer`` is the wall clock; a calibration on a shared machine
        may pass ``time.process_time`` (CPU time: no other process's share).
        ``commit_kv`` faults the whole device pool in now, so no step stalls on
        a first touch of its memory (model/host_memory.py); else its pages
        become resident as rows first reach them."""
        self.model = model
        self.tokenizer = tokenizer
        self.cache = model.allocate_cache(num_blocks, block_size, commit=commit_kv)
        self.host_cache = None  # the host swap pool always lives in CPU memory
        if num_host_blocks:
            self.host_cache = PagedKVCache.allocate(model.config, num_host_blocks, block_size,
                                                    model.dtype, "cpu")
        config = BlockManagerConfig(num_blocks, block_size, num_host_blocks, enable_prefix_caching)
        self.kv = KvResidency(config, on_swap=self._copy_blocks)
        self.streams: dict[str, RequestStream] = {}
        self._eos = tuple(tokenizer.eos_token_ids) if tokenizer is not None else ()
        self._time_scale = time_scale
        self._timer = timer
        self.num_computed_rows = 0
        self.num_cached_rows_skipped = 0
        self._last_end: float | None = None  # wall time the previous iteration ended

    def reset_clock(self, start_s: float | None = None) -> None:
        """Start a new run: the next iteration is timed from its own start, or
        from ``start_s`` (a ``time.perf_counter`` reading) when given: an
        online engine resuming after an idle gap times it from the arrival
        its clock jumped to, so the run's clock keeps tracking the wall."""
        self._last_end = start_s

    def add_request(self, request_id: str, prompt_token_ids: Sequence[int],
                    params: SamplingParams, seed: int) -> None:
        detok = None
        if self.tokenizer is not None:
            detok = IncrementalDetokenizer(self.tokenizer, params.stop, prompt_token_ids)
        self.streams[request_id] = RequestStream(
            tuple(prompt_token_ids), params, seed, detok, list(prompt_token_ids)
        )

    def claim_prefix_hits(self, state: SchedulerState) -> dict[str, int]:
        """Verified prefix hits of waiting requests, held for them (0x0E)."""
        return self.kv.claim_prefix_hits(state, self._prompt_of)

    def _prompt_of(self, request_id: str) -> tuple[int, ...] | None:
        stream = self.streams.get(request_id)
        if stream is None or stream.params.prompt_logprobs:  # it must compute every prompt row
            return None
        return stream.prompt_token_ids

    def capacity(self) -> CapacityFacts:
        return self.kv.facts()

    def release(self, request_ids: Iterable[str]) -> None:
        self.kv.release(request_ids)

    def execute(self, plan: IterationPlan, state: SchedulerState) -> IterationResult:
        began = self._timer() if self._last_end is None else self._last_end
        builder = ResultBuilder(plan, state, self.kv)
        segments: list[_Segment] = []
        backed: list[tuple[WorkItem, RequestView, bool]] = []
        for work in plan.work:
            view = state.views[work.request_id]
            segment = None if builder.intent_failed(work.request_id) else self._segment(work, view)
            if segment is None:
                builder.fail(work)
                continue
            if segment.token_ids:  # an interval wholly inside a prefix hit computes nothing
                segments.append(segment)
            backed.append((work, view, segment.sample))
        self._publish(builder, backed, self._forward(segments, backed))
        builder.release_finished()
        self._last_end = ended = self._timer()
        # wall time since the previous iteration ended: scheduling and
        # validation are part of what a request waits for
        return builder.build((ended - began) * self._time_scale)

    def _segment(self, work: WorkItem, view: RequestView) -> _Segment | None:
        """The rows of ``work`` that must be computed; cached rows are skipped,
        the sampling row never is. None when blocks are short."""
        stream = self.streams[work.request_id]
        fresh = self.kv.key(work.request_id) is None
        tokens: list[int] | None = stream.token_ids[0 if fresh else work.start: work.end]
        lookahead = stream.token_ids[: view.target] if fresh else None
        all_logits = stream.params.prompt_logprobs and work.start < view.num_prompt_tokens - 1
        if stream.params.prompt_logprobs:  # anonymous rows: no prefix hit may skip a prompt row
            tokens = lookahead = None
        ready = self.kv.prepare(work.request_id, work.generation, work.start, work.end, tokens,
                                lookahead)
        if ready is None:
            return None
        first = min(max(work.start, ready), work.end)
        self.num_cached_rows_skipped += first - work.start
        sample_here = emits(work.kind, view.num_prompt_tokens, work.end)
        return _Segment(tuple(stream.token_ids[first: work.end]), first,
                        self.kv.block_table(work.request_id), sample_here, work.request_id,
                        all_logits)

    def _forward(self, segments: list[_Segment],
                 backed: list[tuple[WorkItem, RequestView, bool]]) -> SampledBatch | None:
        if not segments:
            return None
        batch = pack(segments, self.cache.block_size, self.model.device)
        self.num_computed_rows += batch.num_rows
        if any(segment.all_logits for segment in segments):
            logits = self._forward_with_prompt_logprobs(batch, segments)
        else:
            logits = self.model.forward(batch, self.cache)
        rows = []
        for work, _, sample_here in backed:
            if sample_here:
                stream = self.streams[work.request_id]
                rows.append(SampleRow(stream.params, stream.seed, len(stream.output_token_ids),
                                      stream.token_ids, len(stream.prompt_token_ids)))
        return sample_batch(logits, rows, self._eos)

    def _forward_with_prompt_logprobs(self, batch: PackedBatch,
                                      segments: list[_Segment]) -> torch.Tensor:
        """The forward with every row's logits for segments that want prompt
        logprobs: records them, and returns the sampling rows' logits only."""
        rows: list[int] = []
        sample_index: list[int] = []
        offset = 0
        for segment in segments:
            num_rows = len(segment.token_ids)
            if segment.all_logits:
                rows.extend(range(offset, offset + num_rows))
            elif segment.sample:
                rows.append(offset + num_rows - 1)
            if segment.sample:
                sample_index.append(len(rows) - 1)
            offset += num_rows
        device = self.model.device
        batch = dataclasses.replace(batch, sample_rows=torch.tensor(rows, dtype=torch.long,
                                                                     device=device))
        logits = self.model.forward(batch, self.cache)
        first_row = 0
        for segment in segments:
            num_rows = len(segment.token_ids) if segment.all_logits else int(segment.sample)
            if segment.all_logits:
                self._record_prompt_logprobs(segment, logits[first_row: first_row + num_rows])
            first_row += num_rows
        return logits.index_select(0, torch.tensor(sample_index, dtype=torch.long, device=device))

    def _record_prompt_logprobs(self, segment: _Segment, logits: torch.Tensor) -> None:
        """Row q's logits score prompt token q + 1. Positions already recorded
        (rows recomputed after a preemption) are skipped."""
        stream = self.streams[segment.request_id]
        prompt = stream.prompt_token_ids
        log_probs = torch.log_softmax(logits.float(), dim=-1)
        num_top = stream.params.num_top_logprobs
        top_values, top_ids = log_probs.topk(num_top, dim=-1) if num_top else (None, None)
        for i in range(log_probs.shape[0]):
            position = segment.start + i + 1
            if position >= len(prompt):
                break
            if position != len(stream.prompt_logprobs) + 1:
                continue
            alternatives: Alternatives = ()
            if top_values is not None and top_ids is not None:
                alternatives = tuple(zip(top_ids[i].tolist(), top_values[i].tolist(), strict=True))
            stream.prompt_logprobs.append((float(log_probs[i, prompt[position]]), alternatives))

    def _publish(self, builder: ResultBuilder, backed: list[tuple[WorkItem, RequestView, bool]],
                 sampled: SampledBatch | None) -> None:
        """Hand every backed interval to the builder, with its sampled token
        and the stop that token triggers where the interval emits: one
        :meth:`ResultBuilder.complete_rows` call for the step (the same facts
        as a ``complete`` call per interval, in order)."""
        next_row = 0
        token_ids: list[int | None] = []
        stops: list[FinishReason | None] = []
        streams = self.streams
        for work, _, sample_here in backed:
            if not sample_here:
                token_ids.append(None)
                stops.append(None)
                continue
            assert sampled is not None, "a sampling row without a forward"
            stream = streams[work.request_id]
            token_id = sampled.token_ids[next_row]
            if stream.params.num_top_logprobs:
                stream.alternatives.append(sampled.alternatives[next_row])
            token_ids.append(token_id)
            stops.append(self._emit(stream, token_id, sampled.logprobs[next_row]))
            next_row += 1
        builder.complete_rows([work for work, _, _ in backed], [view for _, view, _ in backed],
                              token_ids, stops)

    def _emit(self, stream: RequestStream, token_id: int, logprob: float) -> FinishReason | None:
        stream.token_ids.append(token_id)
        stream.output_token_ids.append(token_id)
        stream.logprobs.append(logprob)
        reason = token_stop_reason(token_id, len(stream.output_token_ids), stream.params, self._eos)
        if stream.detokenizer is not None:
            stream.detokenizer.push(token_id)
            if reason is None and stream.detokenizer.is_stopped:
                reason = StopReason.STOP_STRING
            if reason is not None:
                stream.detokenizer.finish()
        stream.stop_reason = reason
        return None if reason is None else _FINISH[reason]

    def _copy_blocks(self, direction: SwapDirection, pairs: tuple[tuple[int, int], ...]) -> None:
        """Copy K/V rows between device and host pools (PRESERVE_EXACT)."""
        host = self.host_cache
        assert host is not None, "swap requested without a host pool"
        device_ids = torch.tensor([d for d, _ in pairs], device=self.model.device)
        host_ids = torch.tensor([h for _, h in pairs])
        with torch.inference_mode():
            for layer in range(len(self.cache.key_pools)):
                for dev_pool, host_pool in ((self.cache.key_pools[layer], host.key_pools[layer]),
                                            (self.cache.value_pools[layer],
                                             host.value_pools[layer])):
                    if direction is SwapDirection.OUT:
                        host_pool[host_ids] = dev_pool[device_ids].to("cpu")
                    else:
                        dev_pool[device_ids] = host_pool[host_ids].to(dev_pool.device)
