"""Small generator specs for the lab tests."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import IO, Any

from iterserve.admission.overload import make_gate
from iterserve.cost import parse_cost_model
from iterserve.policies.registry import policy_for
from iterserve.records.spec import WorkloadManifest
from iterserve.sim.generators import generate_workload
from iterserve.sim.report import RunConfig, SimulationRun, run_simulation
from iterserve.sim.traces import trace_lengths
from iterserve.sim.workload_spec import parse_spec

REPO_ROOT = Path(__file__).resolve().parents[2]
TRACES = REPO_ROOT / "examples" / "traces"
CHAT_MIX = REPO_ROOT / "examples" / "specs" / "chat_mix.json"

SMALL_SPEC: dict[str, Any] = {
    "workload_id": "lab-small",
    "seed": 3,
    "num_requests": 12,
    "clock": "iteration",
    "iteration_s": 1.0,
    # prompts fit the token budget (orca runs whole prompts); chunk_size for the chunked policies
    "capacity": {"max_num_batched_tokens": 24, "max_num_seqs": 4},
    "policy_settings": {"chunk_size": 6},
    "arrival": {"process": "poisson", "rate_per_s": 0.8},
    "slo_classes": {"fast": {"ttft_ms": 4000, "tbt_ms": 2000}},
    "prefix_groups": {"sys": {"num_prefix_tokens": 4, "num_variants": 2}},
    "vocab_size": 100,
    "clients": [
        {"client_id": "a", "weight": 2, "slo_class": "fast", "prefix_group": "sys",
         "prompt_tokens": {"kind": "uniform", "min": 2, "max": 12},
         "output_tokens": {"kind": "uniform", "min": 1, "max": 9}, "max_output_tokens": 8},
        {"client_id": "b", "priority": 1,
         "prompt_tokens": {"kind": "lognormal", "median": 6, "sigma": 0.5, "min": 1, "max": 16},
         "output_tokens": {"kind": "fixed", "value": 5}, "max_output_tokens": 8},
    ],
}


def small_spec(**changes: Any) -> dict[str, Any]:
    spec = copy.deepcopy(SMALL_SPEC)
    spec.update(changes)
    return spec


def chat_mix_manifest(num_blocks: int, num_requests: int) -> WorkloadManifest:
    """``examples/specs/chat_mix.json`` cut to ``num_requests`` requests on a
    ``num_blocks`` pool (small pools preempt: rebuilds, resumes), generated."""
    raw = json.loads(CHAT_MIX.read_text())
    raw["kv"]["num_kv_blocks"] = num_blocks
    raw["num_requests"] = num_requests
    return generate_workload(parse_spec(raw, lambda path, fmt, column: trace_lengths(
        CHAT_MIX.parent / path, fmt, column)))


def chat_mix_run(num_blocks: int, num_requests: int, events: IO[str] | None = None
                 ) -> tuple[WorkloadManifest, SimulationRun]:
    """:func:`chat_mix_manifest` simulated under ``vllm`` with
    ``linear:8,0.02,0.1``; ``events`` streams the metric events there.
    Returns the generated manifest and the run."""
    manifest = chat_mix_manifest(num_blocks, num_requests)
    model = parse_cost_model("linear:8,0.02,0.1")
    config = RunConfig(policy_for("vllm", manifest.online, cost_model=model), model,
                       make_gate("accept-all", {}))
    return manifest, run_simulation(manifest, config, events=events)
