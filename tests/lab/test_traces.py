"""Trace readers (project JSONL, Azure CSV, BurstGPT CSV) and
``iterserve workload convert``: all three sample files load; slicing,
sampling and time scaling; malformed rows name their line (exit 2)."""

from __future__ import annotations

import json

import pytest
from lab_helpers import TRACES

from iterserve.cli.main import main
from iterserve.records.workload import load_workload
from iterserve.sim.trace_workload import TraceSelection, select_records
from iterserve.sim.traces import TraceError, read_trace

SAMPLES = {"jsonl": "requests_sample.jsonl", "azure": "azure_sample.csv",
           "burstgpt": "burstgpt_sample.csv"}


def test_jsonl_sample_loads() -> None:
    trace = read_trace(TRACES / SAMPLES["jsonl"], "jsonl")
    assert [r.arrival_s for r in trace.records] == [0.0, 0.25, 0.4, 1.5, 2.0]
    assert trace.records[1].num_prompt_tokens == 512 and trace.records[1].priority == 1
    assert trace.records[4].client_id == "default"
    assert trace.records[3].line == 5  # the blank line 4 is skipped, lines keep their number


def test_azure_sample_loads() -> None:
    trace = read_trace(TRACES / SAMPLES["azure"], "azure")
    assert trace.num_failed_skipped == 1  # GeneratedTokens 0
    assert len(trace.records) == 7
    assert trace.records[0].arrival_s == 0.0
    assert trace.records[1].arrival_s == pytest.approx(4.314579)
    assert (trace.records[-1].num_prompt_tokens, trace.records[-1].num_output_tokens) == (1021, 130)


@pytest.mark.parametrize("fmt", ["azure", "burstgpt"])
def test_a_csv_with_a_byte_order_mark_loads_as_without(tmp_path, fmt) -> None:
    """A spreadsheet's CSV export starts with a UTF-8 byte order mark; its
    header's first column is the same column (it read as missing)."""
    marked = tmp_path / f"marked_{fmt}.csv"
    marked.write_bytes(b"\xef\xbb\xbf" + (TRACES / SAMPLES[fmt]).read_bytes())
    assert read_trace(marked, fmt) == read_trace(TRACES / SAMPLES[fmt], fmt)


def test_burstgpt_sample_loads() -> None:
    trace = read_trace(TRACES / SAMPLES["burstgpt"], "burstgpt")
    assert trace.num_failed_skipped == 1  # Response tokens 0
    assert [r.arrival_s for r in trace.records][:3] == [0.0, 40.0, 113.0]
    assert {r.client_id for r in trace.records} == {"ChatGPT", "GPT-4"}
    assert trace.records[2].num_output_tokens == 91


@pytest.mark.parametrize("fmt", sorted(SAMPLES))
def test_convert_writes_a_loadable_workload(tmp_path, fmt) -> None:
    out = tmp_path / "w.json"
    assert main(["workload", "convert", str(TRACES / SAMPLES[fmt]), "--format", fmt,
                 "-o", str(out), "--max-output-tokens", "300", "--kv-blocks", "256"]) == 0
    manifest = load_workload(out)
    trace = read_trace(TRACES / SAMPLES[fmt], fmt)
    assert len(manifest.online.requests) == len(trace.records)
    assert manifest.online.kv is not None and manifest.online.kv.num_kv_blocks == 256
    for spec, record in zip(manifest.online.requests, trace.records, strict=True):
        assert spec.max_output_tokens == 300  # the declared cap, never the realized length
        assert spec.arrival == pytest.approx(record.arrival_s * 1000)
        realized = manifest.hidden.realized_output_tokens[spec.request_id]
        assert realized == min(record.num_output_tokens, 300)


def test_slicing_sampling_and_time_scaling(tmp_path) -> None:
    records = read_trace(TRACES / SAMPLES["burstgpt"], "burstgpt").records
    window = select_records(records, TraceSelection(start_s=100, end_s=200))
    assert [r.arrival_s for r in window] == [113.0, 125.0, 126.0, 163.0, 198.0, 199.0]
    assert len(select_records(records, TraceSelection(limit=3))) == 3
    sampled = [select_records(records, TraceSelection(sample_fraction=0.5, seed=s))
               for s in (1, 1, 2)]
    assert sampled[0] == sampled[1] and sampled[0] != sampled[2]
    assert all(r in records for r in sampled[0])
    out = tmp_path / "w.json"
    assert main(["workload", "convert", str(TRACES / SAMPLES["burstgpt"]), "--format",
                 "burstgpt", "-o", str(out), "--start", "100", "--end", "200",
                 "--time-scale", "0.5"]) == 0
    arrivals = [r.arrival for r in load_workload(out).online.requests]
    assert arrivals == [6500.0, 12500.0, 13000.0, 31500.0, 49000.0, 49500.0]


