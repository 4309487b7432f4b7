"""The torch runtime a measurement ran on (0x0E coordinates), so callers
above the model layer need not import torch."""

from __future__ import annotations

import torch


def torch_version() -> str:
    return str(torch.__version__)


def num_threads() -> int:
    return int(torch.get_num_threads())


def set_num_threads(count: int) -> None:
    """Intra-op threads for the rest of the process (a CLI flag's effect)."""
    if count < 1:
        raise ValueError(f"threads must be >= 1, got {count}")
    torch.set_num_threads(count)


def dtype_name(dtype: object) -> str:
    return str(dtype).removeprefix("torch.")
