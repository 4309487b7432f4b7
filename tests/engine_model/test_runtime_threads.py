"""load_runtime does its torch set-up on a passing thread, so the engine
thread's OpenMP pool is the process's only one (model/omp_pools.py), and
commits a KV pool the user sized (model/host_memory.py)."""

from __future__ import annotations

import threading

import pytest


@pytest.mark.slow
def test_the_model_loads_off_the_callers_thread_and_the_engine_serves(tiny_dir, monkeypatch):
    import iterserve.runtime as runtime_module
    from iterserve.engine.streams import BlockingOutputStream
    from iterserve.llm import EngineConfig
    from iterserve.records.sampling_params import SamplingParams

    loaders: list[threading.Thread] = []
    real_load = runtime_module.load_model

    def recording_load(*args, **kwargs):
        loaders.append(threading.current_thread())
        return real_load(*args, **kwargs)

    monkeypatch.setattr(runtime_module, "load_model", recording_load)
    runtime = runtime_module.load_runtime(tiny_dir, EngineConfig(num_kv_blocks=64, max_num_batched_tokens=64))
    try:
        assert len(loaders) == 1
        assert loaders[0] is not threading.current_thread()
        assert not loaders[0].is_alive()
        stream = BlockingOutputStream("")
        runtime.engine.add_request([5, 6, 7], SamplingParams(max_tokens=3, temperature=0.0,
                                                             ignore_eos=True), stream)
        events = list(stream)
        assert sum(len(e.token_ids) for e in events) == 3
    finally:
        runtime.engine.shutdown(0.0)


def test_a_load_failure_reaches_the_caller_as_raised(tiny_dir, monkeypatch):
    import iterserve.runtime as runtime_module
    from iterserve.llm import EngineConfig
    from iterserve.model.errors import CheckpointError

    error = CheckpointError("model.safetensors: truncated")

    def failing_load(*args, **kwargs):
        raise error

    monkeypatch.setattr(runtime_module, "load_model", failing_load)
    with pytest.raises(CheckpointError) as caught:
        runtime_module.load_runtime(tiny_dir, EngineConfig(num_kv_blocks=64, max_num_batched_tokens=64))
    assert caught.value is error


@pytest.mark.parametrize(("sizing", "committed"), [
    ({"num_kv_blocks": 64}, True),
    ({"kv_cache_memory": 4 << 20}, True),
    ({}, False),  # sized from free memory: stays lazy
])
def test_a_pool_the_user_sized_is_committed_at_start_up(tiny_dir, monkeypatch, sizing,
                                                         committed):
    import iterserve.runtime as runtime_module
    from iterserve.llm import EngineConfig

    seen: list[bool] = []
    real_executor = runtime_module.TorchExecutor

    def recording_executor(*args, **kwargs):
        seen.append(kwargs["commit_kv"])
        return real_executor(*args, **kwargs)

    monkeypatch.setattr(runtime_module, "TorchExecutor", recording_executor)
    runtime = runtime_module.load_runtime(tiny_dir, EngineConfig(max_num_batched_tokens=64, **sizing))
    runtime.engine.shutdown(0.0)
    assert seen == [committed]
