"""Prometheus metrics (text format), names ``iterserve:``-prefixed and
vLLM-like where the meaning matches.

Two sources, one registry per app (no module state):

- :class:`LatencyObserver`, an engine observer on the engine thread, feeds
  histograms and counters from engine facts: TTFT from the original arrival
  and inter-token gaps from the previous output (0x07), end-to-end and queue
  time, preemptions by mode and reason, rejections by reason, per-client
  completed service and emitted output tokens, iterations and prefill /
  decode rows;
- :class:`SnapshotCollector` reads the latest immutable state at scrape time:
  running / waiting / suspended, KV blocks used and free, prefix-cache hit
  tokens, and the outcome partition (finished, cancelled, rejected, aborted
  by client) next to ``requests_submitted``; under a client-ledger policy
  (``vtc``, ``vtc-completed``, ``least-service``) each client's weighted
  service W_done and VTC counter.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from iterserve.engine.observer import EngineObserver
from iterserve.engine.online import OnlineEngine
from iterserve.engine.publisher import OUTCOMES
from iterserve.records.plan import IntentKind, IterationPlan, preemption_mode_of
from iterserve.records.result import IterationResult
from iterserve.records.spec import RequestSpec
from iterserve.records.state import SchedulerState
from iterserve.records.view import WorkKind

_LATENCY_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                      2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
_PREEMPT_MODES = {kind: preemption_mode_of(kind).value  # type: ignore[union-attr]
                  for kind in (IntentKind.PREEMPT_RECOMPUTE, IntentKind.PREEMPT_PRESERVE_EXACT)}


class LatencyObserver(EngineObserver):
    """Engine facts -> histograms and counters (engine clock is ms)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        def hist(name: str, doc: str, labels: tuple[str, ...] = ()) -> Histogram:
            return Histogram(name, doc, labels, registry=registry, buckets=_LATENCY_BUCKETS_S)

        def count(name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
            return Counter(name, doc, labels, registry=registry)

        self.ttft = hist("iterserve:time_to_first_token_seconds", "TTFT from arrival")
        self.itl = hist("iterserve:inter_token_latency_seconds", "gap to the previous token")
        self.e2e = hist("iterserve:e2e_request_latency_seconds", "arrival to the last token")
        self.queue = hist("iterserve:request_queue_time_seconds", "arrival to first admission",
                          ("client",))
        self.preemptions = count("iterserve:num_preemptions", "preemptions", ("mode", "reason"))
        self.rejections = count("iterserve:num_rejections", "rejected arrivals", ("reason",))
        self.service = count("iterserve:client_service_tokens", "completed token rows "
                             "debited to each client's fairness service", ("client",))
        self.generation_tokens = count("iterserve:generation_tokens", "output tokens emitted "
                                       "(each closes a TTFT or an inter-token gap)", ("client",))
        self.iterations = count("iterserve:iterations", "executed iterations")
        self.prefill_rows = count("iterserve:prefill_rows", "prefill token rows executed")
        self.decode_rows = count("iterserve:decode_rows", "decode token rows executed")
        self._arrival_ms: dict[str, float] = {}
        self._last_ms: dict[str, float] = {}
        self._queued: set[str] = set()

    def on_arrival(self, spec: RequestSpec, now: float) -> None:
        self._arrival_ms[spec.request_id] = spec.arrival
        self._queued.add(spec.request_id)

    def on_reject(self, spec: RequestSpec, reason: str, now: float) -> None:
        self.rejections.labels(reason).inc()

    def on_cancel(self, request_id: str, state: SchedulerState, successor: SchedulerState) -> None:
        self._forget(request_id)

    def on_step(self, state: SchedulerState, plan: IterationPlan, result: IterationResult,
                successor: SchedulerState) -> None:
        for intent in plan.intents:
            self._intent(intent.kind, intent.request_id, intent.reason, state)
        if plan.work:
            self.iterations.inc()
        for item in plan.work:
            rows = item.end - item.start
            if item.kind is WorkKind.DECODE_ROW:
                self.decode_rows.inc(rows)
            elif item.kind is WorkKind.PREFILL_CHUNK:
                self.prefill_rows.inc(rows)
        for client, rows in result.service.items():
            self.service.labels(client).inc(rows)
        for done in result.completed:
            if done.emitted:
                self.generation_tokens.labels(state.views[done.request_id].client_id).inc()
                self._emission(done.request_id, successor.now, done.finish_reason is not None)

    def _intent(self, kind: IntentKind, request_id: str, reason: str,
                state: SchedulerState) -> None:
        if kind is IntentKind.ADMIT and request_id in self._queued:
            self._queued.discard(request_id)
            view = state.views[request_id]
            self.queue.labels(view.client_id).observe(
                (state.now - self._arrival_ms[request_id]) / 1000.0)
        elif kind in _PREEMPT_MODES:
            self.preemptions.labels(_PREEMPT_MODES[kind], reason or "unspecified").inc()
        elif kind is IntentKind.REJECT:
            self.rejections.labels(reason or "policy").inc()

    def _emission(self, request_id: str, now_ms: float, is_last: bool) -> None:
        last = self._last_ms.get(request_id)
        if last is None:
            self.ttft.observe((now_ms - self._arrival_ms[request_id]) / 1000.0)
        else:
            self.itl.observe((now_ms - last) / 1000.0)
        self._last_ms[request_id] = now_ms
        if is_last:
            self.e2e.observe((now_ms - self._arrival_ms[request_id]) / 1000.0)
            self._forget(request_id)

    def _forget(self, request_id: str) -> None:
        self._arrival_ms.pop(request_id, None)
        self._last_ms.pop(request_id, None)
        self._queued.discard(request_id)


class SnapshotCollector:
    """Gauges and outcome counters read from the engine at scrape time."""

    def __init__(self, engine: OnlineEngine) -> None:
        self._engine = engine

    def collect(self) -> Iterator[Metric]:
        engine = self._engine
        state = engine.state
        yield _gauge("iterserve:num_requests_running", "running requests", len(state.running))
        yield _gauge("iterserve:num_requests_waiting", "waiting requests", len(state.waiting))
        yield _gauge("iterserve:num_requests_suspended", "suspended (swapped) requests",
                     len(state.suspended))
        facts = state.capacity
        total = facts.num_blocks_total or 0
        free = facts.num_blocks_free if facts.num_blocks_free is not None else 0
        yield _gauge("iterserve:kv_blocks_used", "KV blocks held", total - free)
        yield _gauge("iterserve:kv_blocks_free", "KV blocks free", free)
        hits = getattr(engine.executor, "num_cached_rows_skipped", 0)
        yield _counter("iterserve:prefix_cache_hit_tokens", "prompt rows served from the "
                       "prefix cache", hits)
        yield _counter("iterserve:requests_submitted", "requests accepted for scheduling",
                       engine.num_submitted)
        outcomes = CounterMetricFamily("iterserve:requests", "ended requests by outcome "
                                       "(finished + cancelled + rejected + aborted == submitted "
                                       "once none is live)", labels=["outcome", "client"])
        counts = engine.publisher.outcomes()
        for outcome in OUTCOMES:
            outcomes.add_metric([outcome, "_all"], sum(
                n for (o, _), n in counts.items() if o == outcome))
        for (outcome, client), n in sorted(counts.items()):
            outcomes.add_metric([outcome, client], n)
        yield outcomes
        if state.ledger is not None:
            yield from _ledger_metrics(state)


def _ledger_metrics(state: SchedulerState) -> Iterator[Metric]:
    """A client-ledger policy's counters (0x09A): weighted completed service
    W_done and the VTC virtual counter, per client, at the latest cut."""
    ledger = state.ledger
    assert ledger is not None
    done = GaugeMetricFamily("iterserve:client_weighted_service", "weighted completed "
                             "service W_done (w_p prompt rows + w_q outputs) / client weight",
                             labels=["client"])
    counter = GaugeMetricFamily("iterserve:client_vtc_counter", "VTC counter (charged at "
                                "join and per output, lifted on activation)", labels=["client"])
    for client in sorted(set(ledger.done) | set(ledger.counters)):
        done.add_metric([client], ledger.done_of(client))
        counter.add_metric([client], ledger.counter(client))
    yield done
    yield counter


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)


class ServerMetrics:
    """One app's registry: the engine observer plus the scrape-time collector."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, engine: OnlineEngine) -> None:
        self.registry = CollectorRegistry()
        self.observer = LatencyObserver(self.registry)
        self.registry.register(SnapshotCollector(engine))
        engine.engine.observers.append(self.observer)

    def render(self) -> bytes:
        return bytes(generate_latest(self.registry))


def parse_metrics(text: str) -> dict[str, Any]:
    """Samples of a text exposition by ``name{labels}`` (for tests and tools)."""
    from prometheus_client.parser import text_string_to_metric_families

    samples: dict[str, Any] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return samples

