#!/usr/bin/env bash
# Installs everything, then runs the demo: the A/B/C fixture of spec 0x02 under two policies.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
out=${1:-demo-out}
.venv/bin/iterserve simulate --workload examples/abc_fixture.json --policy static --out "$out/static"
.venv/bin/iterserve simulate --workload examples/abc_fixture.json --policy refill --out "$out/refill" \
    --decision-log "$out/refill/decisions.jsonl"
.venv/bin/iterserve replay "$out/refill/decisions.jsonl"
