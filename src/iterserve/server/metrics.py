"""Prometheus metrics (text format): vLLM's names where the meaning is the
same, ``iterserve:`` for iterserve's own; every series has a ``model_name``
label. docs/metrics.md ("Server metrics") lists them all.

One registry per app (no module state), fed by two sources:

- :class:`~iterserve.server.metrics_observer.MetricsObserver` on the engine
  thread observes the histograms and publishes one snapshot per step;
- :class:`SnapshotCollector` turns the latest snapshot into gauges and
  counters at scrape time, so one scrape reads one step's numbers. Under a
  client-ledger policy (``vtc``, ``vtc-completed``, ``least-service``) it
  adds each client's weighted service W_done and VTC counter (0x09A).

Per-client families carry at most ``max_client_labels + 1`` client values
(:mod:`iterserve.server.client_labels`); preemption causes and rejection
reasons come from closed sets. The process collector adds
``process_*`` (memory, CPU, open file descriptors).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from iterserve.engine.online import OnlineEngine
from iterserve.engine.publisher import OUTCOMES
from iterserve.records.preemption import KV_PREEMPTION_MODES, PreemptionCause
from iterserve.records.state import SchedulerState, blocks_used_of_total
from iterserve.server.client_labels import OTHER_CLIENTS, ClientLabels
from iterserve.server.metrics_observer import (
    GATE_REASONS,
    MetricsObserver,
    MetricsSnapshot,
    SnapshotPublisher,
)

# counter families read off the snapshot: name -> (help, label names, label values
# always shown even at zero, so a dashboard's series exist from the start)
_COUNTERS: dict[str, tuple[str, tuple[str, ...], tuple[tuple[str, ...], ...]]] = {
    "vllm:prompt_tokens": ("prompt tokens of requests that reached their first token",
                           (), ((),)),
    "vllm:generation_tokens": ("output tokens emitted", (), ((),)),
    "vllm:request_success": ("ended requests by finish reason (abort: cancelled by the "
                             "client or aborted by the engine)", ("finished_reason",),
                             (("stop",), ("length",), ("abort",))),
    "vllm:num_preemptions": ("preemptions (every mode)", (), ((),)),
    "iterserve:requests_submitted": ("requests the engine received", (), ((),)),
    "iterserve:requests": ("ended requests by outcome (finished + cancelled + rejected + "
                           "aborted == submitted - live)", ("outcome",),
                           tuple((o,) for o in OUTCOMES)),
    "iterserve:client_requests": ("ended requests by client (bounded labels) and outcome",
                                  ("client", "outcome"), ()),
    "iterserve:preemptions": ("preemptions by mode and cause", ("mode", "cause"),
                              tuple((m.value, c.value) for m in KV_PREEMPTION_MODES
                                    for c in PreemptionCause)),
    "iterserve:rejections": ("refused arrivals by reason (a gate's, or policy)", ("reason",),
                             tuple((r,) for r in sorted(GATE_REASONS | {"policy", "other"}))),
    "iterserve:client_service_tokens": ("completed token rows debited to each client's "
                                        "fairness service (bounded labels)", ("client",), ()),
    "iterserve:client_generation_tokens": ("output tokens emitted per client (bounded labels)",
                                           ("client",), ()),
    "iterserve:iterations": ("executed iterations", (), ((),)),
    "iterserve:prefill_rows": ("prefill token rows executed", (), ((),)),
    "iterserve:decode_rows": ("decode token rows executed", (), ((),)),
    "iterserve:prefix_cache_hit_tokens": ("prompt rows served from the prefix cache", (),
                                          ((),)),
}


class SnapshotCollector:
    """Gauges and counters of the latest published snapshot, at scrape time."""

    def __init__(self, observer: MetricsObserver, labels: ClientLabels, model_name: str,
                 policy: tuple[str, str]) -> None:
        self._observer = observer
        self._labels = labels
        self._model = model_name
        self._policy = policy

    def collect(self) -> Iterator[Metric]:
        snapshot = self._observer.snapshot  # one step's numbers, read once
        yield from self._gauges(snapshot.state)
        yield from self._counters(snapshot)
        info = GaugeMetricFamily("iterserve:policy_info", "the scheduling policy (value 1)",
                                 labels=["model_name", "policy", "policy_version"])
        info.add_metric([self._model, *self._policy], 1)
        yield info
        if snapshot.state.ledger is not None:
            yield from self._ledger(snapshot.state)

    def _gauge(self, name: str, doc: str, value: float) -> GaugeMetricFamily:
        family = GaugeMetricFamily(name, doc, labels=["model_name"])
        family.add_metric([self._model], value)
        return family

    def _gauges(self, state: SchedulerState) -> Iterator[Metric]:
        used, total = blocks_used_of_total(state.capacity)
        yield self._gauge("vllm:num_requests_running", "running requests", len(state.running))
        yield self._gauge("vllm:num_requests_waiting", "waiting requests", len(state.waiting))
        yield self._gauge("vllm:num_requests_swapped", "suspended (preserved, swapped) "
                          "requests", len(state.suspended))
        yield self._gauge("vllm:kv_cache_usage_perc", "KV blocks held / blocks in all "
                          "(1 means 100 percent)", used / total if total else 0.0)
        yield self._gauge("iterserve:kv_blocks_used", "KV blocks held", used)
        yield self._gauge("iterserve:kv_blocks_total", "KV blocks in the device pool", total)

    def _counters(self, snapshot: MetricsSnapshot) -> Iterator[Metric]:
        values: dict[str, dict[tuple[str, ...], float]] = {name: {} for name in _COUNTERS}
        for (name, label_values), value in snapshot.counts.items():
            if name in values:
                values[name][label_values] = value
        for name, (doc, label_names, shown) in _COUNTERS.items():
            family = CounterMetricFamily(name, doc, labels=["model_name", *label_names])
            series = {**dict.fromkeys(shown, 0.0), **values[name]}
            for label_values, value in sorted(series.items()):
                family.add_metric([self._model, *label_values], value)
            yield family

    def _ledger(self, state: SchedulerState) -> Iterator[Metric]:
        """A client-ledger policy's numbers at the snapshot's cut (0x09A):
        W_done summed per label (``other``: every unlabelled client), the
        VTC counter per labelled client and, for ``other``, the largest."""
        ledger = state.ledger
        assert ledger is not None
        done: dict[str, float] = {}
        counter: dict[str, float] = {}
        for client in set(ledger.done) | set(ledger.counters):
            label = self._labels.label_if_known(client)
            done[label] = done.get(label, 0.0) + ledger.done_of(client)
            counter[label] = max(counter.get(label, float("-inf")), ledger.counter(client))
        labels = ["model_name", "client"]
        w_done = GaugeMetricFamily("iterserve:client_weighted_service", "weighted completed "
                                   "service W_done (w_p prompt rows + w_q outputs) / client "
                                   "weight", labels=labels)
        vtc = GaugeMetricFamily("iterserve:client_vtc_counter", "VTC counter (charged at join "
                                f"and per output, lifted on activation; {OTHER_CLIENTS}: the "
                                "largest of the unlabelled clients')", labels=labels)
        for label in sorted(done):
            w_done.add_metric([self._model, label], done[label])
            vtc.add_metric([self._model, label], counter[label])
        yield w_done
        yield vtc


class _IgnoredFields:
    """Scrape-time view of the app's ignored-field counts."""

    def __init__(self, ignored: Mapping[str, int]) -> None:
        self._ignored = ignored

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "iterserve:ignored_request_fields", "requests that sent an unknown field, which "
            "was ignored (by field name; names past a bound count as 'other')",
            labels=["field"])
        for name, count in sorted(self._ignored.items()):
            family.add_metric([name], count)
        yield family


