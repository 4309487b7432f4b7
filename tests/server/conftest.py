"""Fixtures for the server tests: one tiny checkpoint per session, and real
servers started with uvicorn on 127.0.0.1 and a free port in a background
thread, stopped by the test (issue 10)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from server_helpers import free_port

from torch_fixtures import *  # noqa: F403  (the session fixtures: _one_torch_thread, tiny_dir)


@dataclass
class Served:
    base_url: str
    runtime: object  # iterserve.runtime.Runtime
    server: object  # uvicorn.Server
    thread: threading.Thread

    @property
    def engine(self):  # -> OnlineEngine
        return self.runtime.engine

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
        self.runtime.engine.shutdown(0.0)


@pytest.fixture(scope="module")
def serve(tiny_dir: Path) -> Iterator[Callable[..., Served]]:
    """``serve(**EngineConfig overrides, api_key=None, strict_fields=False,
    chat_template=None, server={ServerSettings fields}, logs=OnlineLogs)`` -> a running server
    (each call starts a fresh one; all stop when the test module ends)."""
    import uvicorn

    from iterserve.llm import EngineConfig
    from iterserve.runtime import load_runtime
    from iterserve.server.app import ServerSettings, create_app

    started: list[Served] = []

    def start(api_key: str | None = None, max_body_bytes: int = 1 << 20,
              strict_fields: bool = False, chat_template: str | None = None,
              server: dict[str, object] | None = None, logs: object = None,
              **overrides: object) -> Served:
        config = EngineConfig(**{"num_kv_blocks": 256, **overrides})  # type: ignore[arg-type]
        runtime = load_runtime(tiny_dir, config, served_model_name="tiny",
                               chat_template=chat_template, logs=logs)  # type: ignore[arg-type]
        app = create_app(runtime, ServerSettings(api_key, max_body_bytes, strict_fields=strict_fields,
                                                 **(server or {})))  # type: ignore[arg-type]
        port = free_port()
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                               log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        while not server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        served = Served(f"http://127.0.0.1:{port}", runtime, server, thread)
        started.append(served)
        return served

    yield start
    for served in started:
        served.stop()
