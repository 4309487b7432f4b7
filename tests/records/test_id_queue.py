"""The shared waiting queue (records/id_queue) reads as the tuple edited
alike, reports what left and entered, and a run whose long queues are
shared decides byte for byte as one whose queues are tuples."""

from __future__ import annotations

import pickle
import random
import sys
from pathlib import Path

import pytest

from iterserve.records import id_queue
from iterserve.records.id_queue import IdQueue, appended, queue_changes, with_front, without

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from golden.golden_cases import run_case, workload_paths  # noqa: E402


def _random_edits(seed: int, steps: int):  # type: ignore[no-untyped-def]
    """Yield (shared, model) after each random edit of a queue."""
    rng = random.Random(seed)
    shared: id_queue.Queue = IdQueue()
    model: list[str] = []
    left: list[str] = []  # removed ids: a preempted request comes back first
    next_id = 0
    for _ in range(steps):
        kind = rng.random()
        if kind < 0.35:
            ids = [f"r{next_id + i}" for i in range(rng.randint(1, 5))]
            next_id += len(ids)
            shared, model = appended(shared, ids), model + ids
        elif kind < 0.6 and model:  # the head: an admission
            left.append(model[0])
            shared, model = without(shared, model[0]), model[1:]
        elif kind < 0.85 and model:  # anywhere: a priority admission or an abort
            rid = rng.choice(model)
            left.append(rid)
            shared, model = without(shared, rid), [r for r in model if r != rid]
        else:  # a preempted request goes first: one that left, or a new one
            if left and rng.random() < 0.7:
                rid = left.pop(rng.randrange(len(left)))
            else:
                rid = f"p{next_id}"
                next_id += 1
            shared, model = with_front(shared, rid), [rid, *model]
        yield shared, model


@pytest.fixture
def compact_often(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(id_queue, "_MIN_GONE", 3)
    monkeypatch.setattr(id_queue, "_MIN_CONSUMED", 5)


@pytest.mark.usefixtures("compact_often")
@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_reads_as_the_tuple_edited_alike(seed: int) -> None:
    for shared, model in _random_edits(seed, 600):
        expected = tuple(model)
        assert tuple(shared) == expected and shared == expected and expected == shared
        assert len(shared) == len(expected) and bool(shared) == bool(expected)
        assert shared[:3] == expected[:3] and shared[2:7] == expected[2:7]
        if expected:
            assert shared[0] == expected[0] and shared[-1] == expected[-1]
            index = len(expected) // 2
            assert shared[index] == expected[index]
            assert expected[index] in shared
        assert "never" not in shared
        assert ("x",) + shared == ("x", *expected) and shared + ("x",) == (*expected, "x")
        assert pickle.loads(pickle.dumps(shared)) == expected


@pytest.mark.usefixtures("compact_often")
@pytest.mark.parametrize("seed", [5, 6, 7])
def test_changes_name_what_left_and_entered(seed: int) -> None:
    """Across one or several edits: applying (left, front, back) to the old
    sequence gives the new one; None only where the buffer was copied."""
    history = list(_random_edits(seed, 500))
    rng = random.Random(seed)
    num_answered = 0
    for _ in range(400):
        i = rng.randrange(len(history))
        j = min(len(history) - 1, i + rng.randint(0, 4))
        (old, old_model), (new, new_model) = history[i], history[j]
        changes = queue_changes(old, new)
        if changes is None:
            continue
        num_answered += 1
        left, front, back = changes
        kept = [rid for rid in old_model if rid not in set(left)]
        assert [*front, *kept, *back] == new_model
    assert num_answered > 200


def test_short_queues_stay_tuples_and_long_ones_share() -> None:
    short = appended((), ["a", "b"])
    assert type(short) is tuple
    long = appended(short, [f"r{i}" for i in range(id_queue.QUEUED_AT)])
    assert type(long) is IdQueue
    later = without(appended(long, ["z"]), "a")
    assert queue_changes(long, later) == (["a"], [], ["z"])


@pytest.mark.parametrize("workload", ["random_2024", "burst_0x07", "small_kv"])
@pytest.mark.parametrize("policy", ["vllm", "vllm-priority", "edf", "orca", "static"])
def test_shared_queues_decide_byte_for_byte_alike(
        workload: str, policy: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = workload_paths(tmp_path)[workload]
    (tmp_path / "plain").mkdir()
    plain = run_case(path, policy, tmp_path / "plain")
    monkeypatch.setattr(id_queue, "QUEUED_AT", 0)
    monkeypatch.setattr(id_queue, "_MIN_GONE", 2)
    monkeypatch.setattr(id_queue, "_MIN_CONSUMED", 3)
    (tmp_path / "shared").mkdir()
    assert run_case(path, policy, tmp_path / "shared") == plain
