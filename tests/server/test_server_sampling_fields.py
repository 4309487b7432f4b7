"""The sampling fields clients send, each against an independent reference:
transformers on the tiny checkpoint for logprobs and penalties (greedy with
``repetition_penalty`` equals ``generate(repetition_penalty=...)``, top
logprobs equal ``log_softmax`` of transformers' logits), and the server's
own single-request output for ``n``, batched prompts and seeds."""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Sequence

import httpx
import pytest

pytestmark = pytest.mark.slow

PROMPT_IDS = [1, 17, 42, 99, 7, 23, 64]
NUM_TOKENS = 6
ATOL = 1e-3  # logprobs, packed float32 forward vs transformers


@pytest.fixture(scope="module")
def server(serve):
    return serve()


def post(server, path: str, body: dict) -> dict:
    response = httpx.post(server.base_url + path, json={"model": "tiny", **body}, timeout=120)
    assert response.status_code == 200, response.text
    return response.json()


def reference_steps(reference, prompt_ids: Sequence[int], num_tokens: int,
                    adjust: Callable[[list[int], object], object] | None = None):
    """Greedy decoding with transformers: (token ids, log_softmax rows of the
    raw logits); ``adjust(outputs, logits)`` edits the logits before argmax."""
    import torch

    ids, outputs, rows = list(prompt_ids), [], []
    with torch.no_grad():
        for _ in range(num_tokens):
            logits = reference(torch.tensor([ids])).logits[0, -1].float()
            rows.append(torch.log_softmax(logits, dim=-1))
            scores = adjust(outputs, logits.clone()) if adjust else logits
            token = int(scores.argmax())
            ids.append(token)
            outputs.append(token)
    return outputs, rows


def test_completion_top_logprobs_equal_transformers_log_softmax(server, tiny_reference):
    tokenizer = server.runtime.tokenizer
    reply = post(server, "/v1/completions", {"prompt": PROMPT_IDS, "max_tokens": NUM_TOKENS,
                                             "min_tokens": NUM_TOKENS, "temperature": 0,
                                             "logprobs": 3})
    want_ids, rows = reference_steps(tiny_reference, PROMPT_IDS, NUM_TOKENS, _no_eos(server))
    logprobs = reply["choices"][0]["logprobs"]
    assert logprobs["tokens"] == [tokenizer.decode([t]) for t in want_ids]
    for i, (token_id, row) in enumerate(zip(want_ids, rows, strict=True)):
        assert math.isclose(logprobs["token_logprobs"][i], float(row[token_id]), abs_tol=ATOL)
        values, ids = row.topk(3)
        top = logprobs["top_logprobs"][i]
        for value, token_id_ in zip(values.tolist(), ids.tolist(), strict=True):
            assert math.isclose(top[tokenizer.decode([token_id_])], value, abs_tol=ATOL)
    offsets = logprobs["text_offset"]
    assert offsets[0] == 0 and offsets == sorted(offsets)


def test_chat_top_logprobs_equal_transformers_log_softmax(server, tiny_reference):
    tokenizer = server.runtime.tokenizer
    messages = [{"role": "user", "content": "the scheduler"}]
    prompt_ids = tokenizer.apply_chat_template(messages)
    reply = post(server, "/v1/chat/completions", {
        "messages": messages, "max_completion_tokens": NUM_TOKENS, "min_tokens": NUM_TOKENS,
        "temperature": 0, "logprobs": True, "top_logprobs": 4})
    want_ids, rows = reference_steps(tiny_reference, prompt_ids, NUM_TOKENS, _no_eos(server))
    content = reply["choices"][0]["logprobs"]["content"]
    assert [c["token"] for c in content] == [tokenizer.decode([t]) for t in want_ids]
    for item, token_id, row in zip(content, want_ids, rows, strict=True):
        assert math.isclose(item["logprob"], float(row[token_id]), abs_tol=ATOL)
        assert item["bytes"] == list(item["token"].encode())
        values, ids = row.topk(4)
        assert [t["token"] for t in item["top_logprobs"]] == [tokenizer.decode([t])
                                                               for t in ids.tolist()]
        for got, want in zip(item["top_logprobs"], values.tolist(), strict=True):
            assert math.isclose(got["logprob"], want, abs_tol=ATOL)


def _no_eos(server):
    eos = list(server.runtime.tokenizer.eos_token_ids)

    def adjust(outputs, logits):
        logits[eos] = float("-inf")  # what min_tokens does for every token here
        return logits
    return adjust


