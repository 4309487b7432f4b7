"""What ``iterserve bench`` sends: one OpenAI request body per workload request.

Prompts: a workload request with ``prompt_token_ids`` is sent as those ids
(``prompt`` as a list of ints on ``/v1/completions``, which vLLM and
iterserve both accept), so the server runs exactly the declared prompt
length whatever its tokenizer. Without ids, ``/v1/completions`` gets a
synthetic list of ``num_prompt_tokens`` ids, seeded by the request id and
drawn from ``SYNTHETIC_IDS`` (plain ids in every tokenizer iterserve builds
and in common BPE vocabularies; distinct per request, so no two prompts share
a prefix by accident). ``/v1/chat/completions`` takes text only: it gets a
synthetic text of ``num_prompt_tokens`` short words, whose token count
depends on the server's tokenizer and chat template (the server's own
``usage.prompt_tokens`` is recorded next to the declared length).

Output length: the workload's realized output length when the file carries
fixture-only hidden truth (what ``simulate`` runs to), else
``max_output_tokens``; sent as ``max_tokens`` with ``ignore_eos: true`` (an
extension both servers accept), so the server generates exactly that many.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from typing import Any

from iterserve.records.spec import RequestSpec, WorkloadManifest

ENDPOINTS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
SYNTHETIC_IDS = range(4, 260)  # ids below 4 are special in iterserve's built tokenizers
_SYNTHETIC_WORDS = ("alpha", "bravo", "delta", "echo", "gamma", "kilo", "lima", "metro",
                    "nova", "omega", "polar", "quartz", "sigma", "tango", "ultra", "zulu")


@dataclass(frozen=True, slots=True)
class RequestPlan:
    """One request to send: when (seconds after the run starts), who, what."""

    request_id: str
    client_id: str
    scheduled_s: float
    num_prompt_tokens: int  # declared by the workload
    num_output_tokens: int  # sent as max_tokens with ignore_eos
    prompt_kind: str  # "token_ids", "synthetic_token_ids" or "synthetic_text"
    body: dict[str, Any]


@dataclass(frozen=True, slots=True)
class PlanOptions:
    model: str
    endpoint: str  # a key of ENDPOINTS
    time_scale: float  # multiplies every arrival (seconds)
    seconds_per_clock_unit: float  # the workload clock's unit in seconds
    use_logprobs: bool = True  # ask for per-token logprobs to count tokens per chunk


def plan_requests(manifest: WorkloadManifest, options: PlanOptions) -> tuple[RequestPlan, ...]:
    """Every request of the workload in arrival order (ties: file order)."""
    realized = manifest.hidden.realized_output_tokens
    plans = []
    for spec in sorted(manifest.online.requests, key=lambda r: r.arrival):
        num_out = min(realized.get(spec.request_id, spec.max_output_tokens),
                      spec.max_output_tokens)
        kind, body = _body(spec, num_out, options)
        scheduled_s = spec.arrival * options.seconds_per_clock_unit * options.time_scale
        plans.append(RequestPlan(spec.request_id, spec.client_id, scheduled_s,
                                 spec.num_prompt_tokens, num_out, kind, body))
    return tuple(plans)


def _body(spec: RequestSpec, num_out: int, options: PlanOptions) -> tuple[str, dict[str, Any]]:
    body: dict[str, Any] = {
        "model": options.model, "max_tokens": num_out, "ignore_eos": True,
        "temperature": 0.0, "stream": True, "stream_options": {"include_usage": True},
        "user": spec.client_id,
    }
    if spec.priority:
        body["priority"] = spec.priority  # an extension; sent only when the workload sets it
    if options.endpoint == "chat":
        body["messages"] = [{"role": "user", "content": synthetic_text(spec)}]
        if options.use_logprobs:
            body["logprobs"] = True
        return "synthetic_text", body
    if options.use_logprobs:
        body["logprobs"] = 0
    if spec.prompt_token_ids is not None:
        body["prompt"] = list(spec.prompt_token_ids)
        return "token_ids", body
    body["prompt"] = synthetic_token_ids(spec)
    return "synthetic_token_ids", body


def _rng(spec: RequestSpec) -> random.Random:
    seed = int.from_bytes(hashlib.sha256(spec.request_id.encode()).digest()[:8], "big")
    return random.Random(seed)


def synthetic_token_ids(spec: RequestSpec) -> list[int]:
    rng = _rng(spec)
    return [rng.choice(SYNTHETIC_IDS) for _ in range(spec.num_prompt_tokens)]


def synthetic_text(spec: RequestSpec) -> str:
    rng = _rng(spec)
    return " ".join(rng.choice(_SYNTHETIC_WORDS) for _ in range(spec.num_prompt_tokens))
