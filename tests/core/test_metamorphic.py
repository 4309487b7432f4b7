"""Hidden truth stays hidden (DESIGN rule 5, 0x01A, 0x06).

Changing every realized output length leaves the online projection and the
first plan byte-identical; later plans may differ only after a stop fact that
the changed truth produced has been published.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iterserve.engine.decision_log import header_line
from iterserve.engine.loop import Engine, bind_policy
from iterserve.policies.registry import make_policy, policy_for, policy_names
from iterserve.records import codec
from iterserve.records.spec import HiddenTruth, OnlineWorkload, WorkloadManifest
from iterserve.records.state import CapacityFacts
from iterserve.records.workload import load_workload, online_to_json, parse_workload
from iterserve.records.workload_json import dumps_workload
from iterserve.sim.factory import make_simulated_executor
from iterserve.sim.generators import generate_document
from iterserve.sim.workload_spec import parse_spec

from .helpers import ABC_FIXTURE, random_workload_json, run_engine

HIDDEN_NAMES = ("hidden", "realized", "fixture_only")


def _manifests():
    abc = json.loads(ABC_FIXTURE.read_text())
    abc["capacity"].setdefault("chunk_size", 1)  # a knob the chunked policies require
    rnd = random_workload_json(seed=11)
    return {"abc": abc, "random": rnd, "generated": generate_document(parse_spec(GENERATED_SPEC))}


# a generated workload (iterserve workload gen): weighted clients, SLO classes,
# priorities and shared-prefix token ids; prompts fit the token budget
GENERATED_SPEC = {
    "workload_id": "metamorphic-gen", "seed": 21, "num_requests": 10, "clock": "iteration",
    "iteration_s": 1.0, "capacity": {"max_num_batched_tokens": 12, "max_num_seqs": 3},
    "policy_settings": {"chunk_size": 4},
    "arrival": {"process": "gamma", "rate_per_s": 1.5, "cv": 2.0},
    "slo_classes": {"fast": {"ttft_ms": 3000, "tbt_ms": 2000}},
    "prefix_groups": {"sys": {"num_prefix_tokens": 3, "num_variants": 2}}, "vocab_size": 50,
    "clients": [
        {"client_id": "a", "weight": 2, "slo_class": "fast", "prefix_group": "sys",
         "prompt_tokens": {"kind": "uniform", "min": 1, "max": 8},
         "output_tokens": {"kind": "uniform", "min": 1, "max": 12}, "max_output_tokens": 9},
        {"client_id": "b", "priority": 1,
         "prompt_tokens": {"kind": "lognormal", "median": 4, "sigma": 0.6, "min": 1, "max": 10},
         "output_tokens": {"kind": "fixed", "value": 4}, "max_output_tokens": 9},
    ],
}


def _with_lengths(raw, lengths):
    raw = json.loads(json.dumps(raw))
    raw["fixture_only_hidden_truth"] = {"realized_output_tokens": lengths}
    return parse_workload(raw)


def _variants(raw):
    ids = [r["request_id"] for r in raw["requests"]]
    return {
        "as-declared": parse_workload(raw),
        "all-one": _with_lengths(raw, {rid: 1 for rid in ids}),
        "all-long": _with_lengths(raw, {rid: 40 for rid in ids}),
        "reversed": _with_lengths(raw, {rid: 1 + i for i, rid in enumerate(reversed(ids))}),
        "none": _with_lengths(raw, {}),
    }


def _plan_bytes(plan):
    return codec.dumps(codec.plan_to_json(plan))


def _walk(obj, path="projection"):
    """Every (path, value) reachable through dataclass / NamedTuple / container fields."""
    yield path, obj
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            yield from _walk(getattr(obj, f.name), f"{path}.{f.name}")
    elif hasattr(obj, "_fields"):
        for name in obj._fields:
            yield from _walk(getattr(obj, name), f"{path}.{name}")
    elif isinstance(obj, (tuple, list)):
        for i, item in enumerate(obj):
            yield from _walk(item, f"{path}[{i}]")
    elif isinstance(obj, dict):
        for key, item in obj.items():
            yield from _walk(item, f"{path}[{key!r}]")


@pytest.mark.parametrize("name", ["abc", "random", "generated"])
def test_projection_is_identical_across_hidden_truths(name):
    variants = _variants(_manifests()[name])
    projections = {label: m.online_projection() for label, m in variants.items()}
    wire = {label: codec.dumps(online_to_json(p)) for label, p in projections.items()}
    assert len(set(wire.values())) == 1
    first = next(iter(projections.values()))
    assert all(p == first for p in projections.values())
    # the hidden truths really differ, so the test can fail
    assert len({tuple(sorted(m.hidden.realized_output_tokens.items()))
                for m in variants.values()}) == len(variants)


def test_projection_has_no_hidden_truth_field():
    manifest = load_workload(ABC_FIXTURE)
    projection = manifest.online_projection()
    assert isinstance(projection, OnlineWorkload)
    for path, value in _walk(projection):
        assert not isinstance(value, (HiddenTruth, WorkloadManifest)), path
        leaf = path.rsplit(".", 1)[-1]
        assert not any(word in leaf for word in HIDDEN_NAMES), path
    for cls in (OnlineWorkload, type(projection.requests[0])):
        names = (list(cls._fields) if hasattr(cls, "_fields")
                 else [f.name for f in dataclasses.fields(cls)])
        assert not any(word in n for n in names for word in HIDDEN_NAMES), names
    text = codec.dumps(online_to_json(projection))
    assert "realized" not in text and "hidden" not in text
    header = codec.dumps(header_line(bind_policy(projection, make_policy("refill")),
                                     CapacityFacts()))
    assert "realized" not in header and "hidden" not in header


@pytest.mark.parametrize("policy_name", policy_names())
@pytest.mark.parametrize("name", ["abc", "random", "generated"])
def test_first_plan_is_byte_identical(name, policy_name):
    runs = {label: run_engine(m, policy_name)[1] for label, m in _variants(_manifests()[name]).items()}
    first = {label: _plan_bytes(rec.plans[0]) for label, rec in runs.items()}
    assert len(set(first.values())) == 1, first
    # ...while the runs as a whole do differ: the variants are observable later
    lengths = {label: len(rec.plans) for label, rec in runs.items()}
    assert len(set(lengths.values())) > 1


def _assert_plans_agree_until_stop_facts_differ(rec_a, rec_b):
    """plan[i] is chosen from results[0..i-1]: it must agree while those agree
    on every published fact (token ids included)."""
    n = min(len(rec_a.plans), len(rec_b.plans))
    for i in range(n):
        assert _plan_bytes(rec_a.plans[i]) == _plan_bytes(rec_b.plans[i]), f"plan {i}"
        ra = codec.dumps(codec.result_to_json(rec_a.results[i]))
        rb = codec.dumps(codec.result_to_json(rec_b.results[i]))
        if ra != rb:
            return i
    return n


@settings(max_examples=25, deadline=None, database=None)
@given(seed=st.integers(0, 10_000), policy_name=st.sampled_from(policy_names()),
       lengths=st.lists(st.integers(1, 12), min_size=10, max_size=10))
def test_plans_agree_until_a_different_stop_is_published(seed, policy_name, lengths):
    raw = random_workload_json(seed)
    ids = [r["request_id"] for r in raw["requests"]]
    a = run_engine(parse_workload(raw), policy_name)[1]
    b = run_engine(_with_lengths(raw, dict(zip(ids, lengths, strict=True))), policy_name)[1]
    _assert_plans_agree_until_stop_facts_differ(a, b)


class _SpyPolicy:
    """Delegates to a real policy and checks every argument it is handed."""

    def __init__(self, policy):
        self._policy = policy
        self.policy_id = policy.policy_id
        self.policy_version = policy.policy_version
        self.tie_break_key = policy.tie_break_key
        self.contract = policy.contract
        self.num_calls = 0

    def choose(self, state):
        self.num_calls += 1
        for arg in (state,):
            for path, value in _walk(arg, type(arg).__name__):
                assert not isinstance(value, (HiddenTruth, WorkloadManifest)), path
                assert not any(word in path.rsplit(".", 1)[-1] for word in HIDDEN_NAMES), path
        return self._policy.choose(state)


@pytest.mark.parametrize("policy_name", policy_names())
def test_policies_are_never_handed_hidden_truth(policy_name):
    raw = _manifests()["abc"]
    manifest = parse_workload(raw)
    spy = _SpyPolicy(policy_for(policy_name, manifest.online))
    Engine(manifest.online_projection(), spy, make_simulated_executor(manifest)).run()
    assert spy.num_calls > 0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_generated_hidden_truth_is_never_online(seed):
    """Generated workloads: a different output-length distribution changes
    only fixture_only_hidden_truth; the online projection and the written
    online section stay byte-identical, and no realized length leaks in."""
    spec = {**GENERATED_SPEC, "seed": seed}
    other = json.loads(json.dumps(spec))
    other["clients"][0]["output_tokens"] = {"kind": "fixed", "value": 2}
    other["clients"][1]["output_tokens"] = {"kind": "uniform", "min": 5, "max": 40}
    docs = [generate_document(parse_spec(s)) for s in (spec, other)]
    manifests = [parse_workload(d) for d in docs]
    wire = [codec.dumps(online_to_json(m.online_projection())) for m in manifests]
    assert wire[0] == wire[1]
    assert manifests[0].online_projection() == manifests[1].online_projection()
    assert manifests[0].hidden != manifests[1].hidden  # the test can fail
    texts = [dumps_workload(d).split('"fixture_only_hidden_truth"') for d in docs]
    assert texts[0][0] == texts[1][0] and texts[0][1] != texts[1][1]
    assert "realized" not in texts[0][0] and "hidden" not in texts[0][0]
    assert dumps_workload(docs[0]) == dumps_workload(generate_document(parse_spec(spec)))


@settings(max_examples=10, deadline=None, database=None)
@given(seed=st.integers(0, 10_000), policy_name=st.sampled_from(policy_names()),
       lengths=st.lists(st.integers(1, 12), min_size=10, max_size=10))
def test_generated_plans_agree_until_a_different_stop_is_published(seed, policy_name, lengths):
    raw = generate_document(parse_spec({**GENERATED_SPEC, "seed": seed}))
    ids = [r["request_id"] for r in raw["requests"]]
    a = run_engine(parse_workload(raw), policy_name)[1]
    b = run_engine(_with_lengths(raw, dict(zip(ids, lengths, strict=True))), policy_name)[1]
    _assert_plans_agree_until_stop_facts_differ(a, b)