def test_greedy_repetition_penalty_equals_transformers_generate(server, tiny_reference):
    import torch

    penalty = 1.8
    generated = tiny_reference.generate(
        torch.tensor([PROMPT_IDS]), attention_mask=torch.ones(1, len(PROMPT_IDS), dtype=torch.long),
        do_sample=False, max_new_tokens=NUM_TOKENS, min_new_tokens=NUM_TOKENS,
        repetition_penalty=penalty, eos_token_id=list(server.runtime.tokenizer.eos_token_ids),
        pad_token_id=0)
    want = generated[0, len(PROMPT_IDS):].tolist()
    got = post(server, "/v1/completions", {
        "prompt": PROMPT_IDS, "max_tokens": NUM_TOKENS, "min_tokens": NUM_TOKENS,
        "temperature": 0, "repetition_penalty": penalty, "logprobs": 0})
    tokens = got["choices"][0]["logprobs"]["tokens"]
    assert tokens == [server.runtime.tokenizer.decode([t]) for t in want]
    plain, _ = reference_steps(tiny_reference, PROMPT_IDS, NUM_TOKENS, _no_eos(server))
    assert plain != want, "the penalty must change this output, or the test proves nothing"


@pytest.mark.parametrize(("presence", "frequency"), [(1.5, 0.0), (0.0, 1.0), (-2.0, 0.7)])
def test_presence_and_frequency_penalties_follow_openai(server, tiny_reference, presence,
                                                        frequency):
    no_eos = _no_eos(server)

    def penalised(outputs, logits):
        for token, count in Counter(outputs).items():
            logits[token] -= frequency * count + presence  # OpenAI's definition
        return no_eos(outputs, logits)

    want, _ = reference_steps(tiny_reference, PROMPT_IDS, NUM_TOKENS, penalised)
    plain, _ = reference_steps(tiny_reference, PROMPT_IDS, NUM_TOKENS, no_eos)
    assert want != plain, "the penalties must change this output, or the test proves nothing"
    got = post(server, "/v1/completions", {
        "prompt": PROMPT_IDS, "max_tokens": NUM_TOKENS, "min_tokens": NUM_TOKENS,
        "temperature": 0, "presence_penalty": presence, "frequency_penalty": frequency,
        "logprobs": 0})
    decode = server.runtime.tokenizer.decode
    assert got["choices"][0]["logprobs"]["tokens"] == [decode([t]) for t in want]


def test_max_completion_tokens_wins_over_max_tokens(server):
    for path, body in (("/v1/completions", {"prompt": "hello"}),
                       ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})):
        reply = post(server, path, {**body, "max_tokens": 9, "max_completion_tokens": 3,
                                    "ignore_eos": True})
        assert reply["usage"]["completion_tokens"] == 3


def test_n_samples_are_independent_and_sample_zero_is_the_single_request(server):
    body = {"prompt": "once upon", "max_tokens": 8, "ignore_eos": True, "temperature": 1.0,
            "seed": 5}
    single = post(server, "/v1/completions", body)["choices"][0]["text"]
    reply = post(server, "/v1/completions", {**body, "n": 3})
    assert [c["index"] for c in reply["choices"]] == [0, 1, 2]
    texts = [c["text"] for c in reply["choices"]]
    assert texts[0] == single
    assert len(set(texts)) > 1
    assert reply["usage"]["completion_tokens"] == 24
    assert reply["usage"]["prompt_tokens"] == len(server.runtime.tokenizer.encode("once upon"))


def test_chat_n_streams_every_choice(server):
    response = httpx.post(server.base_url + "/v1/chat/completions", json={
        "model": "tiny", "messages": [{"role": "user", "content": "hi"}], "n": 2, "stream": True,
        "max_tokens": 4, "ignore_eos": True, "seed": 1}, timeout=60)
    chunks = [json.loads(line[6:]) for line in response.text.splitlines()
              if line.startswith("data: ") and line != "data: [DONE]"]
    text = {0: "", 1: ""}
    for chunk in chunks:
        for choice in chunk["choices"]:
            text[choice["index"]] += choice["delta"].get("content") or ""
    seeded = [post(server, "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "ignore_eos": True,
        "seed": seed})["choices"][0]["message"]["content"] for seed in (1, 2)]
    assert [text[0], text[1]] == seeded  # sample i draws with seed + i


def test_batched_prompts_equal_one_request_each(server):
    prompts = ["the pool", "a request waits"]
    singles = [post(server, "/v1/completions", {"prompt": p, "max_tokens": 5, "temperature": 0})
               ["choices"][0]["text"] for p in prompts]
    batched = post(server, "/v1/completions", {"prompt": prompts, "max_tokens": 5,
                                               "temperature": 0})
    assert [c["text"] for c in batched["choices"]] == singles
    ids = [server.runtime.tokenizer.encode(p) for p in prompts]
    by_ids = post(server, "/v1/completions", {"prompt": ids, "max_tokens": 5, "temperature": 0})
    assert [c["text"] for c in by_ids["choices"]] == singles
    assert by_ids["usage"]["prompt_tokens"] == sum(len(i) for i in ids)


def test_seed_reproduces_and_differs(server):
    body = {"prompt": "hello", "max_tokens": 8, "ignore_eos": True, "temperature": 1.0}
    first = [post(server, "/v1/completions", {**body, "seed": s})["choices"][0]["text"]
             for s in (3, 3, 4)]
    assert first[0] == first[1] != first[2]


