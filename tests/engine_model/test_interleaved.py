"""lab.interleaved: profile cells between a real run's iterations, outside
the run's clock (the fidelity protocol)."""

from __future__ import annotations

import pytest

from iterserve.cost import BatchShape
from iterserve.cost.fit import MeasuredIteration
from iterserve.lab import interleaved
from iterserve.lab.interleaved import CellInterleaver, ExcludingClock, measure_during
from iterserve.lab.profiling import ProfileGrid

GRID = ProfileGrid(num_sequences=(1, 2), prompt_lens=(16, 32))  # 4 cells


class FakeTime:
    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


@pytest.fixture
def fake_cells(monkeypatch):  # type: ignore[no-untyped-def]
    """Cells that take 0.5 s of the base clock each and record their tags."""
    base = FakeTime()
    tags: list[str] = []

    def measure_cell(executor, grid, num_sequences, prompt_len, rng, tag, gap_ms=0.0):  # type: ignore[no-untyped-def]
        base.now_s += 0.5
        tags.append(f"{tag}:{num_sequences}x{prompt_len}@{gap_ms:g}")
        return [MeasuredIteration(BatchShape(prompt_len, 0, 0, num_sequences), 1.0)]

    monkeypatch.setattr(interleaved, "measure_cell", measure_cell)
    monkeypatch.setattr(interleaved, "TorchExecutor", lambda *args, **kwargs: None)
    return base, tags


def test_the_clock_does_not_count_excluded_work() -> None:
    base = FakeTime()
    clock = ExcludingClock(base)
    base.now_s = 2.0

    def work() -> str:
        base.now_s += 3.0
        return "done"

    assert clock.excluding(work) == "done"
    assert base.now_s == 5.0 and clock() == 2.0 and clock.excluded_s == 3.0
    base.now_s += 1.0
    assert clock() == 3.0


def test_a_cell_runs_after_every_interval_of_the_run_and_outside_its_clock(fake_cells) -> None:
    base, tags = fake_cells
    clock = ExcludingClock(base)
    interleaver = CellInterleaver(None, GRID, clock, every_s=1.0)  # type: ignore[arg-type]
    assert tags == ["warmup:1x16@0"] and clock() == 0.0  # the warm-up is not the run's
    steps = []
    for _ in range(8):  # eight iterations of the run, 0.4 s each
        base.now_s += 0.4
        interleaver.on_step(None, None, None, None)  # type: ignore[arg-type]
        steps.append(round(clock(), 6))
    # a cell after 1.2 s and 2.4 s of the run; the clock never shows one
    assert tags[1:] == ["i0:1x16@0", "i1:1x32@4"]
    assert steps == [0.4, 0.8, 1.2, 1.6, 2.0, 2.4, 2.8, 3.2]
    assert interleaver.num_cells_run == 2 and len(interleaver.samples) == 2
    interleaver.complete_the_grid()
    assert tags[3:] == ["i2:2x16@0", "i3:2x32@4"] and len(interleaver.samples) == 4
    interleaver.complete_the_grid()  # a grid already covered runs nothing more
    assert len(tags) == 5


def test_measure_during_gives_each_run_its_own_clock_and_cells(fake_cells) -> None:
    base, tags = fake_cells

    def run(name: str):  # type: ignore[no-untyped-def]
        def go(clock, observers):  # type: ignore[no-untyped-def]
            assert isinstance(clock, ExcludingClock) and clock.excluded_s == 0.5  # the warm-up
            began_s = clock()
            for _ in range(3):
                base.now_s += 0.6
                for observer in observers:
                    observer.on_step(None, None, None, None)
            return f"{name} ran {clock() - began_s:.1f} s"
        return go

    cells, results = measure_during(None, GRID, {"a": run("a"), "b": run("b")},  # type: ignore[arg-type]
                                    every_s=1.0, timer=base)
    assert results == {"a": "a ran 1.8 s", "b": "b ran 1.8 s"}
    assert [len(cells["a"]), len(cells["b"])] == [4, 4]  # one during each run, the rest after
    assert tags.count("warmup:1x16@0") == 2


def test_the_interval_must_be_positive(fake_cells) -> None:
    with pytest.raises(ValueError, match="every_s"):
        CellInterleaver(None, GRID, ExcludingClock(), every_s=0.0)  # type: ignore[arg-type]
