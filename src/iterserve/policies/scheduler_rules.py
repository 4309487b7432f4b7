"""SchedulerConfig-style cross-field rules for the vLLM-shaped policies
(0x0D): each rule has an id, the fields it relates and its own one-line
error, checked when the policy's config is made (never mid-run).

After vLLM 0.32's ``SchedulerConfig.verify_max_model_len``
(config/scheduler.py, markers in :mod:`iterserve.policies.vllm_pin`): SC1
is its max_num_batched_tokens >= max_num_seqs. vLLM bounds the long-prefill
threshold by max_model_len; iterserve has no model length, so SC2 bounds
it by the per-step token budget, the most it can ever cut (a declared
deviation). iterserve's vllm policy always chunks prefills, so vLLM's rule
that max_num_batched_tokens >= max_model_len without chunked prefill has
no field here to relate.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from iterserve.policies.settings import PolicyConfigError


@dataclass(frozen=True, slots=True)
class CrossFieldRule:
    rule_id: str
    fields: tuple[str, str]
    holds: Callable[[int, int], bool]  # (first, second) -> ok; skipped when either is None
    message: str


VLLM_RULES: tuple[CrossFieldRule, ...] = (
    CrossFieldRule("SC1", ("max_num_batched_tokens", "max_num_seqs"), lambda t, s: t >= s,
                   "max_num_batched_tokens ({0}) must be >= max_num_seqs ({1}): every running "
                   "sequence needs one token per step"),
    CrossFieldRule("SC2", ("long_prefill_token_threshold", "max_num_batched_tokens"),
                   lambda h, t: h <= t,
                   "long_prefill_token_threshold ({0}) must be <= max_num_batched_tokens ({1}): "
                   "a larger threshold never binds"),
    CrossFieldRule("SC3", ("reserve_full_isl", "reserve_full_isl"), lambda v, _: v == 1,
                   "reserve_full_isl ({0}) must be 1 (on) when set; leave it out for off"),
)

def check_cross_fields(config: object, rules: tuple[CrossFieldRule, ...]) -> None:
    """Raise :class:`PolicyConfigError` naming the first rule ``config``
    breaks (the policy registry prefixes the policy's name)."""
    for rule in rules:
        first, second = (getattr(config, name) for name in rule.fields)
        if first is None or second is None or rule.holds(first, second):
            continue
        raise PolicyConfigError(f"rule {rule.rule_id}: " + rule.message.format(first, second))
