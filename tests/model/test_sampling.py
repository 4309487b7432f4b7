"""Sampler: greedy, filters, logprobs, and reproducibility independent of batch composition."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from iterserve.model.sampling import (
    SampleRow,
    greedy_token_ids,
    row_seed,
    sample,
    sample_batch,
    sample_ids,
)
from iterserve.records.sampling_params import SamplingParams

VOCAB = 50


def _logits(num_rows: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(num_rows, VOCAB, generator=torch.Generator().manual_seed(seed)) * 3


def test_greedy_is_argmax_with_raw_logprob() -> None:
    logits = _logits(6)
    rows = [SampleRow(SamplingParams(temperature=0.0), seed=i, output_index=0) for i in range(6)]
    sampled = sample(logits, rows)
    assert [s.token_id for s in sampled] == logits.argmax(-1).tolist()
    expected = torch.log_softmax(logits, -1).max(-1).values
    torch.testing.assert_close(torch.tensor([s.logprob for s in sampled]), expected)


@pytest.mark.parametrize("temperature", [0.5, 1.0, 3.0])
def test_top_k_one_equals_greedy(temperature: float) -> None:
    logits = _logits(8, seed=1)
    params = SamplingParams(temperature=temperature, top_k=1)
    sampled = sample(logits, [SampleRow(params, seed=i, output_index=i) for i in range(8)])
    assert [s.token_id for s in sampled] == logits.argmax(-1).tolist()


def test_tiny_top_p_equals_greedy() -> None:
    logits = _logits(8, seed=2)
    params = SamplingParams(temperature=1.0, top_p=1e-6)
    sampled = sample(logits, [SampleRow(params, seed=i, output_index=0) for i in range(8)])
    assert [s.token_id for s in sampled] == logits.argmax(-1).tolist()


def test_top_k_keeps_draws_inside_the_k_best() -> None:
    logits = torch.zeros(1, VOCAB)
    logits[0, :3] = torch.tensor([5.0, 4.0, 3.0])
    params = SamplingParams(temperature=5.0, top_k=3)
    drawn = {
        sample(logits, [SampleRow(params, seed=7, output_index=i)])[0].token_id for i in range(200)
    }
    assert drawn == {0, 1, 2}


@settings(max_examples=25, deadline=None)
@given(
    permutation=st.permutations(range(6)),
    keep=st.lists(st.booleans(), min_size=6, max_size=6),
)
def test_same_seed_same_token_regardless_of_batch(permutation: list[int], keep: list[bool]) -> None:
    """Each row's draw depends only on its logits, seed and output index."""
    logits = _logits(6, seed=3)
    params = [
        SamplingParams(temperature=1.0),
        SamplingParams(temperature=0.7, top_k=10),
        SamplingParams(temperature=1.3, top_p=0.8),
        SamplingParams(temperature=0.0),
        SamplingParams(temperature=2.0, top_k=5, top_p=0.9),
        SamplingParams(temperature=1.0, seed=42),
    ]
    rows = [SampleRow(p, seed=100 + i, output_index=i) for i, p in enumerate(params)]
    alone = [sample(logits[i : i + 1], [rows[i]])[0] for i in range(6)]
    chosen = [i for i in permutation if keep[i]] or [permutation[0]]
    together = sample(logits[chosen], [rows[i] for i in chosen])
    assert together == [alone[i] for i in chosen]


def test_seed_and_output_index_both_matter() -> None:
    logits = torch.zeros(1, 1000)
    params = SamplingParams(temperature=1.0)

    def draw(seed: int, index: int) -> int:
        return sample(logits, [SampleRow(params, seed=seed, output_index=index)])[0].token_id

    assert draw(1, 0) == draw(1, 0)
    assert len({draw(1, i) for i in range(10)}) > 5
    assert len({draw(s, 0) for s in range(10)}) > 5
    assert len({row_seed(s, i) for s in range(20) for i in range(20)}) == 400


