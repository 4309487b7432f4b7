"""The worked cadence example and the imbalance-area proxy (0x09).

The spec's slot table did not survive extraction. Its stated facts: a
ten-token prompt in chunks of 4, 4 and 2; three eligible decodes; an 8-token
budget; decode-only service 4 ms; every mixed slot within a 10 ms gate, yet
decodes wait longer between outputs; pairs 10, 26, 19 (55); twelve prior
rows exposed. The mixed-slot times [8, 8, 6] ms are the smallest fixture we
build from those facts (the spec's uniform proxy vector); [18, 4, 4] is its
uneven contrast (one unchunked prefill slot, then two decode-only slots).
"""

from __future__ import annotations

import pytest

from iterserve.metrics.cadence import (
    CadenceSchedule,
    CadenceSlot,
    cadence_ledger,
    imbalance_proxy_ms,
)

DECODES = ("d0", "d1", "d2")


def _schedule(chunks=(4, 4, 2), service=(8.0, 8.0, 6.0), decodes=(DECODES,) * 3,
              prompt=10) -> CadenceSchedule:
    slots = tuple(CadenceSlot(rows, ids, t) for rows, ids, t in zip(chunks, decodes, service,
                                                                   strict=True))
    return CadenceSchedule(prompt, DECODES, max_num_batched_tokens=8, decode_only_ms=4.0,
                           service_gate_ms=10.0, slots=slots)


@pytest.mark.parametrize(("service", "expected_ms"), [((18, 4, 4), 28), ((8, 8, 6), 2),
                                                      ((5,), 0), ((3, 3, 3), 0)])
def test_imbalance_proxy_of_the_spec_vectors(service, expected_ms) -> None:
    # 3 * 18 - 26 = 28; 3 * 8 - 22 = 2; equal service leaves no idle area
    assert imbalance_proxy_ms(service) == expected_ms


def test_imbalance_proxy_rejects_empty_and_negative_times() -> None:
    with pytest.raises(ValueError):
        imbalance_proxy_ms([])
    with pytest.raises(ValueError):
        imbalance_proxy_ms([4, -1])


def test_worked_cadence_example() -> None:
    ledger = cadence_ledger(_schedule())
    assert ledger.rows_per_slot == (7, 7, 5)  # 4+3, 4+3, 2+3: all within 8
    assert ledger.within_gate == (True, True, True)
    assert ledger.causal_pairs == (10, 26, 19)  # 4*0+10, 4*4+10, 2*8+3
    assert ledger.total_pairs == 55 == 10 * 11 // 2
    assert ledger.history_rows == 12  # starts 0 + 4 + 8
    assert ledger.dilation == (2.0, 2.0, 1.5)  # 8/4, 8/4, 6/4: longer waits between outputs
    assert ledger.imbalance_ms == 2


def test_a_slot_past_the_gate_is_reported() -> None:
    ledger = cadence_ledger(_schedule(service=(8.0, 11.0, 6.0)))
    assert ledger.within_gate == (True, False, True)
    assert ledger.imbalance_ms == 3 * 11 - 25


@pytest.mark.parametrize(("kwargs", "rule"), [
    ({"chunks": (4, 4, 3)}, "chunk coverage"),
    ({"chunks": (4, 4, 1)}, "chunk coverage"),
    ({"chunks": (6, 2, 2)}, "token budget"),  # 6 + 3 = 9 > 8
    ({"decodes": (DECODES, ("d0", "d1"), DECODES)}, "decode membership"),
    ({"decodes": (DECODES, DECODES, ("d0", "d1", "d3"))}, "decode membership"),
])
def test_negative_fixtures_name_the_broken_rule(kwargs, rule) -> None:
    with pytest.raises(ValueError, match=rule):
        cadence_ledger(_schedule(**kwargs))
