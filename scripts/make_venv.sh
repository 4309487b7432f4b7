#!/usr/bin/env bash
# Makes the venv DIR (default .venv) unless it exists, and prints the interpreter it was
# made from. The interpreter: $PYTHON if set (one or more names or paths, tried in
# order); else the distribution's python3.11, which Debian and Ubuntu build with
# profile-guided and link-time optimisation (the simulator runs about 15 % faster on it
# than on a default source build such as pyenv's: benchmarks/README.md); else
# python3.11, then python3, on PATH. A candidate that is missing or cannot make a venv
# (no ensurepip) is skipped; none left: one line naming what was tried, exit 2.
set -uo pipefail
dir=${1:-.venv}
if [ -x "$dir/bin/python" ]; then
    exit 0
fi
candidates=${PYTHON:-/usr/bin/python3.11 python3.11 python3}
for candidate in $candidates; do
    if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -m venv "$dir" 2>/dev/null; then
        echo "made $dir from $(command -v "$candidate")"
        exit 0
    fi
    rm -rf "$dir"  # a half-made venv is not kept
done
echo "setup: no Python could make $dir (tried: $candidates)" >&2
exit 2
