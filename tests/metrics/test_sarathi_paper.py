"""SARATHI's paper capacity model (0x09, F50 B_paper and F51 P:D), against
numbers worked by hand."""

from __future__ import annotations

from fractions import Fraction

import pytest

from iterserve.metrics.sarathi_paper import SarathiPaperModel, prefill_decode_ratio

GIB = 1 << 30


def test_llama13b_on_an_80gib_device_holds_17_requests_f50() -> None:
    # m_KV = 2 (K and V) * 40 layers * 5120 hidden * 2 bytes = 819,200 bytes/token
    # L_max * m_KV = 4096 * 819,200 = 3,355,443,200 bytes per request
    # M_G - M_S = (80 - 26) GiB = 57,982,058,496 bytes; / 3,355,443,200 = 17.28 -> 17
    model = SarathiPaperModel(80 * GIB, 26 * GIB, 4096, 819_200)
    assert model.batch_bound == 17


def test_p_to_d_is_the_chunk_over_the_piggybacked_decodes_f51() -> None:
    # 17 resident requests: one prefill chunk and 16 decodes
    assert prefill_decode_ratio(256, 17) == 16
    assert prefill_decode_ratio(100, 17) == Fraction(25, 4)  # 100 / 16, exact


def test_the_floor_is_exact_at_the_boundary_f50() -> None:
    per_request = 10 * 7  # L_max 10 tokens of 7 bytes
    assert SarathiPaperModel(5 + 3 * per_request, 5, 10, 7).batch_bound == 3
    assert SarathiPaperModel(5 + 3 * per_request - 1, 5, 10, 7).batch_bound == 2


def test_no_decode_slot_leaves_the_ratio_undefined_f51() -> None:
    one = SarathiPaperModel(5 + 70, 5, 10, 7).batch_bound
    assert one == 1
    with pytest.raises(ValueError, match="B_paper >= 2"):
        prefill_decode_ratio(64, one)
    with pytest.raises(ValueError, match="chunk_size"):
        prefill_decode_ratio(0, 17)


@pytest.mark.parametrize(("gpu", "state", "length", "per_token"),
                         [(0, 0, 1, 1), (10, 10, 1, 1), (10, -1, 1, 1), (10, 0, 0, 1),
                          (10, 0, 1, 0)])
def test_impossible_inputs_are_rejected(gpu: int, state: int, length: int,
                                        per_token: int) -> None:
    with pytest.raises(ValueError):
        SarathiPaperModel(gpu, state, length, per_token)
