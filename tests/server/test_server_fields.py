"""vLLM's rule for request fields: unknown ones are ignored with one logged
warning per field name and counted; declared fields that would change the
output in a way this server does not serve are a 400 naming the field;
``null`` is accepted where OpenAI accepts it; ``strict_fields`` keeps the
refuse-unknown behaviour."""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest

from iterserve.server.fields import FieldPolicy, field_name, unknown_field_paths
from iterserve.server.protocol import ChatCompletionRequest, CompletionRequest


def completion(**fields: Any) -> dict[str, Any]:
    return {"model": "tiny", "prompt": "hello", "max_tokens": 2, **fields}


def chat(**fields: Any) -> dict[str, Any]:
    return {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
            **fields}


def test_unknown_fields_are_found_in_nested_models_and_named_without_indices():
    body = ChatCompletionRequest.model_validate(chat(
        store=True, stream_options={"include_usage": True, "chunky": 1},
        messages=[{"role": "user", "content": [{"type": "text", "text": "x", "cache": 1}],
                   "audio": None}]))
    paths = list(unknown_field_paths(body))
    assert paths == ["store", "stream_options.chunky", "messages.0.audio",
                     "messages.0.content.0.cache"]
    assert [field_name(p) for p in paths][2:] == ["messages.*.audio", "messages.*.content.*.cache"]


def test_one_warning_per_field_name_and_a_count_per_request(caplog):
    policy = FieldPolicy()
    with caplog.at_level(logging.WARNING, logger="iterserve.server"):
        for _ in range(3):
            policy.check(CompletionRequest.model_validate(completion(store=True, metadata={})))
    warned = [r.getMessage() for r in caplog.records if r.name == "iterserve.server"]
    assert len(warned) == 2 and any("'store'" in m for m in warned)
    assert policy.ignored == {"store": 3, "metadata": 3}


def test_names_from_clients_are_bounded_in_memory_logs_and_metrics(caplog):
    policy = FieldPolicy(max_named=3)
    with caplog.at_level(logging.WARNING, logger="iterserve.server"):
        for index in range(50):  # a client inventing a new field name per request
            policy.check(CompletionRequest.model_validate(completion(**{f"f{index}": 1})))
    warned = [r.getMessage() for r in caplog.records if r.name == "iterserve.server"]
    assert len(warned) == 4 and "further new unknown fields" in warned[-1]
    assert policy.ignored == {"f0": 1, "f1": 1, "f2": 1, "other": 47}


@pytest.mark.slow
def test_ignored_fields_are_a_metric(server):
    from iterserve.server.metrics import parse_metrics

    before = parse_metrics(httpx.get(server.base_url + "/metrics", timeout=60).text)
    response = httpx.post(server.base_url + "/v1/completions", json=completion(store=True),
                          timeout=60)
    assert response.status_code == 200
    after = parse_metrics(httpx.get(server.base_url + "/metrics", timeout=60).text)
    key = 'iterserve:ignored_request_fields_total{field="store"}'
    assert after[key] == before.get(key, 0) + 1


def test_strict_fields_refuse_the_first_unknown_field():
    from iterserve.server.errors import APIError

    with pytest.raises(APIError) as raised:
        FieldPolicy(is_strict=True).check(CompletionRequest.model_validate(completion(store=1)))
    assert raised.value.status_code == 400 and raised.value.param == "store"


