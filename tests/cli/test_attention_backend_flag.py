"""--attention-backend on generate and serve: parsed into EngineConfig; a
backend on the wrong device is one line and exit 2, before any model loads."""

from __future__ import annotations

import pytest

from iterserve.cli.main import build_parser, main
from iterserve.config import ATTENTION_BACKEND_NAMES, EngineConfig


@pytest.mark.parametrize("command", [["generate", "MODEL", "--prompt", "hi"], ["serve", "MODEL"]],
                         ids=lambda c: c[0])
def test_the_flag_takes_every_backend(command) -> None:
    for backend in ATTENTION_BACKEND_NAMES:
        args = build_parser().parse_args([*command, "--attention-backend", backend])
        assert args.attention_backend == backend
    assert build_parser().parse_args(command).attention_backend == "auto"


def test_an_unknown_backend_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["generate", "MODEL", "--prompt", "hi", "--attention-backend", "triton"]) == 2
    err = capsys.readouterr().err
    assert "--attention-backend" in err and len(err.strip().splitlines()) == 1


def test_varlen_on_the_cpu_is_refused_before_loading(tmp_path, capsys) -> None:
    assert main(["generate", str(tmp_path), "--prompt", "hi", "--attention-backend",
                 "varlen"]) == 2
    err = capsys.readouterr().err
    assert "attention_backend 'varlen' runs on cuda only" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(("backend", "device"), [("varlen", "cpu"), ("cpp", "cuda")])
def test_config_refuses_a_backend_on_the_wrong_device(backend: str, device: str) -> None:
    with pytest.raises(ValueError, match=f"attention_backend '{backend}' runs on"):
        EngineConfig(attention_backend=backend, device=device)
