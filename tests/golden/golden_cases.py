"""The golden decision-log cases: every example workload (plus a seeded
random one with a chunk size, so the chunked policies run) under every
registered policy. Logs were written before the consolidation of issue 9
began; a refactor must reproduce every decision line byte for byte.

Regenerate only for an intended behaviour change, only the logs it changes,
with ``python tests/golden/golden_cases.py --write WORKLOAD__POLICY ...``,
an entry in :data:`REGENERATED` and a commit message that says which
decisions changed and why.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
LOG_DIR = Path(__file__).resolve().parent / "logs"
EXAMPLES = ("abc_fixture", "burst_0x07", "small_kv")
RANDOM_SEED = 2024

# policies that could not run a workload when the fixtures were written, with
# the reason; the golden test requires them to keep failing before the first
# line is written or to succeed, never to produce different decisions
POLICIES = (
    "decode-first", "decode-first-bounded", "edf", "least-slack", "orca", "prefill-first",
    "refill", "sarathi", "sarathi-serve", "static", "vllm", "vllm-priority",
)

# logs written again after an intended behaviour change (log format 5, compared
# whole); every other log is the format-2 original. name -> why it changed
REGENERATED: dict[str, str] = {
    "small_kv__vllm": "the vllm policy took vLLM 0.32's default reserve_full_isl=1: a waiting "
                      "request is admitted only when its whole sequence fits the small pool "
                      "(with reserve_full_isl=0 the format-2 log's decisions come back)",
    "small_kv__vllm-priority": "as small_kv__vllm (the same default)",
}


def random_workload() -> dict:
    sys.path.insert(0, str(REPO_ROOT))
    from tests.core.helpers import random_workload_json

    return random_workload_json(seed=RANDOM_SEED, num_requests=16)


def workload_paths(tmp: Path) -> dict[str, Path]:
    paths = {name: REPO_ROOT / "examples" / f"{name}.json" for name in EXAMPLES}
    random_path = tmp / "random_2024.json"
    random_path.write_text(json.dumps(random_workload(), indent=1))
    paths["random_2024"] = random_path
    return paths


def run_case(workload: Path, policy: str, out: Path) -> bytes | None:
    """The decision log bytes of one simulate run, or None if it failed."""
    from iterserve.cli.main import main

    log = out / "decisions.jsonl"
    rc = main(["simulate", "--no-plots", "--workload", str(workload), "--policy", policy,
               "--out", str(out / "run"), "--decision-log", str(log)])
    return log.read_bytes() if rc == 0 else None


def fixture_path(workload: str, policy: str) -> Path:
    return LOG_DIR / f"{workload}__{policy}.jsonl.gz"


def write_all(tmp: Path, names: list[str]) -> None:
    """Write the logs named ``workload__policy`` (all of them when none is named)."""
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    for workload, path in workload_paths(tmp).items():
        for policy in POLICIES:
            if names and f"{workload}__{policy}" not in names:
                continue
            out = tmp / f"{workload}-{policy}"
            out.mkdir()
            data = run_case(path, policy, out)
            target = fixture_path(workload, policy)
            if data is None:
                target.unlink(missing_ok=True)
                print(f"{workload} {policy}: failed (no fixture)")
                continue
            target.write_bytes(gzip.compress(data, mtime=0))
            num_lines = data.count(b"\n")
            print(f"{workload} {policy}: {num_lines} lines")


if __name__ == "__main__":
    import tempfile

    if sys.argv[1:2] != ["--write"]:
        sys.exit("usage: python tests/golden/golden_cases.py --write [WORKLOAD__POLICY ...]")
    with tempfile.TemporaryDirectory() as tmp:
        write_all(Path(tmp), sys.argv[2:])
