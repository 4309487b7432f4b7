"""Ctrl-C during a command: one line on stderr and exit 130, no traceback."""

from __future__ import annotations

from iterserve.cli import main as cli_main
from iterserve.cli import policies


def test_an_interrupted_command_says_so_in_one_line(monkeypatch, capsys) -> None:
    def interrupted(args) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(policies, "run", interrupted)
    assert cli_main.main(["policies"]) == 130
    err = capsys.readouterr().err
    assert err == "iterserve policies: interrupted\n"
