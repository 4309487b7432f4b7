"""``iterserve serve [MODEL_DIR]``: the OpenAI-compatible server.

Without MODEL_DIR the built-in tiny model is served (written once with
``make-model`` into ``--model-cache-dir``). Flags take vLLM's names where the
meaning is the same. SIGTERM (or Ctrl-C) stops accepting (503), drains the
in-flight requests up to ``--drain-timeout``, aborts the rest, ends the
decision and event logs and exits 0, always within the drain timeout (a
second signal cuts the drain short; the logs are still ended, exit 0). The
logs are streamed to their files as the server runs, rolled over by size
with ``--log-max-bytes`` (docs/server-logs.md): memory is bounded by the live
requests, not by how long the server has run.
SIGTERM while the model loads exits 143 with one line. Connection limits
and their defaults: docs/server-limits.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import os
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from iterserve.cli.flag_types import add_attention_backend_flag
from iterserve.cli.output_files import OutputFileError, checked_output_file
from iterserve.cli.rotating_file import RotatingTextFile
from iterserve.cli.signals import terminate_raises
from iterserve.cli.simulate import FlagError
from iterserve.policies.settings import add_policy_setting_flag
from iterserve.server.client_labels import DEFAULT_MAX_CLIENT_LABELS
from iterserve.server.limits import ConnectionLimits

if TYPE_CHECKING:
    from iterserve.engine.online_log import OnlineLogs
    from iterserve.llm import EngineConfig
    from iterserve.runtime import Runtime
    from iterserve.server.app import ServerSettings
    from iterserve.server.shutdown import DrainingServer

LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
DEFAULT_LOG_BACKUPS = 5
API_KEY_ENV = "ITERSERVE_API_KEY"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("serve", help="serve a checkpoint over an OpenAI-compatible API")
    parser.add_argument("model_dir", type=Path, nargs="?", default=None,
                        help="a checkpoint directory, or a hub id (org/name) in the local "
                             "Hugging Face cache (default: the built-in tiny model)")
    _add_http_flags(parser)
    _add_engine_flags(parser)
    _add_ops_flags(parser)
    parser.set_defaults(run=run)


def _add_http_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default: %(default)s; 0.0.0.0 for all)")
    parser.add_argument("--port", type=int, default=8000,
                        help="TCP port to listen on (default: %(default)s)")
    parser.add_argument("--api-key", default=None,
                        help=f"require 'Authorization: Bearer KEY' on the /v1 routes "
                             f"(default: ${API_KEY_ENV} when set, else no key)")
    parser.add_argument("--served-model-name", default=None,
                        help="the model name clients send (default: the checkpoint "
                             "directory's name)")
    parser.add_argument("--max-body-bytes", type=int, default=4 * 1024 * 1024,
                        help="largest request body accepted; larger ones get 413 "
                             "(default: %(default)s)")
    parser.add_argument("--allowed-origins", nargs="+", default=None, metavar="ORIGIN",
                        help="CORS: origins browsers may call from, e.g. "
                             "https://app.example.com or '*', or one JSON list as vLLM takes "
                             "(default: none, no CORS headers)")
    parser.add_argument("--allowed-methods", nargs="+", default=None, metavar="METHOD",
                        help="CORS: methods allowed cross-origin, or one JSON list (default: *)")
    parser.add_argument("--allowed-headers", nargs="+", default=None, metavar="HEADER",
                        help="CORS: request headers allowed cross-origin, or one JSON list "
                             "(default: *)")


def _add_engine_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-num-batched-tokens", type=int, default=512,
                        help="token rows per iteration, prefill and decode together "
                             "(default: %(default)s)")
    parser.add_argument("--max-num-seqs", type=int, default=64,
                        help="requests per iteration (default: %(default)s)")
    parser.add_argument("--block-size", type=int, default=16,
                        help="token rows per KV block (default: %(default)s)")
    kv = parser.add_mutually_exclusive_group()
    kv.add_argument("--num-kv-blocks", type=int, default=None,
                    help="KV pool size in blocks (default: see --kv-cache-memory)")
    kv.add_argument("--kv-cache-memory", type=int, default=None,
                    help="KV pool size in bytes (default: half the memory free after loading, "
                         "at most max-num-seqs full-length sequences)")
    parser.add_argument("--max-model-len", type=int, default=None,
                        help="prompt + output tokens per request (default: the model's "
                             "max_position_embeddings)")
    parser.add_argument("--dtype", default="auto",
                        choices=["auto", "float32", "bfloat16", "float16"],
                        help="weight and KV dtype (default: auto, the checkpoint's torch_dtype)")
    parser.add_argument("--device", default="cpu",
                        help="torch device, e.g. cpu or cuda:0 (default: %(default)s)")
    add_attention_backend_flag(parser)
    parser.add_argument("--policy", default="vllm",
                        help="scheduling policy (default: %(default)s; "
                             "`iterserve policies` lists them)")
    add_policy_setting_flag(parser)
    parser.add_argument("--admission", default="none",
                        help="KV reservation estimator for admission: none, max, point, "
                             "quantile or watermark (default: %(default)s)")
    parser.add_argument("--overload", default="accept-all",
                        choices=["accept-all", "bounded", "slo-feasible"],
                        help="arrival gate: refused arrivals get 429 (default: %(default)s)")
    parser.add_argument("--max-live", type=int, default=None,
                        help="live requests allowed by --overload bounded")
    parser.add_argument("--cost-model", default=None,
                        help="iteration cost model NAME:PARAMS for --overload slo-feasible")


def _add_ops_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--decision-log", type=Path, default=None,
                        help="stream the decision log (replayable) to this file as the "
                             "server runs")
    parser.add_argument("--event-log", type=Path, default=None,
                        help="stream the metric event log (JSONL) to this file as the "
                             "server runs")
    parser.add_argument("--log-max-bytes", type=int, default=None,
                        help="roll a log file over to FILE.1 (FILE.1 to FILE.2, ...) before "
                             "it passes this size (default: never)")
    parser.add_argument("--log-backups", type=int, default=DEFAULT_LOG_BACKUPS,
                        help="rolled-over files kept per log; older ones are deleted "
                             "(default: %(default)s)")
    parser.add_argument("--drain-timeout", type=float, default=30.0,
                        help="seconds SIGTERM waits for in-flight requests before aborting "
                             "them (default: %(default)s)")
    add_connection_flags(parser)
    parser.add_argument("--model-cache-dir", type=Path, default=None,
                        help="where the built-in tiny model is kept ($XDG_CACHE_HOME/iterserve, "
                             "~/.cache/iterserve when unset)")
    parser.add_argument("--log-level", default="info", choices=LOG_LEVELS,
                        help="stderr log level; info shows one access line per request and "
                             "the stats line (default: %(default)s)")
    parser.add_argument("--stats-interval-s", type=float, default=10.0,
                        help="seconds between stats lines (throughput, queues, KV usage) while "
                             "busy; 0 turns them off (default: %(default)s)")
    parser.add_argument("--max-client-labels", type=int, default=DEFAULT_MAX_CLIENT_LABELS,
                        help="clients (user / X-Client-Id) with their own /metrics label; the "
                             "rest are counted as 'other' (default: %(default)s)")
    parser.add_argument("--strict-fields", action="store_true",
                        help="refuse unknown request fields with a 400 (default: ignore them "
                             "with one logged warning per field name, as vLLM does)")
    parser.add_argument("--chat-template", type=Path, default=None, metavar="FILE",
                        help="a Jinja chat template file to use instead of the checkpoint's")
    parser.set_defaults(run=run)


def add_connection_flags(parser: argparse.ArgumentParser) -> None:
    """What one client may hold (server/connections.py, docs/server-limits.md)."""
    defaults = ConnectionLimits()
    parser.add_argument("--max-connections", type=int, default=defaults.max_connections,
                        help="open connections at most; the next is answered 503 and closed "
                             "(lowered to the open-file limit less a reserve)")
    parser.add_argument("--header-timeout", type=float, default=defaults.header_timeout_s,
                        help="seconds a connection has to send a whole request head")
    parser.add_argument("--body-timeout", type=float, default=defaults.body_timeout_s,
                        help="seconds a request body has to arrive whole (408 after)")
    parser.add_argument("--keep-alive-timeout", type=float,
                        default=defaults.keep_alive_timeout_s,
                        help="seconds an idle keep-alive connection stays open")


def connection_limits(args: argparse.Namespace) -> ConnectionLimits:
    try:
        return ConnectionLimits(args.max_connections, args.header_timeout, args.body_timeout,
                                args.keep_alive_timeout)
    except ValueError as exc:
        raise FlagError(str(exc)) from None


def _check_log_paths(args: argparse.Namespace) -> None:
    """A path that cannot take a log is refused now, before the model loads."""
    for flag, path in (("--decision-log", args.decision_log), ("--event-log", args.event_log)):
        if path is not None:
            try:
                checked_output_file(path, flag)
            except OutputFileError as exc:
                raise FlagError(str(exc)) from None


def builtin_model(cache_dir: Path | None) -> Path:
    """The built-in tiny checkpoint, made once into the cache directory."""
    from iterserve.model.cache_dir import cache_root
    from iterserve.model.make_model import cached_model

    return cached_model((cache_dir or cache_root()) / "tiny")


def _check_flags(args: argparse.Namespace) -> None:
    for flag in ("port", "max_num_batched_tokens", "max_num_seqs", "block_size",
                 "num_kv_blocks", "kv_cache_memory", "max_model_len", "max_live",
                 "max_body_bytes", "max_client_labels", "log_max_bytes", "log_backups"):
        value = getattr(args, flag)
        least = 0 if flag in ("port", "max_client_labels", "log_backups") else 1
        if value is not None and value < least:
            raise FlagError(f"--{flag.replace('_', '-')} must be >= {least}, got {value}")
    if args.port > 65535:
        raise FlagError(f"--port must be <= 65535, got {args.port}")
    if args.max_num_batched_tokens < args.max_num_seqs:
        # each running sequence decodes one token a step: a smaller budget could never step
        # the running set the sequence cap admits (vLLM refuses the same pair)
        raise FlagError(f"--max-num-batched-tokens {args.max_num_batched_tokens} is below "
                        f"--max-num-seqs {args.max_num_seqs}: each running sequence needs one "
                        "token of the budget a step")
    if not (args.drain_timeout >= 0 and math.isfinite(args.drain_timeout)):
        raise FlagError(f"--drain-timeout must be >= 0, got {args.drain_timeout}")
    if not 0 <= args.stats_interval_s < float("inf"):
        raise FlagError(f"--stats-interval-s must be >= 0, got {args.stats_interval_s}")
    if args.overload == "bounded" and args.max_live is None:
        raise FlagError("--overload bounded needs --max-live N")
    if args.overload == "slo-feasible" and args.cost_model is None:
        raise FlagError("--overload slo-feasible needs --cost-model NAME:PARAMS")
    connection_limits(args)
    _check_log_paths(args)


def _num_kv_blocks(args: argparse.Namespace, model_dir: Path, dtype: str) -> int | None:
    """Blocks for --num-kv-blocks or --kv-cache-memory, checked before any model work;
    None leaves the default (sized from free memory) to the runtime."""
    if args.kv_cache_memory is None:
        return args.num_kv_blocks
    from iterserve.kv.pool_size import KvPoolRequest, KvPoolSizeError, num_pool_blocks
    from iterserve.model.loader import load_config
    from iterserve.records.kv_abi import bytes_per_row, dtype_num_bytes

    config = load_config(model_dir)
    dtype_name = (config.torch_dtype or "float32") if dtype == "auto" else dtype
    per_block = args.block_size * bytes_per_row(
        config.num_layers, config.num_kv_heads, config.head_dim, dtype_num_bytes(dtype_name))
    request = KvPoolRequest(None, args.kv_cache_memory, 1, 1, args.block_size)
    try:
        return num_pool_blocks(request, per_block, None)
    except KvPoolSizeError as exc:
        raise FlagError(str(exc)) from None


def build_config(args: argparse.Namespace, model_dir: Path) -> EngineConfig:
    from iterserve.llm import EngineConfig

    dtype = args.dtype
    try:
        return EngineConfig(
            policy=args.policy, max_num_batched_tokens=args.max_num_batched_tokens,
            max_num_seqs=args.max_num_seqs, num_kv_blocks=_num_kv_blocks(args, model_dir, dtype),
            block_size=args.block_size, dtype=dtype, device=args.device,
            attention_backend=args.attention_backend, max_model_len=args.max_model_len,
            admission=args.admission, overload=args.overload,
            max_live=args.max_live, cost_model=args.cost_model,
            # a server runs long: its whole pool is faulted in at start-up, as vLLM's is,
            # so no request's step stalls on a first touch (model/host_memory.py)
            commit_kv=True,
            extra_policy_settings=tuple(dict(args.policy_setting).items()))
    except ValueError as exc:
        raise FlagError(str(exc)) from None


def api_key(args: argparse.Namespace) -> str | None:
    """--api-key, else $ITERSERVE_API_KEY (read when serve runs); empty means none."""
    return args.api_key or os.environ.get(API_KEY_ENV) or None


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at emit time (a test's capture
    that has since closed is never held)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def configure_logging(level: str) -> None:
    """iterserve's loggers (engine errors, access lines, stats) to stderr at ``level``."""
    handler = _StderrHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("iterserve")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


