"""Incremental detokenizer and stop rules: visible text never shows a stop string."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iterserve.model.stopping import IncrementalDetokenizer, StopReason, token_stop_reason
from iterserve.model.tokenizer import FakeTokenizer, load_tokenizer
from iterserve.records.sampling_params import SamplingParams

FAKE = FakeTokenizer()


def _stream(detokenizer: IncrementalDetokenizer, token_ids: list[int]) -> list[str]:
    deltas = []
    for token_id in token_ids:
        deltas.append(detokenizer.push(token_id))
        if detokenizer.is_stopped:
            return deltas
    deltas.append(detokenizer.finish())
    return deltas


def test_stop_string_truncates_visible_text() -> None:
    detokenizer = IncrementalDetokenizer(FAKE, stop=["STOP"])
    deltas = _stream(detokenizer, FAKE.encode("hello STOP world", add_special_tokens=False))
    assert "".join(deltas) == "hello "
    assert detokenizer.text == "hello "
    assert detokenizer.stop_string == "STOP"


def test_possible_stop_prefix_is_held_back_then_released() -> None:
    detokenizer = IncrementalDetokenizer(FAKE, stop=["END"])
    assert [detokenizer.push(t) for t in FAKE.encode("aE", add_special_tokens=False)] == ["a", ""]
    assert detokenizer.push(ord("N")) == ""
    assert detokenizer.push(ord("x")) == "ENx"
    assert detokenizer.finish() == ""
    assert detokenizer.text == "aENx"


def test_first_completed_stop_string_wins() -> None:
    """'cd' completes before 'bcde' does; when two complete together, the earlier start wins."""
    first = IncrementalDetokenizer(FAKE, stop=["cd", "bcde"])
    _stream(first, FAKE.encode("abcdef", add_special_tokens=False))
    assert (first.text, first.stop_string) == ("ab", "cd")
    together = IncrementalDetokenizer(FAKE, stop=["cd", "bcd"])
    _stream(together, FAKE.encode("abcdef", add_special_tokens=False))
    assert (together.text, together.stop_string) == ("a", "bcd")


def test_multibyte_character_is_not_split() -> None:
    detokenizer = IncrementalDetokenizer(FAKE)
    deltas = _stream(detokenizer, FAKE.encode("é🙂!", add_special_tokens=False))
    assert "\ufffd" not in "".join(deltas)
    assert "".join(deltas) == "é🙂!"
    assert deltas[0] == ""  # first byte of é alone is not text yet


@settings(max_examples=200, deadline=None)
@given(
    text=st.text(alphabet="abcXY é", max_size=30),
    stops=st.lists(st.text(alphabet="abcXY", min_size=1, max_size=4), max_size=3),
)
def test_streamed_text_is_text_before_first_stop(text: str, stops: list[str]) -> None:
    detokenizer = IncrementalDetokenizer(FAKE, stop=stops)
    streamed = "".join(_stream(detokenizer, FAKE.encode(text, add_special_tokens=False)))
    assert streamed == _expected_visible(text, stops) == detokenizer.text


def _expected_visible(text: str, stops: list[str]) -> str:
    """Oracle: at the first prefix containing a stop string, cut at its earliest stop."""
    for num_chars in range(1, len(text) + 1):
        found = [text[:num_chars].find(s) for s in stops if s in text[:num_chars]]
        if found:
            return text[: min(found)]
    return text


def test_real_tokenizer_roundtrip_with_leading_space_context(tiny_dir) -> None:
    tokenizer = load_tokenizer(tiny_dir)
    prompt = tokenizer.encode("The river was calm")
    output = tokenizer.encode(" and the boats moved slowly. Done", add_special_tokens=False)
    detokenizer = IncrementalDetokenizer(tokenizer, stop=[". Do"], prompt_token_ids=prompt)
    streamed = "".join(_stream(detokenizer, output))
    assert streamed == " and the boats moved slowly"


@pytest.mark.parametrize(
    ("token_id", "count", "params", "expected"),
    [
        (9, 1, SamplingParams(max_tokens=4), StopReason.EOS),
        (9, 1, SamplingParams(max_tokens=4, ignore_eos=True), None),
        (5, 2, SamplingParams(max_tokens=4, stop_token_ids=(5,)), StopReason.STOP_TOKEN),
        (3, 4, SamplingParams(max_tokens=4), StopReason.MAX_TOKENS),
        (3, 3, SamplingParams(max_tokens=4), None),
    ],
)
def test_token_stop_reason(token_id, count, params, expected) -> None:
    assert token_stop_reason(token_id, count, params, eos_token_ids=(9,)) == expected


def test_push_after_stop_raises() -> None:
    detokenizer = IncrementalDetokenizer(FAKE, stop=["a"])
    detokenizer.push(ord("a"))
    with pytest.raises(ValueError):
        detokenizer.push(ord("b"))
