"""A bench run's records -> the event log, the run summary and report.json.

The event log is the one ``simulate`` writes (docs/metrics.md), with what a
client can see: ``arrival`` at the request's scheduled send time (the TTFT
origin, F30), ``first_token`` / ``token`` at the arrival of the chunk that
carried each token, then ``finish`` (finish_reason ``length`` / ``stop``),
``reject`` (HTTP 429) or ``cancel`` naming what went wrong (``http_503``,
``connection_error``, ``timeout``, ``aborted``). No ``admit``: admission is
not observable from the client, so queue time is withheld, as are
preemptions, KV use and budget use (the summary says so).

When the server's ``usage.completion_tokens`` exceeds the tokens the chunks
showed, the unseen tokens are stamped at the finish chunk's time and counted
in ``outcomes.num_tokens_unattributed``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from iterserve.lab.bench_client import OUTCOMES, RequestRecord
from iterserve.metrics import Report, SloConfig, evaluate
from iterserve.metrics.events import (
    ArrivalEvent,
    CancelEvent,
    Event,
    EventLog,
    FinishEvent,
    FirstTokenEvent,
    RejectEvent,
    TokenEvent,
)
from iterserve.metrics.run_summary import RunSummary, summarize_run
from iterserve.metrics.time_unit import SECONDS
from iterserve.sim.report import default_window

NOT_OBSERVABLE = {
    "queue": "admission happens inside the server; the client sees only its answer",
    "preemptions": "preemption and resumption happen inside the server",
    "kv_blocks": "KV use is the server's; scrape its /metrics",
    "logical_slot_occupancy": "iterations are the server's",
    "batched_tokens_utilisation": "iterations are the server's",
}

METRIC_DEFINITIONS = {
    "clock": "monotonic wall clock of the client, seconds from the run start",
    "arrival": "the request's scheduled send time (workload arrival x time scale)",
    "ttft": "first token-carrying chunk received - arrival (includes the network, the "
            "server's queue and any client-side wait under --max-concurrency)",
    "tbt": "gap between the chunks carrying consecutive tokens (0 inside one chunk)",
    "tpot": "(last token - first token) / (output tokens - 1), per request",
    "end_to_end": "chunk carrying finish_reason received - arrival",
    "queue": "not observable from the client: withheld",
    "throughput": "output tokens (or finished requests) in the window / window length; window "
                  "from the first arrival to the last event",
}


def events_of(records: Sequence[RequestRecord]) -> EventLog:
    events: list[Event] = []
    for record in records:
        events.extend(_request_events(record))
    return EventLog(sorted(events, key=lambda event: event.time_s))  # stable: per-request order


def token_times_s(record: RequestRecord) -> list[float]:
    """One time per output token, padded to the server's usage count."""
    times = [t for t, n in zip(record.chunk_s, record.chunk_num_tokens, strict=True)
             for _ in range(n)]
    unseen = num_unattributed(record)
    if unseen:
        times += [record.finish_s or record.chunk_s[-1]] * unseen
    return times


def num_unattributed(record: RequestRecord) -> int:
    usage = record.usage or {}
    reported = usage.get("completion_tokens")
    if not isinstance(reported, int) or record.outcome != "finished":
        return 0
    return max(0, reported - record.num_output_tokens)


def _request_events(record: RequestRecord) -> list[Event]:
    rid = record.request_id
    end_s = max(record.end_s or record.scheduled_s, record.scheduled_s)
    events: list[Event] = [ArrivalEvent(record.scheduled_s, rid, client_id=record.client_id,
                                        num_prompt_tokens=record.num_prompt_tokens)]
    if record.outcome == "rejected":
        return [*events, RejectEvent(end_s, rid, reason="http_429")]
    times = [max(t, record.scheduled_s) for t in token_times_s(record)]
    if times:
        events.append(FirstTokenEvent(times[0], rid))
        events.extend(TokenEvent(t, rid, token_index=i) for i, t in enumerate(times[1:], 1))
    if record.outcome == "finished":
        finish_s = max(record.finish_s or times[-1], times[-1])
        return [*events, FinishEvent(finish_s, rid, reason=record.finish_reason or "stop",
                                     num_output_tokens=len(times))]
    reason = f"http_{record.status}" if record.outcome == "http_error" else record.outcome
    return [*events, CancelEvent(max(end_s, times[-1] if times else end_s), rid, reason=reason)]


def outcome_counts(records: Sequence[RequestRecord]) -> dict[str, Any]:
    """What the client saw, overall and per client; every sent request is in
    exactly one outcome."""
    by_outcome = Counter(r.outcome for r in records)
    clients: dict[str, Counter[str]] = {}
    tokens: Counter[str] = Counter()
    for record in records:
        clients.setdefault(record.client_id, Counter())[record.outcome] += 1
        tokens[record.client_id] += len(token_times_s(record))
    statuses = Counter(str(r.status) for r in records if r.outcome == "http_error")
    return {
        "num_sent": len(records),
        **{f"num_{name}": by_outcome.get(name, 0) for name in OUTCOMES},
        "num_output_tokens": sum(tokens.values()),
        "num_tokens_unattributed": sum(num_unattributed(r) for r in records),
        "num_prompt_tokens_declared": sum(r.num_prompt_tokens for r in records),
        "num_prompt_tokens_server": _usage_sum(records, "prompt_tokens"),
        "http_errors_by_status": dict(sorted(statuses.items())),
        "per_client": {client: {"num_sent": sum(c.values()),
                                **{f"num_{name}": c.get(name, 0) for name in OUTCOMES},
                                "num_output_tokens": tokens[client]}
                       for client, c in sorted(clients.items())},
    }


def _usage_sum(records: Sequence[RequestRecord], key: str) -> int | None:
    """The server's usage total; None when no request reported one."""
    values = [r.usage[key] for r in records if r.usage and isinstance(r.usage.get(key), int)]
    return sum(values) if values else None


def summary_sections(log: EventLog, label: str,
                     slo: SloConfig | None) -> tuple[RunSummary | None, Report | None]:
    """The run summary (latencies, throughput, counts) and, with an SLO, the
    0x07 evaluation; (None, None) when nothing was sent."""
    if not len(log):
        return None, None
    window = default_window(log)
    summary = summarize_run(list(log), window, SECONDS, label=label, iterations=(),
                            resources=(), max_num_batched_tokens=1, max_num_seqs=1)
    metrics = None if slo is None else evaluate(log, slo, window, label=label)
    return summary, metrics


def summary_dict(summary: RunSummary) -> dict[str, Any]:
    """``summary.to_dict()`` with the server-side figures withheld and the
    reason named (``not_observable``)."""
    out = summary.to_dict()
    for name in ("preemptions", "kv_blocks", "logical_slot_occupancy",
                 "batched_tokens_utilisation"):
        out[name] = None
    out["not_observable"] = NOT_OBSERVABLE
    return out
