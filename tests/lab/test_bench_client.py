"""The bench client against fake OpenAI servers (httpx.MockTransport): it
tolerates what other engines send (a role-only first chat chunk, no usage,
several tokens in one chunk, an error object mid-stream), records every
failure with its kind, and turns records into a valid event log."""

from __future__ import annotations

import asyncio
import itertools
import json

import httpx
import pytest

from iterserve.lab.bench_client import RequestRecord, send, tokens_in_choice
from iterserve.lab.bench_plan import PlanOptions, RequestPlan, plan_requests
from iterserve.lab.bench_report import events_of, outcome_counts
from iterserve.lab.bench_run import BenchInputError, parse_url
from iterserve.metrics.event_scan import build_timelines
from iterserve.records.workload import parse_workload


def _plan(request_id: str = "r0", num_out: int = 3) -> RequestPlan:
    return RequestPlan(request_id, "alice", 0.0, 4, num_out, "token_ids",
                       {"model": "m", "prompt": [5, 6, 7, 8], "max_tokens": num_out,
                        "stream": True})


def _sse(*chunks: object) -> bytes:
    return b"".join(f"data: {json.dumps(c) if not isinstance(c, str) else c}\n\n".encode()
                    for c in chunks)


def _send(handler, plan: RequestPlan | None = None, endpoint: str = "completions",
          timeout_s: float = 5.0) -> RequestRecord:
    ticks = itertools.count()

    async def go() -> RequestRecord:
        transport = httpx.MockTransport(handler)
        async with httpx.AsyncClient(transport=transport, base_url="http://fake") as client:
            return await send(client, plan or _plan(), endpoint, timeout_s,
                              lambda: float(next(ticks)))

    return asyncio.run(go())


def _chat_delta(content: str | None, finish: str | None = None, role: str | None = None) -> dict:
    delta = {k: v for k, v in (("role", role), ("content", content)) if v is not None}
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def test_a_vllm_like_chat_stream_role_chunk_no_usage():
    body = b": keep-alive\n\ndata:\n\n" + _sse(
        _chat_delta("", role="assistant"), _chat_delta("a"), _chat_delta("b"),
        _chat_delta("c", "length"), "[DONE]")
    record = _send(lambda request: httpx.Response(200, content=body), endpoint="chat")
    assert record.outcome == "finished" and record.usage is None
    assert record.chunk_num_tokens == [1, 1, 1]  # the role-only chunk carries no token
    assert record.finish_reason == "length" and record.is_done


