"""``iterserve serve`` flags are checked at the boundary: one line naming the
problem and exit 2, before any socket is bound."""

from __future__ import annotations

import pytest

from iterserve.cli.main import main


@pytest.mark.parametrize(("flags", "says"), [
    (["--port", "70000"], "--port must be <= 65535"),
    (["--max-num-seqs", "0"], "--max-num-seqs must be >= 1"),
    (["--overload", "bounded"], "--overload bounded needs --max-live N"),
    (["--overload", "slo-feasible"], "needs --cost-model"),
    (["--drain-timeout", "-1"], "--drain-timeout must be >= 0"),
    (["--kv-cache-memory", "10"], "holds no block"),
    (["--policy", "nope"], "nope"),
    (["--policy-setting", "chunk_size"], "expected NAME=VALUE"),
    (["--chat-template", "/nonexistent/template.jinja"], "--chat-template /nonexistent"),
])
def test_bad_serve_flags_exit_2_with_one_line(tiny_dir, capsys, flags, says):
    assert main(["serve", str(tiny_dir), *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and "\n" not in err and err.startswith("iterserve serve: error:")


def test_kv_cache_memory_sizes_the_pool(tiny_dir):
    import argparse

    from iterserve.cli.serve import _num_kv_blocks
    from iterserve.model.loader import load_config

    config = load_config(tiny_dir)
    per_block = 2 * config.num_layers * config.num_kv_heads * config.head_dim * 16 * 4
    args = argparse.Namespace(kv_cache_memory=10 * per_block + 5, num_kv_blocks=None,
                              block_size=16)
    assert _num_kv_blocks(args, tiny_dir, "float32") == 10


def test_strict_fields_and_chat_template_flags_parse(tmp_path):
    import argparse

    from iterserve.cli.serve import add_parser, read_chat_template

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    template = tmp_path / "t.jinja"
    template.write_text("{{ messages[0]['content'] }}")
    args = parser.parse_args(["serve", "--strict-fields", "--chat-template", str(template)])
    assert args.strict_fields is True
    assert read_chat_template(args.chat_template) == "{{ messages[0]['content'] }}"
    assert parser.parse_args(["serve"]).strict_fields is False
