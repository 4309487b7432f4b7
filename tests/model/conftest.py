"""Session fixtures for the model tests: one tiny checkpoint, built offline into a tmp dir."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Nothing in these tests may reach a model hub; transformers must read local files only.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from iterserve.model.make_model import make_model

    return make_model(tmp_path_factory.mktemp("tiny"), preset="tiny", seed=0)


@pytest.fixture(scope="session")
def test_device() -> str:
    """Where the packed model under test runs; set ITERSERVE_TEST_DEVICE=cuda on a GPU host.
    The transformers reference always runs on CPU in float32."""
    return os.environ.get("ITERSERVE_TEST_DEVICE", "cpu")


@pytest.fixture(scope="session")
def tiny_model(tiny_dir: Path, test_device: str):  # -> PackedCausalLM
    from iterserve.model.loader import load_model

    return load_model(tiny_dir, device=test_device)


@pytest.fixture(scope="session")
def tiny_reference(tiny_dir: Path):  # -> transformers LlamaForCausalLM, float32, eval
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32).eval()


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread():
    """The tiny model's matmuls are too small to gain from intra-op threads, and on a
    busy 2-core host OpenMP threads waiting on each other cost several times more."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="session")
def paged_decode_kernel() -> None:
    """The in-place decode kernel, loaded once per session (built into the user's
    cache on first use, ~15 s; `iterserve build-kernels` prebuilds it)."""
    from iterserve.model import kernels

    try:
        kernels.load_paged_decode()
    except kernels.KernelBuildError as error:
        pytest.skip(str(error))
