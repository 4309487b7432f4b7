"""The validator's batched key derivation (``keys_function``) gives the
same tuples as the policies' one-view key (``key_function``), for every
registered policy's declared key and for key shapes off the fast paths."""

from __future__ import annotations

import dataclasses

import pytest

from iterserve.policies.registry import POLICIES
from iterserve.records.keys import KEY_FIELDS, key_function, keys_function
from iterserve.records.view import Lifecycle

from .helpers import loop2_state

_SHAPES = sorted({cls.tie_break_key for cls in POLICIES.values()}) + [
    (), ("request_id",), ("queue_rank",), ("queue_rank", "request_id"),
    ("arrival", "request_id"), tuple(sorted(KEY_FIELDS)),
]


@pytest.mark.parametrize("names", _SHAPES, ids=["-".join(n) or "empty" for n in _SHAPES])
def test_keys_function_equals_key_function(names: tuple[str, ...]) -> None:
    state = loop2_state()
    views = list(state.views.values())
    # every queue rank: running, waiting and a suspended lifecycle
    views.append(views[0]._replace(request_id="req-S", lifecycle=Lifecycle.SUSPENDED_RECOMPUTE))
    state = dataclasses.replace(state, prefix_hits={views[0].request_id: 3})
    key_of = key_function(names, state)
    derived = keys_function(names, state)(views)
    assert derived == [key_of(view) for view in views]
    assert all(type(key) is tuple for key in derived)
    assert {view.lifecycle for view in views} >= {Lifecycle.RUNNING, Lifecycle.WAITING}
