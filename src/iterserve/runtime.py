"""Wiring of a served model: checkpoint + tokenizer + TorchExecutor + policy
+ overload gate -> a started :class:`OnlineEngine`. The server and the
offline API both build their engine here, so there is one engine, not two."""

from __future__ import annotations

import gc
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iterserve.admission.overload import OverloadGate, make_gate
from iterserve.config import EngineConfig
from iterserve.engine.observer import EngineObserver
from iterserve.engine.online import OnlineEngine
from iterserve.engine.online_log import OnlineLogs
from iterserve.kv.pool_size import KvPoolRequest, num_pool_blocks
from iterserve.model.executor import TorchExecutor
from iterserve.model.hub import resolve_model
from iterserve.model.kv_cache import bytes_per_block
from iterserve.model.llama import PackedCausalLM
from iterserve.model.loader import check_model_len, load_model
from iterserve.model.omp_pools import on_passing_thread
from iterserve.model.runtime import available_device_bytes, cuda_available
from iterserve.model.tokenizer import TextTokenizer, load_tokenizer
from iterserve.plan import Policy
from iterserve.policies.registry import make_policy
from iterserve.records.spec import KvSpec


@dataclass(frozen=True, slots=True)
class Runtime:
    engine: OnlineEngine
    tokenizer: TextTokenizer
    model_name: str
    max_model_len: int

    @property
    def executor(self) -> TorchExecutor:
        executor = self.engine.executor
        assert isinstance(executor, TorchExecutor)
        return executor


def make_overload_gate(config: EngineConfig) -> OverloadGate:
    """The configured overload contract; unknown names or missing params raise."""
    params: dict[str, Any] = {}
    if config.overload == "bounded":
        params = {"max_live": config.max_live}
    elif config.overload == "slo-feasible":
        params = {"cost_model": config.cost_model, "clock": "ms"}
    return make_gate(config.overload, params)


def make_engine_policy(config: EngineConfig) -> Policy:
    """The configured policy, made once with the settings it takes."""
    return make_policy(config.policy, **config.policy_settings())


def kv_pool_blocks(config: EngineConfig, model: PackedCausalLM, max_model_len: int) -> int:
    """Blocks for the KV pool: explicit, from kv_cache_memory, or from the memory
    available on the model's device once its weights are loaded (0x05 bytes per row)."""
    request = KvPoolRequest(config.num_kv_blocks, config.kv_cache_memory, config.max_num_seqs,
                            max_model_len, config.block_size)
    per_block = bytes_per_block(model.config, config.block_size, model.dtype)
    return num_pool_blocks(request, per_block, available_device_bytes(model.device))


def _freeze_startup_objects() -> None:
    """Collect once, then move every object alive after start-up (imports,
    the model, the tokenizer: ~185k on the small preset) out of the cyclic
    collector's reach: they live as long as the process, and each full
    collection the step loop triggers would otherwise walk them all, a
    pause that lands in some request's inter-token gap
    (benchmarks/bench_step_overhead.py shows it). vLLM's engine does the same."""
    gc.collect()
    gc.freeze()


def _load_executor(model_dir: str | Path, config: EngineConfig,
                   tokenizer: TextTokenizer) -> tuple[TorchExecutor, int]:
    """The checkpoint loaded, its kernels warmed and its KV pool allocated;
    with the maximum model length."""
    model = load_model(model_dir, dtype=config.dtype, device=config.device,
                       attention_backend=config.attention_backend)
    max_model_len = config.max_model_len or model.config.max_position_embeddings
    num_blocks = kv_pool_blocks(config, model, max_model_len)
    # no request waits on oneDNN's JIT
    model.warm(config.max_num_seqs, config.max_num_batched_tokens)
    # a pool the user sized is committed now, as vLLM's VLLM_CPU_KVCACHE_SPACE is; one
    # sized from free memory (GiBs, mostly never reached) stays lazy unless asked
    executor = TorchExecutor(model, num_blocks, config.block_size, tokenizer,
                             num_host_blocks=config.num_host_blocks,
                             enable_prefix_caching=config.enable_prefix_caching,
                             commit_kv=config.commits_kv(),
                             # the online engine aborts a failing request, the rest go on
                             isolate_failures=True)
    return executor, max_model_len


def load_runtime(model_dir: str | Path, config: EngineConfig, *,
                 served_model_name: str | None = None,
                 observers: Sequence[EngineObserver] = (),
                 chat_template: str | None = None, logs: OnlineLogs | None = None) -> Runtime:
    """Load the checkpoint (a directory, or a hub id in the local Hugging Face
    cache: model/hub.py) and start its online engine thread; ``chat_template``
    (a Jinja template's text) replaces the checkpoint's; ``logs``: where the
    engine's logs go (default: kept in memory)."""
    policy = make_engine_policy(config)  # a bad name or setting fails before any model work
    gate = make_overload_gate(config)
    if config.device.startswith("cuda") and not cuda_available():
        raise ValueError(f"device {config.device!r}: this torch build has no usable CUDA device")
    source = resolve_model(model_dir)
    model_dir = source.path
    check_model_len(model_dir, config.max_model_len)  # before any weight is read
    tokenizer = load_tokenizer(model_dir, chat_template)
    # the engine thread's OpenMP pool must be the process's only one (model/omp_pools.py)
    executor, max_model_len = on_passing_thread(
        lambda: _load_executor(model_dir, config, tokenizer))
    num_blocks = executor.cache.num_blocks
    # the workload's kv section carries the admission estimate; without one the
    # policies plan exactly as the offline runs always have (no kv section)
    kv = None if config.admission == "none" else KvSpec(
        num_blocks, config.block_size, config.num_host_blocks, admission=config.admission)
    engine = OnlineEngine(executor, policy, config.capacity(), max_model_len=max_model_len,
                          kv=kv, gate=gate, observers=observers, logs=logs)
    _freeze_startup_objects()
    name = served_model_name or source.name
    return Runtime(engine.start(), tokenizer, name, max_model_len)
