"""Operations: an executor failure is logged once with its traceback and
aborts only the failing request; the access log line; the periodic stats
line; CORS preflight; the API key from the environment; a busy port; help
text on every ``serve`` flag."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import subprocess
import sys
import time

import httpx
import pytest

from iterserve.records.state import CapacityFacts, SchedulerState
from iterserve.server.metrics_observer import MetricsSnapshot
from iterserve.server.stats_log import StatsLine
from torch_fixtures import fail_on_call

POISON = 77  # a prompt holding this token id makes the model's forward raise
NORMAL_PROMPTS = ([5, 6, 7, 8], [9, 10, 11], [12, 13, 14, 15, 16])
NUM_NORMAL_TOKENS = 600


def _poison_forward(executor) -> None:
    real = executor.model.forward

    def forward(batch, cache):  # type: ignore[no-untyped-def]
        if POISON in batch.token_ids.tolist():
            raise RuntimeError("poisoned row")
        return real(batch, cache)

    executor.model.forward = forward


async def _one_poisoned_among_streams(base_url: str) -> tuple[list[dict], httpx.Response]:
    async with httpx.AsyncClient(base_url=base_url, timeout=120) as client:
        started = [asyncio.Event() for _ in NORMAL_PROMPTS]

        async def stream(index: int) -> dict:
            body = {"model": "tiny", "prompt": NORMAL_PROMPTS[index], "stream": True,
                    "max_tokens": NUM_NORMAL_TOKENS, "ignore_eos": True, "temperature": 0.0}
            chunks = []
            async with client.stream("POST", "/v1/completions", json=body) as response:
                async for line in response.aiter_lines():
                    if line.startswith("data: {"):
                        chunks.append(json.loads(line[len("data: "):]))
                        started[index].set()
            return {"status": response.status_code, "chunks": chunks}

        streams = [asyncio.create_task(stream(i)) for i in range(len(NORMAL_PROMPTS))]
        for event in started:
            await event.wait()
        poisoned = await client.post("/v1/completions", json={
            "model": "tiny", "prompt": [POISON, 3, 4], "max_tokens": 4, "ignore_eos": True})
        return list(await asyncio.gather(*streams)), poisoned


def test_a_failing_request_is_aborted_alone_and_logged_with_its_traceback(serve, caplog):
    caplog.set_level(logging.WARNING, logger="iterserve")
    served = serve()
    _poison_forward(served.engine.executor)
    results, poisoned = asyncio.run(_one_poisoned_among_streams(served.base_url))
    assert poisoned.status_code == 503
    assert "engine error: RuntimeError" in poisoned.json()["error"]["message"]
    for result in results:  # the unrelated requests went on to their full length
        assert result["status"] == 200
        assert result["chunks"][-1]["choices"][0]["finish_reason"] == "length"
        text = "".join(chunk["choices"][0]["text"] for chunk in result["chunks"])
        assert text  # tokens were produced after the failure too
    assert served.engine.wait_idle(30)
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1  # once, with its traceback
    assert errors[0].name == "iterserve.engine.online"
    assert "failed in the executor and is aborted" in errors[0].getMessage()
    assert errors[0].exc_info is not None
    assert "RuntimeError: poisoned row" in caplog.text and "Traceback" in caplog.text
    retried = [r for r in caplog.records if "packed forward" in r.getMessage()]
    assert retried and retried[0].exc_info is not None  # the batch it shared was isolated
    facts = served.engine.state.capacity
    assert facts.num_blocks_free == facts.num_blocks_total


class _FailingPolicy:
    """The engine's policy, raising on its ``call``-th choice."""

    def __init__(self, policy: object, call: int, error: Exception) -> None:
        self._policy = policy
        self._calls = {"n": 0, "at": call}
        self._error = error

    def choose(self, state):  # type: ignore[no-untyped-def]
        self._calls["n"] += 1
        if self._calls["n"] == self._calls["at"]:
            raise self._error
        return self._policy.choose(state)

    def __getattr__(self, name: str) -> object:
        return getattr(self._policy, name)


