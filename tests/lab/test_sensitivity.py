"""0x0E one-control sensitivity (F68-F72, F61) from the code paths that
own each ledger: ten cases over nine axes. Every expectation below is
worked by hand from the spec's base fixture (S=16, C=4, D=4, B_tok=8,
B_seq=8, 131072-byte rows, 8 of 28 rows reserved, forecast 5, priorities
low=4 / high=0 with q_age=2, clients A=8 / B=4, prefix hit 0, foreign
ready), never from the module's own formulas."""

from __future__ import annotations

import dataclasses
import json

import pytest

from iterserve.cli.main import main
from iterserve.lab import sensitivity_runs as runs
from iterserve.lab.sensitivity import (
    BASE,
    CASES,
    Ledgers,
    formula_ledgers,
    observe,
    sensitivity_table,
)

MIB = 1024 * 1024
ROWS = {(row.control, row.value): row for row in sensitivity_table()}

# base: M = ceil(16/4) = 4; P = 16*17/2 = 136; R_hist = 0+4+8+12 = 24 rows = 24 * 128 KiB
# = 3 MiB; D_piggy = min(4, 8-4, 8-1) = 4; A_intent = floor((28-8)/5) = 4; aging:
# 4 - floor(t/2) <= 0 first at t = 8 (at t = 7 it is 4 - 3 = 1); clients finish 8 and 4;
# U = 16 - 0; the prompt is eligible.
HAND_BASE = Ledgers(num_chunks=4, causal_pairs=136, history_rows=24, exposure_bytes=3 * MIB,
                    piggyback_decode_rows=4, reservation_intents=4, aging_crossover_tick=8,
                    client_completed=(8, 4), uncached_prompt_rows=16, prompt_eligible=True)

# each case: the ledgers it must move, worked by hand
HAND_CASES = {
    # C=2: M=8, R_hist = 2*(0+1+...+7) = 56 rows = 7 MiB, D_piggy = min(4, 6, 7) = 4
    ("chunk_size", 2): {"num_chunks": 8, "history_rows": 56, "exposure_bytes": 7 * MIB},
    # C=8: M=2, R_hist = 0+8 = 8 rows = 1 MiB, D_piggy = min(4, 0, 7) = 0
    ("chunk_size", 8): {"num_chunks": 2, "history_rows": 8, "exposure_bytes": 1 * MIB,
                        "piggyback_decode_rows": 0},
    ("max_num_batched_tokens", 6): {"piggyback_decode_rows": 2},  # min(4, 6-4, 7)
    ("max_num_seqs", 3): {"piggyback_decode_rows": 2},  # min(4, 4, 3-1)
    ("forecast_rows", 4): {"reservation_intents": 5},  # floor(20/4)
    ("aging_quantum", 3): {"aging_crossover_tick": 12},  # 4 - floor(t/3) <= 0 from t = 12
    ("client_b_events", 8): {"client_completed": (8, 8)},
    ("prefix_hit_rows", 8): {"uncached_prompt_rows": 8},  # two whole 4-row blocks hit
    ("foreign_ready", False): {"prompt_eligible": False},
    ("hidden_output_tokens", 8): {},
}


def test_base_fixture_derives_the_0x0e_figures_from_the_run() -> None:
    assert observe(BASE).ledgers == HAND_BASE


def test_ten_cases_over_nine_axes() -> None:
    assert len(CASES) == 10 and len({axis for axis, _, _ in CASES}) == 9
    assert set(HAND_CASES) == {(control, value) for _, control, value in CASES}


@pytest.mark.parametrize(("control", "value"), sorted(HAND_CASES, key=str))
def test_each_control_moves_only_its_hand_derived_ledgers(control, value) -> None:
    row = ROWS[(control, value)]
    expected = dataclasses.replace(HAND_BASE, **HAND_CASES[(control, value)])
    assert row.ledgers == expected
    assert row.moved == tuple(name for name in Ledgers.__dataclass_fields__
                              if name in HAND_CASES[(control, value)])
    assert row.formula == expected  # the module's formulas agree with the hand figures


@pytest.mark.parametrize(("low", "high", "q_age", "tick"), [
    (4, 0, 2, 8),  # the spec's base: 4 - floor(8/2) = 0, at 7: 4 - 3 = 1
    (3, 0, 3, 9),  # 3 - floor(9/3) = 0, at 8: 3 - 2 = 1
    (5, 2, 1, 3),  # 5 - 3 = 2 = high
    # equal classes: tick 0 ties with high-000, listed first in the workload; at tick 1 the
    # low request is older than high-001
    (0, 0, 2, 1),
])
def test_priority_aging_runs_and_crosses_at_the_hand_derived_tick(low, high, q_age, tick) -> None:
    fixture = dataclasses.replace(BASE, low_priority=low, high_priority=high, aging_quantum=q_age)
    assert runs.aging_crossover_tick(fixture) == tick


def test_aging_that_cannot_cross_within_the_trace_reports_none() -> None:
    """q_age=100 would need tick 400; the run has 64 ticks of high arrivals."""
    assert runs.aging_crossover_tick(dataclasses.replace(BASE, aging_quantum=100)) is None


def test_a_prefix_hit_counts_whole_committed_blocks_only() -> None:
    """A 6-row hit covers one whole 4-row block: U = 16 - 4 = 12, not 10."""
    assert runs.uncached_prompt_rows(dataclasses.replace(BASE, prefix_hit_rows=6)) == 12


def test_no_scalar_best_chunk_smaller_chunks_cost_more_history() -> None:
    small, large = ROWS[("chunk_size", 2)].ledgers, ROWS[("chunk_size", 8)].ledgers
    assert small.history_rows > large.history_rows
    assert small.piggyback_decode_rows > large.piggyback_decode_rows


def test_hidden_output_sweep_changes_no_online_plan() -> None:
    base = observe(BASE).prefill_plans
    for hidden in (1, 8, 16):
        assert observe(dataclasses.replace(BASE, hidden_output_tokens=hidden)).prefill_plans == base
    assert ROWS[("chunk_size", 2)].online_plans_unchanged is False  # the check can fail


def test_formula_ledgers_of_the_base_are_the_hand_figures() -> None:
    assert formula_ledgers(BASE) == HAND_BASE


def test_cli_prints_the_table_and_json(capsys) -> None:
    assert main(["sensitivity"]) == 0
    text = capsys.readouterr().out
    assert "| base | - | 4 | 136 | 24 | 3 | 4 | 4 | 8 | 8/4 | 16 | yes | none | yes | yes |" in text
    assert "| foreign readiness | foreign_ready=no |" in text
    assert main(["sensitivity", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 11 and rows[0]["ledgers"]["causal_pairs"] == 136
    assert rows[6]["ledgers"]["aging_crossover_tick"] == 12
