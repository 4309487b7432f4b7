"""``iterserve workload gen SPEC -o FILE`` and ``iterserve workload convert
TRACE --format jsonl|azure|burstgpt -o FILE``: workload files from a
generator spec or a request trace (docs/workloads.md). Both write the
workload-file schema; realized output lengths go to the hidden-truth section
only, and the written document is checked by the workload loader first."""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path
from typing import Any

from iterserve.cli.flag_types import POSITIVE_INT, non_empty, output_file, renamed_flag
from iterserve.cli.output_files import write_text_file
from iterserve.cli.simulate import FlagError, writing_to
from iterserve.records.workload import parse_workload, read_json_document
from iterserve.records.workload_json import dumps_workload
from iterserve.sim.generators import generate_document
from iterserve.sim.trace_workload import (
    TraceSelection,
    TraceTarget,
    select_records,
    trace_document,
)
from iterserve.sim.traces import FORMATS, read_trace, trace_lengths
from iterserve.sim.workload_spec import WorkloadSpecError, parse_spec


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("workload", help="generate or convert workload files")
    commands = parser.add_subparsers(dest="workload_command", required=True)
    gen = commands.add_parser("gen", help="generate a workload from a JSON spec")
    gen.add_argument("spec", type=Path, help="generator spec (JSON, docs/workloads.md)")
    gen.add_argument("-o", "--out", type=output_file, required=True,
                     help="workload JSON to write")
    gen.set_defaults(run=run_gen)
    convert = commands.add_parser("convert", help="a request trace as a workload")
    convert.add_argument("trace", type=Path, help="trace file")
    convert.add_argument("--format", required=True, choices=FORMATS, help="trace layout")
    convert.add_argument("-o", "--out", type=output_file, required=True,
                         help="workload JSON to write")
    convert.add_argument("--start", type=float, default=0.0, metavar="S",
                         help="keep requests at or after S trace seconds")
    convert.add_argument("--end", type=float, default=None, metavar="S",
                         help="keep requests before S trace seconds")
    convert.add_argument("--limit", type=int, default=None, help="keep the first N requests")
    convert.add_argument("--sample", type=float, default=1.0, metavar="FRACTION",
                         help="keep each request with this probability (seeded)")
    convert.add_argument("--seed", type=int, default=0, help="seed for --sample")
    convert.add_argument("--time-scale", type=float, default=1.0,
                         help="multiply arrival times (0.5 doubles the rate)")
    convert.add_argument("--workload-id", type=non_empty, default=None,
                         help="default: the trace file name")
    convert.add_argument("--max-output-tokens", type=int, default=4096,
                         help="declared output cap of every request (realized lengths stay "
                              "hidden; longer ones are truncated to it)")
    convert.add_argument("--max-num-batched-tokens", type=int, default=2048,
                         help="the workload's per-step token cap")
    convert.add_argument("--token-budget", dest="max_num_batched_tokens", type=int,
                         action=renamed_flag("--max-num-batched-tokens"), help=argparse.SUPPRESS)
    convert.add_argument("--max-num-seqs", type=int, default=256,
                         help="the workload's per-step request cap")
    convert.add_argument("--sequence-budget", dest="max_num_seqs", type=int,
                         action=renamed_flag("--max-num-seqs"), help=argparse.SUPPRESS)
    convert.add_argument("--num-kv-blocks", "--kv-blocks", dest="num_kv_blocks", type=int,
                         default=None,
                         help="paged KV pool size in blocks (default: unbounded; --kv-blocks "
                              "is the older spelling, kept as an alias)")
    convert.add_argument("--block-size", type=POSITIVE_INT, default=16,
                         help="tokens a KV block holds (with --num-kv-blocks)")
    convert.set_defaults(run=run_convert)


def run_gen(args: argparse.Namespace) -> int:
    raw = read_json_document(args.spec, WorkloadSpecError)
    base_dir = args.spec.parent

    def read_lengths(path: str, fmt: str, column: str) -> tuple[int, ...]:
        return trace_lengths(base_dir / path, fmt, column)

    document = generate_document(parse_spec(raw, read_lengths))
    parse_workload(document)
    with writing_to(f"-o {args.out}"):
        write_text_file(args.out, "-o", dumps_workload(document), may_make_dir=True)
    print(f"{_summary(document)} -> {args.out}")
    return 0


def run_convert(args: argparse.Namespace) -> int:
    try:
        selection = TraceSelection(args.start, args.end, args.limit, args.sample, args.seed,
                                   args.time_scale)
        target = TraceTarget(args.workload_id or args.trace.name,
                             {"max_num_batched_tokens": args.max_num_batched_tokens,
                              "max_num_seqs": args.max_num_seqs},
                             args.max_output_tokens, kv=_kv(args))
    except ValueError as exc:
        raise FlagError(str(exc)) from None
    trace = read_trace(args.trace, args.format)
    try:
        document, num_truncated = trace_document(select_records(trace.records, selection),
                                                 selection, target)
    except ValueError as exc:
        raise FlagError(str(exc)) from None
    parse_workload(document)
    with writing_to(f"-o {args.out}"):
        write_text_file(args.out, "-o", dumps_workload(document), may_make_dir=True)
    print(f"{_summary(document)}; {len(trace.records)} trace requests read, "
          f"{trace.num_failed_skipped} failed rows skipped, {num_truncated} outputs truncated "
          f"to --max-output-tokens -> {args.out}")
    return 0


def _kv(args: argparse.Namespace) -> dict[str, int] | None:
    if args.num_kv_blocks is None:
        return None
    return {"num_kv_blocks": args.num_kv_blocks, "block_size": args.block_size}


def _summary(document: dict[str, Any]) -> str:
    requests = document["requests"]
    clients = Counter(r["client_id"] for r in requests)
    span = (requests[-1]["arrival"] - requests[0]["arrival"]) if requests else 0
    return (f"{document['workload_id']}: {len(requests)} requests over {span:g} "
            f"{document['clock']} ({', '.join(f'{c}={n}' for c, n in sorted(clients.items()))})")
