"""The knobs of a real-model engine (the offline API and the server share
them). Torch-free: the runtime maps the dtype name to a torch dtype."""

from __future__ import annotations

from dataclasses import dataclass

from iterserve.policies.registry import make_policy, policy_class, settings_for
from iterserve.policies.settings import PolicyConfigError, setting_names
from iterserve.records.spec import Capacity

DTYPE_NAMES = ("auto", "float32", "bfloat16", "float16")  # auto: the checkpoint's dtype
#: model.kernels.ATTENTION_BACKENDS, spelled here so the config stays torch-free
#: (a test holds the two equal)
ATTENTION_BACKEND_NAMES = ("auto", "torch", "cpp", "flex", "varlen")


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Scheduler and memory knobs of a real run (validated on construction)."""

    policy: str = "vllm"
    max_num_batched_tokens: int = 512
    max_num_seqs: int = 64
    num_kv_blocks: int | None = None  # None: from kv_cache_memory, else sized from free memory
    kv_cache_memory: int | None = None  # bytes for the KV pool (vLLM's --kv-cache-memory)
    block_size: int = 16
    num_host_blocks: int = 0
    chunk_size: int | None = None
    tau: int | None = None
    long_prefill_token_threshold: int | None = None
    extra_policy_settings: tuple[tuple[str, object], ...] = ()  # NAME=VALUE flags, checked strictly
    enable_prefix_caching: bool = True
    dtype: str = "auto"
    device: str = "cpu"
    # auto: native kernels on CPU, one batched attention call per layer on CUDA
    attention_backend: str = "auto"
    max_model_len: int | None = None  # None: the checkpoint's max_position_embeddings
    admission: str = "none"  # kv reservation estimate (see ``iterserve.admission``)
    overload: str = "accept-all"  # arrival gate: accept-all | bounded | slo-feasible
    max_live: int | None = None  # the bounded gate's cap on live requests
    cost_model: str | None = None  # the slo-feasible gate's cost model (NAME:params)
    # fault the KV pool in at start-up (model/host_memory.py); None: when num_kv_blocks or
    # kv_cache_memory sized it, not when it is sized from free memory
    commit_kv: bool | None = None

    def __post_init__(self) -> None:
        if self.dtype not in DTYPE_NAMES:
            raise ValueError(f"dtype must be one of {list(DTYPE_NAMES)}, got {self.dtype!r}")
        for name in ("max_num_batched_tokens", "max_num_seqs", "num_kv_blocks", "kv_cache_memory",
                     "block_size"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1")
        if self.num_kv_blocks is not None and self.kv_cache_memory is not None:
            raise ValueError("give num_kv_blocks or kv_cache_memory, not both")
        if self.num_host_blocks < 0:
            raise ValueError("num_host_blocks must be >= 0")
        for name in ("chunk_size", "tau", "long_prefill_token_threshold"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1 when set")
        if self.attention_backend not in ATTENTION_BACKEND_NAMES:
            raise ValueError(f"attention_backend must be one of {list(ATTENTION_BACKEND_NAMES)}, "
                             f"got {self.attention_backend!r}")
        device, _, index = self.device.partition(":")
        if device not in ("cpu", "cuda") or (index and (device != "cuda" or not index.isdigit())):
            raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {self.device!r}")
        needs = {"varlen": "cuda", "cpp": "cpu"}.get(self.attention_backend)
        if needs is not None and device != needs:
            raise ValueError(f"attention_backend {self.attention_backend!r} runs on {needs} "
                             f"only, not {self.device!r}")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ValueError("max_model_len must be >= 2")
        if self.commit_kv is not None and not isinstance(self.commit_kv, bool):
            raise ValueError(f"commit_kv must be True, False or None, got {self.commit_kv!r}")
        make_policy(self.policy, **self.policy_settings())  # an unknown or inapplicable setting raises

    def commits_kv(self) -> bool:
        """Whether the KV pool is faulted in at start-up (``commit_kv``, else
        whether the user sized it)."""
        if self.commit_kv is not None:
            return self.commit_kv
        return self.num_kv_blocks is not None or self.kv_cache_memory is not None

    def capacity(self) -> Capacity:
        return Capacity(max_num_batched_tokens=self.max_num_batched_tokens,
                        max_num_seqs=self.max_num_seqs)

    def policy_settings(self) -> dict[str, object]:
        """The settings the policy is made with: every knob given (chunk_size,
        tau, long_prefill_token_threshold, NAME=VALUE extras), each one the
        policy must take (else :class:`PolicyConfigError` naming it: a flag
        is never dropped), plus the engine's ``max_num_seqs`` as the policy's
        running cap where its config has one."""
        given: dict[str, object] = {
            name: value for name, value in (
                ("chunk_size", self.chunk_size), ("tau", self.tau),
                ("long_prefill_token_threshold", self.long_prefill_token_threshold))
            if value is not None}
        for name, value in self.extra_policy_settings:
            if name in given:
                raise PolicyConfigError(f"setting {name} given twice")
            given[name] = value
        settings = settings_for(self.policy, None, given, strict=True)
        if "max_num_seqs" in setting_names(policy_class(self.policy).config_type):
            settings.setdefault("max_num_seqs", self.max_num_seqs)
        return settings
