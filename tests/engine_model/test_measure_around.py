"""measure_around: the fidelity protocol's order (a profile pass before the
first run and after every run), so passes i and i + 1 bracket run i."""

from __future__ import annotations

from iterserve.lab import profiling


def test_each_run_sits_between_two_profile_passes(monkeypatch) -> None:
    order: list[str] = []

    def fake_measure(model, grid, pass_index=0, timer=None):  # type: ignore[no-untyped-def]
        order.append(f"pass {pass_index}")
        return [pass_index]

    monkeypatch.setattr(profiling, "measure", fake_measure)
    runs = {"vllm": lambda: order.append("run vllm") or "real vllm",
            "sarathi": lambda: order.append("run sarathi") or "real sarathi"}
    passes, results = profiling.measure_around(None, None, runs)  # type: ignore[arg-type]
    assert order == ["pass 0", "run vllm", "pass 1", "run sarathi", "pass 2"]
    assert passes == [[0], [1], [2]]
    assert results == {"vllm": "real vllm", "sarathi": "real sarathi"}
