"""0x0C preemption, resume and foreign readiness: records, lifecycle and the Loop 9 facts."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pytest

from iterserve.admission import (
    TRANSITIONS,
    BindingMismatchError,
    FallbackMode,
    ForeignBinding,
    ForeignStatus,
    IllegalTransitionError,
    Lifecycle,
    PreemptionIntent,
    PreemptionMode,
    PreemptionReason,
    PreservationResult,
    ReadinessFact,
    ReadinessKind,
    ReadinessRequirement,
    ReadinessStatus,
    ReleaseResult,
    ResumeBlocked,
    ResumeBlocker,
    ResumeTicket,
    Staleness,
    can_transition,
    check_transition,
    derive_resume_ticket,
    is_runnable,
    is_stale,
    reclaimed_capacity_bytes,
    staleness,
    unmet_requirements,
)

DIGEST = "5" * 64
READY, INFLIGHT, FAILED = ForeignStatus.READY, ForeignStatus.INFLIGHT, ForeignStatus.FAILED


def _binding(generation: int = 2, epoch: int = 10, digest: str = DIGEST) -> ForeignBinding:
    return ForeignBinding("r", generation, digest, epoch)


def _intent(binding: ForeignBinding, target: int = 6,
            mode: PreemptionMode = PreemptionMode.SWAP,
            fallback: FallbackMode = FallbackMode.RECOMPUTE) -> PreemptionIntent:
    return PreemptionIntent(f"i-{binding.suspension_epoch}", binding, mode, fallback, target,
                            PreemptionReason.KV_CAPACITY, "fcfs-victim", 1)


def _resume(binding: ForeignBinding, intent: PreemptionIntent,
            release: ReleaseResult | None, preservation: PreservationResult | None = None,
            facts: Sequence[ReadinessFact] = (),
            required: Sequence[ReadinessRequirement] = (), exact_prefix_tokens: int = 0,
            lifecycle: Lifecycle = Lifecycle.RESUME_PENDING) -> ResumeTicket | ResumeBlocked:
    return derive_resume_ticket(binding, lifecycle, intent, release, preservation, facts,
                                required, exact_prefix_tokens)


def _ticket(result: ResumeTicket | ResumeBlocked) -> ResumeTicket:
    assert isinstance(result, ResumeTicket), result
    return result


def _blockers(result: ResumeTicket | ResumeBlocked) -> set[ResumeBlocker]:
    assert isinstance(result, ResumeBlocked), result
    return set(result.blockers)


# ------------------------------------------------------------------ binding


def test_staleness_classifies_every_field() -> None:
    current = _binding()
    assert staleness(current, current) is Staleness.CURRENT and not is_stale(current, current)
    assert staleness(_binding(generation=1), current) is Staleness.STALE_GENERATION
    assert staleness(_binding(epoch=9), current) is Staleness.STALE_EPOCH
    assert staleness(_binding(digest="6" * 64), current) is Staleness.STALE_DIGEST


@pytest.mark.parametrize("receipt", [
    ForeignBinding("other", 2, DIGEST, 10),
    ForeignBinding("r", 3, DIGEST, 10),
    ForeignBinding("r", 2, DIGEST, 11),
])
def test_foreign_or_future_receipts_are_errors(receipt: ForeignBinding) -> None:
    with pytest.raises(BindingMismatchError):
        staleness(receipt, _binding())


@pytest.mark.parametrize("args", [("", 0, DIGEST, 0), ("r", -1, DIGEST, 0), ("r", 0, "", 0),
                                  ("r", 0, DIGEST, -1)])
def test_binding_needs_all_four_fields(args: tuple[str, int, str, int]) -> None:
    with pytest.raises(ValueError):
        ForeignBinding(*args)


# ---------------------------------------------------------------- lifecycle


def test_transition_table_is_the_spec_table() -> None:
    path = [Lifecycle.RUNNING, Lifecycle.PREEMPT_PENDING, Lifecycle.SUSPENDED_PRESERVED,
            Lifecycle.RESUME_PENDING, Lifecycle.RUNNING]
    for source, target in zip(path, path[1:], strict=False):
        assert check_transition(source, target) is target
    assert can_transition(Lifecycle.PREEMPT_PENDING, Lifecycle.SUSPENDED_RECOMPUTE)
    assert can_transition(Lifecycle.SUSPENDED_RECOMPUTE, Lifecycle.RESUME_PENDING)
    for state in Lifecycle:
        assert can_transition(state, Lifecycle.CANCELLED) == (not state.is_terminal)
    assert TRANSITIONS[Lifecycle.CANCELLED] == frozenset()


@pytest.mark.parametrize("source, target", [
    (Lifecycle.RUNNING, Lifecycle.SUSPENDED_PRESERVED),  # preemption is never synchronous
    (Lifecycle.PREEMPT_PENDING, Lifecycle.RUNNING),
    (Lifecycle.SUSPENDED_RECOMPUTE, Lifecycle.RUNNING),  # RESUME_PENDING is not skippable
    (Lifecycle.CANCELLED, Lifecycle.RUNNING),
])
def test_illegal_transitions_raise_a_named_error(source: Lifecycle, target: Lifecycle) -> None:
    with pytest.raises(IllegalTransitionError, match=f"{source.name} -> {target.name}") as info:
        check_transition(source, target)
    assert (info.value.source, info.value.target) == (source, target)


# ------------------------------------------------------------------ records


@pytest.mark.parametrize("mode, fallback, history", [
    (PreemptionMode.ABORT, FallbackMode.RECOMPUTE, True),
    (PreemptionMode.RECOMPUTE, FallbackMode.RECOMPUTE, True),
    (PreemptionMode.RECOMPUTE, FallbackMode.ABORT, False),  # recompute needs token history
    (PreemptionMode.SWAP, FallbackMode.RECOMPUTE, False),
])
def test_illegal_intents_are_refused(mode: PreemptionMode, fallback: FallbackMode,
                                     history: bool) -> None:
    with pytest.raises(ValueError):
        PreemptionIntent("i", _binding(), mode, fallback, 6, PreemptionReason.PRIORITY, "p", 0,
                         has_token_history=history)


def test_intent_is_frozen_and_holds_no_physical_ids() -> None:
    intent = _intent(_binding())
    with pytest.raises(dataclasses.FrozenInstanceError):
        intent.mode = PreemptionMode.ABORT  # type: ignore[misc]
    assert not {"block", "host", "stream", "worker"} & {
        word for name in PreemptionIntent.__slots__ for word in name.split("_")}


def test_pending_or_failed_results_carry_no_capacity_or_prefix() -> None:
    with pytest.raises(ValueError):
        ReleaseResult(_binding(), INFLIGHT, reclaimed_bytes=1)
    with pytest.raises(ValueError):
        PreservationResult(_binding(), FAILED, exact_ready_prefix_tokens=3)


def test_readiness_layer_index_is_exactly_for_layers() -> None:
    with pytest.raises(ValueError):
        ReadinessFact(ReadinessKind.LAYERS, _binding(), ReadinessStatus.READY)
    with pytest.raises(ValueError):
        ReadinessRequirement(ReadinessKind.PROMOTION, layer_index=0)


# ------------------------------------------------------------ Loop 9 facts


def test_exact_preservation_rebuilds_nothing() -> None:
    """exact preservation -> empty rebuild [6,6), then ordinary [6,7)."""
    b = _binding()
    ticket = _ticket(_resume(b, _intent(b), ReleaseResult(b, READY, 6 * 131_072),
                             PreservationResult(b, READY, 6)))
    assert ticket.rebuild_interval == (6, 6) and ticket.recompute_overhead_tokens == 0
    assert (ticket.ordinary_next_frontier, ticket.ordinary_next_frontier + 1) == (6, 7)
    assert ticket.matched_receipts == ("release", "preservation")


def test_full_recompute_rebuilds_everything() -> None:
    """full recomputation -> rebuild [0,6); the overhead is not semantic service."""
    b = _binding()
    intent = _intent(b, mode=PreemptionMode.RECOMPUTE, fallback=FallbackMode.REMAIN_SUSPENDED)
    ticket = _ticket(_resume(b, intent, ReleaseResult(b, READY, 0),
                             lifecycle=Lifecycle.SUSPENDED_RECOMPUTE))
    assert ticket.rebuild_interval == (0, 6) and ticket.recompute_overhead_tokens == 6
    assert ticket.semantic_target_tokens == 6  # the frontier did not move


def test_partial_exact_prefix() -> None:
    """partial exact prefix -> rebuild [4,7), then ordinary [7,8)."""
    b = _binding()
    intent = _intent(b, target=7, mode=PreemptionMode.RECOMPUTE, fallback=FallbackMode.ABORT)
    ticket = _ticket(_resume(b, intent, ReleaseResult(b, READY), exact_prefix_tokens=4))
    assert ticket.rebuild_interval == (4, 7) and ticket.ordinary_next_frontier == 7


def test_failed_preservation_takes_the_explicit_recompute_fallback() -> None:
    """failed preservation -> explicit recompute fallback [0,5)."""
    b = _binding()
    ticket = _ticket(_resume(b, _intent(b, target=5), ReleaseResult(b, READY),
                             PreservationResult(b, FAILED)))
    assert ticket.rebuild_interval == (0, 5) and ticket.used_fallback is FallbackMode.RECOMPUTE
    assert "preservation" not in ticket.matched_receipts  # a failed receipt is never "ready"


@pytest.mark.parametrize("fallback, blocker", [
    (FallbackMode.REMAIN_SUSPENDED, ResumeBlocker.PRESERVATION_FAILED),
    (FallbackMode.ABORT, ResumeBlocker.FALLBACK_ABORT),
])
def test_failed_preservation_without_recompute_fallback_gives_no_ticket(
        fallback: FallbackMode, blocker: ResumeBlocker) -> None:
    b = _binding()
    result = _resume(b, _intent(b, fallback=fallback), ReleaseResult(b, READY),
                     PreservationResult(b, FAILED))
    assert _blockers(result) == {blocker}


def test_cancellation_leaves_old_generation_receipts_stale() -> None:
    """cancellation race -> all old-generation receipts stale; they schedule nothing."""
    old = _binding(generation=2)
    cancelled = _binding(generation=3, digest="c" * 64)
    release = ReleaseResult(old, READY, 6 * 131_072)
    preservation = PreservationResult(old, READY, 6)
    promotion = ReadinessFact(ReadinessKind.PROMOTION, old, ReadinessStatus.READY)
    for receipt in (release.binding, preservation.binding, promotion.binding):
        assert staleness(receipt, cancelled) is Staleness.STALE_GENERATION
    assert reclaimed_capacity_bytes(release, cancelled) == 0
    assert not is_runnable(cancelled, [promotion], [ReadinessRequirement(ReadinessKind.PROMOTION)])
    result = _resume(cancelled, _intent(old), release, preservation, [promotion],
                     lifecycle=Lifecycle.CANCELLED)
    assert {ResumeBlocker.CANCELLED, ResumeBlocker.STALE_INTENT, ResumeBlocker.RELEASE_STALE,
            ResumeBlocker.PRESERVATION_STALE} <= _blockers(result)


def test_epoch_10_receipt_cannot_satisfy_epoch_11() -> None:
    """repeated preemption: same generation and digest, later suspension epoch (ABA)."""
    epoch10, epoch11 = _binding(epoch=10), _binding(epoch=11)
    late = PreservationResult(epoch10, READY, 6)
    assert staleness(late.binding, epoch11) is Staleness.STALE_EPOCH
    result = _resume(epoch11, _intent(epoch11), ReleaseResult(epoch11, READY), late)
    assert _blockers(result) == {ResumeBlocker.PRESERVATION_STALE}
    current = _ticket(_resume(epoch11, _intent(epoch11), ReleaseResult(epoch11, READY),
                              PreservationResult(epoch11, READY, 6)))
    assert current.binding == epoch11


def test_promotion_in_flight_gives_no_ticket() -> None:
    b = _binding()
    promotion = ReadinessFact(ReadinessKind.PROMOTION, b, ReadinessStatus.PENDING)
    required = [ReadinessRequirement(ReadinessKind.PROMOTION)]
    result = _resume(b, _intent(b), ReleaseResult(b, READY), PreservationResult(b, READY, 6),
                     [promotion], required)
    assert _blockers(result) == {ResumeBlocker.FOREIGN_NOT_READY}
    done = dataclasses.replace(promotion, status=ReadinessStatus.READY)
    ticket = _ticket(_resume(b, _intent(b), ReleaseResult(b, READY),
                             PreservationResult(b, READY, 6), [done], required))
    assert "promotion" in ticket.matched_receipts


def test_release_in_flight_gives_no_capacity_and_no_ticket() -> None:
    b = _binding()
    release = ReleaseResult(b, INFLIGHT)
    assert reclaimed_capacity_bytes(release, b) == 0
    result = _resume(b, _intent(b), release, PreservationResult(b, READY, 6))
    assert _blockers(result) == {ResumeBlocker.RELEASE_INFLIGHT}
    assert reclaimed_capacity_bytes(ReleaseResult(b, READY, 4096), b) == 4096


def test_preempt_pending_and_running_requests_get_no_ticket() -> None:
    b = _binding()
    for lifecycle in (Lifecycle.RUNNING, Lifecycle.PREEMPT_PENDING):
        result = _resume(b, _intent(b), ReleaseResult(b, READY), PreservationResult(b, READY, 6),
                         lifecycle=lifecycle)
        assert _blockers(result) == {ResumeBlocker.NOT_SUSPENDED}


def test_missing_receipts_and_abort_mode_block() -> None:
    b = _binding()
    assert _blockers(_resume(b, _intent(b), None)) == {ResumeBlocker.RELEASE_MISSING,
                                                       ResumeBlocker.PRESERVATION_MISSING}
    abort = _intent(b, mode=PreemptionMode.ABORT, fallback=FallbackMode.ABORT)
    assert ResumeBlocker.ABORT_MODE in _blockers(_resume(b, abort, ReleaseResult(b, READY)))


def test_ready_prefix_beyond_the_target_is_corrupt() -> None:
    b = _binding()
    with pytest.raises(ValueError, match="T_target"):
        _resume(b, _intent(b, target=6), ReleaseResult(b, READY), PreservationResult(b, READY, 7))


# -------------------------------------------------------------- readiness


def test_runnable_needs_every_required_layer_ready() -> None:
    b = _binding()
    required = [ReadinessRequirement(ReadinessKind.LAYERS, layer) for layer in range(3)]
    facts = [ReadinessFact(ReadinessKind.LAYERS, b, ReadinessStatus.READY, layer)
             for layer in range(2)]
    assert not is_runnable(b, facts, required)
    assert unmet_requirements(b, facts, required) == (required[2],)
    facts.append(ReadinessFact(ReadinessKind.LAYERS, _binding(epoch=9), ReadinessStatus.READY, 2))
    assert not is_runnable(b, facts, required)  # a stale layer fact is ignored
    facts.append(ReadinessFact(ReadinessKind.LAYERS, b, ReadinessStatus.READY, 2))
    assert is_runnable(b, facts, required)


def test_a_current_failed_or_pending_fact_blocks_even_if_not_required() -> None:
    b = _binding()
    remote = ReadinessFact(ReadinessKind.REMOTE_KV, b, ReadinessStatus.FAILED)
    assert not is_runnable(b, [remote])
    assert is_runnable(b, [])  # nothing foreign is needed
    other = ReadinessFact(ReadinessKind.REMOTE_KV, ForeignBinding("x", 0, DIGEST, 0),
                          ReadinessStatus.PENDING)
    assert is_runnable(b, [other])  # another request's facts are irrelevant