def test_tokens_per_chunk_from_logprobs_and_usage_padding():
    chunks = [{"choices": [{"text": "ab", "logprobs": {"tokens": ["a", "b"]},
                            "finish_reason": None}]},
              {"choices": [{"text": "c", "finish_reason": "length"}]},
              {"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 5}}]
    record = _send(lambda request: httpx.Response(200, content=_sse(*chunks, "[DONE]")))
    assert record.chunk_num_tokens == [2, 1]
    log = events_of([record])
    timeline = build_timelines(log)["r0"]
    assert timeline.num_output_tokens == 5  # 3 seen + 2 the usage reports, at the finish chunk
    assert outcome_counts([record])["num_tokens_unattributed"] == 2


def test_the_request_body_and_client_identity_are_sent():
    seen = {}

    def handler(request: httpx.Request) -> httpx.Response:
        seen["path"] = request.url.path
        seen["client"] = request.headers["x-client-id"]
        seen["body"] = json.loads(request.content)
        return httpx.Response(200, content=_sse({"choices": [{"text": "x",
                                                              "finish_reason": "stop"}]}))

    record = _send(handler)
    assert seen["path"] == "/v1/completions" and seen["client"] == "alice"
    assert seen["body"]["prompt"] == [5, 6, 7, 8]
    assert record.outcome == "finished" and record.finish_reason == "stop"


@pytest.mark.parametrize(("status", "outcome", "reason"), [
    (429, "rejected", "http_429"), (503, "http_error", "http_503"),
    (400, "http_error", "http_400")])
def test_http_errors_are_recorded_not_lost(status, outcome, reason):
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, headers={"Retry-After": "1"},
                              json={"error": {"message": "busy now", "type": "x"}})

    record = _send(handler)
    assert (record.outcome, record.status) == (outcome, status)
    assert "busy now" in (record.error or "")
    [event] = [e for e in events_of([record]) if e.kind != "arrival"]
    assert event.reason == reason
    counts = outcome_counts([record])
    assert counts["num_sent"] == 1 and counts[f"num_{outcome}"] == 1
    if status == 429:
        assert record.retry_after == "1"


def test_connection_failure_timeout_and_error_mid_stream():
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    assert _send(refuse).outcome == "connection_error"

    def stall(request: httpx.Request) -> httpx.Response:
        async def body():
            yield _sse({"choices": [{"text": "a", "finish_reason": None}]})
            await asyncio.sleep(10)

        return httpx.Response(200, content=body())

    timed_out = _send(stall, timeout_s=0.2)
    assert timed_out.outcome == "timeout" and timed_out.chunk_num_tokens == [1]
    broken = _send(lambda r: httpx.Response(200, content=_sse(
        {"choices": [{"text": "a", "finish_reason": None}]}, {"error": {"message": "boom"}})))
    assert broken.outcome == "aborted" and "boom" in (broken.error or "")
    log = events_of([timed_out])
    assert [e.kind for e in log] == ["arrival", "first_token", "cancel"]


def test_a_stream_that_ends_without_finish_is_aborted():
    record = _send(lambda r: httpx.Response(200, content=_sse(
        {"choices": [{"text": "a", "finish_reason": None}]})))
    assert record.outcome == "aborted" and not record.is_done


def test_tokens_in_choice_shapes():
    assert tokens_in_choice({"delta": {"role": "assistant"}}) == 0
    assert tokens_in_choice({"delta": {"content": ""}}) == 0
    assert tokens_in_choice({"text": "hi"}) == 1
    assert tokens_in_choice({"delta": {"content": "x"},
                             "logprobs": {"content": [{}, {}, {}]}}) == 3


@pytest.mark.parametrize(("url", "base"), [
    ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
    ("http://127.0.0.1:8000/v1/", "http://127.0.0.1:8000"),
    ("https://host/prefix/v1", "https://host/prefix")])
def test_urls(url, base):
    assert parse_url(url) == base


@pytest.mark.parametrize("url", ["127.0.0.1:8000", "ftp://x", "http://", "http://h:99999"])
def test_bad_urls(url):
    with pytest.raises(BenchInputError):
        parse_url(url)


def test_plans_use_token_ids_else_synthetic_ids_and_hidden_output_lengths():
    manifest = parse_workload({
        "workload_id": "w", "clock": "ms", "capacity": {"max_num_batched_tokens": 8, "max_num_seqs": 2},
        "requests": [
            {"request_id": "a", "arrival": 5, "prompt_tokens": [7, 8, 9],
             "max_output_tokens": 9},
            {"request_id": "b", "arrival": 1, "prompt_tokens": 4, "max_output_tokens": 6}],
        "fixture_only_hidden_truth": {"realized_output_tokens": {"b": 2}}})
    plans = plan_requests(manifest, PlanOptions("m", "completions", 2.0, 0.001))
    assert [p.request_id for p in plans] == ["b", "a"]
    b, a = plans
    assert a.body["prompt"] == [7, 8, 9] and a.prompt_kind == "token_ids"
    assert len(b.body["prompt"]) == 4 and b.prompt_kind == "synthetic_token_ids"
    assert (a.body["max_tokens"], b.body["max_tokens"]) == (9, 2)
    assert a.body["ignore_eos"] is True and a.body["stream_options"] == {"include_usage": True}
    assert a.scheduled_s == pytest.approx(0.010)
    chat = plan_requests(manifest, PlanOptions("m", "chat", 1.0, 0.001))
    assert len(chat[1].body["messages"][0]["content"].split()) == 3


def test_a_run_where_nothing_finished_still_reports_and_compares():
    from iterserve.lab.bench_report import summary_dict, summary_sections
    from iterserve.lab.run_record import report_results

    def refuse(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, json={"error": {"message": "draining"}})

    records = [_send(refuse, _plan(f"r{i}")) for i in range(3)]
    summary_obj, metrics = summary_sections(events_of(records), "x", None)
    assert summary_obj is not None and metrics is None
    summary = summary_dict(summary_obj)
    assert summary["requests"]["num_cancelled"] == 3 and summary["requests"]["num_completed"] == 0
    values = {(r["metric"], r["percentile"]): r["value"] for r in report_results(
        {"summary": summary})}
    assert values[("request_throughput", None)] == 0.0
    assert values[("ttft", "p50")] is None  # withheld, never 0
    assert outcome_counts(records)["http_errors_by_status"] == {"503": 3}
