"""Sampling and stopping through the engine (issue 5): seeded draws ignore
batch composition, stop strings cut the detokenized text, stop token ids end
a request, and finish reasons say why."""

from __future__ import annotations

import pytest
from engine_model_helpers import GREEDY, make_prompts

from iterserve.llm import LLM
from iterserve.model.stopping import IncrementalDetokenizer
from iterserve.records.sampling_params import SamplingParams

PROMPT = "The cat sat on the mat"
LONG_GREEDY = SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True)


def _sampled(seed: int | None) -> SamplingParams:
    return SamplingParams(max_tokens=12, temperature=0.8, top_p=0.9, seed=seed, ignore_eos=True)


@pytest.fixture(scope="module")
def prompts(tiny_model) -> list[list[int]]:
    return make_prompts([6, 11, 4, 19], tiny_model.config.vocab_size, seed=9)


@pytest.fixture(scope="module")
def unstopped(tiny_dir):
    """The greedy continuation of PROMPT with no stop rule but max_tokens."""
    return LLM(tiny_dir, block_size=4).generate([PROMPT], LONG_GREEDY)[0]


@pytest.mark.slow
@pytest.mark.parametrize(("policy", "knobs"), [
    pytest.param("vllm", {}, id="vllm"),
    pytest.param("sarathi", {"chunk_size": 3}, id="sarathi-chunk3"),
])
def test_seeded_draws_ignore_batch_composition(tiny_dir, prompts, policy, knobs) -> None:
    alone_llm = LLM(tiny_dir, block_size=4, enable_prefix_caching=False)
    params = [_sampled(42), _sampled(1), GREEDY, _sampled(7)]
    alone = [alone_llm.generate([p], sp)[0].token_ids for p, sp in zip(prompts, params, strict=True)]
    order = [2, 0, 3, 1]  # another batch composition and position for every request
    batched = LLM(tiny_dir, policy=policy, block_size=4, **knobs).generate(
        [prompts[i] for i in order], [params[i] for i in order])
    assert [out.token_ids for out in batched] == [alone[i] for i in order]


@pytest.mark.slow
def test_seed_selects_the_stream(tiny_dir, prompts) -> None:
    llm = LLM(tiny_dir, block_size=4)
    first, again, other, greedy = (
        llm.generate([prompts[0]], p)[0].token_ids
        for p in (_sampled(42), _sampled(42), _sampled(43), GREEDY)
    )
    assert first == again
    assert first != other
    assert first != greedy  # temperature 0.8 / top_p 0.9 really samples on this model


def _token_end_offsets(tokenizer, prompt_ids, token_ids) -> list[int]:
    """Visible text length after each output token (the engine's own detokenizer)."""
    detok = IncrementalDetokenizer(tokenizer, (), prompt_ids)
    offsets = []
    for token_id in token_ids:
        detok.push(token_id)
        offsets.append(len(detok.text))  # no stop strings: nothing is held back
    return offsets


@pytest.mark.slow
def test_stop_string_across_a_token_boundary_truncates_text(tiny_dir, unstopped) -> None:
    llm = LLM(tiny_dir, block_size=4)
    text = unstopped.text
    ends = _token_end_offsets(llm.tokenizer, unstopped.prompt_token_ids, unstopped.token_ids)
    # a 3-char stop string whose last char belongs to a later token than its first two,
    # and that does not occur earlier in the text
    boundary = next(e for e in ends[2:]
                    if 2 <= e < len(text) and text.find(text[e - 2: e + 1]) == e - 2)
    stop = text[boundary - 2: boundary + 1]
    out = llm.generate([PROMPT], SamplingParams(max_tokens=16, temperature=0.0, stop=(stop,),
                                                ignore_eos=True))[0]
    assert out.text == text[: boundary - 2]
    assert stop not in out.text
    assert out.finish_reason == "stop"
    assert out.token_ids == unstopped.token_ids[: len(out.token_ids)]
    assert len(out.token_ids) == next(i for i, e in enumerate(ends) if e > boundary) + 1


@pytest.mark.slow
def test_earliest_of_several_stop_strings_wins(tiny_dir, unstopped) -> None:
    text = unstopped.text
    late, early = text[-4:-1], text[3:6]
    cut = min(text.find(late), text.find(early))
    out = LLM(tiny_dir, block_size=4).generate(
        [PROMPT], SamplingParams(max_tokens=16, temperature=0.0, stop=(late, early),
                                 ignore_eos=True))[0]
    assert out.text == text[:cut]
    assert out.finish_reason == "stop"


@pytest.mark.slow
def test_prompt_text_never_matches_a_stop_string(tiny_dir, unstopped) -> None:
    assert "sat" not in unstopped.text  # precondition: only the prompt holds it
    out = LLM(tiny_dir, block_size=4).generate(
        [PROMPT], SamplingParams(max_tokens=16, temperature=0.0, stop=("sat",),
                                 ignore_eos=True))[0]
    assert (out.text, out.finish_reason) == (unstopped.text, "length")


@pytest.mark.slow
def test_stop_token_id_ends_the_request_on_that_token(tiny_dir, unstopped) -> None:
    greedy = unstopped.token_ids
    index = next(k for k in range(2, len(greedy)) if greedy[k] not in greedy[:k])
    params = SamplingParams(max_tokens=16, temperature=0.0, stop_token_ids=(greedy[index],),
                            ignore_eos=True)
    out = LLM(tiny_dir, block_size=4).generate([PROMPT], params)[0]
    assert out.token_ids == greedy[: index + 1]  # the stop token is emitted, then nothing
    assert out.finish_reason == "stop"


@pytest.mark.slow
def test_finish_reasons_in_one_batch(tiny_dir, unstopped) -> None:
    stop_id = unstopped.token_ids[0]
    params = [
        SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True),
        SamplingParams(max_tokens=16, temperature=0.0, stop_token_ids=(stop_id,),
                       ignore_eos=True),
    ]
    length, stop = LLM(tiny_dir, block_size=4).generate([PROMPT, PROMPT], params)
    assert (length.finish_reason, len(length.token_ids)) == ("length", 3)
    assert (stop.finish_reason, stop.token_ids) == ("stop", (stop_id,))
