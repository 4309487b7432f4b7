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

# re-pinned when the vllm policy took vLLM 0.32's default reserve_full_isl=1 (whole-sequence
# admission; this pool is small enough for it to change admissions): run with
# --policy-setting reserve_full_isl=0, report.md, events.jsonl and the four PNGs were
# byte for byte the earlier pins, and the log and report.json differed by the settings
# they record (now every vllm setting, the new switches included).
# main at 340567d, before the sliced report phase; report.json, the decision
# log (its header and so its chain) and batch_composition.png (its axis label)
# re-pinned when the one vocabulary renamed the budgets: the masked log and
# report.md, written back in the old names (_in_old_names), still match the
# old pins byte for byte, so the decisions and figures are the same
PINNED: dict[str, dict[str, str]] = {
    "one-client": {
        "report.json":
            "a4381589bf8a690ddaacc513490a338cf9059803f3e06b017eec6dc837af04b0",
        "report.md":
            "c264bec410ab126614c2a0e90c5fc77bee55bba0dd8280d5b67e0f5b3a2aa047",
        "events.jsonl":  # a run of tokens at one time is one line (issue 15)
            "5c874a99d893373d2114ab6725d345c56a79f446baecbc0b1e3d2a3609b8daea",
        EVENT_LINES:
            "078c3a7a06864c1a187b03515f7d224752dbf06e37886a05ed29407fb0331402",
        "decisions.jsonl":  # log format 6 (issue 37: work and completions as tables)
            "07c6e666f21e5db16d866b81f93c47a7d3a71a0a8bf8c782f68371ab5d301e0e",
        FORMAT_4_LOG:  # log format 4 (issue 15: the incremental state digest)
            "d1f647cbf83b742a911af81a6be6258e06a9fd6aa4b3bdc01dc663601deeacd8",
        MASKED_LOG:  # main's format-3 log, masked alike: the same decisions
            "4e4bc25a66b09b58cc8889c9d88422a0a97172b4999de8e1738a2a4122977290",
        "latency_cdfs.png":
            "c2062e6a1ad739bf268827f804c1ac239ebfd371cb0ea88ed275a05c5dedeeee",
        "batch_composition.png":
            "7ef9764fde8efdc5dbe26dffc23e9b28f7aa49de98e01c632e46c500c00da2a3",
        "queue_and_kv.png":
            "927b6dae29ad7889fd26f0718a0e8cded6247c622cd49e03cb29f02478a38559",
        "client_service.png":
            "00394ad3bcd483cab994494d923ceefaedec6bd39a8846d9dc2126aff26ddf58",
    },
    "two-clients-slo": {
        "report.json":
            "a4d9c03b2262c1ff37dbb32cacf91fe03ec318d89ae55095632ddd66db14e4ee",
        "report.md":
            "0c3526e02d73d9375d282db89fbaa12c8a9dcbb0a6b5f05edce1a238fbcdc362",
        "events.jsonl":
            "6384c26edbbe9a7737e07ab56336b5382f0688cba6282275a35152545e46576b",
        EVENT_LINES:
            "e2843001c1cdddcfb3f6d6c1efb7ce048b65de3bdb98efb316fb5c26a64e4274",
        "decisions.jsonl":
            "7a34ee7fcadc6b9c04553ef4c6bd38225dfa4c68cd667de976a78dacd28aa9d1",
        FORMAT_4_LOG:
            "5b29893164a025b78bdf3d308765fc6467a84b7c89652172e0d4423e0bb5e916",
        MASKED_LOG:
            "474634b842fccfa9daeec9056b2f79b7d0989bc12eb42f959d2f47d64311c8ef",
        "latency_cdfs.png":
            "f692b10e5d9207611b9d8d77b6a705e01bac3cf3b9a931ee5099083f6b83a5a7",
        "batch_composition.png":
            "da93b68483a715c1875268f33ab247c0863acc186b377a15b1011a69a5bf9ad9",
        "queue_and_kv.png":
            "74f4273cf2fc528e00ca4903aa6ef9517fdfe7fb585b38c25b10ce7890c7c606",
        "client_service.png":
            "882502200f0fcb0698e3802c22e113bea5b1a090b30ac570d4c703262aee9533",
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
