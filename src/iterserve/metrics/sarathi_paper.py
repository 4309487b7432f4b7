"""SARATHI's paper capacity model (0x09, F50 and F51).

The 2023 paper sizes its hybrid batches with a simplified memory model:

    B_paper = floor((M_G - M_S) / (L_max * m_KV))      (F50)
    P:D     = C / (B_paper - 1)                         (F51)

M_G is accelerator memory, M_S model-state memory, L_max the assumed longest
sequence and m_KV the K/V bytes one token of one request holds. One resident
prefill leaves at most B_paper - 1 decodes to piggyback, hence F51's
denominator. This is a historical approximation for reading the paper, NOT a
replacement for the paged allocator's grants (0x0A) or the admission
estimators under uncertain output (0x06): a run's real capacity comes from
the block pool.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction


@dataclass(frozen=True, slots=True)
class SarathiPaperModel:
    """The four inputs of F50, in bytes and tokens."""

    gpu_memory_bytes: int  # M_G
    model_state_bytes: int  # M_S
    max_sequence_tokens: int  # L_max
    kv_bytes_per_token: int  # m_KV

    def __post_init__(self) -> None:
        for name in ("gpu_memory_bytes", "max_sequence_tokens", "kv_bytes_per_token"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if not 0 <= self.model_state_bytes < self.gpu_memory_bytes:
            raise ValueError(f"model_state_bytes must be in [0, gpu_memory_bytes), got "
                             f"{self.model_state_bytes} of {self.gpu_memory_bytes}")

    @property
    def batch_bound(self) -> int:
        """B_paper (F50): requests whose whole L_max stack fits beside the model."""
        free_bytes = self.gpu_memory_bytes - self.model_state_bytes
        return free_bytes // (self.max_sequence_tokens * self.kv_bytes_per_token)


def prefill_decode_ratio(chunk_size: int, batch_bound: int) -> Fraction:
    """P:D = C / (B_paper - 1) (F51), exact. Undefined (ValueError) when the
    batch holds no decode beside the prefill (B_paper <= 1)."""
    if chunk_size <= 0:
        raise ValueError(f"chunk_size must be > 0, got {chunk_size}")
    if batch_bound <= 1:
        raise ValueError(f"P:D needs B_paper >= 2 (one prefill and a decode), got {batch_bound}")
    return Fraction(chunk_size, batch_bound - 1)
