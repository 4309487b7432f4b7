"""The fast canonical encoder writes exactly the stdlib's bytes (issue 15
step 1): every state digest and decision-log line is defined by them."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iterserve.records.canonical_json import canonical_json, stdlib_canonical_json

SCALARS = (st.none() | st.booleans() | st.integers(min_value=-(2**80), max_value=2**80)
           | st.floats(allow_nan=False, allow_infinity=False)
           | st.floats(min_value=-1e-3, max_value=1e-3, allow_nan=False) | st.text())
VALUES = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=5)
    | st.dictionaries(st.text(max_size=8), children, max_size=5),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None)
@given(VALUES)
def test_canonical_json_is_the_stdlib_encoding(value):
    assert canonical_json(value) == stdlib_canonical_json(value)


@pytest.mark.parametrize("value", [
    1e-05, 1e-06, -1.5e-07, 3.3e-09, 1e-10, -9.999e-05, 1e16, 2.5e22, 1e-300, 5e-324, 2**64, -(2**63) - 1, "é", "\x7f", "\u2028",
    "\x00\x1f", "".join(map(chr, range(128))), [10.00001, 0.00001, 100.0000001],
    "node-3 10e-3", {"b": 1, "a": [1.5, (2, 3)]}, {"z": {"é": 1}}, "0.00001",
])
def test_the_values_orjson_writes_differently_fall_back(value):
    assert canonical_json(value) == json.dumps(value, sort_keys=True, separators=(",", ":"))


def test_what_the_stdlib_refuses_is_still_refused():
    @dataclasses.dataclass
    class Point:
        x: int

    for value in (Point(1), {1: "a", "b": 2}, object()):
        with pytest.raises(TypeError):
            canonical_json(value)


def test_ordinary_log_values_take_the_fast_path():
    """The guard must not fire on what logs are full of (arrivals such as
    1230.00001, ids with hyphens, hex digests): it would undo the speed-up."""
    import orjson

    from iterserve.records.canonical_json import _may_differ

    line = {"arrival": 1230.00001, "now": 10.0000002, "request_id": "req-0001",
            "client_id": "node-3", "state_digest": "3e" * 32, "duration": 17.240000000000002}
    assert not _may_differ(orjson.dumps(line, option=orjson.OPT_SORT_KEYS))
    assert _may_differ(orjson.dumps({"duration": 0.00001}))


@settings(max_examples=200, deadline=None)
@given(VALUES)
def test_the_bytes_encoder_is_the_text_encoder(value):
    from iterserve.records.canonical_json import canonical_json_bytes

    assert canonical_json_bytes(value) == canonical_json(value).encode()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(), max_size=6))
def test_the_strings_encoder_is_the_stdlib_encoding(strings):
    from iterserve.records.canonical_json import canonical_strings_bytes

    expected = stdlib_canonical_json(strings).encode()
    assert canonical_strings_bytes(tuple(strings)) == expected
    for odd in (["é", "\x7f"], ["\x00\x1f\\\""], ["0.00001", "1e-05", "a],[b"]):
        assert canonical_strings_bytes(tuple(odd)) == stdlib_canonical_json(odd).encode()
