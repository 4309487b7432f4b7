"""Golden decision logs of the 0x09A policies, written before they move onto
the ``plan/`` package: a refactor must reproduce every decision line byte
for byte. Regenerate only for an intended change, with
``python tests/fairness/fair_golden.py --write`` and a commit message that
says which decisions changed and why."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from fairness_helpers import request, two_clients, workload  # noqa: E402

from iterserve.cli.main import main  # noqa: E402

LOG_DIR = HERE / "golden"
EXAMPLES = HERE.parents[1] / "examples"
POLICIES = ("least-service", "vtc", "vtc-completed", "priority", "priority-aging", "mlfq",
            "prefix-quota", "prefix-greedy")


def _mixed() -> dict:
    """Three clients, priorities, a shared prefix and arrivals over time."""
    shared = list(range(50, 58))
    requests = [request(f"r{i}", "ABC"[i % 3], arrival=i // 2, prompt=shared + [100 + i],
                        max_out=1 + i % 4, priority=i % 3) for i in range(18)]
    return workload("mixed", requests, max_num_batched_tokens=12, max_num_seqs=3,
                    kv={"num_kv_blocks": 20, "block_size": 4},
                    fairness={"prompt_weight": 1, "output_weight": 2,
                              "client_weights": {"C": 2}})


def workload_paths(tmp: Path) -> dict[str, Path]:
    paths = {path.stem: path for path in sorted(EXAMPLES.glob("*.json"))}
    for name, spec in (("two_clients", two_clients()), ("mixed", _mixed())):
        paths[name] = tmp / f"{name}.json"
        paths[name].write_text(json.dumps(spec))
    return paths


def run_case(path: Path, policy: str, out: Path) -> bytes | None:
    log = out / "decisions.jsonl"
    rc = main(["simulate", "--no-plots", "--workload", str(path), "--policy", policy,
               "--out", str(out / "run"), "--decision-log", str(log)])
    return log.read_bytes() if rc == 0 else None


def fixture_path(name: str, policy: str) -> Path:
    return LOG_DIR / f"{name}__{policy}.jsonl.gz"


if __name__ == "__main__":
    import tempfile

    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python tests/fairness/fair_golden.py --write")
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in workload_paths(Path(tmp)).items():
            for policy in POLICIES:
                out = Path(tmp) / f"{name}-{policy}"
                out.mkdir()
                data = run_case(path, policy, out)
                assert data is not None, f"{name} under {policy} failed"
                fixture_path(name, policy).write_bytes(gzip.compress(data, mtime=0))
                print(name, policy, data.count(b"\n"), "lines")