def bind_socket(host: str, port: int) -> socket.socket:
    """The listening socket, bound before the model loads: a busy port is one
    line and exit 2, not a traceback after loading (uvicorn listens on it)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise FlagError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock


def cors_values(flag: str, values: list[str] | None, default: tuple[str, ...]
                ) -> tuple[str, ...]:
    """A CORS flag's values: words, or one JSON list of strings (vLLM's form)."""
    if values is None:
        return default
    if len(values) == 1 and values[0].lstrip().startswith("["):
        try:
            parsed = json.loads(values[0])
        except json.JSONDecodeError as exc:
            raise FlagError(f"--{flag}: not a JSON list ({exc.msg})") from None
        if not (isinstance(parsed, list) and all(isinstance(v, str) for v in parsed)):
            raise FlagError(f"--{flag}: a JSON list must hold strings only")
        return tuple(parsed)
    return tuple(values)


def server_settings(args: argparse.Namespace) -> ServerSettings:
    from iterserve.server.app import ServerSettings

    return ServerSettings(
        api_key(args), args.max_body_bytes, args.max_client_labels,
        cors_values("allowed-origins", args.allowed_origins, ()),
        cors_values("allowed-methods", args.allowed_methods, ("*",)),
        cors_values("allowed-headers", args.allowed_headers, ("*",)), args.stats_interval_s,
        strict_fields=args.strict_fields)


def read_chat_template(path: Path | None) -> str | None:
    """The --chat-template file's text, or a flag error naming the problem."""
    if path is None:
        return None
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise FlagError(f"--chat-template {path}: cannot be read ({type(exc).__name__})") from None
    if not text.strip():
        raise FlagError(f"--chat-template {path}: the file is empty")
    return text


