"""The policies that keep their waiting order across decisions
(plan/kept_order.py) decide exactly as re-sorting every waiting view does.

Every decision of the runs below is planned twice on the same state: by the
policy (its kept order, updated from the changes since the state it saw
last) and by its old full-sort rule (tests/oracles/full_sort_policies.py);
the plans must be equal, ties included. For ``least-slack`` the oracle
ranks by slack at ``now`` and the product by the latest start (slack +
now): the runs are the evidence that the two orders agree. Runs are random
(hypothesis): clients, priorities, SLO classes, pool sizes, preemption
modes; one run is long enough that the waiting queue is a shared
``IdQueue`` and the views a layered ``ViewMap``.
"""

from __future__ import annotations

import math
import pickle
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from iterserve.admission.overload import make_gate
from iterserve.cost import parse_cost_model
from iterserve.engine.loop import Engine
from iterserve.engine.observer import EngineObserver
from iterserve.plan.feasibility import RunningSet
from iterserve.plan.kept_order import KeptOrder, reads_view_deltas
from iterserve.policies.registry import bind_fairness, policy_for
from iterserve.records.id_queue import IdQueue
from iterserve.records.plan import IterationPlan
from iterserve.records.spec import FairnessSpec
from iterserve.records.state import SchedulerState
from iterserve.records.view_map import ViewMap
from iterserve.sim.generators import generate_workload
from iterserve.sim.report import RunConfig, costed_executor, run_simulation
from iterserve.sim.workload_spec import parse_spec
from oracles.full_sort_policies import REFERENCES, guard_oldest_starving, reference_choose

KEPT_POLICIES = ("edf", "least-slack", "mlfq", "vtc", "priority-aging", "sarathi-serve",
                 "sarathi", "static", "orca", "priority", "least-service", "vllm-priority",
                 "vtc-completed")
COST_MODEL = "linear:5,0.05,0.5"
# mlfq: under COST_MODEL a first chunk costs 5.4 ms or more, above every quantum
# but the bottom one of the default 4 queues (1, 2, 4 ms): every job would sit
# in the bottom queue and only promotion would rank; with 8 queues the jobs
# skip-join and are demoted through several
OVERRIDES = {"sarathi": {"chunk_size": 64}, "mlfq": {"num_queues": 8}}


def make_policy(name: str, workload: Any = None) -> Any:
    return policy_for(name, workload, OVERRIDES.get(name), cost_model=parse_cost_model(COST_MODEL))


def workload_spec(seed: int, num_requests: int, *, num_clients: int = 3,
                  num_kv_blocks: int = 300, preemption_mode: str = "recompute",
                  rate_per_s: float = 400.0, max_prompt: int = 300) -> dict[str, Any]:
    lengths = {"prompt_tokens": {"kind": "uniform", "min": 8, "max": max_prompt},
               "output_tokens": {"kind": "uniform", "min": 2, "max": 60}}
    clients = [{"client_id": f"c{i}", "weight": 1.0 + i, "priority": i % 3,
                "slo_class": ("tight", "loose", "none")[i % 3], **lengths}
               for i in range(num_clients)]
    return {
        "workload_id": f"kept-{seed}", "seed": seed, "num_requests": num_requests,
        "clock": "ms", "capacity": {"max_num_batched_tokens": 512, "max_num_seqs": 32},
        "kv": {"num_kv_blocks": num_kv_blocks, "block_size": 16,
               "preemption_mode": preemption_mode},
        "arrival": {"process": "poisson", "rate_per_s": rate_per_s},
        "slo_classes": {"tight": {"ttft_ms": 200, "tbt_ms": 40},
                        "loose": {"ttft_ms": 3000}, "none": {}},
        "clients": clients,
    }


class Checked:
    """Wraps a policy: each choose is compared with the oracle's plan."""

    def __init__(self, policy: Any) -> None:
        self.policy = policy
        self.num_checked = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.policy, name)

    def choose(self, state: SchedulerState) -> IterationPlan:
        plan = self.policy.choose(state)
        expected = reference_choose(self.policy, state)
        assert plan == expected, f"{self.policy.policy_id}: decision {state.decision_id} differs"
        self.num_checked += 1
        return plan


