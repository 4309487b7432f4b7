"""Prints docs/models.md's measured table: for each family's tiny checkpoint, the
largest float32 logit error against transformers, the bfloat16 errors, and the
greedy agreement through the engine (the same checks test_families.py asserts).

    .venv/bin/python tests/model/family_report.py
"""

from __future__ import annotations

import os
import random
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from family_checkpoints import FAMILIES, build, reference  # noqa: E402
from model_helpers import BlockHandout, reference_logits, run_segments  # noqa: E402

from iterserve.model.loader import load_model  # noqa: E402

PROMPTS = [[5, 17, 42, 9, 100, 7], [250, 3], [11, 12, 13, 14, 15, 16, 17, 18, 19]]
NEW_TOKENS = 8


def _rows(model, tokens: list[int], prompt_len: int) -> torch.Tensor:
    cache = model.allocate_cache(num_blocks=32, block_size=4)
    handout = BlockHandout(32, 4)
    rows = [run_segments(model, cache, handout, [("a", tokens[:prompt_len], 0, True)])[0]]
    for start in range(prompt_len, len(tokens)):
        rows.append(run_segments(model, cache, handout,
                                 [("a", tokens[start:start + 1], start, True)])[0])
    return torch.stack(rows).float()


def _measure(kind: str, model_dir: Path) -> str:
    from iterserve import LLM, SamplingParams

    rng = random.Random(1)
    tokens = [rng.randrange(320) for _ in range(24)]
    ref32, ref16 = reference(model_dir), reference(model_dir, torch.bfloat16)
    fp32 = (_rows(load_model(model_dir), tokens, 12) - reference_logits(ref32, tokens)[11:])
    ours16 = _rows(load_model(model_dir, dtype=torch.bfloat16), tokens, 12)
    expected16 = reference_logits(ref16, tokens)[11:]
    scale = expected16.abs().max().item()
    row_error = (ours16 - expected16).abs().amax(dim=-1) / scale
    same16 = int((ours16.argmax(-1) == expected16.argmax(-1)).sum())
    llm = LLM(model_dir, dtype="float32", num_kv_blocks=32, block_size=4, max_model_len=48)
    outputs = llm.generate(PROMPTS, SamplingParams(max_tokens=NEW_TOKENS, temperature=0.0,
                                                   ignore_eos=True))
    llm.close()
    agree = 0
    for prompt, output in zip(PROMPTS, outputs, strict=True):
        with torch.inference_mode():
            expected = ref32.generate(torch.tensor([prompt]), max_new_tokens=NEW_TOKENS,
                                      min_new_tokens=NEW_TOKENS, do_sample=False,
                                      pad_token_id=0)[0, len(prompt):].tolist()
        agree += sum(a == b for a, b in zip(output.token_ids, expected, strict=True))
    return (f"| {kind} | {fp32.abs().max().item():.1e} | {row_error.median().item():.3f} / "
            f"{row_error.max().item():.3f} | {same16}/{len(tokens) - 11} | "
            f"{agree}/{len(PROMPTS) * NEW_TOKENS} |")


def main() -> None:
    torch.set_num_threads(1)
    from iterserve.model.make_model import make_model

    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        tokenizer_dir = make_model(root / "tiny", preset="tiny", seed=0)
        print("| family | fp32 max abs logit error | bf16 row error, median / max "
              "(of logit scale) | bf16 greedy = transformers bf16 | engine greedy tokens "
              "= transformers (fp32) |")
        print("|---|---|---|---|---|")
        for kind in FAMILIES:
            print(_measure(kind, build(kind, root / kind, tokenizer_dir=tokenizer_dir)))


if __name__ == "__main__":
    main()
