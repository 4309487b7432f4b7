#!/usr/bin/env bash
# Creates .venv (if missing) and installs iterserve with its pinned dependencies.
# pyproject.toml takes compatible ranges (torch>=2.6,<3); constraints.txt pins the tested
# versions, and its torch==2.13.0 resolves to the CPU wheel pip finds on this machine's disk.
set -euo pipefail
cd "$(dirname "$0")/.."
# .venv from $PYTHON, else the distribution's python3.11 (faster: see make_venv.sh)
bash scripts/make_venv.sh .venv >/dev/null
stamp=.venv/.iterserve-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ constraints.txt -nt "$stamp" ]; then
    .venv/bin/python -m pip install -q --upgrade pip >/dev/null
    .venv/bin/python -m pip install -q -c constraints.txt -e ".[dev]"
    touch "$stamp"
fi
# Prebuild the native attention kernel into ~/.cache/iterserve (about 15 s once
# per torch version and CPU); without a compiler models use the torch path.
.venv/bin/iterserve build-kernels || true
