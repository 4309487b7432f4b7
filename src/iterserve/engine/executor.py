"""The executor interface: the one narrow transport between plan and model.

An executor receives a validated plan and the state it was chosen against
and returns facts (:class:`IterationResult`). It never changes the plan and
never advances state. It decides stops (EOS, stop strings, max_output_tokens)
and frees a finished request's memory before returning; ``release`` tells it
that requests left the state some other way (cancelled) so it can free what
it holds for them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, runtime_checkable

from iterserve.records.plan import IterationPlan
from iterserve.records.prefix_claims import PrefixClaims
from iterserve.records.result import IterationResult
from iterserve.records.state import CapacityFacts, SchedulerState


class Executor(Protocol):
    def execute(self, plan: IterationPlan, state: SchedulerState) -> IterationResult: ...

    def release(self, request_ids: Iterable[str]) -> None: ...

    def capacity(self) -> CapacityFacts:
        """Current KV capacity facts (counts only)."""
        ...


@runtime_checkable
class PrefixHitSource(Protocol):
    """An executor whose KV allocator publishes verified prefix hits before
    the policy runs (0x0E: U = S - H_hit): request id -> cached rows now held
    for a waiting request that has computed nothing, so the plan's frontier
    starts past them and its token budget counts only uncached rows; with the
    blocks each claim reclaimed from the evictable cache, which the plan
    charges to that request (records/prefix_claims)."""

    def claim_prefix_hits(self, state: SchedulerState) -> PrefixClaims: ...


#: the reason a :class:`~iterserve.records.result.WorkFailure` carries when the
#: executor failed on that request alone (the online front then aborts it)
EXECUTOR_ERROR = "executor_error"


@runtime_checkable
class FailureSource(Protocol):
    """An executor that attributes failures to requests: a request whose own
    part of an iteration raised (backing its interval, its rows of the
    forward, its sampling or stop checks) is answered with a
    ``WorkFailure(reason=EXECUTOR_ERROR)`` and the iteration completes for
    the others; the caller takes the exceptions after the step and aborts
    those requests."""

    def take_failures(self) -> dict[str, BaseException]:
        """request id -> the exception, for the failures since the last call."""
        ...