class StateRecorder(EngineObserver):
    def __init__(self) -> None:
        self.states: list[SchedulerState] = []

    def on_step(self, state: SchedulerState, plan: object, result: object,
                next_state: SchedulerState) -> None:
        self.states.append(state)


def checked_run(policy_name: str, spec: dict[str, Any], max_iterations: int | None = None,
                observers: list[Any] | None = None) -> tuple[Checked, Engine]:
    manifest = generate_workload(parse_spec(spec))
    model = parse_cost_model(COST_MODEL)
    checked = Checked(make_policy(policy_name, manifest.online))
    engine = Engine(manifest.online, checked, costed_executor(manifest, model),  # type: ignore[arg-type]
                    observers or [])
    engine.run(max_iterations=max_iterations)
    return checked, engine


def kept_of(policy: Any) -> list[KeptOrder]:
    return [value for value in vars(policy).values() if isinstance(value, KeptOrder)]


def test_every_kept_policy_has_its_oracle() -> None:
    for name in KEPT_POLICIES:
        policy = make_policy(name)
        assert type(policy) in REFERENCES
        assert reads_view_deltas(policy) and kept_of(policy)
    assert not reads_view_deltas(policy_for("vllm"))


@settings(max_examples=48, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), name=st.sampled_from(KEPT_POLICIES),
       num_clients=st.integers(1, 4), num_kv_blocks=st.sampled_from([40, 120, 400]),
       mode=st.sampled_from(["recompute", "swap"]))
def test_kept_order_decides_as_the_full_sort(seed: int, name: str, num_clients: int,
                                            num_kv_blocks: int, mode: str) -> None:
    if make_policy(name).running_set is not RunningSet.PREEMPTS:
        num_kv_blocks = 4_000  # a policy that cannot preempt needs its worst set to fit
    spec = workload_spec(seed, 80, num_clients=num_clients, num_kv_blocks=num_kv_blocks,
                         preemption_mode=mode)
    checked, engine = checked_run(name, spec)
    assert engine.is_done and checked.num_checked == engine.num_iterations > 0
    kept = kept_of(checked.policy)
    assert sum(order.num_rebuilds for order in kept) <= len(kept)  # followed, not re-read


@pytest.mark.parametrize("name", KEPT_POLICIES)
def test_a_long_queue_is_followed_through_shared_structures(name: str) -> None:
    """4,200 requests arriving at once: the waiting queue is an IdQueue and
    the views a ViewMap; the kept order follows them without re-reading."""
    recorder = StateRecorder()
    preempts = make_policy(name).running_set is RunningSet.PREEMPTS
    spec = workload_spec(7, 4_200, num_clients=4, num_kv_blocks=600 if preempts else 40_000,
                         rate_per_s=200_000.0, max_prompt=120)
    checked, engine = checked_run(name, spec, max_iterations=14, observers=[recorder])
    assert checked.num_checked == 14
    last = recorder.states[-1]
    assert isinstance(last.waiting, IdQueue) and isinstance(last.views, ViewMap)
    kept = kept_of(checked.policy)
    assert sum(order.num_rebuilds for order in kept) <= 2 * len(kept)
    # each decision re-keys what changed, not the queue
    assert sum(order.num_rekeyed for order in kept) < 3 * len(kept) * 4_200


@pytest.mark.parametrize("name", KEPT_POLICIES)
def test_states_asked_out_of_order_decide_the_same(name: str) -> None:
    """A policy asked about states of its run in any order (replay, a
    second run) re-reads where the changes do not reach back."""
    recorder = StateRecorder()
    preempts = make_policy(name).running_set is RunningSet.PREEMPTS
    spec = workload_spec(11, 60, num_clients=3, num_kv_blocks=60 if preempts else 4_000)
    checked_run(name, spec, observers=[recorder])
    states = recorder.states[:]
    random.Random(5).shuffle(states)
    fresh = Checked(make_policy(name))
    for state in states[:40]:
        fresh.choose(state)
    assert fresh.num_checked == min(40, len(states))


