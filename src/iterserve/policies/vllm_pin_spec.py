"""The spec's pin (0x0D): vLLM V1 at tag v0.23.0, as facts.

The spec names the tag, its git tag object and "complete file hashes, byte
counts, upstream URLs, and 35 line markers" for two files (its
pinned/vllm-v0.23.0/scheduler.py and scheduler_config.py, which are
vllm/v1/core/sched/scheduler.py and vllm/config/scheduler.py at the tag),
but its text prints neither the hashes nor the markers. The hashes, byte
and line counts below were read from the ``vllm==0.23.0`` wheel on PyPI
(vllm-0.23.0-2-cp38-abi3-manylinux_2_28_x86_64.whl, build tag 2), the
files as the wheel ships them; the spec's one checkable line number
(``Scheduler.schedule()`` at line 340) holds in them. The wheel's
``vllm/_version.py`` says it was built from commit ``g0fc695fc6``, the
prefix of the git object the spec names (recorded in full as the spec
states it; a wheel holds only the prefix). The sdist
(vllm-0.23.0.tar.gz, sha256 760269db3d9611e12e524681df1bca0977d5d2f5fcb4481cc34d33efc4ae7ff5)
holds the same two files byte for byte, though its ``_version.py`` names
commit ``g91df0fad4``.

The 35 markers are one per runtime statement 0x0D (and 0x05, 0x09, 0x0C
where they cite the same tag) makes about the source, each naming the line
that shows it.
"""

from __future__ import annotations

from iterserve.policies.vllm_pin import (
    SCHEDULER,
    SCHEDULER_CONFIG,
    Marker,
    PinnedFile,
    SourcePin,
    upstream_url,
)

_TAG = "v0.23.0"

_SCHEDULER_MARKERS = (
    (104, "self.max_num_running_reqs = self.scheduler_config.max_num_seqs",
     "0x05: the sequence limit is its own counter, beside the token budget"),
    (340, "def schedule(self) -> SchedulerOutput:", "0x0D: Scheduler.schedule() at line 340"),
    (343, 'There\'s no "decoding phase" nor "prefill phase" in the scheduler.',
     "0x0D: no scheduler-level phases"),
    (360, "token_budget = self.max_num_scheduled_tokens",
     "0x05: a per-step token budget is initialised"),
    (378, "while req_index < len(self.running) and token_budget > 0:",
     "0x0D: the running pass goes first"),
    (404, "request.num_tokens_with_spec", "0x0D: Delta_run starts from num_tokens_with_spec"),
    (406, "- request.num_computed_tokens", "0x0D: Delta_run less the computed frontier"),
    (408, "if 0 < self.scheduler_config.long_prefill_token_threshold < num_new_tokens:",
     "0x0D: running path clamps to the long-prefill threshold when active"),
    (410, "num_new_tokens = min(num_new_tokens, token_budget)",
     "0x0D: running path clamps to the remaining token budget"),
    (415, "num_new_tokens, self.max_model_len - 1 - request.num_computed_tokens",
     "0x0D: running path clamps to the model-length bound"),
    (477, "key=lambda r: (r.priority, r.arrival_time),",
     "0x0D: PRIORITY victim max(running, key=(priority, arrival_time))"),
    (483, "token_budget += num_scheduled_tokens.pop(preempted_req_id)",
     "0x0D: a victim already placed gives back its rows and budget"),
    (499, "preempted_req = self.running.pop()", "0x0D: FCFS victim is the running tail"),
    (503, "if preempted_req == request:", "0x0D: a request can preempt itself"),
    (563, "if not preempted_reqs and self._pause_state == PauseState.UNPAUSED:",
     "0x0D: no waiting pass after a running-path preemption"),
    (612, "self.kv_cache_manager.get_computed_blocks(request)",
     "0x0D: T_wait_start counts local exact prefix hits"),
    (640, "num_new_local_computed_tokens + num_external_computed_tokens",
     "0x0D: T_wait_start = local + external computed tokens"),
    (684, "num_new_tokens = request.num_tokens - num_computed_tokens",
     "0x0D: Delta_wait = num_tokens - T_wait_start"),
    (686, "if 0 < threshold < num_new_tokens:",
     "0x0D: waiting path clamps to the long-prefill threshold when active"),
    (699, "num_new_tokens = min(num_new_tokens, token_budget)",
     "0x0D: waiting path clamps to the remaining token budget"),
    (770, "full_sequence_must_fit=self.scheduler_reserve_full_isl,",
     "0x0D: full-input reservation reaches the allocator"),
    (807, "request.status = RequestStatus.WAITING_FOR_REMOTE_KVS",
     "0x0D: async remote loading keeps a request out of runnable service"),
    (833, "elif request.status == RequestStatus.PREEMPTED:",
     "0x0C: a preempted request is classified as resumed on admission"),
    (974, "def _preempt_request(self, request: Request, timestamp: float) -> None:",
     "0x0D: Scheduler._preempt_request()"),
    (983, "self.kv_cache_manager.free(request)", "0x0D: preemption frees the K/V state"),
    (984, "self.encoder_cache_manager.free(request)", "0x0D: and the encoder cache"),
    (986, "request.status = RequestStatus.PREEMPTED", "0x0D: the request is marked PREEMPTED"),
    (987, "request.num_computed_tokens = 0", "0x0D: its computed frontier resets to zero"),
    (990, "request.num_preemptions += 1", "0x0D: its preemption counter increments"),
    (995, "self.waiting.prepend_request(request)", "0x0D: it returns at the front of waiting"),
    (1003, "#    schedule the prefill request again immediately in the next",
     "0x0D: the computed count advances after scheduling, for the next chunk"),
)

_CONFIG_MARKERS = (
    (140, "scheduler_reserve_full_isl: bool = True",
     "0x0D: full-input reservation is a distinct control, on by default"),
    (273, "if self.max_num_batched_tokens < self.max_num_seqs:",
     "0x0D rule SC1: max_num_batched_tokens >= max_num_seqs"),
    (291, '"Chunked prefill must be enabled to set "',
     "0x0D rule SC2: concurrent partial prefills require chunked prefill"),
    (295, "if self.long_prefill_token_threshold > max_model_len:",
     "0x0D rule SC3: the long-prompt threshold cannot exceed model length"),
)

SPEC_PIN = SourcePin(
    release="vllm 0.23.0",
    tag=_TAG,
    git_object="0fc695fc6d1d82e9a5ac6835ac8e4e1c83703665",
    wheel="vllm-0.23.0-2-cp38-abi3-manylinux_2_28_x86_64.whl",
    wheel_sha256="872aeb7c36a1ea942216af067ce870ffdf960804e829367e1b4eb36d4831c03c",
    files=(
        PinnedFile(SCHEDULER, "9ae1491f57a6294e32416b93ef2ea68107fa0d65c3a4d7f745f1261012f735e9",
                   111874, 2422, upstream_url(_TAG, SCHEDULER)),
        PinnedFile(SCHEDULER_CONFIG,
                   "36bdfcf50a8f30d9f1c0dbdd3630a0075234f5c9e1a77943a934c45329f25c86",
                   13052, 308, upstream_url(_TAG, SCHEDULER_CONFIG)),
    ),
    markers=tuple(Marker(SCHEDULER, line, fragment, why)
                  for line, fragment, why in _SCHEDULER_MARKERS)
    + tuple(Marker(SCHEDULER_CONFIG, line, fragment, why)
            for line, fragment, why in _CONFIG_MARKERS),
)
