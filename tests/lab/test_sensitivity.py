"""0x0E one-control sensitivity (F68-F71) from the real code path: the base
fixture derives 4 chunks, 136 causal pairs, 24 history rows, 3 MiB, 4
piggyback decode rows, 4 reservation intents, aging crossover at tick 8;
each case moves only its own ledgers; the hidden-output sweep changes no
online plan."""

from __future__ import annotations

import dataclasses
import json

import pytest

from iterserve.cli.main import main
from iterserve.lab.sensitivity import (
    BASE,
    Ledgers,
    formula_ledgers,
    observe,
    sensitivity_table,
)

ROWS = {(row.control, row.value): row for row in sensitivity_table()}


def test_base_fixture_derives_the_0x0e_figures_from_the_run() -> None:
    assert observe(BASE).ledgers == Ledgers(
        num_chunks=4, causal_pairs=136, history_rows=24, exposure_bytes=3 * 1024 * 1024,
        piggyback_decode_rows=4, reservation_intents=4, aging_crossover_tick=8)


@pytest.mark.parametrize(("control", "value", "moved"), [
    ("chunk_size", 2, ("num_chunks", "history_rows", "exposure_bytes")),
    ("chunk_size", 8, ("num_chunks", "history_rows", "exposure_bytes",
                       "piggyback_decode_rows")),
    ("max_num_batched_tokens", 6, ("piggyback_decode_rows",)),
    ("max_num_seqs", 3, ("piggyback_decode_rows",)),
    ("forecast_rows", 4, ("reservation_intents",)),
    ("hidden_output_tokens", 1, ()),
    ("hidden_output_tokens", 8, ()),
])
def test_each_control_moves_only_its_ledgers_and_runs_agree_with_f68_f71(control, value,
                                                                        moved) -> None:
    row = ROWS[(control, value)]
    assert row.moved == moved
    assert row.ledgers == row.formula == formula_ledgers(dataclasses.replace(BASE,
                                                                           **{control: value}))


def test_no_scalar_best_chunk_smaller_chunks_cost_more_history() -> None:
    small, large = ROWS[("chunk_size", 2)].ledgers, ROWS[("chunk_size", 8)].ledgers
    assert small.history_rows > large.history_rows
    assert small.piggyback_decode_rows > large.piggyback_decode_rows


def test_hidden_output_sweep_changes_no_online_plan() -> None:
    base = observe(BASE).prefill_plans
    for hidden in (1, 8, 16):
        assert observe(dataclasses.replace(BASE, hidden_output_tokens=hidden)).prefill_plans == base
    assert ROWS[("chunk_size", 2)].online_plans_unchanged is False  # the check can fail


def test_cli_prints_the_table_and_json(capsys) -> None:
    assert main(["sensitivity"]) == 0
    text = capsys.readouterr().out
    assert "| base | - | 4 | 136 | 24 | 3 | 4 | 4 | 8 | none | yes | yes |" in text
    assert main(["sensitivity", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 8 and rows[0]["ledgers"]["causal_pairs"] == 136