def test_a_followed_simulation_records_deltas_for_a_kept_order(tmp_path: Any) -> None:
    """With the decision log written by the follower process, the run's own
    states still carry view deltas when the policy keeps an order: it
    follows them instead of re-reading the queue at every decision."""
    manifest = generate_workload(parse_spec(workload_spec(3, 120, num_kv_blocks=120)))
    model = parse_cost_model(COST_MODEL)
    policy = make_policy("edf", manifest.online)
    config = RunConfig(policy, model, make_gate("accept-all", {}))
    with (tmp_path / "log.jsonl").open("w") as log, (tmp_path / "events.jsonl").open("w") as ev:
        run = run_simulation(manifest, config, log, events=ev, log_process=True)
    assert run.engine.num_iterations > 50
    assert kept_of(policy)[0].num_rebuilds <= 1


def test_a_copied_policy_starts_without_the_memo() -> None:
    checked, _ = checked_run("vtc", workload_spec(5, 40), max_iterations=10)
    copied = pickle.loads(pickle.dumps(checked.policy))
    assert [len(order) for order in kept_of(copied)] == [0]
    assert kept_of(copied)[0].num_rebuilds == 0


def test_first_fitting_is_the_first_request_within_the_rows_limit() -> None:
    """``KeptOrder.first_fitting`` against a walk of each client's kept
    requests, on the states of an overloaded run (followed, so the rows
    index is kept through the changes), at every limit and window."""
    recorder = StateRecorder()
    checked_run("vtc", workload_spec(13, 120, num_clients=3, num_kv_blocks=60),
                observers=[recorder])
    kept = KeptOrder(index_rows=True)
    rng = random.Random(3)
    num_found = 0
    for state in recorder.states:
        kept.sync(state, lambda v: (v.client_id, v.arrival_order, v.request_id, v.generation))
        elements = list(kept.elements(0, len(kept)))
        for _ in range(4):
            client = f"c{rng.randrange(3)}"
            start, stop = sorted(rng.randrange(0, 130) for _ in range(2))
            limit = rng.choice([0, 16, 48, 160, 320, math.inf])
            walked = next((key[1] for key, _, rows in elements
                           if key[0] == client and start <= key[1] < stop
                           and (rows is None or rows <= limit)), None)
            assert kept.first_fitting(client, start, stop, limit) == walked
            num_found += walked is not None
    assert kept.num_rebuilds == 1 and num_found > 20


@pytest.mark.parametrize("name", ["vllm", "edf", "vtc", "priority"])
def test_the_guard_picks_the_oldest_starving_as_a_full_scan(name: str) -> None:
    """The guard's oldest ready request per starving client, read from its
    kept order and the running and suspended requests, is the full scan's
    at every decision of overloaded guarded runs, and the guard fires."""
    spec = workload_spec(17, 150, num_clients=4, num_kv_blocks=60)
    manifest = generate_workload(parse_spec(spec))
    horizon = 30.0
    guard: Any = bind_fairness(make_policy(name, manifest.online),
                               FairnessSpec(starvation_horizon=horizon))
    fired = []

    class Compared:
        def __getattr__(self, attribute: str) -> Any:
            return getattr(guard, attribute)

        def choose(self, state: SchedulerState) -> IterationPlan:
            picked = [view.request_id for view in guard._oldest_starving(state)]
            assert picked == [view.request_id for view in guard_oldest_starving(horizon, state)]
            fired.append(bool(picked))
            return guard.choose(state)  # type: ignore[no-any-return]

    engine = Engine(manifest.online, Compared(),  # type: ignore[arg-type]
                    costed_executor(manifest, parse_cost_model(COST_MODEL)), [])
    engine.run()
    assert engine.is_done and any(fired) and not all(fired)
    assert reads_view_deltas(guard) and guard.kept_by_client.num_rebuilds <= 1
