"""``iterserve simulate`` writes the same bytes (issue 15: the report phase
in bounded memory changed how the figures are computed, not what they are).

Two small runs of the issue's workload shape (a pool small enough to
preempt): one without an SLO, one with an SLO and two clients. Every output
is pinned by its SHA-256, taken from the outputs of the code before the
report phase read its facts in slices: report.json (its ``source_version``,
the commit, set aside), report.md, events.jsonl, the decision log and the
four PNGs. The same bytes come out when every slice, chunk and pending batch
is a few values long, so the pins hold the sliced code paths too.
report.md's two pins were re-taken when its labels became plain words with
the spec's terms in parentheses; a diff against the earlier file showed
label lines only, every figure the same.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest

from iterserve.cli.main import main
from iterserve.metrics import counted_sample, plots, service_scan
from iterserve.metrics.events import event_line, iter_jsonl
from iterserve.sim import report as sim_report
from log_rows import as_format_4

OUTPUTS = ("report.json", "report.md", "events.jsonl", "decisions.jsonl", "latency_cdfs.png",
           "batch_composition.png", "queue_and_kv.png", "client_service.png")


def _spec(num_clients: int) -> dict[str, Any]:
    clients = [{"client_id": f"c{i}", "weight": i + 1,
                "prompt_tokens": {"kind": "uniform", "min": 32, "max": 1024},
                "output_tokens": {"kind": "uniform", "min": 16, "max": 400}}
               for i in range(num_clients)]
    return {"workload_id": f"pinned-{num_clients}", "seed": 15, "num_requests": 150,
            "clock": "ms", "capacity": {"max_num_batched_tokens": 2048, "max_num_seqs": 256},
            "kv": {"num_kv_blocks": 700, "block_size": 16},
            "arrival": {"process": "poisson", "rate_per_s": 20.0}, "clients": clients}


# the decision log written as format 4 (log_rows.as_format_4: one object per
# work item and completion, the chain computed again): the pin taken from the
# format-4 writer, so the format-5 log holds the same facts line for line
FORMAT_4_LOG = "decisions.jsonl (as format 4)"
# that log with every state_digest, chain and the header's format masked: log
# format 4 (issue 15) changed how the digest hashes a state, so this pin is
# the one taken from main's format-3 log
MASKED_LOG = "decisions.jsonl (state_digest, chain and format masked)"
# events.jsonl read back and written one line per event, as every events file
# was before a run of tokens at one time became one "tokens" line: the pin
# taken then, so the same facts
EVENT_LINES = "events.jsonl (one line per event)"
_MASK = re.compile(rb'"(state_digest|chain)":"[0-9a-f]{64}"|"format":[0-9]+')

# main at 340567d, before the sliced report phase; report.json, the decision
# log (its header and so its chain) and batch_composition.png (its axis label)
# re-pinned when the one vocabulary renamed the budgets: the masked log and
# report.md, written back in the old names (_in_old_names), still match the
# old pins byte for byte, so the decisions and figures are the same
PINNED: dict[str, dict[str, str]] = {
    "one-client": {
        "report.json":
            "daa6440544e26e7764d0c14c1ffadd8b83729ddad2fafdcd2f6151052128f8d2",
        "report.md":
            "19bea1a051912d8825158506a1f1885048c1ffa8e9b4ec22839157392ab5d798",
        "events.jsonl":  # a run of tokens at one time is one line (issue 15)
            "df8fcc0c11c85651f0d7a8e0490ddfe2d031e1b98b51715fd7b50dba86d5f949",
        EVENT_LINES:
            "e990d203d4719e4776f00e5cd6d5841a06797e285820c893958981de38522ae9",
        "decisions.jsonl":  # log format 6 (issue 37: work and completions as tables)
            "075563a418025a24824e56a36ded62b7296048c59a1c2768c1c17c9fc69015a1",
        FORMAT_4_LOG:  # log format 4 (issue 15: the incremental state digest)
            "631cba003267db1797586ade55713958cc82bfe07433f283429a5881594652f6",
        MASKED_LOG:  # main's format-3 log, masked alike: the same decisions
            "c4adf5b3e4e0d0bbee67db02d59d98d3468bfcc39627ac2ed499ab6fcb87f05d",
        "latency_cdfs.png":
            "7acbde9e7ab2635b2900c653ceeec18a660cc5908c1ee3eb7d3b98296c991c73",
        "batch_composition.png":
            "1995ee1c63608306fa42a162d5d7237f8acccaa46a8d7e8b7ec42ccf03b57e02",
        "queue_and_kv.png":
            "24c2e875bdf34babb9298bc7072744ba5d14b792f5d80833a90e15133989b832",
        "client_service.png":
            "064f7e8562e2d6ee0e149ddd71cc84947010d321ce7a66286b8d37c9dad79050",
    },
    "two-clients-slo": {
        "report.json":
            "c8f45bb523e2244a30132bf1ea1788d2c013f8c58dca489b21a645eed1f951d7",
        "report.md":
            "2fb6e785f458bb416cd7b5818dbf9bd5c3c5ddf6d7713454e4f082b456db3709",
        "events.jsonl":
            "acbe0607bb106fdb95a69cd7ff9ce5c3c7153c838431950170eb5482e9f44059",
        EVENT_LINES:
            "3c331c7acbb9429f635e9aed446306d13a7a1c6bf465e38316785b6ace48c1fc",
        "decisions.jsonl":
            "10b564695250514f37a189e617e123232573cc4ca47e53bdd566af5fa12cc9b0",
        FORMAT_4_LOG:
            "c0228143b3aa2de078d6f3152464e839934b59d09fc3f2493da59aa6cf680afa",
        MASKED_LOG:
            "a94f955cd835a2fa98edb8fe9f2d01a515b7ffd0ec2e0a81ff7881e191b6f275",
        "latency_cdfs.png":
            "3ff8d436e5ca08d92252f6f4446aa140713d15240038117e0495e558dcbdd593",
        "batch_composition.png":
            "3b5c5d7bb74ac2a1bd20e8b8b04c094db8ce79d1861661aa9addf2e818800d57",
        "queue_and_kv.png":
            "e0468efd9719ada5db7b637515d7b73e93f89f80948992206d499a1bb17100f4",
        "client_service.png":
            "0fc890ddaaae2e57368bff810a65b742e9d22e63a34a2bb82f18077f18a3e46c",
    },
}


def _simulate(tmp: Path, num_clients: int, slo: bool) -> dict[str, str]:
    (tmp / "spec.json").write_text(json.dumps(_spec(num_clients)))
    assert main(["workload", "gen", str(tmp / "spec.json"), "-o", str(tmp / "workload.json")]) == 0
    flags = ["--slo-ttft-ms", "2000", "--slo-tbt-ms", "150"] if slo else []
    assert main(["simulate", "--workload", str(tmp / "workload.json"), "--policy", "vllm",
                 "--cost-model", "linear:8,0.02,0.1", "--out", str(tmp / "out"),
                 "--decision-log", str(tmp / "out" / "decisions.jsonl"), *flags]) == 0
    report = json.loads((tmp / "out" / "report.json").read_text())
    assert report["summary"]["preemptions"]["recompute"] > 0  # the pool is small enough
    assert ("metrics" in report) is slo
    digests = {}
    for name in OUTPUTS:
        data = (tmp / "out" / name).read_bytes()
        if name == "report.md":
            data = _in_old_names(data)
        if name == "report.json":  # the commit the run came from, not a figure
            data = b"".join(line for line in data.splitlines(keepends=True)
                            if b'"source_version"' not in line)
        digests[name] = hashlib.sha256(data).hexdigest()
        if name == "decisions.jsonl":
            rows = as_format_4(data)
            digests[FORMAT_4_LOG] = hashlib.sha256(rows).hexdigest()
            digests[MASKED_LOG] = hashlib.sha256(
                _MASK.sub(b"masked", _in_old_names(rows))).hexdigest()
        if name == "events.jsonl":
            lines = "".join(event_line(event) + "\n" for event in iter_jsonl(tmp / "out" / name))
            digests[EVENT_LINES] = hashlib.sha256(lines.encode()).hexdigest()
    return digests


# the one vocabulary (records/vocabulary.py) renamed the budgets and the pool
# size in the log header and report.md; written back in the names the pins
# were taken with, the same bytes (so no value changed, only names)
_OLD_NAMES = ((b'"capacity":{"max_num_batched_tokens":2048,"max_num_seqs":256}',
               b'"capacity":{"sequence_budget":256,"token_budget":2048}'),
              (b'"num_host_blocks":0,"num_kv_blocks":700,',
               b'"num_blocks":700,"num_host_blocks":0,'),
              (b"/ max_num_seqs (", b"/ sequence_budget ("),
              (b"/ max_num_batched_tokens (", b"/ token_budget ("))


def _in_old_names(data: bytes) -> bytes:
    for new, old in _OLD_NAMES:
        data = data.replace(new, old)
    return data


MAX_STEP_VERTICES = 3000
CASES = {"one-client": (1, False), "two-clients-slo": (2, True)}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("mode", ["default", "tiny-slices", "beside"])
def test_simulate_writes_the_pinned_bytes(tmp_path, monkeypatch, case, mode) -> None:
    # a long run's merged curves (one vertex per distinct x) for this short run's samples
    monkeypatch.setattr(plots, "MAX_STEP_VERTICES", MAX_STEP_VERTICES)
    if mode == "tiny-slices":
        monkeypatch.setattr(service_scan, "MAX_FACTS_PER_SLICE", 3)
        monkeypatch.setattr(counted_sample, "MAX_PENDING_VALUES", 5)
        monkeypatch.setattr(plots, "_CDF_CHUNK", 4)
    if mode == "beside":  # a long run's report phase (two CPUs): its forked children
        monkeypatch.setattr(sim_report, "BESIDE_ITERATIONS", 0)
    assert _simulate(tmp_path, *CASES[case]) == PINNED[case]
