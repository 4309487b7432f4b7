"""0x09 Loop 6: the chunk ledger (causal pairs, history exposure) and its
end-to-end appearance in ``iterserve simulate``'s report.json."""

from __future__ import annotations

import json

import pytest
from policy_helpers import FIXTURES, write_workload

from iterserve.cli.main import main
from iterserve.metrics.chunk_ledger import chunk_pairs, ledger_from_sizes
from log_rows import as_rows

BYTES_PER_ROW = 131072  # M5.1 m5-1-gqa-fp16-logical-row-v1 (0x05)


def sizes_for(num_positions: int, chunk_size: int) -> list[int]:
    """Equal chunks of ``chunk_size``; the last chunk is the remainder."""
    full, rest = divmod(num_positions, chunk_size)
    return [chunk_size] * full + ([rest] if rest else [])


def triangle(num_positions: int) -> set[tuple[int, int]]:
    return {(q, k) for q in range(num_positions) for k in range(q + 1)}


def executed_prefill_chunks(decision_log, request_id: str,
                            num_prompt_tokens: int) -> list[tuple[int, int]]:
    """The (start, end) prefill intervals the engine actually executed, from the log."""
    chunks = []
    for line in decision_log.read_text().splitlines()[1:]:
        record = as_rows(json.loads(line))
        for item in (record.get("result") or {}).get("completed", []):
            if item["request_id"] == request_id and item["start"] < num_prompt_tokens:
                chunks.append((item["start"], item["end"]))
    return chunks


@pytest.mark.parametrize("chunk_size", [1, 2, 3, 4, 5, 6, 12])
def test_s12_partition_is_the_full_causal_triangle(chunk_size: int, tmp_path, capsys) -> None:
    """S = 12 under sarathi at chunk size C: the prefill intervals the engine
    executed (read from the decision log) expose every causal pair exactly
    once, and the report's ledger counts the pairs each executed chunk
    exposes (P_m) at the starts it really had."""
    workload = write_workload(
        tmp_path / "s12.json",
        [{"request_id": "p12", "arrival": 0, "prompt_tokens": 12, "max_output_tokens": 2}],
        {"max_num_batched_tokens": 12, "max_num_seqs": 2, "chunk_size": chunk_size}, {"p12": 1})
    out, log = tmp_path / "out", tmp_path / "decisions.jsonl"
    assert main(["simulate", "--workload", str(workload), "--policy", "sarathi", "--no-plots",
                 "--out", str(out), "--decision-log", str(log)]) == 0, capsys.readouterr().err
    executed = executed_prefill_chunks(log, "p12", 12)
    assert [end - start for start, end in executed] == sizes_for(12, chunk_size)
    full = triangle(12)
    assert len(full) == 78
    union: set[tuple[int, int]] = set()
    entry = json.loads((out / "report.json").read_text())["chunk_ledger"]["requests"]["p12"]
    assert entry["chunk_starts"] == [start for start, _ in executed]
    assert entry["total_pairs"] == 78
    for m, (start, end) in enumerate(executed):
        queries = range(start, end)
        history = {(q, k) for q in queries for k in range(start)}
        in_chunk = {(q, k) for q in queries for k in range(start, q + 1)}
        assert not union & (history | in_chunk), "a pair is processed by two chunks"
        union |= history | in_chunk
        assert entry["causal_pairs"][m] == len(history) + len(in_chunk)
    assert full - union == set(), "pairs missing"
    assert union - full == set(), "future (extra) pairs exposed"


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
        {"max_num_batched_tokens": 8, "max_num_seqs": 4, "chunk_size": 4},
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
