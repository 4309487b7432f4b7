"""0x09 Loop 6: the chunk ledger (causal pairs, history exposure) and its
end-to-end appearance in ``iterserve simulate``'s report.json."""

from __future__ import annotations

import json

import pytest
from policy_helpers import FIXTURES, write_workload

from iterserve.cli.main import main
from iterserve.metrics.chunk_ledger import chunk_pairs, ledger_from_sizes, visible_pairs

BYTES_PER_ROW = 131072  # M5.1 m5-1-gqa-fp16-logical-row-v1 (0x05)


def sizes_for(num_positions: int, chunk_size: int) -> list[int]:
    """Equal chunks of ``chunk_size``; the last chunk is the remainder."""
    full, rest = divmod(num_positions, chunk_size)
    return [chunk_size] * full + ([rest] if rest else [])


def triangle(num_positions: int) -> set[tuple[int, int]]:
    return {(q, k) for q in range(num_positions) for k in range(q + 1)}


def regions(sizes: list[int]) -> list[tuple[set[tuple[int, int]], set[tuple[int, int]]]]:
    """Per chunk, the two K/V regions 0x09 says a legal call exposes:
    committed history [0, s_m) and the in-chunk causal prefix [s_m, q]."""
    out = []
    start = 0
    for size in sizes:
        queries = range(start, start + size)
        history = {(q, k) for q in queries for k in range(start)}
        in_chunk = {(q, k) for q in queries for k in range(start, q + 1)}
        out.append((history, in_chunk))
        start += size
    return out


@pytest.mark.parametrize("chunk_size", [1, 2, 3, 4, 5, 6, 12])
def test_s12_partition_is_the_full_causal_triangle(chunk_size: int) -> None:
    sizes = sizes_for(12, chunk_size)
    full = triangle(12)
    assert len(full) == 78
    visible = visible_pairs(sizes)
    assert full - visible == set(), "pairs missing"
    assert visible - full == set(), "future (extra) pairs exposed"
    ledger = ledger_from_sizes(sizes)
    assert ledger.total_pairs == 78
    union: set[tuple[int, int]] = set()
    for m, (history, in_chunk) in enumerate(regions(sizes)):
        assert not history & in_chunk
        assert not union & (history | in_chunk), "a pair is processed by two chunks"
        union |= history | in_chunk
        assert ledger.causal_pairs[m] == len(history) + len(in_chunk)
    assert union == full


def test_s16_sweep_matches_the_hand_derived_table() -> None:
    table = json.loads((FIXTURES / "chunk_sweep_s16.json").read_text())
    assert [row["chunk_size"] for row in table["rows"]] == list(range(1, 17))
    for row in table["rows"]:
        ledger = ledger_from_sizes(sizes_for(16, row["chunk_size"]), table["bytes_per_row"])
        got = {
            "chunk_size": row["chunk_size"],
            "chunk_starts": list(ledger.chunk_starts),
            "history_rows": ledger.history_rows,
            "history_bytes_proxy": ledger.history_bytes_proxy,
        }
        assert got == row
        assert ledger.total_pairs == table["total_pairs"]
        assert ledger.num_positions == table["num_positions"]


def test_non_power_of_two_boundaries_not_chunk_count_decide_exposure() -> None:
    """C=4 and C=5 both make four chunks, yet expose 24 and 30 rows (0x09)."""
    four, five = ledger_from_sizes([4, 4, 4, 4]), ledger_from_sizes([5, 5, 5, 1])
    assert len(four.chunk_sizes) == len(five.chunk_sizes) == 4
    assert (four.history_rows, five.history_rows) == (24, 30)


def test_ten_token_prompt_chunks_4_4_2() -> None:
    ledger = ledger_from_sizes([4, 4, 2], BYTES_PER_ROW)
    assert ledger.chunk_starts == (0, 4, 8)
    assert ledger.causal_pairs == (10, 26, 19)
    assert ledger.total_pairs == 55 == len(triangle(10))
    assert ledger.history_rows == 12
    assert ledger.history_bytes_proxy == 12 * BYTES_PER_ROW
    assert [chunk_pairs(s, c) for s, c in ((0, 4), (4, 4), (8, 2))] == [10, 26, 19]


@pytest.mark.parametrize("sizes", [[], [4, 0, 6], [3, -1]])
def test_illegal_partitions_are_rejected(sizes: list[int]) -> None:
    with pytest.raises(ValueError):
        ledger_from_sizes(sizes)


def test_simulated_sarathi_run_reports_the_ledger(tmp_path, capsys) -> None:
    """A single ten-token prompt under sarathi, C=4: the report's ledger is
    read from completed chunks, not recomputed from the knob."""
    workload = write_workload(
        tmp_path / "ten.json",
        [{"request_id": "p10", "arrival": 0, "prompt_tokens": 10, "max_output_tokens": 3}],
        {"token_budget": 8, "sequence_budget": 4, "chunk_size": 4},
        {"p10": 2},
    )
    out = tmp_path / "out"
    code = main(["simulate", "--workload", str(workload), "--policy", "sarathi",
                 "--out", str(out), "--bytes-per-row", str(BYTES_PER_ROW)])
    assert code == 0, capsys.readouterr().err
    report = json.loads((out / "report.json").read_text())
    ledger = report["chunk_ledger"]
    entry = ledger["requests"]["p10"]
    assert entry["chunk_starts"] == [0, 4, 8]
    assert entry["chunk_sizes"] == [4, 4, 2]
    assert entry["causal_pairs"] == [10, 26, 19]
    assert entry["total_pairs"] == 55
    assert entry["history_rows"] == 12
    assert entry["history_bytes_proxy"] == 12 * BYTES_PER_ROW
    assert ledger["bytes_per_row"] == BYTES_PER_ROW
    assert ledger["history_bytes_proxy"] == 12 * BYTES_PER_ROW
    assert "not measured" in ledger["label"]
    assert report["token_rows"]["prefill"] == 10