@pytest.mark.parametrize("where", ["executor", "policy"])
def test_a_whole_step_failure_is_logged_once_with_its_traceback(serve, caplog, where):
    caplog.set_level(logging.WARNING, logger="iterserve")
    served = serve()
    if where == "executor":
        fail_on_call(served.engine.executor, 2, RuntimeError("device lost"))
    else:
        engine = served.engine.engine
        engine.policy = _FailingPolicy(engine.policy, 2, RuntimeError("device lost"))
    body = {"model": "tiny", "prompt": "x", "max_tokens": 4, "ignore_eos": True}
    assert httpx.post(served.base_url + "/v1/completions", json=body, timeout=60).status_code \
        == 503
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "engine step at decision" in errors[0].getMessage()
    assert "RuntimeError: device lost" in caplog.text and "Traceback" in caplog.text
    assert httpx.post(served.base_url + "/v1/completions", json=body, timeout=60).status_code \
        == 200


def test_one_access_line_per_request(serve, caplog):
    caplog.set_level(logging.INFO, logger="iterserve.access")
    served = serve()
    body = {"model": "tiny", "prompt": "access", "max_tokens": 3, "ignore_eos": True,
            "user": "alice"}
    assert httpx.post(served.base_url + "/v1/completions", json=body, timeout=60).status_code \
        == 200
    assert httpx.post(served.base_url + "/v1/completions", json={**body, "model": "nope"},
                      timeout=60).status_code == 404
    # the line is written once the response is sent: wait for both
    ok = _wait_for_line(caplog, "client=alice")
    missing = _wait_for_line(caplog, '"POST /v1/completions" 404')
    assert '"POST /v1/completions" 200' in ok
    assert "id=req-" in ok and "output_tokens=3" in ok and "duration_s=" in ok
    prompt_tokens = int(ok.split("prompt_tokens=")[1].split()[0])
    assert prompt_tokens == len(served.runtime.tokenizer.encode("access"))
    assert float(ok.split("ttft_s=")[1].split()[0]) >= 0
    assert '"POST /v1/completions" 404' in missing and "id=-" in missing


def _wait_for_line(caplog, text: str) -> str:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        lines = [r.getMessage() for r in caplog.records
                 if r.name == "iterserve.access" and text in r.getMessage()]
        if lines:
            assert len(lines) == 1, lines
            return lines[0]
        time.sleep(0.01)
    raise AssertionError(f"no access line with {text!r}")


def _snapshot(prompt: float, generation: float, running: tuple[str, ...]) -> MetricsSnapshot:
    state = SchedulerState(decision_id=0, state_version=0, now=0.0, waiting=(),
                           running=running, suspended=(), finished=(), views={},
                           max_num_batched_tokens=8, max_num_seqs=8,
                           capacity=CapacityFacts(16, 10, 6))
    counts = {("vllm:prompt_tokens", ()): prompt, ("vllm:generation_tokens", ()): generation}
    return MetricsSnapshot(state, counts)


def test_stats_line_reports_the_interval_and_is_silent_when_idle():
    snapshots = [_snapshot(0, 0, ())]
    times = [0.0]
    stats = StatsLine(lambda: snapshots[-1], lambda: times[-1])
    times.append(2.0)
    assert stats.line() is None  # idle: nothing ran, nothing live
    snapshots.append(_snapshot(100, 40, ("req-1",)))
    times.append(4.0)
    line = stats.line()
    assert line == ("Avg prompt throughput: 50.0 tokens/s, Avg generation throughput: 20.0 "
                    "tokens/s, Running: 1 reqs, Waiting: 0 reqs, Swapped: 0 reqs, "
                    "KV cache usage: 40.0%")
    snapshots.append(_snapshot(100, 40, ()))
    times.append(6.0)
    assert stats.line() is None


def test_the_stats_line_is_logged_while_busy(serve, caplog):
    caplog.set_level(logging.INFO, logger="iterserve.stats")
    served = serve(server={"stats_interval_s": 0.05})
    body = {"model": "tiny", "prompt": "stats", "max_tokens": 200, "ignore_eos": True}
    assert httpx.post(served.base_url + "/v1/completions", json=body, timeout=60).status_code \
        == 200
    lines = [r.getMessage() for r in caplog.records if r.name == "iterserve.stats"]
    assert any(line.startswith("Avg prompt throughput:") for line in lines)


