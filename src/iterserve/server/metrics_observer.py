"""Engine facts -> metric counts and histograms, and one snapshot per step.

:class:`MetricsObserver` runs on the engine thread. Histograms (latencies,
token counts per request and per iteration) are observed as the facts
arrive. Everything a scrape must read consistently (the queue lengths, the
KV usage, the outcome and token counters) is published after each step as
one immutable :class:`MetricsSnapshot`: the state the step produced and
the counts through that step. A scrape reads one snapshot, so a request is
never counted both finished and running, and ``requests_submitted`` equals
the live requests plus the ended ones in every scrape.

Engine clock is milliseconds; TTFT counts from the original arrival and an
inter-token gap from the previous output (0x07).
"""

from __future__ import annotations

import threading
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Histogram

from iterserve.engine.loop import Engine
from iterserve.engine.observer import EngineObserver
from iterserve.records.plan import IntentKind, IterationPlan, preemption_mode_of
from iterserve.records.preemption import preemption_cause_of
from iterserve.records.result import IterationResult
from iterserve.records.spec import RequestSpec
from iterserve.records.state import SchedulerState
from iterserve.records.view import WorkKind
from iterserve.server.client_labels import ClientLabels

TIME_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                  2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
TOKEN_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000)
#: the arrival gates' refusal reasons (admission/overload.py); any other is ``other``
GATE_REASONS = frozenset({"max_live", "slo_infeasible"})
_MAX_ENDED = 4096  # ended requests kept for the access log until it reads them
_PREEMPTS = (IntentKind.PREEMPT_RECOMPUTE, IntentKind.PREEMPT_PRESERVE_EXACT)

CountKey = tuple[str, tuple[str, ...]]  # (family name, label values)


@dataclass(frozen=True, slots=True)
class MetricsSnapshot:
    """The state a step published and every counter through that step."""

    state: SchedulerState
    counts: Mapping[CountKey, float]

    def count(self, family: str, *labels: str) -> float:
        return self.counts.get((family, labels), 0.0)


@dataclass(frozen=True, slots=True)
class RequestSummary:
    """One ended request as the access log reports it."""

    num_prompt_tokens: int
    num_output_tokens: int
    ttft_s: float | None


@dataclass(slots=True)
class _Track:
    client_label: str
    arrival_ms: float
    num_prompt_tokens: int
    admitted_ms: float | None = None
    first_token_ms: float | None = None
    last_token_ms: float | None = None
    num_output_tokens: int = 0


class _Histograms:
    """The latency and size histograms, bound to the model name."""

    def __init__(self, registry: CollectorRegistry, model_name: str) -> None:
        def hist(name: str, doc: str, buckets: tuple[float, ...] = TIME_BUCKETS_S) -> Histogram:
            return Histogram(name, doc, ("model_name",), registry=registry,
                             buckets=buckets).labels(model_name)

        self.ttft = hist("vllm:time_to_first_token_seconds", "arrival to the first token")
        self.itl = hist("vllm:inter_token_latency_seconds", "gap to the previous token")
        self.tpot = hist("vllm:request_time_per_output_token_seconds",
                         "a finished request's decode time / (output tokens - 1)")
        self.e2e = hist("vllm:e2e_request_latency_seconds", "arrival to the last token")
        self.queue = hist("vllm:request_queue_time_seconds", "arrival to the first admission")
        self.inference = hist("vllm:request_inference_time_seconds",
                              "first admission to the last token")
        self.prefill = hist("vllm:request_prefill_time_seconds",
                            "first admission to the first token")
        self.decode = hist("vllm:request_decode_time_seconds", "first token to the last token")
        self.prompt_tokens = hist("vllm:request_prompt_tokens", "a finished request's prompt "
                                  "tokens", TOKEN_BUCKETS)
        self.generation_tokens = hist("vllm:request_generation_tokens", "a finished request's "
                                      "output tokens", TOKEN_BUCKETS)
        self.iteration_tokens = hist("vllm:iteration_tokens_total", "token rows per executed "
                                     "iteration", TOKEN_BUCKETS)
        self.client_queue = Histogram("iterserve:client_queue_time_seconds", "arrival to the "
                                      "first admission, per client (bounded labels)",
                                      ("model_name", "client"), registry=registry,
                                      buckets=TIME_BUCKETS_S)
        self.model_name = model_name


