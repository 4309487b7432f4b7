"""Issue 9 step 6: the 0x0C receipts are the runtime path. The KV residency
answers each preserve intent with a preservation receipt; with an executor
whose preservation completes one iteration later, a preempted request sits
in PREEMPT_PENDING (not resumable) until the READY receipt arrives, and the
run still finishes with the same outputs and replays from its log."""

from __future__ import annotations

from pathlib import Path

from iterserve.cli.main import main
from iterserve.engine.decision_log import DecisionLogWriter
from iterserve.engine.kv_residency import KvResidency
from iterserve.engine.loop import Engine, bind_policy
from iterserve.engine.observer import EngineObserver
from iterserve.kv.config import BlockManagerConfig
from iterserve.policies.registry import make_policy
from iterserve.records.receipts import ForeignStatus
from iterserve.records.view import Lifecycle
from iterserve.records.workload import load_workload
from iterserve.sim.executor import SimulatedExecutor

SMALL_KV = Path(__file__).resolve().parents[2] / "examples" / "small_kv.json"


class _Watch(EngineObserver):
    """Each request's lifecycles at every cut, and every receipt status seen."""

    def __init__(self) -> None:
        self.lifecycles: dict[str, list[Lifecycle]] = {}
        self.statuses: list[ForeignStatus] = []
        self.outputs: dict[str, tuple[int, str | None]] = {}

    def on_step(self, state, plan, result, successor) -> None:  # type: ignore[no-untyped-def]
        self.statuses.extend(r.status for r in result.receipts)
        for rid, view in successor.views.items():
            self.lifecycles.setdefault(rid, []).append(view.lifecycle)
            reason = None if view.finish_reason is None else view.finish_reason.value
            self.outputs[rid] = (view.num_emitted, reason)


def _run(lag: int, log: Path | None = None) -> _Watch:
    manifest = load_workload(SMALL_KV)
    spec = manifest.online.kv
    assert spec is not None
    config = BlockManagerConfig(spec.num_kv_blocks, spec.block_size, spec.num_host_blocks)
    kv = KvResidency(config, preservation_lag_iterations=lag)
    executor = SimulatedExecutor(manifest.hidden, kv=kv, workload=manifest.online)
    policy = make_policy("vllm")
    watch = _Watch()
    observers: list[EngineObserver] = [watch]
    stream = None if log is None else log.open("w")
    if stream is not None:
        observers.append(DecisionLogWriter(stream, bind_policy(manifest.online, policy),
                                           executor.capacity()))
    engine = Engine(manifest.online, policy, executor, observers)
    engine.run(max_iterations=10_000)
    if stream is not None:
        stream.close()
    assert engine.is_done
    assert kv.manager.audit().num_blocks_used == 0 and not kv.has_pending_preservations
    return watch


def _pending_then_preserved(path: list[Lifecycle]) -> bool:
    """A cut in PREEMPT_PENDING right after RUNNING, SUSPENDED_PRESERVED next."""
    return any(path[i:i + 3] == [Lifecycle.RUNNING, Lifecycle.PREEMPT_PENDING,
                                 Lifecycle.SUSPENDED_PRESERVED] for i in range(len(path) - 2))


def test_synchronous_preservation_never_leaves_a_request_pending() -> None:
    watch = _run(lag=0)
    assert ForeignStatus.READY in watch.statuses
    assert ForeignStatus.INFLIGHT not in watch.statuses
    assert not any(Lifecycle.PREEMPT_PENDING in path for path in watch.lifecycles.values())


def test_preservation_one_iteration_later_spans_iterations_and_keeps_outputs(tmp_path) -> None:
    log = tmp_path / "decisions.jsonl"
    sync, lagged = _run(lag=0), _run(lag=1, log=log)
    assert ForeignStatus.INFLIGHT in lagged.statuses
    assert any(_pending_then_preserved(path) for path in lagged.lifecycles.values())
    assert lagged.outputs == sync.outputs  # same emitted counts and finish reasons
    # the receipts are facts of the log: replay consumes them as the run did
    assert '"status":"inflight"' in log.read_text()
    assert main(["replay", str(log)]) == 0


def test_a_stale_receipt_in_the_log_breaks_the_replay(tmp_path, capsys) -> None:
    log = tmp_path / "decisions.jsonl"
    _run(lag=1, log=log)
    lines = log.read_text().splitlines()
    edited = [line.replace('"status":"ready","suspension_epoch":1',
                           '"status":"ready","suspension_epoch":0', 1) for line in lines]
    assert edited != lines
    (tmp_path / "edited.jsonl").write_text("\n".join(edited) + "\n")
    capsys.readouterr()
    assert main(["replay", str(tmp_path / "edited.jsonl")]) == 2