def run(args: argparse.Namespace) -> int:
    _check_flags(args)
    settings = server_settings(args)
    # SIGTERM before uvicorn handles it (the model loading): one line and 143 (cli/signals.py)
    with terminate_raises():
        sock = None
        logs = _LogFiles()
        try:
            runtime, sock = _load(args, logs)
            server = _server(args, runtime, settings)
        except BaseException:
            if sock is not None:
                sock.close()
            logs.close()
            raise
    print(f"iterserve: serving {runtime.model_name!r} on http://{args.host}:{args.port}/v1",
          flush=True)
    try:
        server.run(sockets=[sock])
        runtime.engine.shutdown(0.0)  # whatever the drain left (or a second signal cut short)
        runtime.engine.close_logs()
    finally:
        logs.close()
    if server.was_forced:
        print("iterserve serve: second signal: the drain was cut short; logs written",
              file=sys.stderr, flush=True)
    return logs.report_failures()


class _LogFiles:
    """The streamed log files of one serve run (opened once the port is bound)."""

    def __init__(self) -> None:
        self.files: list[RotatingTextFile] = []

    def open(self, args: argparse.Namespace) -> OnlineLogs:
        from iterserve.engine.online_log import OnlineLogs

        decisions = self._open(args.decision_log, "--decision-log", args)
        events = self._open(args.event_log, "--event-log", args)
        return OnlineLogs(decisions, events, keep_in_memory=False)  # type: ignore[arg-type]

    def _open(self, path: Path | None, flag: str,
              args: argparse.Namespace) -> RotatingTextFile | None:
        if path is None:
            return None
        try:
            sink = RotatingTextFile(path, args.log_max_bytes, args.log_backups, label=flag)
        except OSError as exc:
            raise FlagError(f"{flag} {path}: cannot be opened ({exc.strerror or exc})") from None
        self.files.append(sink)
        return sink

    def close(self) -> None:
        for sink in self.files:
            sink.close()

    def report_failures(self) -> int:
        """1, with one line per log that could not be written to its end; else 0."""
        failed = [sink for sink in self.files if sink.error is not None]
        for sink in failed:
            assert sink.error is not None
            print(f"iterserve serve: {sink.label} {sink.path}: cut short by a failed write "
                  f"({sink.error.strerror or sink.error})", file=sys.stderr, flush=True)
        return 1 if failed else 0


