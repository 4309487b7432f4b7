"""The simulation's collector settings are scoped to the run."""

from __future__ import annotations

import gc

import pytest

from iterserve.sim.collector import YOUNG_THRESHOLD, collector_held_back


@pytest.fixture
def default_collector():  # type: ignore[no-untyped-def]
    thresholds = gc.get_threshold()
    gc.unfreeze()
    yield thresholds
    gc.set_threshold(*thresholds)
    gc.unfreeze()


def test_thresholds_and_frozen_objects_come_back_after_the_run(default_collector) -> None:
    before = gc.get_threshold()
    with collector_held_back():
        assert gc.get_threshold()[0] == YOUNG_THRESHOLD
        assert gc.get_threshold()[1:] == before[1:]
        assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_an_exception_inside_restores_the_thresholds(default_collector) -> None:
    before = gc.get_threshold()
    with pytest.raises(RuntimeError), collector_held_back():
        raise RuntimeError("the run failed")
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_objects_the_process_froze_itself_stay_frozen(default_collector) -> None:
    gc.freeze()
    frozen = gc.get_freeze_count()
    with collector_held_back():
        pass
    assert gc.get_freeze_count() >= frozen > 0
