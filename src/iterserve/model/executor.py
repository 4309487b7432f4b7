"""TorchExecutor: runs exactly the intervals of a validated plan on a real
model (0x04), over one preallocated paged KV pool.

Per iteration: apply the plan's memory intents (free, swap), back every
interval with blocks (a prefix hit skips cached rows, never the sampling
row), pack the segments into one PackedBatch, run one forward, sample only
at sampling points (a decode row; the last row of a prefill reaching p),
decide stops, commit rows and free finished requests. The packed layout
never changes the plan's intervals; rebuild rows emit nothing (0x0C).

Failures are attributed to requests where they can be (``FailureSource``):
an exception while backing one request's interval, sampling its token or
checking its stops fails that request's work only. A packed forward that
raises is run again one request at a time (each request's rows write only
its own blocks, so a rerun recomputes the same K/V); the requests whose
own forward raises again fail, the others complete this iteration.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import torch

from iterserve.engine.executor import EXECUTOR_ERROR
from iterserve.engine.kv_residency import KvResidency
from iterserve.engine.result_builder import ResultBuilder
from iterserve.kv.config import BlockManagerConfig
from iterserve.kv.results import SwapDirection
from iterserve.model.decode_graphs import DecodeGraphs, static_forward
from iterserve.model.kv_cache import PagedKVCache
from iterserve.model.llama import PackedCausalLM
from iterserve.model.packing import (
    PackedBatch,
    RowBinding,
    bind_rows,
    host_arrays,
    pack,
    with_binding,
)
from iterserve.model.sampling import Alternatives, SampleRow, sample_batch
from iterserve.model.staging import HostStaging, upload_batch
from iterserve.model.stopping import IncrementalDetokenizer, StopReason, token_stop_reason
from iterserve.model.tokenizer import TextTokenizer
from iterserve.records.frontier import emits
from iterserve.records.plan import IterationPlan, WorkItem
from iterserve.records.prefix_claims import PrefixClaims
from iterserve.records.result import IterationResult
from iterserve.records.sampling_params import SamplingParams
from iterserve.records.state import CapacityFacts, SchedulerState
from iterserve.records.time_units import MS_PER_S
from iterserve.records.view import FinishReason, RequestView

logger = logging.getLogger(__name__)

_FINISH = {
    StopReason.EOS: FinishReason.STOP,
    StopReason.STOP_TOKEN: FinishReason.STOP,
    StopReason.STOP_STRING: FinishReason.STOP,
    StopReason.MAX_TOKENS: FinishReason.LENGTH,
}


#: one sampling row's token id, its logprob and its top alternatives
_Sampled = tuple[int, float, Alternatives]


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
        time_scale: float = MS_PER_S,
        timer: Callable[[], float] = time.perf_counter,
        commit_kv: bool = False,
        isolate_failures: bool = False,
        decode_graphs: bool | None = None,
    ) -> None:
        """``time_scale`` converts the timer's seconds to the run's clock (ms by
        default). ``timer`` is the wall clock; a calibration on a shared machine
        may pass ``time.process_time`` (CPU time: no other process's share).
        ``commit_kv`` faults the whole device pool in now, so no step stalls on
        a first touch of its memory (model/host_memory.py); else its pages
        become resident as rows first reach them. ``isolate_failures``: a
        request's own failure fails its work only, for a caller that takes
        the failures after each step (``take_failures``) and aborts them;
        else every exception propagates, as a profiling run wants.
        ``decode_graphs``: replay decode-only steps from CUDA graphs
        (model/decode_graphs.py); None: on the batched attention path on
        CUDA. The pool then has one scratch block past ``num_blocks`` that
        the block manager never hands out."""
        self.model = model
        self.tokenizer = tokenizer
        if decode_graphs is None:
            decode_graphs = model.batched_attention and model.device.type == "cuda"
        if decode_graphs and not model.batched_attention:
            raise ValueError("decode graphs run on the batched attention path only")
        self.cache = model.allocate_cache(num_blocks + int(decode_graphs), block_size,
                                          commit=commit_kv)
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
        self._failures: dict[str, BaseException] = {}  # request id -> its own failure
        self.isolate_failures = isolate_failures
        #: the batched attention path's one upload per step (model/staging.py)
        self._staging = HostStaging(model.device) if model.batched_attention else None
        self.decode_graphs: DecodeGraphs | None = None
        if decode_graphs and self._staging is not None:
            self.decode_graphs = DecodeGraphs(static_forward(model, self.cache), self.cache,
                                              num_blocks, self._staging,
                                              model.config.vocab_size)

    def take_failures(self) -> dict[str, BaseException]:
        """The requests whose own work failed since the last call (FailureSource)."""
        failures, self._failures = self._failures, {}
        return failures

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

    def claim_prefix_hits(self, state: SchedulerState) -> PrefixClaims:
        """Verified prefix hits of waiting requests, held for them (0x0E)."""
        return self.kv.claim_prefix_hits(state, self._prompt_of)

    def _prompt_of(self, request_id: str) -> tuple[int, ...] | None:
        stream = self.streams.get(request_id)
        if stream is None or stream.params.prompt_logprobs:  # it must compute every prompt row
            return None
        return stream.prompt_token_ids

    @property
    def prefix_block_size(self) -> int | None:
        """Rows per block the prefix cache shares, or None when it is off."""
        config = self.kv.manager.config
        return config.block_size_rows if config.enable_prefix_caching else None

    def capacity(self) -> CapacityFacts:
        return self.kv.facts()

    def release(self, request_ids: Iterable[str]) -> None:
        self.kv.release(request_ids)

    def execute(self, plan: IterationPlan, state: SchedulerState) -> IterationResult:
        began = self._timer() if self._last_end is None else self._last_end
        builder = ResultBuilder(plan, state, self.kv)
        segments: list[tuple[_Segment, WorkItem]] = []
        backed: list[tuple[WorkItem, RequestView, bool]] = []
        for work in plan.work:
            view = state.views[work.request_id]
            if builder.intent_failed(work.request_id):
                builder.fail(work)
                continue
            try:
                segment = self._segment(work, view)
            except Exception as exc:  # this request's blocks or tokens: fail it alone
                if not self.isolate_failures:
                    raise
                self._failures[work.request_id] = exc
                builder.fail(work, EXECUTOR_ERROR)
                continue
            if segment is None:  # the allocator's answer names the branch (0x06)
                builder.fail(work, self.kv.shortfall_reason(work.request_id, work.end))
                continue
            if segment.token_ids:  # an interval wholly inside a prefix hit computes nothing
                segments.append((segment, work))
            backed.append((work, view, segment.sample))
        self._publish(builder, backed, self._forward(segments, plan))
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

    def _forward(self, segments: list[tuple[_Segment, WorkItem]], plan: IterationPlan
                 ) -> dict[str, _Sampled]:
        """Each sampling request's (token id, logprob); a request whose own
        rows fail to run is in ``self._failures`` instead."""
        if not segments:
            return {}
        if not self.isolate_failures:
            return self._run(segments, plan)
        try:
            return self._run(segments, plan)
        except Exception as exc:
            if len(segments) == 1:
                self._failures[segments[0][1].request_id] = exc
                return {}
            logger.warning("a packed forward of %d requests failed; running them one at a "
                           "time to find the failing ones", len(segments), exc_info=exc)
        sampled: dict[str, _Sampled] = {}
        for one in segments:
            try:
                sampled.update(self._run([one], plan))
            except Exception as exc:
                self._failures[one[1].request_id] = exc
        return sampled

    def _run(self, segments: list[tuple[_Segment, WorkItem]],
             plan: IterationPlan) -> dict[str, _Sampled]:
        only = [segment for segment, _ in segments]
        # every packed row names its plan item, phase and versions (0x04)
        binding = bind_rows(plan, [work for _, work in segments], only)
        logits = self._logits(only, binding)
        rows, sampling_ids = [], []
        for segment, work in segments:
            if segment.sample:
                stream = self.streams[work.request_id]
                rows.append(SampleRow(stream.params, stream.seed, len(stream.output_token_ids),
                                      stream.token_ids, len(stream.prompt_token_ids)))
                sampling_ids.append(work.request_id)
        sampled = sample_batch(logits, rows, self._eos)
        return dict(zip(sampling_ids, zip(sampled.token_ids, sampled.logprobs,
                                          sampled.alternatives, strict=True), strict=True))

    def _logits(self, segments: list[_Segment], binding: RowBinding | None = None) -> torch.Tensor:
        """The sampling rows' logits: per-request path (pack, forward), or
        the batched one (one upload; a decode graph where one fits). Counts
        the rows computed."""
        block_size = self.cache.block_size
        if self._staging is None:
            batch = pack(segments, block_size, self.model.device, binding)
        else:
            host = host_arrays(segments, block_size)
            wants_all = any(segment.all_logits for segment in segments)
            if self.decode_graphs is not None and not wants_all:
                logits = self.decode_graphs.run(host)
                if logits is not None:
                    self.num_computed_rows += len(host.query_lens)  # one row each
                    return logits
            batch = with_binding(upload_batch(host, self.cache.num_blocks, self._staging),
                                 binding)
        self.num_computed_rows += batch.num_rows
        if any(segment.all_logits for segment in segments):
            return self._forward_with_prompt_logprobs(batch, segments)
        return self.model.forward(batch, self.cache)

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
                 sampled: dict[str, _Sampled]) -> None:
        """Hand every backed interval to the builder, with its sampled token
        and the stop that token triggers where the interval emits: one
        :meth:`ResultBuilder.complete_rows` call for the step (the same facts
        as a ``complete`` call per interval, in order). An interval whose
        request failed is a failure instead."""
        works: list[WorkItem] = []
        views: list[RequestView] = []
        token_ids: list[int | None] = []
        stops: list[FinishReason | None] = []
        streams, failures = self.streams, self._failures
        for work, view, sample_here in backed:
            rid = work.request_id
            token_id: int | None = None
            stop: FinishReason | None = None
            if sample_here and rid not in failures:
                token_id, logprob, alternatives = sampled[rid]
                if streams[rid].params.num_top_logprobs:
                    streams[rid].alternatives.append(alternatives)
                try:
                    stop = self._emit(streams[rid], token_id, logprob)
                except Exception as exc:  # its detokenizer or stop strings: fail it alone
                    if not self.isolate_failures:
                        raise
                    failures[rid] = exc
            if rid in failures:
                builder.fail(work, EXECUTOR_ERROR)
                continue
            works.append(work)
            views.append(view)
            token_ids.append(token_id)
            stops.append(stop)
        builder.complete_rows(works, views, token_ids, stops)

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
