"""Session fixtures for the engine-with-a-real-model tests (issue 5).

One tiny checkpoint is built offline into a tmp dir per session; every test
runs float32 on CPU. The first test here pins torch to one intra-op thread
for the rest of the session: these tests are many small forwards, and
OpenMP spinning threads on a shared 2-core machine only slow them down.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

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

    return make_model(tmp_path_factory.mktemp("engine-tiny"), preset="tiny", seed=0)


@pytest.fixture(scope="session")
def tiny_model(tiny_dir: Path):  # -> PackedCausalLM, float32, CPU
    from iterserve.model.loader import load_model

    return load_model(tiny_dir)


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_dir: Path):  # -> TextTokenizer
    from iterserve.model.tokenizer import load_tokenizer

    return load_tokenizer(tiny_dir)
