"""Session fixtures shared by the suites that run the tiny model (engine and
server): hub access off, torch pinned to one intra-op thread, and one tiny
random-weight checkpoint per session. A conftest takes them by importing
them into its own namespace.

One thread: these suites run many small forwards, and OpenMP threads
spinning on a shared 2-core machine only slow them down.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

__all__ = ["_one_torch_thread", "tiny_dir", "tiny_reference"]

# Nothing here may reach a model hub; transformers must read local files only.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread() -> Iterator[None]:
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from iterserve.model.make_model import make_model

    return make_model(tmp_path_factory.mktemp("tiny"), preset="tiny", seed=0)


@pytest.fixture(scope="session")
def tiny_reference(tiny_dir: Path):  # -> transformers LlamaForCausalLM, float32, eval, CPU
    """The independent reference: transformers' own model on the tiny checkpoint."""
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32).eval()


def fail_on_call(executor: object, call: int, error: Exception) -> None:
    """Make ``executor.execute`` raise ``error`` on its ``call``-th call
    (1-based) and run normally on every other call."""
    real_execute = executor.execute  # type: ignore[attr-defined]
    calls = {"n": 0}

    def execute(plan, state):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == call:
            raise error
        return real_execute(plan, state)

    executor.execute = execute  # type: ignore[attr-defined]
