"""The simulation holds the cyclic collector back, and makes no cycles for it."""

from __future__ import annotations

import gc
import io
from collections.abc import Iterator

import pytest
from lab_helpers import chat_mix_manifest

from iterserve.admission.overload import make_gate
from iterserve.cost import parse_cost_model
from iterserve.policies.registry import policy_for
from iterserve.sim.collector import collector_held_back
from iterserve.sim.report import RunConfig, run_simulation


@pytest.fixture
def collector_enabled() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.enable()
    yield
    if not was_enabled:
        gc.disable()


def test_no_pass_inside_and_the_collector_comes_back_after(collector_enabled: None) -> None:
    with collector_held_back():
        assert not gc.isenabled()
        with collector_held_back():  # nested: the outer block decides
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_an_exception_inside_enables_the_collector_again(collector_enabled: None) -> None:
    with pytest.raises(RuntimeError), collector_held_back():
        raise RuntimeError("the run failed")
    assert gc.isenabled()


def test_a_disabled_collector_stays_disabled(collector_enabled: None) -> None:
    gc.disable()
    with collector_held_back():
        pass
    assert not gc.isenabled()


@pytest.mark.parametrize("policy", ["vllm", "sarathi-serve", "vtc"])
def test_a_run_with_every_observer_leaves_no_cyclic_garbage(policy: str,
                                                             collector_enabled: None) -> None:
    """What the collector would have freed is nothing: every object the
    run (policy, executor, transitions, decision log, events, traces) drops
    goes by its reference count. A run that made cycles would grow while
    the collector is held back; this names it."""
    manifest = chat_mix_manifest(60, 40)  # a small pool: preemptions and rebuilds
    model = parse_cost_model("linear:8,0.02,0.1")
    config = RunConfig(policy_for(policy, manifest.online, cost_model=model), model,
                       make_gate("accept-all", {}))
    gc.collect()
    gc.disable()
    run = run_simulation(manifest, config, io.StringIO(), events=io.StringIO())
    assert len(run.recorder.iterations) > 100
    assert gc.collect() == 0
