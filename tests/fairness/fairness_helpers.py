"""Run fairness fixtures through ``iterserve simulate`` (the real code path)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from iterserve.cli.main import main


def request(rid: str, client: str, arrival: float = 0, prompt: int = 1, max_out: int = 1,
            **extra: Any) -> dict[str, Any]:
    return {"request_id": rid, "arrival": arrival, "prompt_tokens": prompt,
            "max_output_tokens": max_out, "client_id": client, **extra}


def workload(workload_id: str, requests: list[dict[str, Any]], *, max_num_batched_tokens: int = 1,
             max_num_seqs: int = 1, clock: str = "iteration",
             **sections: Any) -> dict[str, Any]:
    return {"workload_id": workload_id, "clock": clock,
            "capacity": {"max_num_batched_tokens": max_num_batched_tokens, "max_num_seqs": max_num_seqs},
            "requests": requests, **sections}


def simulate(tmp: Path, spec: dict[str, Any], policy: str, *flags: str) -> dict[str, Any]:
    """Write ``spec``, run ``iterserve simulate`` on it, return report.json."""
    path = tmp / f"{spec['workload_id']}.json"
    path.write_text(json.dumps(spec))
    out = tmp / f"out-{policy}-{len(list(tmp.iterdir()))}"
    code = main(["simulate", "--workload", str(path), "--policy", policy, "--out", str(out),
                 "--no-plots", *flags])
    assert code == 0
    report: dict[str, Any] = json.loads((out / "report.json").read_text())
    report["_out"] = str(out)
    return report


def two_clients() -> dict[str, Any]:
    """0x09A: A with 8 events, B with 4, all at tick 0; each event is one
    request of one prompt row and one output, 2 weighted units at w_p = w_q = 1."""
    requests = [request(f"A{i}", "A") for i in range(8)]
    requests += [request(f"B{i}", "B") for i in range(4)]
    return workload("two-clients-0x09A", requests,
                    fairness={"prompt_weight": 1, "output_weight": 1})