class ServerMetrics:
    """One app's registry: the engine observer, the snapshot collector and
    the process collector."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, engine: OnlineEngine, model_name: str = "iterserve",
                 max_client_labels: int | None = None) -> None:
        self.registry = CollectorRegistry()
        self.labels = ClientLabels() if max_client_labels is None \
            else ClientLabels(max_client_labels)
        self.observer = MetricsObserver(self.registry, model_name, self.labels, engine.engine,
                                        engine.executor, engine.submitted_ms)
        policy = engine.engine.policy
        self.registry.register(SnapshotCollector(
            self.observer, self.labels, model_name,
            (policy.policy_id, str(getattr(policy, "policy_version", "1")))))
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        # the observer counts a step's tokens before the stream publisher ends
        # requests (and calls it back with their outcomes); the snapshot is
        # published after, with the outcomes counted
        observers = engine.engine.observers
        observers.insert(observers.index(engine.publisher), self.observer)
        engine.publisher.outcome_listeners.append(self.observer.on_outcome)
        observers.append(SnapshotPublisher(self.observer))

    def watch_ignored_fields(self, ignored: Mapping[str, int]) -> None:
        """Expose ``ignored`` (requests per ignored request field, bounded by
        the field policy) as ``iterserve:ignored_request_fields_total``."""
        self.registry.register(_IgnoredFields(ignored))

    @property
    def snapshot(self) -> MetricsSnapshot:
        return self.observer.snapshot

    def render(self) -> bytes:
        return bytes(generate_latest(self.registry))


def parse_metrics(text: str, drop_labels: tuple[str, ...] = ()) -> dict[str, Any]:
    """Samples of a text exposition by ``name{labels}``, labels sorted and
    those in ``drop_labels`` left out (for tests and tools)."""
    from prometheus_client.parser import text_string_to_metric_families

    samples: dict[str, Any] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items())
                              if k not in drop_labels)
            samples[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return samples
