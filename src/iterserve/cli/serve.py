"""``iterserve serve [MODEL_DIR]``: the OpenAI-compatible server.

Without MODEL_DIR the built-in tiny model is served (written once with
``make-model`` into ``--model-cache-dir``). Flags take vLLM's names where the
meaning is the same. SIGTERM (or Ctrl-C) stops accepting (503), drains the
in-flight requests up to ``--drain-timeout``, aborts the rest, writes the
decision and event logs and exits 0.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from iterserve.cli.simulate import FlagError
from iterserve.policies.settings import add_policy_setting_flag, parse_settings

if TYPE_CHECKING:
    from iterserve.llm import EngineConfig

def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("serve", help="serve a checkpoint over an OpenAI-compatible API")
    parser.add_argument("model_dir", type=Path, nargs="?", default=None,
                        help="a local checkpoint (default: the built-in tiny model)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument("--max-num-batched-tokens", type=int, default=512)
    parser.add_argument("--max-num-seqs", type=int, default=64)
    parser.add_argument("--block-size", type=int, default=16)
    kv = parser.add_mutually_exclusive_group()
    kv.add_argument("--num-kv-blocks", type=int, default=None)
    kv.add_argument("--kv-cache-memory", type=int, default=None,
                    help="KV pool size in bytes (default: half the memory free after loading, "
                         "at most max-num-seqs full-length sequences)")
    parser.add_argument("--max-model-len", type=int, default=None)
    parser.add_argument("--dtype", default="auto",
                        choices=["auto", "float32", "bfloat16", "float16"])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--policy", default="vllm")
    add_policy_setting_flag(parser)
    parser.add_argument("--admission", default="none")
    parser.add_argument("--overload", default="accept-all",
                        choices=["accept-all", "bounded", "slo-feasible"])
    parser.add_argument("--max-live", type=int, default=None)
    parser.add_argument("--cost-model", default=None, help="for --overload slo-feasible")
    parser.add_argument("--decision-log", type=Path, default=None)
    parser.add_argument("--event-log", type=Path, default=None)
    parser.add_argument("--drain-timeout", type=float, default=30.0, help="seconds")
    parser.add_argument("--max-body-bytes", type=int, default=4 * 1024 * 1024)
    parser.add_argument("--model-cache-dir", type=Path, default=None,
                        help="where the built-in tiny model is kept ($XDG_CACHE_HOME/iterserve, "
                             "~/.cache/iterserve when unset)")
    parser.add_argument("--strict-fields", action="store_true",
                        help="refuse unknown request fields with a 400 (default: ignore them "
                             "with one logged warning per field name, as vLLM does)")
    parser.add_argument("--chat-template", type=Path, default=None, metavar="FILE",
                        help="a Jinja chat template file to use instead of the checkpoint's")
    parser.set_defaults(run=run)


def builtin_model(cache_dir: Path | None) -> Path:
    """The built-in tiny checkpoint, made once into the cache directory."""
    from iterserve.model.cache_dir import cache_root
    from iterserve.model.make_model import cached_model

    return cached_model((cache_dir or cache_root()) / "tiny")


def _check_flags(args: argparse.Namespace) -> None:
    for flag in ("port", "max_num_batched_tokens", "max_num_seqs", "block_size",
                 "num_kv_blocks", "kv_cache_memory", "max_model_len", "max_live",
                 "max_body_bytes"):
        value = getattr(args, flag)
        if value is not None and value < (0 if flag == "port" else 1):
            raise FlagError(f"--{flag.replace('_', '-')} must be >= 1, got {value}")
    if args.port > 65535:
        raise FlagError(f"--port must be <= 65535, got {args.port}")
    if not args.drain_timeout >= 0:
        raise FlagError(f"--drain-timeout must be >= 0, got {args.drain_timeout}")
    if args.overload == "bounded" and args.max_live is None:
        raise FlagError("--overload bounded needs --max-live N")
    if args.overload == "slo-feasible" and args.cost_model is None:
        raise FlagError("--overload slo-feasible needs --cost-model NAME:PARAMS")


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
            policy=args.policy, token_budget=args.max_num_batched_tokens,
            max_num_seqs=args.max_num_seqs, kv_blocks=_num_kv_blocks(args, model_dir, dtype),
            block_size=args.block_size, dtype=dtype, device=args.device,
            max_model_len=args.max_model_len, admission=args.admission, overload=args.overload,
            max_live=args.max_live, cost_model=args.cost_model,
            # a server runs long: its whole pool is faulted in at start-up, as vLLM's is,
            # so no request's step stalls on a first touch (model/host_memory.py)
            commit_kv=True,
            extra_policy_settings=tuple(parse_settings(args.policy_setting).items()))
    except ValueError as exc:
        raise FlagError(str(exc)) from None


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
    import uvicorn

    from iterserve.runtime import load_runtime
    from iterserve.server.app import ServerSettings, create_app
    from iterserve.server.shutdown import DrainingServer

    _check_flags(args)
    model_dir = args.model_dir or builtin_model(args.model_cache_dir)
    config = build_config(args, model_dir)
    chat_template = read_chat_template(args.chat_template)
    runtime = load_runtime(model_dir, config, served_model_name=args.served_model_name,
                           chat_template=chat_template)
    app = create_app(runtime, ServerSettings(args.api_key, args.max_body_bytes,
                                             strict_fields=args.strict_fields))
    server = DrainingServer(uvicorn.Config(app, host=args.host, port=args.port,
                                           log_level="warning"),
                            app.state.gatekeeper, runtime.engine, args.drain_timeout)
    print(f"iterserve: serving {runtime.model_name!r} on http://{args.host}:{args.port}/v1",
          flush=True)
    server.run()
    runtime.engine.shutdown(0.0)
    runtime.engine.write_logs(args.decision_log, args.event_log)
    return 0