REFUSED = [
    ("tools with tool_choice auto", "/v1/chat/completions",
     chat(tools=[{"type": "function", "function": {"name": "f"}}], tool_choice="auto"), "tools"),
    ("tools without tool_choice", "/v1/chat/completions",
     chat(tools=[{"type": "function", "function": {"name": "f"}}]), "tools"),
    ("a named tool choice", "/v1/chat/completions",
     chat(tool_choice={"type": "function", "function": {"name": "f"}}), "tool_choice"),
    ("functions", "/v1/chat/completions", chat(functions=[{"name": "f"}]), "functions"),
    ("json response_format", "/v1/chat/completions",
     chat(response_format={"type": "json_object"}), "response_format"),
    ("json schema response_format", "/v1/completions",
     completion(response_format={"type": "json_schema", "json_schema": {}}), "response_format"),
    ("logit_bias", "/v1/completions", completion(logit_bias={"5": 10}), "logit_bias"),
    ("best_of > n", "/v1/completions", completion(best_of=3), "best_of"),
    ("suffix", "/v1/completions", completion(suffix="tail"), "suffix"),
    ("echo with logprobs, streamed", "/v1/completions",
     completion(echo=True, logprobs=1, stream=True), "echo"),
    ("min_p", "/v1/completions", completion(min_p=0.1), "min_p"),
    ("beam search", "/v1/completions", completion(use_beam_search=True), "use_beam_search"),
    ("guided_json", "/v1/chat/completions", chat(guided_json={"type": "object"}), "guided_json"),
    ("top_logprobs without logprobs", "/v1/chat/completions", chat(top_logprobs=2),
     "top_logprobs"),
    ("too many top_logprobs", "/v1/chat/completions", chat(logprobs=True, top_logprobs=21),
     "top_logprobs"),
    ("too many completion logprobs", "/v1/completions", completion(logprobs=21), "logprobs"),
    ("an image part", "/v1/chat/completions",
     chat(messages=[{"role": "user", "content": [
         {"type": "text", "text": "look"},
         {"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]),
     "messages.0.content.1.type"),
    ("a user message without content", "/v1/chat/completions",
     chat(messages=[{"role": "user"}]), "messages.0.content"),
    ("a per-request chat template", "/v1/chat/completions", chat(chat_template="{{ 1 }}"),
     "chat_template"),
    ("skip_special_tokens false", "/v1/completions", completion(skip_special_tokens=False),
     "skip_special_tokens"),
    ("presence_penalty out of range", "/v1/completions", completion(presence_penalty=2.5),
     "presence_penalty"),
    ("min_tokens past max_tokens", "/v1/completions", completion(min_tokens=5), "min_tokens"),
]


@pytest.fixture(scope="module")
def server(serve):
    return serve()


@pytest.mark.slow
@pytest.mark.parametrize(("name", "path", "body", "param"), REFUSED,
                         ids=[case[0] for case in REFUSED])
def test_unservable_fields_are_a_400_naming_the_field(server, name, path, body, param):
    response = httpx.post(server.base_url + path, json=body, timeout=60)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param
    assert error["type"] == "invalid_request_error"


ACCEPTED = [
    ("nulls on completions", "/v1/completions",
     completion(n=None, stream=None, logprobs=None, echo=None, seed=None, stop=None,
                temperature=None, top_p=None, presence_penalty=None, frequency_penalty=None,
                best_of=None, logit_bias=None, suffix=None, user=None, stream_options=None)),
    ("nulls on chat", "/v1/chat/completions",
     chat(n=None, stream=None, logprobs=None, top_logprobs=None, tools=None, tool_choice=None,
          response_format=None, max_completion_tokens=None, seed=None, stop=None)),
    ("tools with tool_choice none", "/v1/chat/completions",
     chat(tools=[{"type": "function", "function": {"name": "f"}}], tool_choice="none")),
    ("text response_format", "/v1/chat/completions", chat(response_format={"type": "text"})),
    ("best_of equal to n", "/v1/completions", completion(best_of=2, n=2)),
    ("empty logit_bias", "/v1/completions", completion(logit_bias={})),
    ("unknown fields", "/v1/completions", completion(store=True, prediction={"x": 1})),
    ("vLLM top_k -1", "/v1/completions", completion(top_k=-1)),
]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "path", "body"), ACCEPTED, ids=[c[0] for c in ACCEPTED])
def test_null_and_harmless_fields_are_served(server, name, path, body):
    response = httpx.post(server.base_url + path, json=body, timeout=60)
    assert response.status_code == 200, response.text
