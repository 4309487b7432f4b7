"""/metrics: vLLM's names with a ``model_name`` label, iterserve's own
families, the outcome partition, the fairness identity (``user`` or
``X-Client-Id``, default anonymous) as a bounded client label, closed
preemption causes, process metrics, and scrapes consistent with one step."""

from __future__ import annotations

import asyncio
import threading

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from iterserve.records.preemption import PreemptionCause, preemption_cause_of
from iterserve.server.metrics import parse_metrics

FAMILIES = (
    "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:num_requests_swapped",
    "vllm:kv_cache_usage_perc", "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
    'vllm:request_success_total{finished_reason="length"}', "vllm:num_preemptions_total",
    "vllm:time_to_first_token_seconds_count", "vllm:inter_token_latency_seconds_count",
    "vllm:request_time_per_output_token_seconds_count", "vllm:e2e_request_latency_seconds_count",
    "vllm:request_queue_time_seconds_count", "vllm:request_inference_time_seconds_count",
    "vllm:request_prefill_time_seconds_count", "vllm:request_decode_time_seconds_count",
    "vllm:request_prompt_tokens_count", "vllm:request_generation_tokens_count",
    "vllm:iteration_tokens_total_count",
    "iterserve:kv_blocks_used", "iterserve:kv_blocks_total",
    "iterserve:prefix_cache_hit_tokens_total", "iterserve:iterations_total",
    "iterserve:prefill_rows_total", "iterserve:decode_rows_total",
    "iterserve:requests_submitted_total", 'iterserve:requests_total{outcome="finished"}',
    'iterserve:preemptions_total{cause="kv_exhausted",mode="recompute"}',
    'iterserve:rejections_total{reason="max_live"}',
    "process_resident_memory_bytes", "process_open_fds",
)
OUTCOMES = ("finished", "cancelled", "rejected", "aborted")


def _complete(served, **extra) -> httpx.Response:
    headers = extra.pop("headers", {})
    body = {"model": "tiny", "prompt": "metrics please", "max_tokens": 3, "temperature": 0.0,
            "ignore_eos": True, **extra}
    return httpx.post(served.base_url + "/v1/completions", json=body, headers=headers,
                      timeout=60)


def _scrape(served) -> dict[str, float]:
    return parse_metrics(httpx.get(served.base_url + "/metrics", timeout=30).text,
                         ("model_name",))


def test_metrics_families_and_tenancy(serve):
    served = serve()
    assert _complete(served, user="alice").status_code == 200
    assert _complete(served, headers={"X-Client-Id": "bob"}).status_code == 200
    assert _complete(served, user="carol", headers={"X-Client-Id": "bob"}).status_code == 200
    assert _complete(served).status_code == 200
    assert served.engine.wait_idle(30)
    response = httpx.get(served.base_url + "/metrics")
    assert response.headers["content-type"].startswith("text/plain")
    assert 'model_name="tiny"' in response.text
    samples = parse_metrics(response.text, ("model_name",))
    for name in FAMILIES:
        assert name in samples, name
    assert samples["iterserve:requests_submitted_total"] == 4
    assert samples["vllm:time_to_first_token_seconds_count"] == 4
    assert samples["vllm:inter_token_latency_seconds_count"] == 4 * 2
    assert samples["vllm:e2e_request_latency_seconds_count"] == 4
    assert samples["vllm:generation_tokens_total"] == 4 * 3
    assert samples['vllm:request_success_total{finished_reason="length"}'] == 4
    assert samples["iterserve:decode_rows_total"] == 4 * 2
    assert samples["iterserve:kv_blocks_used"] == 0
    assert samples["vllm:kv_cache_usage_perc"] == 0
    prompt_tokens = samples["vllm:prompt_tokens_total"]
    assert prompt_tokens == samples["vllm:request_prompt_tokens_sum"] > 0
    for client in ("alice", "bob", "carol", "anonymous"):
        key = f'iterserve:client_requests_total{{client="{client}",outcome="finished"}}'
        assert samples[key] == 1
        # prompt rows + 2 decode rows debited to the client's fairness service
        assert samples[f'iterserve:client_service_tokens_total{{client="{client}"}}'] >= 3
        assert samples[f'iterserve:client_queue_time_seconds_count{{client="{client}"}}'] == 1
    total = sum(samples[f'iterserve:requests_total{{outcome="{o}"}}'] for o in OUTCOMES)
    assert total == samples["iterserve:requests_submitted_total"]
    assert not any('client="_all"' in key for key in samples)


