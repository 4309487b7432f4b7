"""EngineConfig.commit_kv: when the KV pool is faulted in at start-up."""

from __future__ import annotations

import pytest

from iterserve.config import EngineConfig


@pytest.mark.parametrize(("fields", "commits"), [
    ({}, False),  # sized from free memory: lazy
    ({"num_kv_blocks": 64}, True),
    ({"kv_cache_memory": 1 << 20}, True),
    ({"commit_kv": True}, True),
    ({"num_kv_blocks": 64, "commit_kv": False}, False),
])
def test_a_pool_is_committed_when_sized_by_the_user_or_asked(fields, commits) -> None:
    assert EngineConfig(**fields).commits_kv() is commits


def test_commit_kv_takes_only_a_bool_or_none() -> None:
    with pytest.raises(ValueError, match="commit_kv must be True, False or None, got 'yes'"):
        EngineConfig(commit_kv="yes")  # type: ignore[arg-type]


def test_the_server_commits_its_pool_however_it_is_sized(tmp_path) -> None:
    from iterserve.cli.main import build_parser
    from iterserve.cli.serve import build_config

    # the real parser: a hand-made namespace misses every flag added later
    args = build_parser().parse_args(["serve", str(tmp_path), "--max-num-seqs", "8",
                                      "--dtype", "float32"])
    assert build_config(args, tmp_path).commits_kv()
