"""The layered views mapping (records/view_map) is a dict to every reader,
and a run whose states hold layered views decides byte for byte as one
whose states hold plain dicts."""

from __future__ import annotations

import pickle
import random
import sys
from pathlib import Path

import pytest

from iterserve.records import view_map
from iterserve.records.view_map import ViewMap, edit, own_table_ids, publish

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from golden.golden_cases import run_case, workload_paths  # noqa: E402


@pytest.fixture
def layered_small(monkeypatch: pytest.MonkeyPatch) -> None:
    """Layers from the first view on, merged past a handful: every path taken often."""
    monkeypatch.setattr(view_map, "LAYERED_AT", 1)
    monkeypatch.setattr(view_map, "compaction_size", lambda num_views: 6)


def _random_edits(seed: int, steps: int):  # type: ignore[no-untyped-def]
    """Yield (layered, plain) after each random transition."""
    rng = random.Random(seed)
    layered: dict = {}
    plain: dict = {}
    next_id = 0
    for step in range(steps):
        draft, model = edit(layered), dict(plain)
        for _ in range(rng.randint(0, 6)):
            key = f"r{next_id}"
            next_id += 1
            draft[key] = model[key] = (key, step)
        keys = list(model)
        for key in rng.sample(keys, min(len(keys), rng.randint(0, 4))):
            draft[key] = model[key] = (key, -step)
        for key in rng.sample(keys, min(len(keys), rng.randint(0, 3))):
            del draft[key], model[key]
            if rng.random() < 0.3:  # deleted, then written again: it moves to the end
                draft[key] = model[key] = (key, 7)
        layered, plain = publish(draft), model
        yield layered, plain


@pytest.mark.usefixtures("layered_small")
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_reads_as_the_plain_dict_edited_alike(seed: int) -> None:
    num_layered = 0
    for layered, plain in _random_edits(seed, 400):
        num_layered += type(layered) is ViewMap
        assert len(layered) == len(plain)
        assert list(layered) == list(plain)  # a plain dict's order, deletions included
        assert layered == plain and plain == layered
        assert (layered != plain) is False
        assert dict(layered) == plain and {**layered} == plain
        assert list(layered.items()) == list(plain.items())
        assert list(layered.values()) == list(plain.values())
        for key in [*list(plain)[:5], "r-unknown"]:
            assert (key in layered) == (key in plain)
            assert layered.get(key) == plain.get(key)
            if key in plain:
                assert layered[key] == plain[key]
            else:
                with pytest.raises(KeyError):
                    layered[key]
    assert num_layered > 100  # the layered path, not only merged plain dicts


@pytest.mark.usefixtures("layered_small")
def test_a_published_map_is_immutable_and_pickles_whole() -> None:
    layered, plain = next((layered, plain) for layered, plain in _random_edits(4, 30)
                          if type(layered) is ViewMap and len(layered) > 3)
    for write in (lambda: layered.__setitem__("x", 1), lambda: layered.pop("x"),
                  lambda: layered.update({}), layered.clear):
        with pytest.raises(TypeError, match="immutable"):
            write()
    assert pickle.loads(pickle.dumps(layered)) == plain
    assert layered.copy() is layered


@pytest.mark.usefixtures("layered_small")
def test_the_own_table_stays_small() -> None:
    for layered, _ in _random_edits(5, 300):  # a merged map is a plain dict
        if type(layered) is ViewMap:
            assert len(own_table_ids(layered)) < 6  # the size it merges at


def test_a_large_dict_is_layered_and_a_small_one_copied() -> None:
    small = {f"r{i}": (i,) for i in range(10)}
    large = {f"r{i}": (i,) for i in range(view_map.LAYERED_AT)}
    assert type(edit(small)) is dict
    draft = edit(large)
    draft["new"] = (0,)
    published = publish(draft)
    assert type(published) is ViewMap and own_table_ids(published) == ["new"]
    assert len(published) == len(large) + 1 and published["r0"] == (0,)


@pytest.mark.parametrize("workload", ["random_2024", "burst_0x07", "small_kv"])
@pytest.mark.parametrize("policy", ["vllm", "edf", "sarathi-serve", "refill"])
def test_layered_states_decide_byte_for_byte_alike(
        workload: str, policy: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = workload_paths(tmp_path)[workload]
    (tmp_path / "plain").mkdir()
    plain = run_case(path, policy, tmp_path / "plain")
    monkeypatch.setattr(view_map, "LAYERED_AT", 1)
    monkeypatch.setattr(view_map, "compaction_size", lambda num_views: 4)
    (tmp_path / "layered").mkdir()
    assert run_case(path, policy, tmp_path / "layered") == plain


@pytest.mark.usefixtures("layered_small")
def test_deletions_count_toward_the_merge() -> None:
    """A draining run deletes from the base at every transition: the ids it
    hides are copied per transition too, so they are merged away as well."""
    layered: dict = publish(edit({f"r{i}": (i,) for i in range(200)}))
    for i in range(150):
        draft = edit(layered)
        del draft[f"r{i}"]
        layered = publish(draft)
        if type(layered) is ViewMap:
            assert len(layered._gone) + len(own_table_ids(layered)) < 6
    assert list(layered) == [f"r{i}" for i in range(150, 200)]
