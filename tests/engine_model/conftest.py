"""Session fixtures for the engine-with-a-real-model tests (issue 5).

The tiny checkpoint and the one-thread pin come from tests/torch_fixtures.py;
every test runs float32 on CPU.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from torch_fixtures import *  # noqa: F403  (the session fixtures: _one_torch_thread, tiny_dir)


@pytest.fixture(scope="session")
def tiny_model(tiny_dir: Path):  # -> PackedCausalLM, float32, CPU
    from iterserve.model.loader import load_model

    return load_model(tiny_dir)


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_dir: Path):  # -> TextTokenizer
    from iterserve.model.tokenizer import load_tokenizer

    return load_tokenizer(tiny_dir)
