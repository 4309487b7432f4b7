"""``iterserve generate`` on the tiny checkpoint (issue 5, in-process CLI)."""

from __future__ import annotations

import json

import pytest

from iterserve.cli.main import main
from iterserve.llm import LLM
from iterserve.records.sampling_params import SamplingParams

ARGS = ["--max-tokens", "4", "--ignore-eos", "--block-size", "4"]


@pytest.mark.slow
def test_generate_prompts_print_one_line_each(tiny_dir, capsys) -> None:
    code = main(["generate", str(tiny_dir), "--prompt", "Hello", "--prompt", "The cat", *ARGS])
    lines = capsys.readouterr().out.splitlines()
    assert code == 0
    assert len(lines) == 2
    assert lines[0].startswith("'Hello' -> ") and lines[0].endswith("[length]")
    assert lines[1].startswith("'The cat' -> ")


@pytest.mark.slow
def test_generate_prompts_file_json_matches_the_api(tiny_dir, tmp_path, capsys) -> None:
    prompts_file = tmp_path / "prompts.txt"
    prompts_file.write_text("Hello\n\nThe cat sat\n  \nOnce upon a time\n")
    code = main(["generate", str(tiny_dir), "--prompts-file", str(prompts_file), "--json", *ARGS])
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert code == 0
    assert [r["prompt"] for r in records] == ["Hello", "The cat sat", "Once upon a time"]
    want = LLM(tiny_dir, block_size=4).generate(
        [r["prompt"] for r in records],
        SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True))
    assert [r["token_ids"] for r in records] == [list(o.token_ids) for o in want]
    assert [r["text"] for r in records] == [o.text for o in want]
    assert {r["finish_reason"] for r in records} == {"length"}
    assert all(0 <= r["first_token_ms"] <= r["finish_ms"] for r in records)


@pytest.mark.slow
def test_generate_json_stdout_is_only_json_lines(tiny_dir, capsys) -> None:
    """The progress bar stays off stdout (it once left a blank first line there)."""
    code = main(["generate", str(tiny_dir), "--prompt", "Hello", "--json", *ARGS])
    lines = capsys.readouterr().out.splitlines()
    assert code == 0
    assert [json.loads(line)["prompt"] for line in lines] == ["Hello"]


def test_generate_missing_model_dir_exits_2_with_one_line(tmp_path, capsys) -> None:
    missing = tmp_path / "no-such-model"
    code = main(["generate", str(missing), "--prompt", "Hello"])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("iterserve generate: error:")
    assert str(missing) in lines[0]
