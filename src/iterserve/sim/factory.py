"""Builds the simulated executor a workload asks for."""

from __future__ import annotations

from iterserve.cost import ClockedCost
from iterserve.engine.kv_residency import KvResidency
from iterserve.kv.config import BlockManagerConfig
from iterserve.records.spec import WorkloadManifest
from iterserve.sim.executor import SimulatedExecutor


def make_simulated_executor(manifest: WorkloadManifest,
                            cost_model: ClockedCost | None = None) -> SimulatedExecutor:
    """The simulated executor for a workload: the paged pool of its ``kv``
    section; else logical KV rows when capacity.kv_rows is set (block size
    1); else unbounded memory."""
    spec = manifest.online.kv
    kv_rows = manifest.online.capacity.kv_rows
    kv = None
    if spec is not None:
        kv = KvResidency(BlockManagerConfig(spec.num_kv_blocks, spec.block_size,
                                            spec.num_host_blocks),
                         bytes_per_row=spec.bytes_per_row)
    elif kv_rows is not None:
        kv = KvResidency(BlockManagerConfig(kv_rows, 1))
    return SimulatedExecutor(manifest.hidden, cost_model, kv=kv, workload=manifest.online,
                             plan_prefix_hits=spec is not None and spec.plan_prefix_hits)
