"""``iterserve workload gen``: seeded, byte-identical generation; every
arrival process and length distribution; hidden truth stays hidden; bad
specs fail in one line naming the field (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from lab_helpers import CHAT_MIX, small_spec

from iterserve.cli.main import main
from iterserve.records.workload import load_workload, online_to_json
from iterserve.records.workload_json import dumps_workload
from iterserve.sim.arrivals import GammaArrivals, OnOffArrivals, PoissonArrivals
from iterserve.sim.generators import generate_document, generate_workload
from iterserve.sim.workload_spec import parse_spec


def _gen(tmp_path: Path, spec: dict, name: str = "w.json") -> Path:
    spec_path = tmp_path / f"{name}.spec.json"
    spec_path.write_text(json.dumps(spec))
    out = tmp_path / name
    assert main(["workload", "gen", str(spec_path), "-o", str(out)]) == 0
    return out


def test_same_spec_and_seed_give_the_same_bytes(tmp_path) -> None:
    first = _gen(tmp_path, small_spec(), "a.json").read_bytes()
    second = _gen(tmp_path, small_spec(), "b.json").read_bytes()
    other_seed = _gen(tmp_path, small_spec(seed=4), "c.json").read_bytes()
    assert first == second
    assert first != other_seed


def test_the_example_spec_is_byte_identical_and_loads(tmp_path) -> None:
    out_a, out_b = tmp_path / "a.json", tmp_path / "b.json"
    for out in (out_a, out_b):
        assert main(["workload", "gen", str(CHAT_MIX), "-o", str(out)]) == 0
    assert out_a.read_bytes() == out_b.read_bytes()
    manifest = load_workload(out_a)
    assert len(manifest.online.requests) == 200
    assert set(manifest.hidden.realized_output_tokens) == {
        r.request_id for r in manifest.online.requests}


def test_generated_file_carries_the_spec(tmp_path) -> None:
    manifest = load_workload(_gen(tmp_path, small_spec(num_requests=200)))
    requests = manifest.online.requests
    arrivals = [r.arrival for r in requests]
    assert arrivals == sorted(arrivals)
    by_client = {c: [r for r in requests if r.client_id == c] for c in ("a", "b")}
    assert 0.55 < len(by_client["a"]) / 200 < 0.8  # weight 2 : 1
    for r in by_client["a"]:
        assert r.slo is not None and r.slo.ttft_ms == 4000 and r.priority == 0
        assert r.prompt_token_ids is not None and r.num_prompt_tokens >= 5
    prefixes = {r.prompt_token_ids[:4] for r in by_client["a"] if r.prompt_token_ids}
    assert len(prefixes) == 2  # two shared-prefix variants, real token identities
    for r in by_client["b"]:
        assert r.slo is None and r.priority == 1 and r.prompt_token_ids is None
        assert 1 <= r.num_prompt_tokens <= 16
        assert manifest.hidden.realized_output_tokens[r.request_id] == 5
    assert all(manifest.hidden.realized_output_tokens[r.request_id] <= 8 for r in requests)


def test_output_distribution_changes_hidden_truth_only() -> None:
    """The realized lengths draw from their own stream: another output
    distribution (same declared cap) leaves the online projection byte for
    byte identical (0x06)."""
    base = parse_spec(small_spec(num_requests=40))
    changed = small_spec(num_requests=40)
    changed["clients"][0]["output_tokens"] = {"kind": "fixed", "value": 3}
    changed["clients"][1]["output_tokens"] = {"kind": "lognormal", "median": 4, "sigma": 1,
                                              "max": 30}
    a, b = generate_workload(base), generate_workload(parse_spec(changed))
    assert json.dumps(online_to_json(a.online)) == json.dumps(online_to_json(b.online))
    assert a.hidden != b.hidden
    text = dumps_workload(generate_document(base))
    online_text = text.split('"fixture_only_hidden_truth"')[0]
    assert "realized" not in online_text


@pytest.mark.parametrize("process, expected_cv", [
    (PoissonArrivals(50.0), 1.0),
    (GammaArrivals(50.0, 3.0), 3.0),
    (GammaArrivals(50.0, 0.5), 0.5),
])
def test_arrival_processes_have_their_rate_and_burstiness(process, expected_cv) -> None:
    times = process.times_s(np.random.default_rng(1), 20_000)
    gaps = np.diff(times)
    assert gaps.mean() == pytest.approx(1 / 50, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(expected_cv, rel=0.08)


def test_on_off_arrivals_are_silent_while_off() -> None:
    times = OnOffArrivals(40.0, on_s=1.0, off_s=2.0).times_s(np.random.default_rng(2), 400)
    phase = np.mod(times, 3.0)
    assert (phase < 1.0).all()
    assert np.diff(times).min() >= 0
    assert times[-1] > 3 * 400 / 40 * 0.8  # the off periods stretch the span


def test_explicit_timestamps_and_iteration_clock(tmp_path) -> None:
    spec = small_spec(arrival={"process": "explicit", "timestamps_s": [0, 0, 1.5, 4]},
                      iteration_s=0.5)
    del spec["num_requests"]
    manifest = load_workload(_gen(tmp_path, spec))
    assert [r.arrival for r in manifest.online.requests] == [0.0, 0.0, 3.0, 8.0]


def test_empirical_lengths_from_a_trace_and_a_list(tmp_path) -> None:
    spec = small_spec(num_requests=60, clock="ms")
    del spec["iteration_s"]
    spec["clients"][1]["prompt_tokens"] = {"kind": "empirical", "values": [7, 11]}
    spec["clients"][1]["output_tokens"] = {
        "kind": "empirical", "trace": "requests_sample.jsonl", "format": "jsonl",
        "column": "output"}
    spec_path = tmp_path / "s.json"
    spec_path.write_text(json.dumps(spec))
    (tmp_path / "requests_sample.jsonl").write_text(
        '{"arrival_s": 0, "prompt_tokens": 3, "output_tokens": 2}\n'
        '{"arrival_s": 1, "prompt_tokens": 3, "output_tokens": 6}\n')
    assert main(["workload", "gen", str(spec_path), "-o", str(tmp_path / "w.json")]) == 0
    manifest = load_workload(tmp_path / "w.json")
    b = [r for r in manifest.online.requests if r.client_id == "b"]
    assert {r.num_prompt_tokens for r in b} == {7, 11}
    assert {manifest.hidden.realized_output_tokens[r.request_id] for r in b} == {2, 6}


BAD_SPECS = {
    "missing-seed": (lambda s: s.pop("seed"), "seed: missing"),
    "bad-process": (lambda s: s["arrival"].update(process="hawkes"), "arrival.process"),
    "gamma-cv": (lambda s: s.update(arrival={"process": "gamma", "rate_per_s": 2}),
                 "arrival.cv: missing"),
    "negative-rate": (lambda s: s["arrival"].update(rate_per_s=-1), "rate_per_s must be > 0"),
    "unknown-kind": (lambda s: s["clients"][0]["prompt_tokens"].update(kind="zipf"),
                     "clients[0].prompt_tokens.kind"),
    "bad-median": (lambda s: s["clients"][1]["prompt_tokens"].update(median=-3),
                   "clients[1].prompt_tokens: median must be > 0"),
    "unknown-slo-class": (lambda s: s["clients"][0].update(slo_class="gold"),
                          "clients[0].slo_class: no such entry 'gold'"),
    "unknown-field": (lambda s: s["clients"][1].update(weigth=2), "clients[1]: unknown field"),
    "zero-weight": (lambda s: s["clients"][0].update(weight=0), "clients[0].weight"),
    "capacity": (lambda s: s["capacity"].pop("max_num_batched_tokens"), "capacity.max_num_batched_tokens: missing"),
    "policy-settings": (lambda s: s.update(policy_settings={"chunk_size": [1]}),
                        "policy_settings.chunk_size"),
    "uniform-order": (lambda s: s["clients"][0]["output_tokens"].update(min=9, max=2),
                      "clients[0].output_tokens: need 1 <= min <= max"),
    "num-requests": (lambda s: s.update(num_requests=0), "num_requests: must be >= 1"),
    # refused before generating: a billion requests ran out of time and memory first
    "num-requests-absurd": (lambda s: s.update(num_requests=10**9),
                            "num_requests: at most 100000 (documented limit)"),
    "clock": (lambda s: s.update(clock="wall"), "clock: must be one of"),
    "missing-trace": (lambda s: s["clients"][0].update(prompt_tokens={
        "kind": "empirical", "trace": "nope.csv", "format": "azure", "column": "prompt"}),
        "nope.csv: no such file"),
}


@pytest.mark.parametrize("case", sorted(BAD_SPECS))
def test_bad_spec_fails_in_one_line(tmp_path, capsys, case) -> None:
    spec = small_spec()
    mutate, expected = BAD_SPECS[case]
    mutate(spec)
    spec_path = tmp_path / "s.json"
    spec_path.write_text(json.dumps(spec))
    assert main(["workload", "gen", str(spec_path), "-o", str(tmp_path / "w.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and expected in err, err
    assert not (tmp_path / "w.json").exists()


def test_unreadable_spec_fails_in_one_line(tmp_path, capsys) -> None:
    (tmp_path / "s.json").write_text("{not json")
    assert main(["workload", "gen", str(tmp_path / "s.json"), "-o", str(tmp_path / "w")]) == 2
    assert "not valid JSON" in capsys.readouterr().err
    assert main(["workload", "gen", str(tmp_path / "none.json"), "-o", str(tmp_path / "w")]) == 2
    assert "no such file" in capsys.readouterr().err