def _load(args: argparse.Namespace, logs: _LogFiles) -> tuple[Runtime, socket.socket]:
    """The flags checked against the policy and gate, the port bound (a busy
    one is one line before the model loads, seconds to minutes), then the
    model loaded; the listening socket comes back with the runtime."""
    from iterserve.model.hub import resolve_model
    from iterserve.runtime import load_runtime, make_engine_policy, make_overload_gate

    source = resolve_model(args.model_dir or builtin_model(args.model_cache_dir))
    config = build_config(args, source.path)
    chat_template = read_chat_template(args.chat_template)
    make_engine_policy(config)  # a bad policy, setting or gate fails before the port is bound
    make_overload_gate(config)
    sock = bind_socket(args.host, args.port)
    try:
        configure_logging(args.log_level)
        runtime = load_runtime(source.path, config,
                               served_model_name=args.served_model_name or source.name,
                               chat_template=chat_template, logs=logs.open(args))
    except BaseException:
        sock.close()
        raise
    return runtime, sock


def _server(args: argparse.Namespace, runtime: Runtime,
            settings: ServerSettings) -> DrainingServer:
    """The app and its uvicorn server with the connection limits (docs/server-limits.md)."""
    import uvicorn

    from iterserve.server.app import create_app
    from iterserve.server.connections import fit_to_descriptors, guarded_protocol
    from iterserve.server.shutdown import DrainingServer

    limits = connection_limits(args)
    max_connections, fd_limit = fit_to_descriptors(limits.max_connections)
    if max_connections < limits.max_connections:
        print(f"iterserve: --max-connections lowered to {max_connections} (open-file limit "
              f"{fd_limit})", flush=True)
        limits = dataclasses.replace(limits, max_connections=max_connections)
    app = create_app(runtime, dataclasses.replace(settings, body_timeout_s=limits.body_timeout_s))
    return DrainingServer(
        uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level,
                       access_log=False, http=guarded_protocol(limits),
                       timeout_keep_alive=limits.keep_alive_timeout_s,  # type: ignore[arg-type]
                       h11_max_incomplete_event_size=MAX_REQUEST_HEAD_BYTES),
        app.state.gatekeeper, runtime.engine, args.drain_timeout)


#: the largest request head (request line and headers) read; h11's default is 16 KiB too
MAX_REQUEST_HEAD_BYTES = 16 * 1024
