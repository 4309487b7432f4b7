"""A real-model run's decision log (issue 14 part 3): replay re-derives its
plans and states and checks its results against the digest chain, since a
TorchExecutor's tokens and timings cannot be re-derived without the model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from engine_model_helpers import GREEDY, make_prompts

from iterserve.cli.main import main
from iterserve.llm import LLM
from log_rows import as_columns, row_lines


@pytest.fixture(scope="module")
def torch_log(tiny_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    llm = LLM(tiny_dir, policy="vllm", block_size=4, max_num_batched_tokens=16)
    log = tmp_path_factory.mktemp("torch-log") / "decisions.jsonl"
    prompts = make_prompts([5, 9, 14], llm.tokenizer.vocab_size)
    with log.open("w") as stream:
        outputs = llm.generate(prompts, GREEDY, decision_log=stream)
    assert all(len(out.token_ids) == GREEDY.max_tokens for out in outputs)
    return log


def _lines(path: Path) -> list[dict]:
    return row_lines(path)  # one object per work item and completion, to read or edit


@pytest.mark.slow
def test_torch_log_replays_with_its_results_checked_by_the_chain(torch_log, capsys):
    header = _lines(torch_log)[0]
    assert header["executor"] == "torch" and header["output_lengths_sha256"] is None
    capsys.readouterr()
    assert main(["replay", str(torch_log)]) == 0
    assert "real-model results checked against the digest chain" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize("field", ["token_id", "duration", "num_blocks_free"])
@pytest.mark.parametrize("position", [1, "middle", -1])
def test_an_edited_torch_result_breaks_the_chain_at_its_line(torch_log, field, position,
                                                            tmp_path, capsys):
    lines = _lines(torch_log)
    # the first, a middle and the last iteration line (an online log has arrival lines too)
    iterations = [i for i, line in enumerate(lines) if line["type"] == "iteration"]
    index = iterations[{1: 0, "middle": len(iterations) // 2, -1: -1}[position]]
    result = lines[index]["result"]
    if field == "token_id":
        completion = next(c for c in reversed(result["completed"]) if c["emitted"])
        completion["token_id"] += 1
    elif field == "duration":
        result["duration"] *= 2
    else:
        result["capacity"]["num_blocks_free"] -= 1
    edited = tmp_path / "edited.jsonl"
    edited.write_text("".join(json.dumps(as_columns(line)) + "\n" for line in lines))
    capsys.readouterr()
    assert main(["replay", str(edited)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"line {index + 1}, decision {lines[index]['decision_id']}: chain does not match" in err
