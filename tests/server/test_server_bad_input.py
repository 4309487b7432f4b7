"""Hostile and bad input (issue 10 step 6), table-driven: every case gets a
4xx with an OpenAI-style error object naming the problem; never a 500."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

MAX_MODEL_LEN = 256
KV_BLOCKS = 8  # x 16 rows = a 128-row pool, shorter than max_model_len


@dataclass(frozen=True)
class Case:
    name: str
    status: int
    says: str  # a fragment of the error message
    json: Any = None
    content: bytes | None = None
    path: str = "/v1/completions"
    method: str = "POST"
    headers: dict[str, str] = field(default_factory=dict)
    param: str | None = None


def completion(**fields: Any) -> dict[str, Any]:
    return {"model": "tiny", "prompt": "hello", "max_tokens": 2, **fields}


def chat(**fields: Any) -> dict[str, Any]:
    return {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
            **fields}


LONG_PROMPT = [5] * (MAX_MODEL_LEN + 10)
POOL_PROMPT = [5] * (KV_BLOCKS * 16 + 20)

CASES = [
    Case("malformed json", 400, "not valid JSON", content=b'{"model": "tiny", "prompt": '),
    Case("invalid utf-8", 400, "not valid JSON", content=b'{"model": "tiny", "prompt": "\xff\xfe"}'),
    Case("body is a list", 400, "body", json=[1, 2, 3]),
    Case("wrong type", 400, "max_tokens", json=completion(max_tokens="ten"), param="max_tokens"),
    Case("missing prompt", 400, "missing required field 'prompt'",
         json={"model": "tiny"}, param="prompt"),
    Case("missing model", 400, "missing required field 'model'", json={"prompt": "x"},
         param="model"),
    Case("negative max_tokens", 400, "max_tokens", json=completion(max_tokens=-1),
         param="max_tokens"),
    Case("zero max_tokens", 400, "max_tokens", json=completion(max_tokens=0), param="max_tokens"),
    Case("absurd max_tokens", 400, "max_tokens", json=completion(max_tokens=10**15),
         param="max_tokens"),
    Case("max_tokens past max_model_len", 400, "maximum model length",
         json=completion(max_tokens=10**6), param="max_tokens"),
    Case("prompt past max_model_len", 400, "maximum model length",
         json=completion(prompt=LONG_PROMPT)),
    Case("prompt past the KV pool", 400, "KV blocks", json=completion(prompt=POOL_PROMPT)),
    Case("unknown model", 404, "does not exist", json=completion(model="gpt-9"), param="model"),
    Case("empty prompt", 400, "prompt is empty", json=completion(prompt="")),
    Case("empty token list", 400, "prompt", json=completion(prompt=[])),
    Case("token id outside vocab", 400, "outside the vocabulary", json=completion(prompt=[10**9])),
    Case("negative token id", 400, "prompt", json=completion(prompt=[-1])),
    Case("unknown field", 400, "unknown field 'best_of_all'", json=completion(best_of_all=3),
         param="best_of_all"),
    Case("n past the maximum", 400, "n", json=completion(n=10**3), param="n"),
    Case("a zero repetition penalty", 400, "repetition_penalty",
         json=completion(repetition_penalty=0), param="repetition_penalty"),
    Case("negative temperature", 400, "temperature", json=completion(temperature=-1),
         param="temperature"),
    Case("nan temperature", 400, "finite number",
         content=b'{"model": "tiny", "prompt": "x", "temperature": NaN}'),
    Case("top_p zero", 400, "top_p", json=completion(top_p=0), param="top_p"),
    Case("negative seed", 400, "seed", json=completion(seed=-3), param="seed"),
    Case("too many stop strings", 400, "stop", json=completion(stop=["a", "b", "c", "d", "e"])),
    Case("empty stop string", 400, "stop", json=completion(stop="")),
    Case("bad client id header", 400, "client id", json=completion(),
         headers={"X-Client-Id": "two words"}),
    Case("oversized body", 413, "exceeds", json=completion(prompt="x" * (2 << 20))),
    Case("chat without messages", 400, "messages", json=chat(messages=[]),
         path="/v1/chat/completions"),
    Case("chat bad role", 400, "role", json=chat(messages=[{"role": "robot", "content": "x"}]),
         path="/v1/chat/completions"),
    Case("chat content not a string", 400, "content",
         json=chat(messages=[{"role": "user", "content": 5}]), path="/v1/chat/completions"),
    Case("chat prompt past the pool", 400, "KV blocks", path="/v1/chat/completions",
         json=chat(messages=[{"role": "user", "content": "word " * 125}])),
    Case("wrong method", 405, "Method Not Allowed", method="GET"),
    Case("unknown path", 404, "Not Found", path="/v1/nothing", json={}),
]


@pytest.fixture(scope="module")
def server(serve):
    return serve(num_kv_blocks=KV_BLOCKS, max_model_len=MAX_MODEL_LEN, strict_fields=True)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_gets_a_4xx_error_object(server, case: Case):
    headers = {"Content-Type": "application/json", **case.headers}
    response = httpx.request(case.method, server.base_url + case.path, json=case.json,
                             content=case.content, headers=headers, timeout=30)
    assert response.status_code == case.status, response.text
    error = response.json()["error"]
    assert case.says in error["message"], error
    assert error["type"]
    if case.param is not None:
        assert error["param"] == case.param
    assert "Traceback" not in response.text


def test_the_server_still_serves_after_the_bad_input(server):
    response = httpx.post(server.base_url + "/v1/completions", json=completion(), timeout=60)
    assert response.status_code == 200
    assert response.json()["usage"]["completion_tokens"] == 2


def test_no_repetition_penalty_is_served_as_vllm_bench_sends_it(server):
    body = completion(repetition_penalty=1.0, ignore_eos=True, logprobs=None, stream=True,
                      stream_options={"include_usage": True})
    response = httpx.post(server.base_url + "/v1/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    assert response.text.rstrip().endswith("data: [DONE]")
    assert '"completion_tokens":2' in response.text.replace(" ", "")


def test_api_key_is_required_when_set(serve):
    served = serve(api_key="sesame")
    url = served.base_url + "/v1/completions"
    refused = httpx.post(url, json=completion(), timeout=30)
    assert refused.status_code == 401
    assert refused.json()["error"]["type"] == "authentication_error"
    wrong = httpx.post(url, json=completion(), headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    ok = httpx.post(url, json=completion(), headers={"Authorization": "Bearer sesame"},
                    timeout=60)
    assert ok.status_code == 200
