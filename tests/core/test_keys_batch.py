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


@pytest.mark.parametrize("names", [("client_service", "arrival_order", "request_id"),
                                   ("prefix_hit_rows", "request_id"),
                                   ("queue_rank", "client_service", "request_id")])
def test_a_compiled_key_reads_the_state_it_is_bound_to(names: tuple[str, ...]) -> None:
    """Keys are compiled once per key shape; a field that reads the state
    must read the state each call binds, never the first one compiled."""
    state = loop2_state()
    views = list(state.views.values())
    first = dataclasses.replace(state, service={view.client_id: 5 for view in views},
                                prefix_hits={view.request_id: 7 for view in views})
    second = dataclasses.replace(state, service={view.client_id: 9 for view in views},
                                 prefix_hits={view.request_id: 11 for view in views})
    for bound in (first, second, first):
        expected = [tuple(KEY_FIELDS[name](bound, view) for name in names) for view in views]
        assert [key_function(names, bound)(view) for view in views] == expected
        assert keys_function(names, bound)(views) == expected
