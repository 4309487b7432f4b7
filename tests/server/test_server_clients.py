"""Request bodies real clients send (guidellm 0.8.1, LangChain's OpenAI and
ChatOpenAI, the openai SDK), kept as JSON fixtures: every one gets a 200 with
a well-formed body, and the fields this server does not use are ignored and
counted rather than refused."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

FIXTURES = sorted((Path(__file__).parent / "fixtures").glob("*.json"))


@pytest.fixture(scope="module")
def server(serve):
    return serve()


def _events(text: str) -> list[dict]:
    lines = [line[len("data: "):] for line in text.splitlines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(line) for line in lines[:-1]]


@pytest.mark.slow
@pytest.mark.parametrize("fixture", FIXTURES, ids=[f.stem for f in FIXTURES])
def test_every_captured_client_body_gets_a_200(server, fixture: Path):
    captured = json.loads(fixture.read_text())
    body = captured["body"]
    response = httpx.post(server.base_url + captured["path"], json=body, timeout=120)
    assert response.status_code == 200, response.text
    num_choices = _num_prompts(body) * (body.get("n") or 1)
    if body.get("stream"):
        events = _events(response.text)
        indices = {c["index"] for e in events for c in e["choices"]}
        assert indices == set(range(num_choices))
        finished = [c for e in events for c in e["choices"] if c.get("finish_reason")]
        assert len(finished) == num_choices
        if (body.get("stream_options") or {}).get("include_usage"):
            assert events[-1]["usage"]["completion_tokens"] >= num_choices
    else:
        reply = response.json()
        assert [c["index"] for c in reply["choices"]] == list(range(num_choices))
        assert reply["usage"]["completion_tokens"] >= num_choices


def _num_prompts(body: dict) -> int:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
        return len(prompt)
    return 1


@pytest.mark.slow
def test_the_sdk_extras_are_ignored_and_counted(server):
    fields = server.server.config.app.state.fields
    before = fields.ignored["store"]
    captured = json.loads((Path(__file__).parent / "fixtures" / "openai_sdk_chat.json").read_text())
    response = httpx.post(server.base_url + captured["path"], json=captured["body"], timeout=120)
    assert response.status_code == 200, response.text
    assert fields.ignored["store"] == before + 1
    assert {"parallel_tool_calls", "metadata", "service_tier"} <= set(fields.ignored)