def test_cors_preflight_answers_with_the_allowed_origin(serve):
    served = serve(api_key="secret", server={"allowed_origins": ("https://app.example",)})
    preflight = httpx.options(served.base_url + "/v1/completions", headers={
        "Origin": "https://app.example", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type"})
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == "https://app.example"
    assert "POST" in preflight.headers["access-control-allow-methods"]
    assert "authorization" in preflight.headers["access-control-allow-headers"].lower()
    other = httpx.options(served.base_url + "/v1/completions", headers={
        "Origin": "https://evil.example", "Access-Control-Request-Method": "POST"})
    assert "access-control-allow-origin" not in other.headers
    models = httpx.get(served.base_url + "/v1/models", headers={
        "Origin": "https://app.example", "Authorization": "Bearer secret"})
    assert models.status_code == 200
    assert models.headers["access-control-allow-origin"] == "https://app.example"


def test_cors_flags_take_words_or_a_json_list():
    from iterserve.cli.main import build_parser
    from iterserve.cli.serve import server_settings
    from iterserve.cli.simulate import FlagError

    def settings(*flags: str):  # type: ignore[no-untyped-def]
        return server_settings(build_parser().parse_args(["serve", *flags]))

    plain = settings("--allowed-origins", "https://a.example", "https://b.example")
    assert plain.allowed_origins == ("https://a.example", "https://b.example")
    assert plain.allowed_methods == ("*",) and plain.allowed_headers == ("*",)
    vllm_style = settings("--allowed-origins", '["https://a.example"]',
                          "--allowed-methods", '["GET", "POST"]')
    assert vllm_style.allowed_origins == ("https://a.example",)
    assert vllm_style.allowed_methods == ("GET", "POST")
    assert settings().allowed_origins == ()
    with pytest.raises(FlagError, match="--allowed-origins: not a JSON list"):
        settings("--allowed-origins", "[nope")


def test_no_cors_headers_unless_origins_are_allowed(serve):
    served = serve()
    response = httpx.get(served.base_url + "/v1/models",
                         headers={"Origin": "https://app.example"})
    assert response.status_code == 200
    assert "access-control-allow-origin" not in response.headers


def test_api_key_from_the_environment(serve, monkeypatch):
    from iterserve.cli.main import build_parser
    from iterserve.cli.serve import server_settings

    monkeypatch.setenv("ITERSERVE_API_KEY", "from-env")
    settings = server_settings(build_parser().parse_args(["serve"]))
    assert settings.api_key == "from-env"
    flag = server_settings(build_parser().parse_args(["serve", "--api-key", "flag"]))
    assert flag.api_key == "flag"  # the flag wins
    served = serve(api_key=settings.api_key)
    url = served.base_url + "/v1/models"
    assert httpx.get(url).status_code == 401
    assert httpx.get(url, headers={"Authorization": "Bearer from-env"}).status_code == 200
    monkeypatch.setenv("ITERSERVE_API_KEY", "")
    assert server_settings(build_parser().parse_args(["serve"])).api_key is None


def test_a_busy_port_is_one_line_and_exit_2(tiny_dir):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "iterserve.cli.main", "serve", str(tiny_dir),
             "--port", str(port)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    err = done.stderr.strip()
    assert err == (f"iterserve serve: error: cannot listen on 127.0.0.1:{port}: "
                   "Address already in use"), err


def test_every_serve_flag_has_help():
    from iterserve.cli.main import build_parser

    parser = build_parser()
    serve_parser = next(a for a in parser._actions if a.dest == "command").choices["serve"]
    missing = [a.option_strings or a.dest for a in serve_parser._actions
               if not (a.help and a.help.strip())]
    assert not missing, missing


@pytest.mark.parametrize(("flags", "says"), [
    (["--max-client-labels", "-1"], "--max-client-labels must be >= 0"),
    (["--stats-interval-s", "-1"], "--stats-interval-s must be >= 0"),
])
def test_bad_ops_flags_exit_2(tiny_dir, capsys, flags, says):
    from iterserve.cli.main import main

    assert main(["serve", str(tiny_dir), *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and "\n" not in err
