#!/usr/bin/env bash
# Installs everything, then runs the demo on the built-in tiny model:
#   1. writes a random-weight tiny Llama checkpoint (no download),
#   2. generates text for a few prompts through the real engine loop
#      (policy plans -> validation -> packed paged forward),
#   3. replays the spec's 0x02 A/B/C fixture under static and iteration-level
#      batching, writes a decision log and re-derives it bit for bit.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
out=${1:-demo-out}
mkdir -p "$out"
bin=.venv/bin/iterserve
[ -f "$out/tiny-model/model.safetensors" ] || $bin make-model "$out/tiny-model" --preset tiny --seed 0
$bin generate "$out/tiny-model" --policy sarathi-serve --max-tokens 16 --ignore-eos \
    --prompt "Continuous batching schedules one iteration at a time" \
    --prompt "The scheduler validates every plan" \
    --prompt "Hello"
$bin simulate --workload examples/abc_fixture.json --policy static --out "$out/static"
$bin simulate --workload examples/abc_fixture.json --policy refill --out "$out/refill" \
    --decision-log "$out/refill/decisions.jsonl"
$bin replay "$out/refill/decisions.jsonl" --workload examples/abc_fixture.json
