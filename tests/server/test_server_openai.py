"""The official openai client against a real server: completions and chat,
streaming and not; greedy text equals the offline API's; usage is right."""

from __future__ import annotations

import pytest

openai = pytest.importorskip("openai")

PROMPT = "Once upon a time"
MAX_TOKENS = 6


@pytest.fixture
def client_and_server(serve):
    served = serve()
    client = openai.OpenAI(base_url=served.base_url + "/v1", api_key="unused")
    return client, served


@pytest.fixture(scope="module")
def offline(tiny_dir):
    from iterserve.llm import LLM
    from iterserve.records.sampling_params import SamplingParams

    llm = LLM(tiny_dir, num_kv_blocks=256)
    out = llm.generate([PROMPT], SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0, seed=3))
    return out[0], llm.tokenizer


def test_completion_greedy_equals_offline(client_and_server, offline):
    client, _ = client_and_server
    expected, tokenizer = offline
    reply = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=MAX_TOKENS,
                                      temperature=0.0, seed=3)
    assert reply.choices[0].text == expected.text
    assert reply.choices[0].finish_reason == expected.finish_reason
    num_prompt = len(tokenizer.encode(PROMPT))
    assert reply.usage.prompt_tokens == num_prompt
    assert reply.usage.completion_tokens == len(expected.token_ids)
    assert reply.usage.total_tokens == num_prompt + len(expected.token_ids)


def test_completion_stream_concatenates_to_the_same_text(client_and_server, offline):
    client, _ = client_and_server
    expected, _ = offline
    chunks = list(client.completions.create(
        model="tiny", prompt=PROMPT, max_tokens=MAX_TOKENS, temperature=0.0, stream=True,
        stream_options={"include_usage": True}))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == expected.text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == expected.finish_reason
    assert chunks[-1].usage.completion_tokens == len(expected.token_ids)


def test_chat_stream_and_not_agree(client_and_server, tiny_dir):
    client, served = client_and_server
    messages = [{"role": "user", "content": "Say hello"}]
    reply = client.chat.completions.create(model="tiny", messages=messages,
                                           max_completion_tokens=MAX_TOKENS, temperature=0.0)
    text = reply.choices[0].message.content
    assert reply.choices[0].message.role == "assistant"
    prompt_ids = served.runtime.tokenizer.apply_chat_template(messages)
    assert reply.usage.prompt_tokens == len(prompt_ids)
    assert 1 <= reply.usage.completion_tokens <= MAX_TOKENS
    stream = client.chat.completions.create(model="tiny", messages=messages,
                                            max_tokens=MAX_TOKENS, temperature=0.0, stream=True,
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
    assert chunks[-1].usage.completion_tokens == reply.usage.completion_tokens


def test_models_health_version(client_and_server):
    import httpx

    client, served = client_and_server
    assert [m.id for m in client.models.list()] == ["tiny"]
    assert httpx.get(served.base_url + "/health").json() == {"status": "ok"}
    assert httpx.get(served.base_url + "/version").json()["version"]
