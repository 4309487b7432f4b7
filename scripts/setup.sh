#!/usr/bin/env bash
# Creates .venv (if missing) and installs iterserve with its pinned dependencies.
# torch==2.13.0 resolves to the CPU wheel that pip finds on this machine's disk.
set -euo pipefail
cd "$(dirname "$0")/.."
# The interpreter: $PYTHON if set; else the distribution's python3.11, which
# Debian and Ubuntu build with profile-guided and link-time optimisation (the
# simulator runs about 15 % faster on it than on a default source build such as
# pyenv's, benchmarks/README.md); else python3.11, then python3, on PATH.
# An existing .venv is kept: remove it to remake it from another interpreter.
if [ ! -x .venv/bin/python ]; then
    made=
    for candidate in ${PYTHON:-/usr/bin/python3.11 python3.11 python3}; do
        if command -v "$candidate" >/dev/null && "$candidate" -m venv .venv 2>/dev/null; then
            made=$candidate
            break
        fi
        rm -rf .venv  # a half-made venv (no ensurepip) is not kept
    done
    if [ -z "$made" ]; then
        echo "setup: no Python could make .venv (tried: ${PYTHON:-/usr/bin/python3.11 python3.11 python3})" >&2
        exit 2
    fi
fi
stamp=.venv/.iterserve-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ constraints.txt -nt "$stamp" ]; then
    .venv/bin/python -m pip install -q --upgrade pip >/dev/null
    .venv/bin/python -m pip install -q -c constraints.txt -e ".[dev]"
    touch "$stamp"
fi
# Prebuild the native attention kernel into ~/.cache/iterserve (about 15 s once
# per torch version and CPU); without a compiler models use the torch path.
.venv/bin/iterserve build-kernels || true