def test_convert_is_byte_identical_for_the_same_flags(tmp_path) -> None:
    texts = []
    for name in ("a.json", "b.json"):
        assert main(["workload", "convert", str(TRACES / SAMPLES["azure"]), "--format", "azure",
                     "-o", str(tmp_path / name), "--sample", "0.7", "--seed", "5"]) == 0
        texts.append((tmp_path / name).read_bytes())
    assert texts[0] == texts[1]


MALFORMED = {
    "jsonl-not-json": ("jsonl", '{"arrival_s": 0, "prompt_tokens": 3, "output_tokens": 2}\n'
                       '{"arrival_s": 1, "prompt_tokens": 3,\n', "t.jsonl:2: not valid JSON"),
    "jsonl-zero-prompt": ("jsonl", '\n\n{"arrival_s": 0, "prompt_tokens": 0, "output_tokens": 2}\n',
                          "t.jsonl:3: column 'prompt_tokens' must be an integer >= 1"),
    "jsonl-unknown": ("jsonl", '{"arrival_s": 0, "prompt_tokens": 1, "output_tokens": 2, "x": 1}\n',
                      "t.jsonl:1: unknown field"),
    "azure-text-count": ("azure", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                         "2023-11-16 18:15:46.68,10,4\n2023-11-16 18:15:47.0,ten,4\n",
                         "t.jsonl:3: column 'ContextTokens' must be an integer >= 0, got 'ten'"),
    "azure-bad-time": ("azure", "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,10,4\n",
                       "t.jsonl:2: column 'TIMESTAMP'"),
    "azure-missing-column": ("azure", "TIMESTAMP,ContextTokens\n0,10\n",
                             "t.jsonl:1: missing column(s) ['GeneratedTokens']"),
    "burstgpt-negative": ("burstgpt",
                          "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                          "1,ChatGPT,10,4,14,API log\n2,ChatGPT,10,-4,6,API log\n",
                          "t.jsonl:3: column 'Response tokens' must be an integer >= 0"),
    "burstgpt-short-row": ("burstgpt",
                           "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                           "1,ChatGPT,10\n", "t.jsonl:2: expected 6 columns"),
    "burstgpt-bad-time": ("burstgpt",
                          "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                          "soon,ChatGPT,10,4,14,API log\n", "t.jsonl:2: column 'Timestamp'"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_rows_name_their_line(tmp_path, capsys, case) -> None:
    fmt, text, expected = MALFORMED[case]
    path = tmp_path / "t.jsonl"
    path.write_text(text)
    with pytest.raises(TraceError, match="t.jsonl"):
        read_trace(path, fmt)
    assert main(["workload", "convert", str(path), "--format", fmt,
                 "-o", str(tmp_path / "w.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and expected in err, err


@pytest.mark.parametrize("flags, expected", [
    (["--sample", "0"], "--sample"), (["--limit", "0"], "--limit"),
    (["--start", "5", "--end", "1"], "--end"), (["--time-scale", "-1"], "--time-scale"),
    (["--start", "9999"], "keeps no request"), (["--max-output-tokens", "0"], "--max-output"),
])
def test_bad_convert_flags_fail_in_one_line(tmp_path, capsys, flags, expected) -> None:
    assert main(["workload", "convert", str(TRACES / SAMPLES["jsonl"]), "--format", "jsonl",
                 "-o", str(tmp_path / "w.json"), *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and expected in err, err


def test_converted_trace_runs_in_the_simulator(tmp_path) -> None:
    out = tmp_path / "w.json"
    assert main(["workload", "convert", str(TRACES / SAMPLES["jsonl"]), "--format", "jsonl",
                 "-o", str(out), "--max-output-tokens", "400"]) == 0
    assert main(["simulate", "--workload", str(out), "--policy", "vllm",
                 "--out", str(tmp_path / "run"), "--no-plots"]) == 0
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert {r["finish_reason"] for r in report["requests"].values()} <= {"stop", "length"}
