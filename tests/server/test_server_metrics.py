"""/metrics (issue 10 steps 4 and 5): the vLLM-like families exist, the
outcome partition reconciles, and the fairness identity (``user`` or
``X-Client-Id``, default anonymous) labels service, outcomes and queue time."""

from __future__ import annotations

import httpx
import pytest

from iterserve.server.metrics import parse_metrics

FAMILIES = (
    "iterserve:time_to_first_token_seconds_count", "iterserve:inter_token_latency_seconds_count",
    "iterserve:e2e_request_latency_seconds_count", "iterserve:num_requests_running",
    "iterserve:num_requests_waiting", "iterserve:num_requests_suspended",
    "iterserve:kv_blocks_used", "iterserve:kv_blocks_free",
    "iterserve:prefix_cache_hit_tokens_total", "iterserve:iterations_total",
    "iterserve:prefill_rows_total", "iterserve:decode_rows_total",
    "iterserve:requests_submitted_total",
)


@pytest.fixture(scope="module")
def served(serve):
    return serve()


def _complete(served, **extra) -> httpx.Response:
    headers = extra.pop("headers", {})
    body = {"model": "tiny", "prompt": "metrics please", "max_tokens": 3, "temperature": 0.0,
            "ignore_eos": True, **extra}
    return httpx.post(served.base_url + "/v1/completions", json=body, headers=headers,
                      timeout=60)


def test_metrics_families_and_tenancy(served):
    assert _complete(served, user="alice").status_code == 200
    assert _complete(served, headers={"X-Client-Id": "bob"}).status_code == 200
    assert _complete(served, user="carol", headers={"X-Client-Id": "bob"}).status_code == 200
    assert _complete(served).status_code == 200
    assert served.engine.wait_idle(30)
    response = httpx.get(served.base_url + "/metrics")
    assert response.headers["content-type"].startswith("text/plain")
    samples = parse_metrics(response.text)
    for name in FAMILIES:
        assert name in samples, name
    assert samples["iterserve:requests_submitted_total"] == 4
    assert samples["iterserve:time_to_first_token_seconds_count"] == 4
    assert samples["iterserve:inter_token_latency_seconds_count"] == 4 * 2
    assert samples["iterserve:decode_rows_total"] == 4 * 2
    assert samples["iterserve:kv_blocks_used"] == 0
    for client in ("alice", "bob", "carol", "anonymous"):
        assert samples[f'iterserve:requests_total{{client="{client}",outcome="finished"}}'] == 1
        # prompt rows + 2 decode rows debited to the client's fairness service
        service = samples[f'iterserve:client_service_tokens_total{{client="{client}"}}']
        assert service >= 3
        assert samples[f'iterserve:request_queue_time_seconds_count{{client="{client}"}}'] == 1
    total = sum(samples.get(f'iterserve:requests_total{{client="_all",outcome="{o}"}}', 0)
                for o in ("finished", "cancelled", "rejected", "aborted"))
    assert total == samples["iterserve:requests_submitted_total"]
