"""One host-to-device upload per step for the batched attention path.

`pack_batched` builds a step's packed batch and its attention layout
(model/batched_attention.py) as numpy arrays on the host, writes them all
into one staging buffer and moves it to the device with a single copy; the
tensors the forward reads are views into that one device buffer. On CUDA the
staging buffer is pinned and the copy non-blocking, so it overlaps the
host's remaining work; on the CPU the arrays are used in place (no copy).

The staging buffer is the only mutable state and `HostStaging` owns it: it
is reused step after step, and before it is overwritten the previous copy's
event is waited on (the step's one device-to-host sync, the sampled ids,
has normally passed it already).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from iterserve.model.batched_attention import FlexLayout, host_layout
from iterserve.model.packing import HostPack, PackedBatch, SegmentRows, host_arrays

#: Each array starts at a multiple of this many bytes in the staging buffer,
#: so every view keeps its dtype's alignment.
ALIGN_BYTES = 16


class HostStaging:
    """A reusable (pinned on CUDA) host buffer and its one upload per step."""

    def __init__(self, device: torch.device | str) -> None:
        self.device = torch.device(device)
        self._host: torch.Tensor | None = None  # uint8, grown on demand
        self._copied: torch.cuda.Event | None = None  # the last upload's completion
        self.num_uploads = 0

    def upload(self, arrays: Sequence[np.ndarray]) -> list[torch.Tensor]:
        """`arrays` on the device, each a view of one uploaded buffer."""
        self.num_uploads += 1
        if self.device.type == "cpu":
            return [torch.from_numpy(np.ascontiguousarray(a)) for a in arrays]
        offsets = aligned_offsets(arrays)
        host = self._buffer(offsets[-1])
        view = host.numpy()
        for array, begin in zip(arrays, offsets, strict=False):
            view[begin: begin + array.nbytes] = np.ascontiguousarray(array).view(np.uint8).ravel()
        device_bytes = host[: offsets[-1]].to(self.device, non_blocking=True)
        if self.device.type == "cuda":
            self._copied = torch.cuda.Event()
            self._copied.record()
        return [typed_view(device_bytes, begin, array)
                for array, begin in zip(arrays, offsets, strict=False)]

    def upload_into(self, arrays: Sequence[np.ndarray], device_bytes: torch.Tensor) -> None:
        """`arrays` into `device_bytes` at their `aligned_offsets`, in one copy
        (non-blocking from the pinned buffer on CUDA; a plain write on the CPU)."""
        offsets = aligned_offsets(arrays)
        self.num_uploads += 1
        host = device_bytes if device_bytes.device.type == "cpu" else self._buffer(offsets[-1])
        view = host.numpy()
        for array, begin in zip(arrays, offsets, strict=False):
            view[begin: begin + array.nbytes] = np.ascontiguousarray(array).view(np.uint8).ravel()
        if host is device_bytes:
            return
        device_bytes[: offsets[-1]].copy_(host[: offsets[-1]], non_blocking=True)
        if device_bytes.device.type == "cuda":
            self._copied = torch.cuda.Event()
            self._copied.record()

    def _buffer(self, num_bytes: int) -> torch.Tensor:
        if self._copied is not None:
            self._copied.synchronize()  # the previous upload must have left the buffer
        if self._host is None or self._host.numel() < num_bytes:
            capacity = 1 << max(12, (num_bytes - 1).bit_length())
            self._host = torch.empty(capacity, dtype=torch.uint8,
                                     pin_memory=self.device.type == "cuda")
        return self._host


def aligned_offsets(arrays: Sequence[np.ndarray]) -> list[int]:
    """Start byte of each array, then the total, each rounded up to ALIGN_BYTES."""
    offsets, position = [], 0
    for array in arrays:
        offsets.append(position)
        position += -(-array.nbytes // ALIGN_BYTES) * ALIGN_BYTES
    return [*offsets, position]


def typed_view(device_bytes: torch.Tensor, begin: int, array: np.ndarray) -> torch.Tensor:
    """The bytes of `device_bytes` from `begin` seen as `array`'s dtype and shape."""
    dtype = torch.from_numpy(np.empty(0, array.dtype)).dtype
    return device_bytes[begin: begin + array.nbytes].view(dtype).view(array.shape)


def pack_batched(segments: Sequence[SegmentRows], block_size: int, num_pool_blocks: int,
                 staging: HostStaging) -> PackedBatch:
    """`packing.pack` plus the batched attention layout, uploaded in one copy."""
    return upload_batch(host_arrays(segments, block_size), num_pool_blocks, staging)


def upload_batch(host: HostPack, num_pool_blocks: int, staging: HostStaging) -> PackedBatch:
    """The packed batch of `host` with its attention layout, in one upload."""
    block_size = host.block_size
    layout = host_layout(host.query_lens, host.context_lens, host.block_tables,
                         host.num_blocks, block_size)
    batch_arrays, layout_arrays = host.arrays(), layout.arrays()
    uploaded = staging.upload((*batch_arrays, *layout_arrays))
    flex = FlexLayout.from_uploaded(layout, uploaded[len(batch_arrays):],
                                    int(host.query_lens.sum()), num_pool_blocks, block_size)
    return host.batch(uploaded[: len(batch_arrays)], flex)


def layout_for(batch: PackedBatch, num_pool_blocks: int) -> FlexLayout:
    """The layout of a batch packed without it (`packing.pack`): reads the
    block tables back to the host (a sync off the CPU); pack_batched avoids it."""
    tables = batch.block_tables.cpu().numpy()
    query_lens, starts = np.asarray(batch.query_lens), np.asarray(batch.starts)
    layout = host_layout(query_lens, starts, tables, np.asarray(batch.num_blocks),
                         batch.block_size)
    device = batch.token_ids.device
    uploaded = [torch.from_numpy(a).to(device) for a in layout.arrays()]
    return FlexLayout.from_uploaded(layout, uploaded, batch.num_rows, num_pool_blocks,
                                    batch.block_size)
