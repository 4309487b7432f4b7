"""Hypothesis fuzz of the workload loader (issue 14): random JSON values in
every field, random documents and random bytes. The only exception that may
escape is the documented :class:`WorkloadError`, as one line naming a field
or the file; whatever loads round-trips through its online JSON unchanged."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from iterserve.policies.registry import policy_for, policy_names
from iterserve.policies.settings import PolicyConfigError
from iterserve.records.workload import WorkloadError, load_workload, online_to_json, parse_workload

from .helpers import ABC_FIXTURE

BASE = json.loads(ABC_FIXTURE.read_text())
BASE["kv"] = {"num_kv_blocks": 8, "block_size": 4, "num_host_blocks": 2, "bytes_per_row": 64,
              "admission": "watermark:4", "preemption_mode": "swap"}
BASE["policy_settings"] = {"chunk_size": 3, "tau": 2}
BASE["policy_settings"] = {**BASE.get("policy_settings", {}), "max_num_seqs": 4}
BASE["requests"][0] |= {"slo": {"ttft_ms": 100.0, "tbt_ms": 50.0}, "output_forecast": 2.5,
                        "output_forecast_p90": 4.0}

SCALARS = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, 1, -1, 2**31, 2**63, 10**18, 10**400]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["", "none", "max", "max:5", "watermark:", "watermark:-5", "watermark:7",
                     "watermark:nan", "preserve", "recompute", "iteration", "ms", "A"]),
)
JSON_VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12,
)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every field path of the base document (objects and list items, and their leaves)."""
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            out += _paths(value, (*prefix, index))
    return out


PATHS = _paths(BASE)


def _replace(document: Any, path: tuple[Any, ...], value: Any) -> Any:
    node = document
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return document


def _assert_contract(raw: Any) -> None:
    try:
        manifest = parse_workload(raw)
    except WorkloadError as exc:
        message = str(exc)
        assert message and "\n" not in message and message.startswith("workload"), message
        return
    again = parse_workload(json.loads(json.dumps(online_to_json(manifest.online))))
    assert again.online == manifest.online
    for name in policy_names():  # the settings' values are the policy's to refuse, in one line
        try:
            policy_for(name, manifest.online)
        except PolicyConfigError as exc:
            assert str(exc) and "\n" not in str(exc), str(exc)


FUZZ = settings(max_examples=150, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(PATHS), JSON_VALUES), min_size=1, max_size=3))
def test_random_values_in_fields(edits) -> None:
    document = copy.deepcopy(BASE)
    for path, value in edits:
        try:
            _replace(document, path, value)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier edit replaced this field's parent
    _assert_contract(document)


@FUZZ
@given(st.sampled_from(PATHS), st.text(max_size=6), JSON_VALUES)
def test_unknown_keys_next_to_fields(path, key, value) -> None:
    document = copy.deepcopy(BASE)
    parent = document
    for part in path[:-1]:
        parent = parent[part]
    if isinstance(parent, dict):
        parent[key] = value
    _assert_contract(document)


def test_the_base_document_loads_and_every_policy_takes_its_settings() -> None:
    """The control: the fuzz edits a document that loads and runs everywhere."""
    online = parse_workload(copy.deepcopy(BASE)).online
    assert dict(online.policy_settings) == {"chunk_size": 3, "tau": 2, "max_num_seqs": 4}
    for name in policy_names():
        assert policy_for(name, online).policy_id == name


@FUZZ
@given(JSON_VALUES)
def test_random_documents(raw) -> None:
    _assert_contract(raw)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.binary(max_size=64))
def test_random_bytes_from_a_file(tmp_path_factory, payload) -> None:
    path = Path(tmp_path_factory.mktemp("fuzz")) / "workload.json"
    path.write_bytes(payload)
    try:
        load_workload(path)
    except WorkloadError as exc:
        assert "\n" not in str(exc)