def test_stop_token_ids_stop_and_min_tokens_holds_them_back(server, tiny_reference):
    want, _ = reference_steps(tiny_reference, PROMPT_IDS, NUM_TOKENS, _no_eos(server))
    stop_id = want[2]
    first_stop = want.index(stop_id)
    body = {"prompt": PROMPT_IDS, "max_tokens": NUM_TOKENS, "temperature": 0,
            "stop_token_ids": [stop_id], "ignore_eos": True}
    stopped = post(server, "/v1/completions", body)
    assert stopped["choices"][0]["finish_reason"] == "stop"
    assert stopped["usage"]["completion_tokens"] == first_stop + 1
    held = post(server, "/v1/completions", {**body, "min_tokens": first_stop + 1})
    assert held["usage"]["completion_tokens"] > first_stop + 1


def test_echo_prepends_the_prompt(server):
    plain = post(server, "/v1/completions", {"prompt": "hello there", "max_tokens": 3,
                                             "temperature": 0})
    echoed = post(server, "/v1/completions", {"prompt": "hello there", "max_tokens": 3,
                                              "temperature": 0, "echo": True})
    assert echoed["choices"][0]["text"] == "hello there" + plain["choices"][0]["text"]
    response = httpx.post(server.base_url + "/v1/completions", json={
        "model": "tiny", "prompt": "hello there", "max_tokens": 3, "temperature": 0,
        "echo": True, "stream": True}, timeout=60)
    texts = [json.loads(line[6:])["choices"][0]["text"] for line in response.text.splitlines()
             if line.startswith("data: {")]
    assert texts[0] == "hello there"
    assert "".join(texts) == echoed["choices"][0]["text"]


def _prompt_reference(reference, prompt_ids):
    import torch

    with torch.no_grad():
        logits = reference(torch.tensor([prompt_ids])).logits[0].float()
    return torch.log_softmax(logits, dim=-1)  # row q scores token q + 1


@pytest.mark.parametrize("max_num_batched_tokens", [512, 5])  # 5: the prompt prefills in chunks
def test_echo_with_logprobs_scores_the_prompt_like_transformers(serve, tiny_reference,
                                                                 max_num_batched_tokens):
    served = serve(max_num_batched_tokens=max_num_batched_tokens)
    prompt = [1, *range(30, 50)]  # past one 16-row block: a repeat would hit the prefix cache
    rows = _prompt_reference(tiny_reference, prompt)
    decode = served.runtime.tokenizer.decode
    for _ in range(2):  # the second time its blocks are cached; it must still score every row
        reply = post(served, "/v1/completions", {"prompt": prompt, "max_tokens": 1,
                                                 "temperature": 0, "echo": True, "logprobs": 2})
        logprobs = reply["choices"][0]["logprobs"]
        assert logprobs["tokens"][:len(prompt)] == [decode([t]) for t in prompt]
        assert logprobs["token_logprobs"][0] is None and logprobs["top_logprobs"][0] is None
        assert len(logprobs["tokens"]) == len(prompt) + 1
        for position in range(1, len(prompt)):
            row = rows[position - 1]
            got = logprobs["token_logprobs"][position]
            assert math.isclose(got, float(row[prompt[position]]), abs_tol=ATOL)
            values, ids = row.topk(2)
            top = logprobs["top_logprobs"][position]
            for value, token_id in zip(values.tolist(), ids.tolist(), strict=True):
                assert math.isclose(top[decode([token_id])], value, abs_tol=ATOL)
        last = rows[len(prompt) - 1]
        assert math.isclose(logprobs["token_logprobs"][-1], float(last.max()), abs_tol=ATOL)
        assert reply["choices"][0]["text"].startswith(decode(prompt))


def test_list_of_text_parts_is_the_joined_text(server):
    parts = [{"type": "text", "text": "first"}, {"type": "text", "text": "second"}]
    as_parts = post(server, "/v1/chat/completions", {
        "messages": [{"role": "user", "content": parts}], "max_tokens": 4, "temperature": 0})
    as_text = post(server, "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "first\nsecond"}], "max_tokens": 4,
        "temperature": 0})
    assert as_parts["choices"] == as_text["choices"]
    assert as_parts["usage"] == as_text["usage"]


def test_continuous_usage_stats_on_every_chunk(server):
    response = httpx.post(server.base_url + "/v1/completions", json={
        "model": "tiny", "prompt": "hello", "max_tokens": 4, "ignore_eos": True, "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True}}, timeout=60)
    chunks = [json.loads(line[6:]) for line in response.text.splitlines()
              if line.startswith("data: {")]
    counts = [c["usage"]["completion_tokens"] for c in chunks]
    assert all(c["usage"] is not None for c in chunks)
    assert counts == sorted(counts) and counts[-1] == 4
