"""Verify a vLLM copy against a pin (spec 0x0D): full-file sha256, byte and
line counts, and every symbol/line marker, read as text (vLLM is never
imported).

    pip download vllm==0.23.0 --no-deps -d /tmp/vllm023
    .venv/bin/python scripts/verify_vllm_pin.py /tmp/vllm023/vllm-0.23.0-*.whl
    .venv/bin/python scripts/verify_vllm_pin.py --pin policy /tmp/vllm032/vllm-0.32.0-*.whl

PATH is the wheel file, an unpacked wheel or source checkout, or its
``vllm`` package folder. ``--pin spec`` (default) is the spec's v0.23.0
pin; ``--pin policy`` is vLLM 0.32.0, the release the ``vllm`` policy
follows. Exit 0: the copy is the pinned source (and, when the copy's
``vllm/_version.py`` names the commit it was built from, whether that is the
git object the pin names: a note, since the file facts are what is pinned);
1: one line per difference; 2: PATH cannot be read.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from iterserve.policies.vllm_pin import (
    POLICY_PIN,
    SourcePin,
    SourceTree,
    build_commit,
    verify_pin,
)
from iterserve.policies.vllm_pin_spec import SPEC_PIN

PINS: dict[str, SourcePin] = {"spec": SPEC_PIN, "policy": POLICY_PIN}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path, help="wheel, unpacked tree or vllm/ folder")
    parser.add_argument("--pin", choices=sorted(PINS), default="spec")
    args = parser.parse_args(argv)
    pin = PINS[args.pin]
    try:
        source = SourceTree(args.path)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    problems = verify_pin(source, pin)
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    if problems:
        return 1
    print(f"ok: {args.path} is {pin.release} ({pin.tag}): {len(pin.files)} files "
          f"(sha256, bytes, lines) and {len(pin.markers)} markers match")
    commit = build_commit(source)
    if commit is not None and pin.git_object:
        same = pin.git_object.startswith(commit)
        print(f"built from commit {commit}: "
              f"{'the' if same else 'not the'} git object {pin.git_object} the pin names")
    return 0


if __name__ == "__main__":
    sys.exit(main())