class MetricsObserver(EngineObserver):
    """Runs before the engine's stream publisher and is its outcome listener,
    so an ended request's summary exists before its client hears the end;
    :class:`SnapshotPublisher`, after the publisher, publishes each step's
    snapshot once its outcomes are counted (``ServerMetrics`` places both)."""

    def __init__(self, registry: CollectorRegistry, model_name: str, labels: ClientLabels,
                 engine: Engine, executor: object,
                 submitted_ms: Callable[[RequestSpec], float] | None = None) -> None:
        """``submitted_ms``: when the client submitted a request, where that
        precedes its arrival (a sample held for its sibling's prompt,
        engine/held.py); latencies count from there."""
        self._hist = _Histograms(registry, model_name)
        self._labels = labels
        self._engine = engine
        self._executor = executor
        self._submitted_ms = submitted_ms or _arrival_ms
        self._counts: defaultdict[CountKey, float] = defaultdict(float)
        self._live: dict[str, _Track] = {}
        self._ended: OrderedDict[str, RequestSummary] = OrderedDict()
        # live requests whose access line is already written (a client that went
        # away): their summary is not kept when they end, nobody would take it
        self._untaken: set[str] = set()
        self._ended_lock = threading.Lock()  # _ended and _untaken: the loop and the engine
        self.snapshot = MetricsSnapshot(engine.state, {})

    # -- the access log (any thread) --------------------------------------------
    def take_summary(self, request_id: str) -> RequestSummary | None:
        """An ended request's summary, once (None if unknown or still live)."""
        with self._ended_lock:
            summary = self._ended.pop(request_id, None)
            if summary is None and request_id in self._live:
                self._untaken.add(request_id)
            return summary

    # -- engine thread ------------------------------------------------------------
    def on_outcome(self, request_id: str, outcome: str, finish_reason: str,
                   client_id: str) -> None:
        """The stream publisher's outcome listener: a request ended."""
        counts = self._counts
        counts[("iterserve:requests", (outcome,))] += 1
        counts[("iterserve:client_requests", (self._labels.label(client_id), outcome))] += 1
        if outcome != "rejected":  # vLLM counts client and engine aborts as ``abort``
            reason = finish_reason if finish_reason in ("stop", "length") else "abort"
            counts[("vllm:request_success", (reason,))] += 1
        self._end(request_id, outcome)

    def on_arrival(self, spec: RequestSpec, now: float) -> None:
        self._counts[("iterserve:requests_submitted", ())] += 1
        self._live[spec.request_id] = _Track(self._labels.label(spec.client_id),
                                             self._submitted_ms(spec), spec.num_prompt_tokens)

    def on_reject(self, spec: RequestSpec, reason: str, now: float) -> None:
        self._counts[("iterserve:requests_submitted", ())] += 1
        self._counts[("iterserve:rejections", (reason if reason in GATE_REASONS
                                               else "other",))] += 1
        with self._ended_lock:
            self._keep_ended(spec.request_id, RequestSummary(spec.num_prompt_tokens, 0, None))

    def on_step(self, state: SchedulerState, plan: IterationPlan, result: IterationResult,
                successor: SchedulerState) -> None:
        for intent in plan.intents:
            self._intent(intent.kind, intent.request_id, intent.reason, state.now)
        self._work(plan)
        counts = self._counts
        for client, rows in result.service.items():
            counts[("iterserve:client_service_tokens", (self._labels.label(client),))] += rows
        now_ms = successor.now
        for done in result.completed:
            if done.emitted:
                self._emission(done.request_id, now_ms)
        counts[("iterserve:prefix_cache_hit_tokens", ())] = getattr(
            self._executor, "num_cached_rows_skipped", 0)

    def _intent(self, kind: IntentKind, request_id: str, reason: str, now_ms: float) -> None:
        if kind is IntentKind.ADMIT:
            track = self._live.get(request_id)
            if track is not None and track.admitted_ms is None:
                track.admitted_ms = now_ms
                queue_s = (now_ms - track.arrival_ms) / 1000.0
                self._hist.queue.observe(queue_s)
                self._hist.client_queue.labels(self._hist.model_name,
                                               track.client_label).observe(queue_s)
        elif kind in _PREEMPTS:
            mode = preemption_mode_of(kind)
            assert mode is not None
            self._counts[("vllm:num_preemptions", ())] += 1
            self._counts[("iterserve:preemptions",
                          (mode.value, preemption_cause_of(reason).value))] += 1
        elif kind is IntentKind.REJECT:
            self._counts[("iterserve:rejections", ("policy",))] += 1

    def _work(self, plan: IterationPlan) -> None:
        if not plan.work:
            return
        counts = self._counts
        num_rows = 0
        for item in plan.work:
            rows = item.end - item.start
            num_rows += rows
            if item.kind is WorkKind.DECODE_ROW:
                counts[("iterserve:decode_rows", ())] += rows
            elif item.kind is WorkKind.PREFILL_CHUNK:
                counts[("iterserve:prefill_rows", ())] += rows
        counts[("iterserve:iterations", ())] += 1
        self._hist.iteration_tokens.observe(num_rows)

    def _emission(self, request_id: str, now_ms: float) -> None:
        track = self._live.get(request_id)
        if track is None:
            return
        counts = self._counts
        counts[("vllm:generation_tokens", ())] += 1
        counts[("iterserve:client_generation_tokens", (track.client_label,))] += 1
        if track.first_token_ms is None:
            track.first_token_ms = now_ms
            counts[("vllm:prompt_tokens", ())] += track.num_prompt_tokens
            self._hist.ttft.observe((now_ms - track.arrival_ms) / 1000.0)
            admitted = track.arrival_ms if track.admitted_ms is None else track.admitted_ms
            self._hist.prefill.observe((now_ms - admitted) / 1000.0)
        else:
            assert track.last_token_ms is not None
            self._hist.itl.observe((now_ms - track.last_token_ms) / 1000.0)
        track.last_token_ms = now_ms
        track.num_output_tokens += 1

    def _keep_ended(self, request_id: str, summary: RequestSummary) -> None:
        """Until the access log takes it (unless it has already written the
        request's line); the oldest go past the bound. Under ``_ended_lock``."""
        if request_id in self._untaken:
            self._untaken.discard(request_id)
            return
        self._ended[request_id] = summary
        while len(self._ended) > _MAX_ENDED:
            self._ended.popitem(last=False)

    def publish(self, state: SchedulerState) -> None:
        """Publish ``state`` with the counts through it (one immutable object)."""
        self.snapshot = MetricsSnapshot(state, dict(self._counts))

    def publish_current(self) -> None:
        self.publish(self._engine.state)

    def _end(self, request_id: str, outcome: str) -> None:
        with self._ended_lock:  # live, or ended: never neither to take_summary
            track = self._live.pop(request_id, None)
            if track is None:
                return
            first, last = track.first_token_ms, track.last_token_ms
            ttft_s = None if first is None else (first - track.arrival_ms) / 1000.0
            self._keep_ended(request_id, RequestSummary(track.num_prompt_tokens,
                                                        track.num_output_tokens, ttft_s))
        if outcome != "finished" or first is None or last is None:
            return
        hist = self._hist
        hist.e2e.observe((last - track.arrival_ms) / 1000.0)
        hist.decode.observe((last - first) / 1000.0)
        admitted = track.arrival_ms if track.admitted_ms is None else track.admitted_ms
        hist.inference.observe((last - admitted) / 1000.0)
        if track.num_output_tokens > 1:
            hist.tpot.observe((last - first) / 1000.0 / (track.num_output_tokens - 1))
        hist.prompt_tokens.observe(track.num_prompt_tokens)
        hist.generation_tokens.observe(track.num_output_tokens)


class SnapshotPublisher(EngineObserver):
    """After the stream publisher: the step's state and counts become the
    snapshot a scrape reads. A gate's rejection publishes the engine's
    current state, which already holds the arrivals admitted before it."""

    def __init__(self, observer: MetricsObserver) -> None:
        self._observer = observer

    def on_reject(self, spec: RequestSpec, reason: str, now: float) -> None:
        self._observer.publish_current()

    def on_cancel(self, request_id: str, state: SchedulerState, successor: SchedulerState) -> None:
        self._observer.publish(successor)

    def on_step(self, state: SchedulerState, plan: IterationPlan, result: IterationResult,
                successor: SchedulerState) -> None:
        self._observer.publish(successor)


def _arrival_ms(spec: RequestSpec) -> float:
    return spec.arrival
