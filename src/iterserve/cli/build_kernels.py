"""``iterserve build-kernels``: compile the native attention kernel into the
user's cache ahead of time, so that loading a model never waits on a compiler
(see iterserve.model.kernels)."""

from __future__ import annotations

import argparse


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "build-kernels", help="compile the native attention and layer kernels once into "
                              "~/.cache/iterserve (setup does it; models fall back to torch "
                              "without them)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import time

    from iterserve.model import kernels

    build_dir = kernels.cache_root() / kernels.build_key()
    began_s = time.perf_counter()
    try:
        kernels.load_paged_decode(build_dir)
    except kernels.KernelBuildError as error:
        print(f"iterserve build-kernels: {error}; models fall back to the torch attention path")
        return 1
    print(f"paged_decode kernel ready in {build_dir} ({time.perf_counter() - began_s:.1f} s)")
    return 0
