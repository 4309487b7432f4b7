"""vLLM source pinned as facts (0x0D): a release, its full-file sha256,
byte and line counts, and symbol/line markers (a 1-based line number and a
fragment that line holds). No vLLM source is committed; :func:`verify_pin`
checks a copy (an unpacked wheel or source tree, or the wheel file itself)
against a pin as text, without importing it.

Two pins, for two questions:

- :data:`iterserve.policies.vllm_pin_spec.SPEC_PIN`: the spec's pin, vLLM V1
  at tag v0.23.0, the 35 markers behind every runtime statement of 0x0D;
- :data:`POLICY_PIN` (here): vLLM 0.32.0, the release whose defaults and
  rules the ``vllm`` policy follows (its contract cites these markers).

``scripts/verify_vllm_pin.py`` runs the check from the command line.
"""

from __future__ import annotations

import hashlib
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

SCHEDULER = "v1/core/sched/scheduler.py"
SCHEDULER_CONFIG = "config/scheduler.py"


@dataclass(frozen=True, slots=True)
class PinnedFile:
    path: str  # relative to the ``vllm`` package directory
    sha256: str
    num_bytes: int
    num_lines: int  # newline characters
    url: str  # where the same file sits upstream at the pinned tag


@dataclass(frozen=True, slots=True)
class Marker:
    path: str
    line: int  # 1-based
    fragment: str  # text that line contains
    evidences: str  # the claim it binds to the source


@dataclass(frozen=True, slots=True)
class SourcePin:
    release: str
    tag: str
    git_object: str  # the git object the spec names for the tag ('' when none is claimed)
    wheel: str  # the wheel the facts were read from
    wheel_sha256: str
    files: tuple[PinnedFile, ...]
    markers: tuple[Marker, ...]


def upstream_url(tag: str, path: str) -> str:
    return f"https://github.com/vllm-project/vllm/blob/{tag}/vllm/{path}"


POLICY_PIN = SourcePin(
    release="vllm 0.32.0",
    tag="v0.32.0",
    git_object="",
    wheel="vllm-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl",
    wheel_sha256="5e2ecdc5b0baf72921c288486417ca82778456a448e4fe60b62ee43c0dfc8611",
    files=(
        PinnedFile(SCHEDULER, "d9a39870286c424cef2fc0730e24092ee3df67e848608e2278944846bab804ae",
                   161925, 3436, upstream_url("v0.32.0", SCHEDULER)),
        PinnedFile(SCHEDULER_CONFIG,
                   "2fb86b1572a4925be59f304d13b4f6ec03d496b67a7c4abbb976ecda2232839a",
                   16149, 359, upstream_url("v0.32.0", SCHEDULER_CONFIG)),
    ),
    markers=(
        Marker(SCHEDULER, 594, 'no "decoding phase" nor "prefill phase"',
               "frontier catch-up, no phases"),
        Marker(SCHEDULER, 642, "request there is nobody to starve",
               "the lone-request rule: why the threshold spares a lone request"),
        Marker(SCHEDULER, 644, "num_eligible_reqs = num_running + num_waiting",
               "the lone-request rule counts running plus waiting requests"),
        Marker(SCHEDULER, 647, "if num_eligible_reqs > 1",
               "the lone-request rule: threshold 0 (off) unless two or more are eligible"),
        Marker(SCHEDULER, 650, "if long_prefill_token_threshold > 0 and "
               "self.adaptive_long_prefill_threshold",
               "the adaptive floor applies only to an active threshold"),
        Marker(SCHEDULER, 654, "long_prefill_token_threshold, input_budget // num_eligible_reqs",
               "the adaptive floor max(threshold, input_budget // num_eligible)"),
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
        Marker(SCHEDULER_CONFIG, 86,
               "long_prefill_token_threshold_adaptive: bool = Field(default=False)",
               "the adaptive floor is opt-in"),
        Marker(SCHEDULER_CONFIG, 190, "scheduler_reserve_full_isl: bool = True",
               "R1 is on by default"),
        Marker(SCHEDULER_CONFIG, 328, "self.max_num_batched_tokens < self.max_num_seqs",
               "rule SC1"),
        Marker(SCHEDULER_CONFIG, 352, "self.long_prefill_token_threshold > max_model_len",
               "rule SC3 (0.32 checks it whatever max_num_partial_prefills)"),
    ),
)


class SourceTree:
    """Read-only access to the files of a vLLM copy: the ``vllm`` package
    directory, a folder holding it (an unpacked wheel or a source
    checkout), or a ``.whl`` file read in place."""

    def __init__(self, location: Path) -> None:
        self.location = location
        self._zip: zipfile.ZipFile | None = None
        self._root: Path | None = None
        if location.is_file():
            try:
                self._zip = zipfile.ZipFile(location)
            except zipfile.BadZipFile:
                raise ValueError(f"{location}: not a wheel (zip) file") from None
        elif (location / "vllm" / SCHEDULER).is_file():
            self._root = location / "vllm"
        elif location.is_dir():
            self._root = location
        else:
            raise ValueError(f"{location}: no such file or folder")

    def read(self, path: str) -> bytes | None:
        """The bytes of ``vllm/<path>``, None when the copy lacks it."""
        if self._zip is not None:
            try:
                return self._zip.read(f"vllm/{path}")
            except KeyError:
                return None
        assert self._root is not None
        file = self._root / path
        return file.read_bytes() if file.is_file() else None


_COMMIT_ID = re.compile(r"""^__commit_id__ = commit_id = ['"]g?([0-9a-f]+)['"]""", re.M)


def build_commit(source: SourceTree) -> str | None:
    """The commit (abbreviated) the copy was built from, as setuptools-scm
    wrote it into ``vllm/_version.py``; None when the copy does not say."""
    data = source.read("_version.py")
    match = _COMMIT_ID.search(data.decode("utf-8", "replace")) if data is not None else None
    return match.group(1) if match else None


def verify_pin(source: SourceTree, pin: SourcePin) -> list[str]:
    """Every way ``source`` differs from ``pin``, one line each (empty: the
    copy is the pinned source)."""
    problems: list[str] = []
    contents: dict[str, bytes | None] = {}
    for pinned in pin.files:
        data = contents[pinned.path] = source.read(pinned.path)
        if data is None:
            problems.append(f"{pinned.path}: missing")
            continue
        problems.extend(_file_problems(pinned, data))
    for marker in pin.markers:
        data = contents.get(marker.path)
        if data is None:
            data = contents[marker.path] = source.read(marker.path)
        lines = data.decode("utf-8", "replace").splitlines() if data is not None else []
        text = lines[marker.line - 1] if marker.line <= len(lines) else ""
        if marker.fragment not in text:
            problems.append(f"{marker.path}:{marker.line}: marker {marker.fragment!r} not found")
    return problems


def _file_problems(pinned: PinnedFile, data: bytes) -> list[str]:
    problems = []
    digest = hashlib.sha256(data).hexdigest()
    if digest != pinned.sha256:
        problems.append(f"{pinned.path}: sha256 {digest}, pinned {pinned.sha256}")
    if len(data) != pinned.num_bytes:
        problems.append(f"{pinned.path}: {len(data)} bytes, pinned {pinned.num_bytes}")
    num_lines = data.count(b"\n")
    if num_lines != pinned.num_lines:
        problems.append(f"{pinned.path}: {num_lines} lines, pinned {pinned.num_lines}")
    return problems
