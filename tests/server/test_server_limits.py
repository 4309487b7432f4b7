"""What slow, idle or hostile clients can hold, and a shutdown that always
ends: ``iterserve serve`` as a process with short limits (a second each),
attacked with raw sockets (docs/server-limits.md)."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from server_helpers import free_port, wait_up

from iterserve.sim.replay import replay

KEY = "sekrit"


def _serve(tiny_dir: Path, port: int, *flags: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "iterserve.cli.main", "serve", str(tiny_dir), "--port", str(port),
         "--served-model-name", "tiny", "--num-kv-blocks", "64", *flags],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    return sock


def _is_closed_by_server(sock: socket.socket, wait_s: float) -> bool:
    """True when the server closed the connection (EOF, possibly after a response)."""
    sock.settimeout(wait_s)
    try:
        while True:
            data = sock.recv(4096)
            if not data:
                return True
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def _stalled_body(port: int, path: str = "/v1/completions", key: str | None = KEY) -> socket.socket:
    """A request whose head is whole and whose body never arrives."""
    sock = _connect(port)
    auth = f"Authorization: Bearer {key}\r\n" if key else ""
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\n{auth}Content-Type: application/json\r\n"
                 "Content-Length: 1000\r\n\r\n{\"model\": ".encode())
    return sock


@pytest.fixture(scope="module")
def limited(tiny_dir: Path) -> Iterator[tuple[str, int, subprocess.Popen]]:
    port = free_port()
    proc = _serve(tiny_dir, port, "--api-key", KEY, "--header-timeout", "1",
                  "--body-timeout", "1", "--keep-alive-timeout", "1", "--max-connections", "600")
    base_url = f"http://127.0.0.1:{port}"
    try:
        wait_up(base_url, proc)
        yield base_url, port, proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.mark.slow
def test_idle_and_slowloris_connections_do_not_stop_health(limited) -> None:
    base_url, port, _ = limited
    idle = [_connect(port) for _ in range(500)]
    slowloris = []
    for _ in range(50):
        sock = _connect(port)
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ")  # a head never finished
        slowloris.append(sock)
    try:
        started = time.monotonic()
        assert httpx.get(base_url + "/health", timeout=5).status_code == 200
        assert time.monotonic() - started < 2
        # the header deadline (1 s) closes every one of them
        deadline = time.monotonic() + 10
        for sock in idle + slowloris:
            assert _is_closed_by_server(sock, max(0.1, deadline - time.monotonic()))
        assert httpx.get(base_url + "/health", timeout=5).status_code == 200
    finally:
        for sock in idle + slowloris:
            sock.close()


@pytest.mark.slow
def test_connections_past_the_cap_are_answered_503(limited) -> None:
    base_url, port, _ = limited
    held = [_connect(port) for _ in range(600)]
    try:
        extra = _connect(port)
        extra.settimeout(5)
        answer = b""
        while chunk := extra.recv(4096):
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 503 ")
        assert b"too many open connections" in answer
        extra.close()
    finally:
        for sock in held:
            sock.close()
    time.sleep(0.5)  # the server sees the closes
    assert httpx.get(base_url + "/health", timeout=5).status_code == 200


@pytest.mark.slow
def test_a_stalled_body_is_answered_408_and_closed(limited) -> None:
    _, port, _ = limited
    sock = _stalled_body(port)
    started = time.monotonic()
    sock.settimeout(10)
    answer = b""
    while chunk := sock.recv(4096):
        answer += chunk
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert b"did not arrive within 1 s" in answer
    assert time.monotonic() - started < 5


@pytest.mark.slow
def test_the_api_key_is_checked_before_the_body(limited) -> None:
    base_url, _, _ = limited
    malformed = httpx.post(base_url + "/v1/completions", content=b"{not json",
                           headers={"Content-Type": "application/json"})
    assert malformed.status_code == 401
    assert "API key" in malformed.json()["error"]["message"]
    authorized = httpx.post(base_url + "/v1/completions", content=b"{not json",
                            headers={"Content-Type": "application/json",
                                     "Authorization": f"Bearer {KEY}"})
    assert authorized.status_code == 400


@pytest.mark.slow
def test_sigterm_with_a_stalled_body_exits_within_the_drain_timeout(tiny_dir, tmp_path) -> None:
    port = free_port()
    log, events = tmp_path / "decisions.jsonl", tmp_path / "events.jsonl"
    proc = _serve(tiny_dir, port, "--drain-timeout", "2", "--decision-log", str(log),
                  "--event-log", str(events))
    base_url = f"http://127.0.0.1:{port}"
    try:
        wait_up(base_url, proc)
        assert httpx.post(base_url + "/v1/completions", json={
            "model": "tiny", "prompt": "hello", "max_tokens": 3}).status_code == 200
        stalled = _stalled_body(port, key=None)
        idle = [_connect(port) for _ in range(20)]
        time.sleep(0.2)
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        assert time.monotonic() - started < 2.5
        answer = stalled.recv(4096)
        assert answer.startswith(b"HTTP/1.1 503 ") or answer == b""
        for sock in [stalled, *idle]:
            sock.close()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert replay(log).num_iterations > 0
    assert events.read_text().count('"finish"') >= 1


@pytest.mark.slow
def test_a_second_sigterm_cuts_the_drain_short_and_still_writes_the_logs(tiny_dir,
                                                                        tmp_path) -> None:
    port = free_port()
    log, events = tmp_path / "decisions.jsonl", tmp_path / "events.jsonl"
    proc = _serve(tiny_dir, port, "--drain-timeout", "60", "--decision-log", str(log),
                  "--event-log", str(events))
    base_url = f"http://127.0.0.1:{port}"
    lines: list[str] = []
    body = {"model": "tiny", "prompt": "a very long story", "max_tokens": 900,
            "temperature": 0.0, "ignore_eos": True, "stream": True}

    def stream() -> None:
        try:
            with httpx.stream("POST", base_url + "/v1/completions", json=body,
                              timeout=60) as response:
                lines.append(str(response.status_code))
                lines.extend(line for line in response.iter_lines() if line)
        except httpx.TransportError:  # cut short by the second signal
            pass

    try:
        wait_up(base_url, proc)
        reader = threading.Thread(target=stream)
        reader.start()
        while len(lines) < 3:
            assert reader.is_alive(), lines
            time.sleep(0.01)
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        assert proc.poll() is None  # draining: the stream may run for 60 s
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
        assert time.monotonic() - started < 10
        reader.join(timeout=20)
        err = proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "second signal" in err
    assert replay(log).num_iterations > 0
    assert events.read_text().count('"cancel"') >= 1


def test_sigterm_while_the_model_loads_exits_143_with_one_line(monkeypatch, capsys,
                                                                tmp_path) -> None:
    import iterserve.runtime
    from iterserve.cli import main as cli_main

    loading = threading.Event()

    def slow_load(*args, **kwargs):
        loading.set()
        for _ in range(300):  # 30 s of "loading" in slices
            time.sleep(0.1)
        raise AssertionError("not interrupted")

    def terminate_once_loading() -> None:
        if loading.wait(timeout=60):
            # where the kernel delivers a process's SIGTERM: its main thread
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGTERM)

    monkeypatch.setattr(iterserve.runtime, "load_runtime", slow_load)
    (tmp_path / "model").mkdir()
    threading.Thread(target=terminate_once_loading, daemon=True).start()
    started = time.monotonic()
    status = cli_main.main(["serve", str(tmp_path / "model"), "--num-kv-blocks", "4"])
    assert status == 143
    assert time.monotonic() - started < 10
    assert capsys.readouterr().err == "iterserve serve: terminated during start-up\n"
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_serve_refuses_a_log_path_it_could_not_write_at_shutdown(tmp_path, capsys) -> None:
    from iterserve.cli import main as cli_main

    (tmp_path / "dir").mkdir()
    cases = {
        str(tmp_path / "missing" / "d.jsonl"): "does not exist",
        str(tmp_path / "dir"): "is a directory",
        "/dev/null": "not a regular file",
    }
    for flag in ("--decision-log", "--event-log"):
        for path, needle in cases.items():
            status = cli_main.main(["serve", str(tmp_path / "model"), flag, path])
            err = capsys.readouterr().err
            assert status == 2, err
            assert err.count("\n") == 1 and needle in err and flag in err, err
    assert Path("/dev/null").is_char_device()


def test_serve_policy_setting_reaches_the_policy(tmp_path) -> None:
    from iterserve.cli.main import build_parser
    from iterserve.cli.serve import build_config
    from iterserve.runtime import make_engine_policy

    args = build_parser().parse_args(["serve", str(tmp_path), "--policy", "sarathi",
                                      "--policy-setting", "chunk_size=8"])
    config = build_config(args, tmp_path)
    assert dict(config.extra_policy_settings) == {"chunk_size": 8}
    assert make_engine_policy(config).config.chunk_size == 8
    bad = build_parser().parse_args(["serve", str(tmp_path), "--policy", "sarathi",
                                     "--policy-setting", "nope=1"])
    from iterserve.cli.simulate import FlagError
    with pytest.raises(FlagError, match="no policy takes setting 'nope'"):
        build_config(bad, tmp_path)


def test_an_aborted_stream_ends_with_an_error_chunk() -> None:
    from iterserve.engine.streams import StreamEvent
    from iterserve.server.sse import ended_early_chunk

    chunk = ended_early_chunk(StreamEvent("r", finish_reason="aborted", reason="shutdown"))
    assert chunk is not None
    error = json.loads(chunk.removeprefix("data: "))["error"]
    assert "aborted by the engine (shutdown)" in error["message"]
    assert ended_early_chunk(StreamEvent("r", finish_reason="stop")) is None


@pytest.mark.slow
def test_a_prompt_over_the_budget_of_a_whole_prompt_policy_gets_400(serve) -> None:
    served = serve(policy="orca", max_num_batched_tokens=64, max_num_seqs=8)
    url = served.base_url + "/v1/completions"
    long = httpx.post(url, json={"model": "tiny", "prompt": [5] * 65, "max_tokens": 2},
                      timeout=30)
    assert long.status_code == 400
    assert "prefills whole prompts" in long.json()["error"]["message"]
    fits = httpx.post(url, json={"model": "tiny", "prompt": [5] * 64, "max_tokens": 2},
                      timeout=60)
    assert fits.status_code == 200, fits.text


def test_the_accept_error_storm_is_logged_once(caplog) -> None:
    import asyncio
    import logging

    from iterserve.server.connections import AcceptErrorFilter

    seen: list[dict] = []

    class Loop(asyncio.SelectorEventLoop):
        def default_exception_handler(self, context):  # type: ignore[override]
            seen.append(context)

    loop = Loop()
    try:
        handler = AcceptErrorFilter()
        error = OSError(24, "Too many open files")
        with caplog.at_level(logging.WARNING, logger="iterserve.server"):
            for _ in range(300):
                handler(loop, {"message": "socket.accept() out of system resource",
                               "exception": error})
            handler(loop, {"message": "something else"})
    finally:
        loop.close()
    warnings = [r for r in caplog.records if r.name == "iterserve.server"]
    assert len(warnings) == 1 and "logged once" in warnings[0].getMessage()
    assert handler.num_suppressed == 300
    assert [c["message"] for c in seen] == ["something else"]


@pytest.mark.slow
def test_a_server_out_of_descriptors_logs_once_and_recovers(tiny_dir) -> None:
    import resource

    port = free_port()

    def few_descriptors() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))

    proc = subprocess.Popen(
        [sys.executable, "-m", "iterserve.cli.main", "serve", str(tiny_dir), "--port", str(port),
         "--served-model-name", "tiny", "--num-kv-blocks", "64", "--header-timeout", "2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=few_descriptors)
    base_url = f"http://127.0.0.1:{port}"
    held: list[socket.socket] = []
    try:
        wait_up(base_url, proc)
        for _ in range(400):  # past the cap (192) and past the descriptors
            try:
                held.append(_connect(port))
            except OSError:
                break
        time.sleep(1.5)
        for sock in held:
            sock.close()
        held.clear()
        time.sleep(0.5)
        assert httpx.get(base_url + "/health", timeout=10).status_code == 200
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        for sock in held:
            sock.close()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    assert "--max-connections lowered to 192 (open-file limit 256)" in out
    assert err.count("out of system resource") + err.count("accepting connections failed") <= 1
    assert len(err.splitlines()) < 10, err


def test_an_accept_retry_after_shutdown_is_not_an_error() -> None:
    """asyncio retries accepting a second after an accept error; if the
    server closed its listener meanwhile the retry fails on fd -1: the
    filter drops that one, and hands every other error on."""
    import asyncio

    from iterserve.server.connections import AcceptErrorFilter

    handled: list[dict] = []

    class _Loop:
        def default_exception_handler(self, context: dict) -> None:
            handled.append(context)

    def _start_serving() -> None: ...

    loop = asyncio.new_event_loop()
    try:
        late = {"message": "Exception in callback", "exception": ValueError(
            "Invalid file descriptor: -1"), "handle": loop.call_later(60, _start_serving)}
        other = {"message": "Exception in callback", "exception": ValueError("other")}
        flt = AcceptErrorFilter()
        flt(_Loop(), late)  # type: ignore[arg-type]
        flt(_Loop(), other)  # type: ignore[arg-type]
        assert handled == [other]
    finally:
        late["handle"].cancel()
        loop.close()
