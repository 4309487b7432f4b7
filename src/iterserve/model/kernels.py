"""Native kernels, built on demand and cached on disk (spec 0x04 launch structure).

`paged_attention` (csrc/paged_decode.cpp) attends the segments of a packed
batch, decode rows and multi-row chunks at any start, reading K/V rows in
place from the paged pool: no gather, no padding, no mask. `fused_add_rms_norm`,
`silu_and_mul` and `rotary_in_place` (csrc/fused_ops.cpp) do the layer's
element-wise steps in one pass per row. `decoder_layers`
(csrc/decoder_layers.cpp) runs the model's whole layer loop with those ops and
oneDNN's packed linear in one call (model/llama.py decides where it applies).

Build and load, never at import: `load_paged_decode()` compiles the source
with torch.utils.cpp_extension (g++ and ninja) into
`$XDG_CACHE_HOME/iterserve/kernels/<key>/` (default `~/.cache`), where the key
names the torch version, the source hash and the CPU's instruction-set flags,
so a torch upgrade, an edited source or another CPU model builds afresh
(`-march=native`). A cached build loads in milliseconds; a missing one is
built on first use, announced by one warning line on stderr; `iterserve
build-kernels` (run by scripts/setup.sh) builds ahead so that start-up stays
fast. The loaded library is memoized per build directory; that is the only
state kept.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import platform
from pathlib import Path

import torch
from torch._ops import _OpNamespace as OpNamespace

from iterserve.model import cache_dir

logger = logging.getLogger(__name__)

#: "auto": the kernel when it is built or buildable (a CPU model in a kernel
#: dtype), the batched FlexAttention path on an accelerator, else torch with
#: one warning; "torch": gather + SDPA (the per-request reference); "cpp": the
#: kernel or an error; "flex": the batched path (model/batched_attention.py)
#: on any device (on the CPU it runs eagerly: for tests, not for speed);
#: "varlen": torch's varlen flash attention over the block tables
#: (model/varlen_attention.py), CUDA only. The kernel attends every segment, not only decode rows
#: (the names `in_place_decode` / `load_paged_decode` predate chunk support).
ATTENTION_BACKENDS = ("auto", "torch", "cpp", "flex", "varlen")
KERNEL_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
#: The extension's sources: in-place paged attention, fused element-wise ops.
SOURCES = tuple(Path(__file__).with_name("csrc") / name
                for name in ("paged_decode.cpp", "fused_ops.cpp", "decoder_layers.cpp"))
#: Headers the sources include (hashed into the build key with them).
HEADERS = tuple(Path(__file__).with_name("csrc") / name for name in ("simd.h", "amx_score.h",
                                                                    "amx_chunk.h"))
LIBRARY_NAME = "iterserve_paged_decode"
CFLAGS = ("-O3", "-march=native", "-fopenmp")


class KernelBuildError(RuntimeError):
    """The native kernel could not be compiled or loaded."""


def cache_root() -> Path:
    """`$XDG_CACHE_HOME/iterserve/kernels`, `~/.cache/...` when unset (read per call)."""
    return cache_dir.cache_root() / "kernels"


def build_key() -> str:
    """torch version + source hash + CPU flags: anything that changes the binary."""
    digest = hashlib.sha256()
    digest.update(torch.__version__.encode())
    for source in (*SOURCES, *HEADERS):
        digest.update(source.read_bytes())
    digest.update(" ".join(CFLAGS).encode())
    digest.update(_cpu_flags().encode())
    return f"{LIBRARY_NAME}-{digest.hexdigest()[:16]}"


def _cpu_flags() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith(("flags", "Features")):
                return line
    return platform.machine() + platform.processor()


def load_paged_decode(build_dir: Path | None = None) -> OpNamespace:
    """Load the kernels and return their op namespace, building them first if
    `build_dir` (default: cache_root() / build_key()) holds no library.
    Raises KernelBuildError naming the cause; a failure is remembered, so a
    broken toolchain costs one build attempt per process."""
    loaded = _load(build_dir or cache_root() / build_key())
    if isinstance(loaded, str):
        raise KernelBuildError(loaded)
    return loaded


def op_namespace(build_dir: Path) -> str:
    """The torch.ops namespace of the build in `build_dir` (named by its key):
    one per build, so two builds (two source trees, as in
    benchmarks/bench_step_ab.py) can be loaded in one process side by side."""
    digest = hashlib.sha256(build_dir.name.encode()).hexdigest()[:16]
    return f"iterserve_kernels_{digest}"


@functools.cache
def _load(build_dir: Path) -> OpNamespace | str:
    """The loaded ops, else why not."""
    library = build_dir / f"{LIBRARY_NAME}.so"
    namespace = op_namespace(build_dir)
    try:
        if library.is_file():
            torch.ops.load_library(str(library))
        else:
            from torch.utils import cpp_extension  # heavy import, only when building

            logger.warning("iterserve: native kernels not built for this torch and CPU yet; "
                           "building them into %s once (about 15 s; `iterserve build-kernels` "
                           "does it ahead)", build_dir)
            build_dir.mkdir(parents=True, exist_ok=True)
            cpp_extension.load(name=LIBRARY_NAME, sources=[str(s) for s in SOURCES],
                               build_directory=str(build_dir),
                               extra_cflags=[*CFLAGS, f"-DITERSERVE_OPS={namespace}"],
                               extra_ldflags=["-fopenmp"], is_python_module=False, verbose=False)
        ops: OpNamespace = getattr(torch.ops, namespace)
        ops.paged_attention, ops.rotary_in_place  # noqa: B018 - absent from a library built otherwise
    except Exception as error:  # compiler missing, build error, bad cached library
        message = " ".join(str(error).split())[-300:]
        failure = f"paged_decode kernel unavailable in {build_dir} ({type(error).__name__}: {message})"
        logger.warning("%s; attention uses the torch path", failure)
        return failure
    return ops


def resolve_in_place_decode(backend: str, dtype: torch.dtype,
                            device: torch.device) -> OpNamespace | None:
    """The kernels' ops if a model of `dtype` on `device` attends its segments
    with them, per `backend` (one of ATTENTION_BACKENDS), else None. Loads (and
    if need be builds) the kernels; "cpp" raises ValueError or KernelBuildError
    where "auto" falls back (the build failure is logged once)."""
    if backend not in ATTENTION_BACKENDS:
        raise ValueError(f"attention_backend {backend!r} unknown; use one of {ATTENTION_BACKENDS}")
    if backend in ("torch", "flex", "varlen"):
        return None
    is_supported = device.type == "cpu" and dtype in KERNEL_DTYPES
    if backend == "cpp" and not is_supported:
        raise ValueError(f"attention_backend 'cpp' runs on CPU in {KERNEL_DTYPES}, "
                         f"not {device.type} {dtype}")
    if not is_supported:
        return None
    try:
        return load_paged_decode()
    except KernelBuildError:
        if backend == "cpp":
            raise
        return None


def uses_batched_attention(backend: str, device: torch.device) -> bool:
    """Whether a model with `backend` on `device` attends through
    model/batched_attention.py: "flex" anywhere, "auto" off the CPU."""
    if backend not in ATTENTION_BACKENDS:
        raise ValueError(f"attention_backend {backend!r} unknown; use one of {ATTENTION_BACKENDS}")
    return backend == "flex" or (backend == "auto" and device.type != "cpu")
