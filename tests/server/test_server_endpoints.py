"""vLLM's extra endpoints and the chat template's sources: ``/v1/models/{id}``
(the SDK's ``models.retrieve``), ``/tokenize``, ``/detokenize``,
``/version``; ``chat_template.jinja`` read as transformers 5 reads it, and
a template given to the server (``--chat-template``) over the checkpoint's."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import httpx
import pytest

import iterserve

openai = pytest.importorskip("openai")

pytestmark = pytest.mark.slow

JINJA_TEMPLATE = (
    "{% for message in messages %}[{{ message['role'] | upper }}] {{ message['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}[ASSISTANT] {% endif %}"
)


@pytest.fixture(scope="module")
def server(serve):
    return serve()


def test_models_retrieve_and_an_unknown_id(server):
    client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused")
    card = client.models.retrieve("tiny")
    assert card.id == "tiny" and card.object == "model"
    missing = httpx.get(server.base_url + "/v1/models/gpt-9", timeout=30)
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "model_not_found"


def test_version_is_the_package_version(server):
    assert httpx.get(server.base_url + "/version").json() == {"version": iterserve.__version__}


def test_tokenize_and_detokenize_round_trip(server):
    tokenizer = server.runtime.tokenizer
    reply = httpx.post(server.base_url + "/tokenize", json={
        "model": "tiny", "prompt": "the scheduler", "return_token_strs": True}).json()
    assert reply["tokens"] == tokenizer.encode("the scheduler")
    assert reply["count"] == len(reply["tokens"])
    assert reply["max_model_len"] == server.runtime.max_model_len
    assert len(reply["token_strs"]) == reply["count"]
    bare = httpx.post(server.base_url + "/tokenize", json={
        "prompt": "the scheduler", "add_special_tokens": False}).json()
    assert bare["tokens"] == tokenizer.encode("the scheduler", add_special_tokens=False)
    text = httpx.post(server.base_url + "/detokenize", json={"tokens": reply["tokens"]}).json()
    assert text == {"prompt": tokenizer.decode(reply["tokens"])}


def test_tokenize_messages_renders_developer_and_tool_roles(server):
    messages = [{"role": "developer", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                {"role": "tool", "tool_call_id": "c1", "content": "ok"}]
    reply = httpx.post(server.base_url + "/tokenize", json={"messages": messages}).json()
    rendered = server.runtime.tokenizer.decode(reply["tokens"], False)
    assert "developer\nbe brief" in rendered and "tool\nok" in rendered
    flat = [{**m, "content": "hi"} if m["role"] == "user" else m for m in messages]
    assert reply["tokens"] == server.runtime.tokenizer.apply_chat_template(flat)


@pytest.mark.parametrize(("body", "param"), [
    ({"prompt": "x", "messages": [{"role": "user", "content": "x"}]}, "prompt"),
    ({}, "prompt"),
    ({"tokens": [10**9]}, "tokens"),
])
def test_tokenize_bad_bodies_are_a_400(server, body, param):
    path = "/detokenize" if "tokens" in body else "/tokenize"
    response = httpx.post(server.base_url + path, json=body, timeout=30)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == param


@pytest.fixture(scope="module", params=["jinja only", "jinja and config"])
def jinja_dir(request, tiny_dir: Path, tmp_path_factory) -> Path:
    """The tiny checkpoint as transformers 5 saves one: the template in
    ``chat_template.jinja`` and none in ``tokenizer_config.json``; or both
    (the file wins, as in transformers)."""
    out = tmp_path_factory.mktemp("jinja") / "tiny"
    shutil.copytree(tiny_dir, out)
    if request.param == "jinja only":
        config_path = out / "tokenizer_config.json"
        config = json.loads(config_path.read_text())
        del config["chat_template"]
        config_path.write_text(json.dumps(config))
    (out / "chat_template.jinja").write_text(JINJA_TEMPLATE)
    return out


def test_chat_template_jinja_is_read_as_transformers_reads_it(jinja_dir):
    from transformers import AutoTokenizer

    from iterserve.model.tokenizer import load_tokenizer

    messages = [{"role": "user", "content": "hello"}]
    ours = load_tokenizer(jinja_dir).apply_chat_template(messages)
    theirs = AutoTokenizer.from_pretrained(jinja_dir).apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True)
    assert theirs.startswith("[USER] hello")
    assert ours == load_tokenizer(jinja_dir).encode(theirs, add_special_tokens=False)


def test_a_given_template_wins_over_the_checkpoints(serve):
    served = serve(chat_template=JINJA_TEMPLATE)
    reply = httpx.post(served.base_url + "/v1/chat/completions", json={
        "model": "tiny", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 2,
        "temperature": 0}, timeout=60).json()
    tokenizer = served.runtime.tokenizer
    want = tokenizer.encode("[USER] hello\n[ASSISTANT] ", add_special_tokens=False)
    assert reply["usage"]["prompt_tokens"] == len(want)
    tokens = httpx.post(served.base_url + "/tokenize", json={
        "messages": [{"role": "user", "content": "hello"}]}).json()["tokens"]
    assert tokens == want


def test_llm_chat_over_conversations_returns_one_output_each(tiny_dir):
    from iterserve.llm import LLM
    from iterserve.records.sampling_params import SamplingParams

    llm = LLM(tiny_dir, num_kv_blocks=64)
    try:
        params = SamplingParams(max_tokens=4, temperature=0.0)
        conversations = [[{"role": "user", "content": "hello"}],
                         [{"role": "system", "content": "be brief"},
                          {"role": "user", "content": "the pool"}]]
        outputs = llm.chat(conversations, params)
        singles = [llm.chat(c, params)[0] for c in conversations]
        assert len(outputs) == 2
        assert [o.token_ids for o in outputs] == [s.token_ids for s in singles]
        assert [o.prompt_token_ids for o in outputs] == [
            tuple(llm.tokenizer.apply_chat_template(c)) for c in conversations]
    finally:
        llm.close()
