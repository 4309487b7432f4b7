"""The project's one vocabulary for its knobs, and how older names are read.

Every layer, flag, config field, workload file and report uses these names
(vLLM's where the meaning is the same):

- ``max_num_batched_tokens``: the per-iteration token cap (K_token, 0x05);
- ``max_num_seqs``: the per-iteration sequence cap (K_seq, 0x05); a
  policy's own ``max_num_seqs`` setting caps its running set (vLLM's);
- ``num_kv_blocks`` and ``block_size``: the paged KV pool;
- ``preemption_mode``: ``recompute``, ``swap`` or ``cheaper`` (per victim by cost) (0x0C).

Older names in workload files are read with a :class:`RenamedWarning`
naming the new one; two spellings of one field in one file are an error.
"""

from __future__ import annotations

import warnings


class RenamedWarning(FutureWarning):
    """An input used a name the project has replaced (shown by default)."""


#: workload ``capacity`` fields: old name -> new name
CAPACITY_RENAMES = {"token_budget": "max_num_batched_tokens", "sequence_budget": "max_num_seqs"}
#: workload ``kv`` fields: old name -> new name
KV_RENAMES = {"num_blocks": "num_kv_blocks"}


def warn_renamed(old: str, new: str) -> None:
    warnings.warn(f"{old} is deprecated; write {new}", RenamedWarning, stacklevel=3)
