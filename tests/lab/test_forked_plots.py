"""A long run's report draws its plots and measures its fairness in forked
children beside its other figures (``write_metric_outputs``): the same files
as in process; a child that fails fails the report with its reason, and a
report that fails stops its children.
``ForkedCall`` is the mechanism under it and under the run's follower;
``BesideCall`` runs a call in such a child or, for a short run, in process."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from lab_helpers import chat_mix_run

from iterserve.metrics import SloConfig
from iterserve.sim import forked as forked_module
from iterserve.sim import report as report_module
from iterserve.sim.follower import can_fork
from iterserve.sim.forked import BesideCall, ForkedCall, ForkedError
from iterserve.sim.report import write_metric_outputs

OUTPUTS = ("report.md", "client_service.png", "latency_cdfs.png", "batch_composition.png",
           "queue_and_kv.png")
needs_fork = pytest.mark.skipif(not can_fork(), reason="needs os.fork and two usable CPUs")


def _report(out_dir: Path, *, beside: bool, monkeypatch: pytest.MonkeyPatch) -> dict[str, bytes]:
    """The report of one seeded preempting run, its plots drawn beside
    (in a child) or not; the bytes of its files."""
    monkeypatch.setattr(report_module, "BESIDE_ITERATIONS", 0 if beside else 10**9)
    out_dir.mkdir()
    with (out_dir / "events.jsonl").open("w", encoding="utf-8") as events:
        manifest, run = chat_mix_run(60, 80, events)
    write_metric_outputs(out_dir, run, manifest.online, SloConfig(ttft_ms=500, tbt_ms=100),
                         None, "L")
    return {name: (out_dir / name).read_bytes() for name in OUTPUTS}


@needs_fork
def test_plots_drawn_beside_are_the_plots_drawn_in_process(tmp_path, monkeypatch) -> None:
    beside = _report(tmp_path / "beside", beside=True, monkeypatch=monkeypatch)
    in_process = _report(tmp_path / "in_process", beside=False, monkeypatch=monkeypatch)
    assert beside == in_process
    assert all(beside[name] for name in OUTPUTS)


@pytest.fixture
def children(monkeypatch) -> list[ForkedCall]:
    """Every child the report forks, kept to be looked at."""
    made: list[ForkedCall] = []

    class Recorded(ForkedCall):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(report_module, "ForkedCall", Recorded)
    monkeypatch.setattr(forked_module, "ForkedCall", Recorded)  # BesideCall's children
    return made


@needs_fork
def test_a_child_that_fails_to_draw_fails_the_report(tmp_path, monkeypatch, children) -> None:
    def broken(*args: object) -> None:
        raise ValueError("no canvas")

    monkeypatch.setattr(report_module, "_plot_latency", broken)
    with pytest.raises(ForkedError, match="drawing the plots: ValueError: no canvas"):
        _report(tmp_path / "out", beside=True, monkeypatch=monkeypatch)
    # the series, service and latency plots, and the fairness measures
    assert len(children) == 4 and all(child._pid is None for child in children)  # collected


@needs_fork
def test_a_child_that_fails_to_measure_fairness_fails_the_report(tmp_path, monkeypatch,
                                                                  children) -> None:
    def broken(*args: object) -> None:
        raise ValueError("no fairness")

    monkeypatch.setattr(report_module, "run_fairness", broken)
    with pytest.raises(ForkedError, match="measuring fairness: ValueError: no fairness"):
        _report(tmp_path / "out", beside=True, monkeypatch=monkeypatch)
    assert len(children) == 4 and all(child._pid is None for child in children)


@needs_fork
def test_a_report_that_fails_stops_its_children(tmp_path, monkeypatch, children) -> None:
    def slow(*args: object) -> None:
        time.sleep(60)

    def broken(*args: object, **kwargs: object) -> None:
        raise ValueError("no evaluation")

    monkeypatch.setattr(report_module, "_plot_series", slow)
    monkeypatch.setattr(report_module, "_plot_service", slow)
    monkeypatch.setattr(report_module, "_plot_latency", slow)
    monkeypatch.setattr(report_module, "run_fairness", slow)
    monkeypatch.setattr(report_module, "evaluate_timelines", broken)  # in process
    started = time.monotonic()
    with pytest.raises(ValueError, match="no evaluation"):
        _report(tmp_path / "out", beside=True, monkeypatch=monkeypatch)
    assert len(children) == 4 and all(child._pid is None for child in children)  # reaped
    assert time.monotonic() - started < 30


def test_a_forked_call_returns_its_value_or_its_error() -> None:
    assert ForkedCall(lambda: {"rows": [1, 2, 3]}).value() == {"rows": [1, 2, 3]}

    def fails() -> None:
        raise KeyError("gone")

    with pytest.raises(ForkedError, match="KeyError: 'gone'"):
        ForkedCall(fails).value()


def test_a_beside_call_forks_only_when_asked() -> None:
    parent = os.getpid()
    forked = BesideCall(os.getpid, fork=True)
    here = BesideCall(os.getpid, fork=False)
    assert forked.is_forked and not here.is_forked
    assert forked.value() != parent and here.value() == parent
    forked.kill()  # nothing once its value was read
    with pytest.raises(ForkedError, match="already taken"):
        here.value()

    def fails() -> None:
        raise KeyError("gone")

    with pytest.raises(ForkedError, match="KeyError: 'gone'"):
        BesideCall(fails, fork=True).value()
    with pytest.raises(KeyError, match="gone"):
        BesideCall(fails, fork=False).value()


def test_a_killed_child_is_named_by_its_signal() -> None:
    child = ForkedCall(lambda: time.sleep(60))
    child.kill()
    with pytest.raises(ForkedError, match="already collected"):
        child.value()
    sleeper = ForkedCall(lambda: time.sleep(60))
    os.kill(sleeper._pid, signal.SIGTERM)
    with pytest.raises(ForkedError, match=f"killed by signal {int(signal.SIGTERM)}"):
        sleeper.value()
