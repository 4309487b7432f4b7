"""The torch runtime a measurement ran on (0x0E coordinates), so callers
above the model layer need not import torch."""

from __future__ import annotations

import torch

from iterserve.kv.pool_size import available_host_bytes

# the dtypes a run may load a checkpoint in, by their flag spelling
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def available_device_bytes(device: torch.device) -> int | None:
    """Free bytes on ``device`` now (CUDA: the driver's count; CPU: the host's)."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    return available_host_bytes()


def cuda_available() -> bool:
    return bool(torch.cuda.is_available())


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