def test_empirical_frequencies_follow_probabilities() -> None:
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.2]]))
    params = SamplingParams(temperature=1.0)
    draws = [
        sample(logits, [SampleRow(params, seed=9, output_index=i)])[0].token_id for i in range(3000)
    ]
    frequencies = [draws.count(t) / len(draws) for t in range(3)]
    assert frequencies == pytest.approx([0.5, 0.3, 0.2], abs=0.04)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_tokens": 0},
        {"temperature": -0.1},
        {"temperature": float("nan")},
        {"top_k": 0},
        {"top_p": 0.0},
        {"top_p": 1.5},
        {"seed": -1},
        {"stop": ("",)},
    ],
)
def test_invalid_params_raise(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        SamplingParams(**kwargs)


def test_params_store_tuples() -> None:
    params = SamplingParams(stop=["a", "b"], stop_token_ids=[3])  # type: ignore[arg-type]
    assert params.stop == ("a", "b")
    assert params.stop_token_ids == (3,)
    assert hash(params) == hash(SamplingParams(stop=("a", "b"), stop_token_ids=(3,)))


def test_row_count_mismatch_raises() -> None:
    with pytest.raises(ValueError):
        sample(_logits(2), [SampleRow(SamplingParams(), seed=0, output_index=0)])


def test_greedy_token_ids_is_torch_argmax_on_ties_nan_and_inf() -> None:
    """The numpy fast path picks what torch's argmax picks: the first
    maximum, NaN counting as the maximum, all -inf rows at index 0."""
    generator = torch.Generator().manual_seed(3)
    logits = torch.randint(-2, 2, (9, 257), generator=generator).float()  # many ties
    logits[1, 40] = float("nan")
    logits[1, 7] = float("nan")
    logits[2] = float("-inf")
    logits[3, 100] = float("inf")
    with torch.inference_mode():  # the forward's logits are inference tensors
        frozen = logits.clone()
    for case in (logits, frozen, logits[:, ::2], logits.t().contiguous().t()):
        assert greedy_token_ids(case).tolist() == case.argmax(-1).tolist()
        assert greedy_token_ids(case).dtype == torch.int64


def test_sample_ids_matches_sample() -> None:
    logits = _logits(7, seed=4)
    rows = [SampleRow(SamplingParams(temperature=0.0 if i % 2 else 0.8), seed=i, output_index=i)
            for i in range(7)]
    token_ids, logprobs = sample_ids(logits, rows)
    assert [(s.token_id, s.logprob) for s in sample(logits, rows)] == list(
        zip(token_ids, logprobs, strict=True))


def test_repetition_penalty_equals_transformers_processor() -> None:
    from transformers import RepetitionPenaltyLogitsProcessor

    logits = _logits(3, seed=4)
    histories = [[1, 5, 5, 9], [2, 3], [7, 7, 7, 40, 1]]
    params = SamplingParams(temperature=0.0, repetition_penalty=1.7)
    rows = [SampleRow(params, seed=0, output_index=0, history=h, num_prompt_tokens=2)
            for h in histories]
    got = sample_batch(logits, rows).token_ids
    processor = RepetitionPenaltyLogitsProcessor(1.7)
    want = [int(processor(torch.tensor([h]), logits[i:i + 1].clone()).argmax())
            for i, h in enumerate(histories)]
    assert got == want


def test_presence_and_frequency_read_only_the_outputs() -> None:
    logits = torch.zeros(1, 8)
    logits[0, 3] = 1.0  # in the prompt only: not penalised
    logits[0, 5] = 1.2  # output twice: 1.2 - 0.2 - 2 * 0.3 = 0.4
    params = SamplingParams(temperature=0.0, presence_penalty=0.2, frequency_penalty=0.3)
    row = SampleRow(params, seed=0, output_index=2, history=[3, 3, 5, 5], num_prompt_tokens=2)
    assert sample_batch(logits, [row]).token_ids == [3]


def test_min_tokens_masks_eos_and_stop_ids_until_reached() -> None:
    logits = torch.zeros(2, 8)
    logits[:, 7] = 5.0  # eos
    logits[:, 6] = 4.0  # a stop token id
    params = SamplingParams(temperature=0.0, min_tokens=2, stop_token_ids=(6,))
    rows = [SampleRow(params, seed=0, output_index=i) for i in (1, 2)]
    assert sample_batch(logits, rows, eos_token_ids=(7,)).token_ids == [0, 7]


def test_alternatives_are_the_top_raw_logprobs() -> None:
    logits = _logits(2, seed=2)
    rows = [SampleRow(SamplingParams(temperature=0.0, num_top_logprobs=k, repetition_penalty=2.0),
                      seed=0, output_index=0, history=[0, 1]) for k in (0, 3)]
    batch = sample_batch(logits, rows)
    assert batch.alternatives[0] == ()
    values, ids = torch.log_softmax(logits[1], dim=-1).topk(3)
    assert [t for t, _ in batch.alternatives[1]] == ids.tolist()
    assert [lp for _, lp in batch.alternatives[1]] == pytest.approx(values.tolist())