async def _users(base_url: str, num_users: int) -> list[int]:
    limits = httpx.Limits(max_connections=32)
    async with httpx.AsyncClient(base_url=base_url, timeout=120, limits=limits) as client:
        async def one(index: int) -> int:
            body = {"model": "tiny", "prompt": "u", "max_tokens": 1, "user": f"user-{index}"}
            return (await client.post("/v1/completions", json=body)).status_code
        return list(await asyncio.gather(*(one(i) for i in range(num_users))))


def test_300_users_make_at_most_max_labels_plus_one_client_series(serve):
    served = serve(server={"max_client_labels": 8})
    assert set(asyncio.run(_users(served.base_url, 300))) == {200}
    assert served.engine.wait_idle(60)
    text = httpx.get(served.base_url + "/metrics").text
    clients_per_family: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if "client" in sample.labels:
                clients_per_family.setdefault(family.name, set()).add(sample.labels["client"])
    assert clients_per_family  # the per-client families exist
    for name, clients in clients_per_family.items():
        assert len(clients) <= 8 + 1, (name, len(clients))
        assert "other" in clients and "_all" not in clients
    samples = parse_metrics(text, ("model_name",))
    per_client = sum(v for k, v in samples.items()
                     if k.startswith("iterserve:client_requests_total{"))
    assert per_client == samples['iterserve:requests_total{outcome="finished"}'] == 300


def test_preemption_causes_are_a_closed_set():
    free_text = ("kv_exhausted; victim by fcfs_victim: queue_position=3/7, priority=0, "
                 "arrival=12.5, held_rows=40", "starvation_guard: client c unserved for 9 ms",
                 "extension_wait_bound; victim by fcfs_victim: queue_position=0/1, priority=0, "
                 "arrival=0.0, held_rows=4; release_waits=64",
                 "a policy's own words", "")
    causes = {preemption_cause_of(reason) for reason in free_text}
    assert causes == set(PreemptionCause)
    assert {cause.value for cause in PreemptionCause} == {"kv_exhausted", "starvation_guard",
                                                          "extension_wait_bound", "other"}


@pytest.mark.slow
def test_preemptions_are_labelled_by_mode_and_cause_only(serve):
    served = serve(num_kv_blocks=6, max_num_seqs=8, max_num_batched_tokens=64)
    body = {"model": "tiny", "prompt": "tell me a long story " * 2, "max_tokens": 24,
            "temperature": 0.0, "ignore_eos": True}

    async def run() -> list[int]:
        async with httpx.AsyncClient(base_url=served.base_url, timeout=120) as client:
            responses = await asyncio.gather(*(client.post("/v1/completions", json=body)
                                               for _ in range(8)))
            return [r.status_code for r in responses]

    assert set(asyncio.run(run())) == {200}
    text = httpx.get(served.base_url + "/metrics").text
    causes = {s.labels["cause"] for f in text_string_to_metric_families(text)
              for s in f.samples if f.name == "iterserve:preemptions"}
    assert causes <= {c.value for c in PreemptionCause}
    samples = parse_metrics(text, ("model_name",))
    assert samples["vllm:num_preemptions_total"] > 0
    assert samples["vllm:num_preemptions_total"] == sum(
        v for k, v in samples.items() if k.startswith("iterserve:preemptions_total{"))


def test_every_scrape_reads_one_step(serve):
    """submitted == running + waiting + swapped + ended in every scrape: a
    request is never both finished and running."""
    served = serve()
    scrapes: list[dict[str, float]] = []
    done = threading.Event()

    def scrape() -> None:
        while not done.is_set():
            scrapes.append(_scrape(served))

    scraper = threading.Thread(target=scrape)
    scraper.start()
    try:
        assert set(asyncio.run(_users(served.base_url, 24))) == {200}
    finally:
        done.set()
        scraper.join()
    scrapes.append(_scrape(served))
    assert len(scrapes) >= 2
    for samples in scrapes:
        live = sum(samples[f"vllm:num_requests_{q}"] for q in ("running", "waiting", "swapped"))
        ended = sum(samples[f'iterserve:requests_total{{outcome="{o}"}}'] for o in OUTCOMES)
        assert live + ended == samples["iterserve:requests_submitted_total"], samples
