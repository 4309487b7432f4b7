"""``iterserve serve`` as a process (issue 10 steps 2 and 7): SIGTERM stops
accepting (503), drains up to --drain-timeout, aborts the rest, writes the
decision log (which replays) and exits 0."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest
from server_helpers import free_port, wait_up

from iterserve.sim.replay import replay


@pytest.mark.slow
def test_sigterm_drains_aborts_and_exits_zero(tiny_dir, tmp_path):
    port = free_port()
    log = tmp_path / "decisions.jsonl"
    events = tmp_path / "events.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "iterserve.cli.main", "serve", str(tiny_dir), "--port", str(port),
         "--served-model-name", "tiny", "--num-kv-blocks", "256", "--drain-timeout", "2",
         "--decision-log", str(log), "--event-log", str(events)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    base_url = f"http://127.0.0.1:{port}"
    try:
        wait_up(base_url, proc)
        lines: list[str] = []
        body = {"model": "tiny", "prompt": "a very long story", "max_tokens": 4000,
                "temperature": 0.0, "ignore_eos": True, "stream": True}

        def stream() -> None:
            with httpx.stream("POST", base_url + "/v1/completions", json=body,
                              timeout=120) as response:
                lines.extend(line for line in response.iter_lines() if line)

        reader = threading.Thread(target=stream)
        reader.start()
        while len(lines) < 3:
            time.sleep(0.01)
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.1)
        assert httpx.get(base_url + "/health").status_code == 503
        refused = httpx.post(base_url + "/v1/completions", json={**body, "stream": False})
        assert refused.status_code == 503
        assert "shutting down" in refused.json()["error"]["message"]
        reader.join(timeout=60)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert lines[-1] == "data: [DONE]"
    assert json.loads(lines[-3][len("data: "):])["choices"][0]["finish_reason"] == "abort"
    error = json.loads(lines[-2][len("data: "):])["error"]  # then why, as vLLM streams it
    assert error["message"] == "the request was aborted by the engine (shutdown)"
    assert replay(log).num_iterations > 0
    assert events.read_text().count('"cancel"') >= 1


def test_builtin_model_is_made_once(tmp_path):
    from iterserve.cli.serve import builtin_model

    path = builtin_model(tmp_path)
    made = (path / "model.safetensors").stat().st_mtime_ns
    assert builtin_model(tmp_path) == path
    assert (path / "model.safetensors").stat().st_mtime_ns == made
