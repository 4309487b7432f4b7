"""One spelling per quantity (issue 9 step 9): ``--num-kv-blocks`` is the KV
pool size everywhere, and the older ``--kv-blocks`` stays a working alias."""

from __future__ import annotations

import pytest

from iterserve.cli.main import build_parser
from iterserve.sim.traces import FORMATS

COMMANDS = (
    ["generate", "MODEL_DIR", "--prompt", "hi"],
    ["workload", "convert", "TRACE", "--format", FORMATS[0], "-o", "OUT"],
)


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
@pytest.mark.parametrize("flag", ["--num-kv-blocks", "--kv-blocks"])
def test_both_spellings_set_the_one_pool_size(command, flag):
    args = build_parser().parse_args([*command, flag, "37"])
    assert args.num_kv_blocks == 37
