"""SchedulerConfig cross-field rules for the vLLM-shaped policies (0x0D):
each rule has an id, the fields it relates and its own one-line error,
checked when the policy's config is made (never mid-run). A rule whose
fields are not all set is not checked.

The spec's three, as 0x0D states them (markers in
:mod:`iterserve.policies.vllm_pin_spec`, vLLM v0.23.0
``SchedulerConfig.verify_max_model_len``):

- SC1 ``max_num_batched_tokens >= max_num_seqs``;
- SC2 concurrent partial prefills (``max_num_partial_prefills > 1``)
  require chunked prefill (``enable_chunked_prefill``);
- SC3 the long-prompt threshold cannot exceed model length
  (``long_prefill_token_threshold <= max_model_len``). v0.23.0 checks it
  only when max_num_partial_prefills > 1, vLLM 0.32 always; the spec
  states it unconditionally, and so it is checked here.

SC4 is the same function's first rule, which the spec does not list:
without chunked prefill ``max_num_batched_tokens >= max_model_len``, else
a prompt longer than the budget could never be admitted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from iterserve.policies.settings import PolicyConfigError


@dataclass(frozen=True, slots=True)
class CrossFieldRule:
    rule_id: str
    fields: tuple[str, ...]
    holds: Callable[..., bool]  # field values in ``fields`` order -> ok
    message: str  # formatted with the field values


VLLM_RULES: tuple[CrossFieldRule, ...] = (
    CrossFieldRule("SC1", ("max_num_batched_tokens", "max_num_seqs"), lambda t, s: t >= s,
                   "max_num_batched_tokens ({0}) must be >= max_num_seqs ({1}): every running "
                   "sequence needs one token per step"),
    CrossFieldRule("SC2", ("max_num_partial_prefills", "enable_chunked_prefill"),
                   lambda p, c: p <= 1 or c == 1,
                   "max_num_partial_prefills ({0}) > 1 requires enable_chunked_prefill=1 "
                   "(got {1}): concurrent partial prefills are chunks"),
    CrossFieldRule("SC3", ("long_prefill_token_threshold", "max_model_len"),
                   lambda h, m: h <= m,
                   "long_prefill_token_threshold ({0}) cannot exceed max_model_len ({1})"),
    CrossFieldRule("SC4", ("enable_chunked_prefill", "max_num_batched_tokens", "max_model_len"),
                   lambda c, t, m: c == 1 or t >= m,
                   "enable_chunked_prefill={0} needs max_num_batched_tokens ({1}) >= "
                   "max_model_len ({2}): an unchunked prompt must fit one step"),
)


def check_cross_fields(config: object, rules: tuple[CrossFieldRule, ...]) -> None:
    """Raise :class:`PolicyConfigError` naming the first rule ``config``
    breaks (the policy registry prefixes the policy's name)."""
    for rule in rules:
        values = [getattr(config, name) for name in rule.fields]
        if any(value is None for value in values) or rule.holds(*values):
            continue
        raise PolicyConfigError(f"rule {rule.rule_id}: " + rule.message.format(*values))
