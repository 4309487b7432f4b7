"""0x01A negative fixtures: one mutation of a valid Loop 2 plan, state or
result each, rejected with its own named error before execution or
publication."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from iterserve.engine.loop import bind_policy
from iterserve.policies.registry import make_policy
from iterserve.records import codec
from iterserve.records import errors as E
from iterserve.records.plan import IntentKind, QueueIntent
from iterserve.records.result import CompletedInterval, WorkFailure
from iterserve.records.spec import HiddenTruth
from iterserve.records.validate import validate_plan, validate_result, validate_state
from iterserve.records.view import WorkKind
from iterserve.sim.executor import SimulatedExecutor

from .helpers import loop2_state, loop2_workload, replace


@dataclass
class Base:
    workload: Any
    state: Any
    plan: Any
    result: Any

    def item(self, rid):
        return next(w for w in self.plan.work if w.request_id == rid)

    def with_item(self, rid, **changes):
        """The plan with one item changed; positions follow start/end unless given."""
        old = self.item(rid)
        if ("start" in changes or "end" in changes) and "positions" not in changes:
            changes["positions"] = range(changes.get("start", old.start),
                                         changes.get("end", old.end))
        work = tuple(replace(w, **changes) if w.request_id == rid else w for w in self.plan.work)
        return self.plan_with(work=work)

    def plan_with(self, **changes):
        plan = replace(self.plan, **changes)
        if "work" in changes and "tokens_used" not in changes:  # keep the ledger honest
            plan = replace(plan, tokens_used=sum(w.end - w.start for w in plan.work),
                           sequences_used=len(plan.work))
        return plan

    def with_completion(self, rid, **changes):
        completed = tuple(replace(c, **changes) if c.request_id == rid else c
                          for c in self.result.completed)
        return replace(self.result, completed=completed)


def _base() -> Base:
    workload, state = loop2_workload(), loop2_state()
    plan = make_policy("decode-first").choose(state)
    result = SimulatedExecutor(HiddenTruth({"req-B": 2})).execute(plan, state)
    return Base(workload, state, plan, result)


def test_base_is_valid():
    b = _base()
    validate_state(b.state)
    validate_plan(b.workload, b.state, b.plan)
    validate_result(b.plan, b.state, b.result)
    assert len(b.plan.work) == 3


def _plan_case(make: Callable[[Base], Any]):
    def check(b: Base) -> None:
        validate_plan(b.workload, b.state, make(b))
    return check


def _state_plan_case(make: Callable[[Base], Any]):
    def check(b: Base) -> None:
        validate_plan(b.workload, make(b), b.plan)
    return check


def _state_case(make: Callable[[Base], Any]):
    def check(b: Base) -> None:
        validate_state(make(b))
    return check


def _result_case(make: Callable[[Base], Any]):
    def check(b: Base) -> None:
        validate_result(b.plan, b.state, make(b))
    return check


def _json_case(mutate: Callable[[dict], None]):
    def check(b: Base) -> None:
        obj = codec.plan_to_json(b.plan)
        mutate(obj)
        validate_plan(b.workload, b.state, codec.plan_from_json(obj))
    return check


def _queues(b: Base, **queues):
    return replace(b.state, **queues)


def _swap_d_for_a(b: Base):
    """Replace A's chunk by D's legal-looking chunk [0,2) with D admitted."""
    d = b.state.views["req-D"]
    a = b.item("req-A")
    item = replace(a, request_id="req-D", generation=d.generation,
                   snapshot_version=d.snapshot_version, tie_break=(2, 0, 0, "req-D", 0))
    work = (item,) + tuple(w for w in b.plan.work if w.request_id != "req-A")
    intents = (QueueIntent(IntentKind.ADMIT, "req-D", 0),)
    return b.plan_with(work=work, intents=intents)


def _terminal_e(b: Base):
    e = b.state.views["req-E"]
    item = replace(b.item("req-B"), request_id="req-E", generation=e.generation,
                   snapshot_version=e.snapshot_version, start=4, end=5, positions=range(4, 5),
                   tie_break=(0, 0, 4, "req-E", 4))
    return b.plan_with(work=b.plan.work + (item,))


def _leak(where: str, field: str):
    def mutate(obj: dict) -> None:
        target = obj if where == "plan" else obj["work"][0]
        target[field] = [7, 8] if field == "block_ids" else 2
    return mutate


def _positions(listed):
    def mutate(obj: dict) -> None:
        obj["work"][2]["positions"] = listed  # req-A [0,2)
    return mutate


CASES: list[tuple[str, Callable[[Base], None], type[E.ContractViolation]]] = [
    # interval legality
    ("interval-before-frontier",
     _plan_case(lambda b: b.with_item("req-B", start=2, end=3)), E.IntervalBeforeFrontier),
    ("interval-after-frontier",
     _plan_case(lambda b: b.with_item("req-A", start=1, end=2)), E.IntervalBeforeFrontier),
    ("beyond-prompt",
     _plan_case(lambda b: b.with_item("req-A", end=5)), E.IntervalBeyondTarget),
    ("empty-interval",
     _plan_case(lambda b: b.with_item("req-A", end=0)), E.EmptyInterval),
    ("multi-row-decode",
     _plan_case(lambda b: b.with_item("req-B", end=5)), E.MultiRowDecode),
    # identity and versions
    ("duplicate-work",
     _plan_case(lambda b: b.plan_with(work=b.plan.work + (b.item("req-C"),))), E.DuplicateWork),
    ("stale-generation",
     _plan_case(lambda b: b.with_item("req-B", generation=1)), E.StaleGeneration),
    ("successor-generation",
     _plan_case(lambda b: b.with_item("req-C", generation=2)), E.StaleGeneration),
    ("stale-snapshot",
     _plan_case(lambda b: b.with_item("req-C", snapshot_version=5)), E.StaleSnapshot),
    ("stale-state-version",
     _plan_case(lambda b: b.plan_with(input_state_version=6)), E.StaleStateVersion),
    ("stale-decision-id",
     _plan_case(lambda b: b.plan_with(decision_id=4)), E.StaleStateVersion),
    ("unknown-request",
     _plan_case(lambda b: b.with_item("req-A", request_id="req-Z")), E.UnknownRequest),
    # queue membership
    ("unready", _plan_case(_swap_d_for_a), E.NotReady),
    ("terminal", _plan_case(_terminal_e), E.TerminalRequest),
    ("not-admitted",
     _plan_case(lambda b: b.plan_with(intents=())), E.NotAdmitted),
    ("admit-running-request",
     _plan_case(lambda b: b.plan_with(intents=b.plan.intents + (
         QueueIntent(IntentKind.ADMIT, "req-B", 2),))), E.IllegalIntent),
    ("duplicated-queue-member",
     _state_case(lambda b: _queues(b, running=("req-B", "req-C", "req-A"))), E.DuplicateQueueMember),
    ("duplicated-within-queue",
     _state_case(lambda b: _queues(b, running=("req-B", "req-C", "req-B"))), E.DuplicateQueueMember),
    ("queue-lifecycle-mismatch",
     _state_case(lambda b: _queues(b, waiting=("req-D",), running=("req-B", "req-C", "req-A"))),
     E.QueueLifecycleMismatch),
    ("view-in-no-queue",
     _state_case(lambda b: _queues(b, waiting=("req-A",))), E.UnknownRequest),
    # budgets and ledger
    ("token-budget",
     _plan_case(lambda b: b.with_item("req-A", end=3)), E.TokenBudgetExceeded),
    ("sequence-budget",
     _state_plan_case(lambda b: replace(b.state, max_num_seqs=2)), E.SequenceBudgetExceeded),
    ("token-budget-shrunk",
     _state_plan_case(lambda b: replace(b.state, max_num_batched_tokens=3)), E.TokenBudgetExceeded),
    ("ledger-drift-tokens",
     _plan_case(lambda b: b.plan_with(tokens_used=3)), E.LedgerDrift),
    ("ledger-drift-sequences",
     _plan_case(lambda b: b.plan_with(sequences_used=2)), E.LedgerDrift),
    # forged derived annotations and identity
    ("forged-kind-decode-as-prefill",
     _plan_case(lambda b: b.with_item("req-B", kind=WorkKind.PREFILL_CHUNK)), E.ForgedKind),
    ("forged-kind-prefill-as-rebuild",
     _plan_case(lambda b: b.with_item("req-A", kind=WorkKind.REBUILD)), E.ForgedKind),
    ("forged-positions",
     _plan_case(lambda b: b.with_item("req-A", positions=range(1, 3))), E.ForgedPositions),
    ("forged-positions-json-gap", _json_case(_positions([0, 2])), E.ForgedPositions),
    ("forged-positions-json-shift", _json_case(_positions([1, 2])), E.ForgedPositions),
    ("forged-policy-version",
     _plan_case(lambda b: b.plan_with(policy_version="2")), E.PolicyIdentityMismatch),
    ("forged-policy-id",
     _plan_case(lambda b: b.plan_with(policy_id="refill")), E.PolicyIdentityMismatch),
    ("forged-tie-break-value",
     _plan_case(lambda b: b.with_item("req-C", tie_break=(0, 0, 1, "req-C", 1))), E.ForgedTieBreak),
    ("forged-tie-break-order",
     _plan_case(lambda b: b.plan_with(work=tuple(reversed(b.plan.work)))), E.ForgedTieBreak),
    ("forged-tie-break-field",
     _plan_case(lambda b: b.plan_with(tie_break_key=("oracle_length",) + b.plan.tie_break_key)),
     E.ForgedTieBreak),
    # information leaks through the plan's wire form
    ("leak-realized-output-in-work", _json_case(_leak("work", "realized_output_tokens")),
     E.InformationLeak),
    ("leak-block-ids-in-work", _json_case(_leak("work", "block_ids")), E.InformationLeak),
    ("leak-block-ids-in-plan", _json_case(_leak("plan", "block_ids")), E.InformationLeak),
    ("leak-realized-output-in-plan", _json_case(_leak("plan", "realized_output_tokens")),
     E.InformationLeak),
    # results versus the plan
    ("unplanned-completion",
     _result_case(lambda b: replace(b.result, completed=b.result.completed + (
         CompletedInterval("req-D", 0, 0, 1, False),))), E.UnplannedCompletion),
    ("duplicate-completion",
     _result_case(lambda b: replace(b.result, completed=b.result.completed + (
         b.result.completed[1],))), E.DuplicateCompletion),
    ("completion-beyond-plan",
     _result_case(lambda b: b.with_completion("req-A", end=3)), E.CompletionBeyondPlan),
    ("wrong-output-clock-prefill-emits",
     _result_case(lambda b: b.with_completion("req-A", emitted=True, token_id=1)),
     E.WrongOutputClock),
    ("wrong-output-clock-decode-silent",
     _result_case(lambda b: b.with_completion("req-C", emitted=False, token_id=None)),
     E.WrongOutputClock),
    ("wrong-output-clock-finish-without-emission",
     _result_case(lambda b: b.with_completion(
         "req-B", emitted=False, token_id=None)), E.WrongOutputClock),
    ("planned-service-debit",
     _result_case(lambda b: replace(b.result, completed=tuple(
         c for c in b.result.completed if c.request_id != "req-A"))), E.ServiceDebitMismatch),
    ("service-debit-drift",
     _result_case(lambda b: replace(b.result, service={"client-alpha": 3, "client-beta": 2})),
     E.ServiceDebitMismatch),
    ("stale-result-state-version",
     _result_case(lambda b: replace(b.result, input_state_version=6)), E.StaleResult),
    ("stale-result-decision",
     _result_case(lambda b: replace(b.result, decision_id=4)), E.StaleResult),
    ("stale-result-generation",
     _result_case(lambda b: b.with_completion("req-B", generation=1)), E.StaleGeneration),
]


@pytest.mark.parametrize(("check", "error"), [(c, e) for _, c, e in CASES],
                         ids=[name for name, _, _ in CASES])
def test_negative_fixture_is_rejected(check, error):
    with pytest.raises(E.ContractViolation) as info:
        check(_base())
    assert type(info.value) is error, f"{type(info.value).__name__}: {info.value}"
    assert info.value.code == error.code
    assert str(info.value)  # a precise message, never an empty error


def test_policy_identity_is_bound_by_the_run():
    """An unbound workload does not check identity; bind_policy makes it binding."""
    b = _base()
    forged = b.plan_with(policy_version="2")
    unbound = replace(b.workload, policy=None)
    validate_plan(unbound, b.state, forged)
    with pytest.raises(E.PolicyIdentityMismatch):
        validate_plan(bind_policy(unbound, make_policy("decode-first")), b.state, forged)


def test_error_codes_are_unique():
    codes = [cls.code for cls in vars(E).values()
             if isinstance(cls, type) and issubclass(cls, E.ContractViolation)]
    assert len(codes) == len(set(codes))


@pytest.mark.parametrize("where", ["intent", "policy"])
def test_leak_through_intent_or_policy_is_rejected(where):
    """Every object of the plan's wire form is strict, not only plan and work."""
    b = _base()
    obj = codec.plan_to_json(b.plan)
    target = obj["intents"][0] if where == "intent" else obj["policy"]
    target["block_ids"] = [3, 4]
    with pytest.raises(E.InformationLeak):
        codec.plan_from_json(obj)


def test_stale_generation_failure_is_rejected():
    b = _base()
    completed = tuple(c for c in b.result.completed if c.request_id != "req-A")
    result = replace(b.result, completed=completed,
                     failures=(WorkFailure("req-A", 7, "kv_allocation"),),
                     service={"client-alpha": 1, "client-beta": 1})
    with pytest.raises(E.StaleGeneration):
        validate_result(b.plan, b.state, result)


def test_failure_of_the_planned_generation_is_a_fact():
    """The same failure with the planned generation is accepted and advances nothing."""
    b = _base()
    completed = tuple(c for c in b.result.completed if c.request_id != "req-A")
    result = replace(b.result, completed=completed,
                     failures=(WorkFailure("req-A", 0, "kv_allocation"),),
                     service={"client-alpha": 1, "client-beta": 1})
    validate_result(b.plan, b.state, result)
