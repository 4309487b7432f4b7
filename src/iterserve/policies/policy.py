"""The scaffolding every policy shares: made from its validated config, it
chooses by scheduling into a :class:`~iterserve.plan.PlanBuilder` whose
ledgers it may tighten (:meth:`PolicyBase.ledgers`). A policy module then
holds only its identity, its contract (0x0E), its config and its rules."""

from __future__ import annotations

from typing import Generic, TypeVar, get_args

from iterserve.plan import PlanBuilder, PolicyContract
from iterserve.plan.feasibility import RunningSet
from iterserve.plan.passes import schedule_in_key_order
from iterserve.policies.settings import NoSettings
from iterserve.records.plan import IterationPlan
from iterserve.records.state import RunRules, SchedulerState

C = TypeVar("C")

#: the key-ordered baselines break ties by priority, then FCFS identity
PRIORITY_THEN_FCFS: tuple[str, ...] = ("priority_rank", "arrival_order", "request_id",
                                       "request_generation")
#: what the key-ordered baselines (decode-first, prefill-first) share; each
#: states its own order, objective, metric and source
KEY_ORDERED_BASELINE = PolicyContract.parse("""
    granularity: iteration, token interval
    protected_identity: request_id + generation + snapshot_version
    visible_state: frontiers, priorities, arrival order, readiness
    decision_output: ready work in key order
    unknown_future: output lengths
    objective: none beyond the key
    metric: rows per class per iteration (0x09)
    assumptions: priority: lower value is more urgent
    foreign_owners: readiness facts
    source: spec 0x09
    denominator: token rows per iteration, by class
    premises: none (a fixture policy; no theorem is claimed)
    evidence_class: simulated or measured here (iterserve); never source-reported
    source_version: spec M5.2 0x09 (iterserve's own fixture policy)
    non_claims: no latency, throughput or fairness bound; starvation is shown, not excluded
""")


class PolicyBase(Generic[C]):
    """A policy with config type ``C`` (``config_type``, from the subscript
    ``PolicyBase[C]``; :class:`NoSettings` without one). Its rule is
    :meth:`schedule`; by default every live request gets its legal interval
    in ``tie_break_key`` order (the key-ordered baselines)."""

    policy_id: str
    policy_version = "1"
    tie_break_key: tuple[str, ...]
    contract: PolicyContract
    config_type: type = NoSettings
    config: C
    #: which requests may hold KV memory at once; PREEMPTS when the policy
    #: preempts on a KV shortfall (checked before a run: plan/feasibility.py)
    running_set: RunningSet = RunningSet.UNBOUNDED

    def __init_subclass__(cls, **kwargs: object) -> None:
        """``class P(PolicyBase[PConfig])`` makes ``PConfig`` P's config type."""
        super().__init_subclass__(**kwargs)
        if "config_type" in cls.__dict__:  # declared in the class body: it wins
            return
        for base in cls.__dict__.get("__orig_bases__", ()):
            args = get_args(base)
            if args and isinstance(args[0], type):
                cls.config_type = args[0]

    def __init__(self, config: C | None = None) -> None:
        self.config = self.config_type() if config is None else config

    def ledgers(self) -> dict[str, int | None]:
        """Builder limits from the config: ``max_num_batched_tokens``,
        ``max_num_seqs`` (tighten the state's), ``max_running`` (the
        running-set cap a policy's ``max_num_seqs`` setting sets)."""
        return {}

    def check_rules(self, rules: RunRules) -> None:
        """Raise ``PolicyConfigError`` if this policy cannot run under the
        run's rules (checked when the policy is made for a workload)."""

    def schedule(self, builder: PlanBuilder, state: SchedulerState) -> None:
        schedule_in_key_order(builder, state, self.tie_break_key)

    def choose(self, state: SchedulerState) -> IterationPlan:
        builder = PlanBuilder(self, state, **self.ledgers())
        self.schedule(builder, state)
        return builder.build()
