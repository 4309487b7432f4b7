"""``iterserve sweep --ray ADDRESS`` on a local Ray head equals the same
sweep on local processes (issue 15 step 6).

The head is started here on 127.0.0.1 with free ports, in its own process
group, and that group is stopped at the end (never ``ray stop``, which would
stop every Ray on the machine)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from lab_helpers import small_spec

from iterserve.cli.main import main

pytest.importorskip("ray", reason="Ray is not installed (pip install 'iterserve[ray]'): "
                                  "the Ray sweep test needs it")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_for_port(port: int, process: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"ray start exited with {process.returncode}")
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    raise TimeoutError(f"the Ray head did not listen on {port} within {timeout_s} s")


@pytest.fixture(scope="module")
def ray_head() -> Iterator[str]:
    ray_cli = Path(sys.executable).with_name("ray")
    port = _free_port()
    temp_dir = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths are long
    command = [str(ray_cli), "start", "--head", f"--port={port}", "--node-ip-address=127.0.0.1",
               "--num-cpus=2", "--include-dashboard=false", "--disable-usage-stats",
               f"--dashboard-agent-listen-port={_free_port()}", f"--temp-dir={temp_dir}",
               "--block"]
    head = subprocess.Popen(command, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        _wait_for_port(port, head, timeout_s=120)
        yield f"127.0.0.1:{port}"
    finally:
        _stop_group(head)
        shutil.rmtree(temp_dir, ignore_errors=True)


def _stop_group(head: subprocess.Popen[bytes]) -> None:
    """Stop the head and what it started (its own process group)."""
    for sig, wait_s in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(head.pid, sig)
        except ProcessLookupError:
            return
        try:
            head.wait(wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def _sweep(workload: Path, out: Path, *where: str) -> dict:
    assert main(["sweep", "--workload", str(workload), "--policy", "vllm", "edf",
                 "--rates", "0.5", "4", "--trials", "2", "--seed", "3", "--out", str(out),
                 *where]) == 0
    return json.loads((out / "sweep.json").read_text())


def test_a_sweep_on_a_local_ray_head_equals_local_processes(ray_head, tmp_path) -> None:
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(small_spec(num_requests=10)))
    workload = tmp_path / "w.json"
    assert main(["workload", "gen", str(spec), "-o", str(workload)]) == 0
    local = _sweep(workload, tmp_path / "local", "--workers", "2")
    on_ray = _sweep(workload, tmp_path / "ray", "--ray", ray_head)
    assert on_ray == local
    rates = local["policies"]["edf"]["rates"]
    assert [len(entry["offered_load_attainment"]) for entry in rates] == [2, 2]
