"""Decision log: one canonical JSON line per fact of a run (DESIGN rule 6).

Line 1 is a header with the online workload (never hidden truth), the
policy identity and its settings (``policy_settings``, which replay makes
the policy with), the run's cost model (``NAME:params``, which a deadline
policy plans with), its overload contract (``gate``: id and params, or
null), the ``executor`` that produced the results (``simulated`` or
``torch``) and, for a simulated run, ``output_lengths_sha256`` (the
hidden-truth digest): sha256 of the canonical realized-output-length map,
so replay can check that a workload file holds the hidden truth the run used
without the log revealing it. A run whose simulated clock had layer-offload
stalls (``simulate --layer-offload``, 0x09B) adds ``layer_offload``
(``num_layers``, ``num_offloaded``, ``transfer_ms``); other headers have no
such key. (No header key names hidden truth: the 0x06
projection test scans the header for such names.)
Later lines, in the order the facts happened:

- ``iteration``: decision id, the input state's version and digest, the plan
  and the result, and ``rejected`` ([[request_id, reason], ...], present when
  the arrival gate rejected requests since the previous line). From format 5
  on, the plan's ``work`` and the result's ``completed`` are columns, one per
  field (:data:`~iterserve.records.codec.WORK_COLUMNS`,
  :data:`~iterserve.records.codec.COMPLETED_COLUMNS`), row ``i`` of each
  being item ``i``'s (format 4 wrote one object per item: the same values,
  about 2.5 times the bytes). Format 5 writes each column as an array;
  format 6 as a table (:mod:`~iterserve.records.log_columns`): a column that
  repeats another (a completion's id and interval, the key's id), holds
  runs of one value (``kind``), steps (``snapshot_version``), numbered ids or
  lengths over ``start`` is written as such, so a line's bytes follow the
  values that differ, about a third of format 5's;
- ``cancel``: a client cancellation between iterations, with the decision id
  and state version it was applied at and the capacity facts after it (and
  ``rejected`` likewise);
- ``summary`` (written by :meth:`DecisionLogWriter.close` only when the run
  stopped before it was done, or rejections happened after the last line):
  the state version the run ended at and the trailing ``rejected``.

Every line (formats 3 to 6) is the canonical encoding of its fields
followed by ``chain``, its last key: sha256 of the previous line's chain
(empty for the header) and this line's canonical text without ``chain``.
An edited, dropped or reordered line breaks the chain from there on. The
chain detects edits; it is not a signature (no secret: whoever rewrites the
rest of the file can recompute it).

An iteration line's ``state_digest`` binds it to its input state. Format 4
(:func:`~iterserve.records.state_digest.state_digest`) hashes the canonical text
of the state's fields in which ``views`` is ``{"others": H, "running":
[...]}``: the RUNNING views' canonical texts in request-id order, and H,
64 hex digits, the sum modulo 2**256 of sha256(canonical text of the view)
read as a big-endian integer over every other view (an additive multiset
hash; ids are unique, so the state is still determined), and in which
``waiting`` is ``{"num_ids": n, "pairs": P}``, P the same kind of sum over
the neighbour pairs of ``[null, *waiting, null]``. A waiting view or id
that did not change costs the writer nothing per decision
(:class:`~iterserve.records.state_digest.StateDigester`). Formats 1 to 3
hash the whole canonical state text
(:func:`~iterserve.records.codec.state_text_digest`, every view at every
decision); replay checks each log with its format's digest
(:data:`STATE_DIGESTS`). Format 4 changes nothing else; formats 5 and 6
keep format 4's digest.

The writer writes text to any stream; a ``.zst`` file is written through
:func:`~iterserve.records.compressed_text.compressed_text` (the same text,
zstd frames ended at each flush), which the reader tells by its first bytes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import IO, Any

from iterserve.engine.observer import EngineObserver
from iterserve.records.codec import (
    capacity_to_json,
    completed_columns,
    completed_table,
    dumps,
    plan_to_json,
    result_to_json,
    state_text_digest,
    work_columns,
    work_table,
)
from iterserve.records.plan import IterationPlan
from iterserve.records.result import IterationResult
from iterserve.records.spec import HiddenTruth, OnlineWorkload, RequestSpec
from iterserve.records.state import CapacityFacts, SchedulerState
from iterserve.records.state_digest import StateDigester, state_digest
from iterserve.records.transition import claimed_prefix_rows
from iterserve.records.workload import online_to_json

LOG_FORMAT = 6
# format 1: no cost model, gate or cancel lines; format 2: no executor,
# hidden-truth digest or chain; format 3: the state digest over the whole text;
# format 4: the plan's work and the result's completed intervals as row objects;
# format 5: as columns, one array per field
READABLE_FORMATS = (1, 2, 3, 4, 5, 6)
#: formats whose iteration lines hold the work and the completions as columns
COLUMNAR_FORMATS = frozenset({5, 6})
#: formats whose columns are tables (:mod:`~iterserve.records.log_columns`)
TABLE_FORMATS = frozenset({6})
#: each readable format's state digest (replay checks a log with its own)
STATE_DIGESTS: Mapping[int, Callable[[SchedulerState], str]] = {
    1: state_text_digest, 2: state_text_digest, 3: state_text_digest, 4: state_digest,
    5: state_digest, 6: state_digest,
}
EXECUTORS = ("simulated", "torch")
CHAIN_KEY = "chain"


@dataclass(frozen=True, slots=True)
class GateRecord:
    """An overload contract as the header records it (``make_gate`` input)."""

    gate_id: str
    params: Mapping[str, Any] = field(default_factory=dict)


def hidden_truth_digest(hidden: HiddenTruth) -> str:
    """sha256 of the canonical realized-output-length map (0x06): binds a
    log to its hidden truth without revealing it."""
    lengths = dict(sorted(hidden.realized_output_tokens.items()))
    if not hidden.injected_failures:
        return hashlib.sha256(dumps(lengths).encode()).hexdigest()
    # injected execution failures are hidden truth too; logs without any keep their digest
    faults = sorted([rid, decision] for rid, decision in hidden.injected_failures)
    return hashlib.sha256(dumps({"injected_failures": faults,
                                 "realized_output_tokens": lengths}).encode()).hexdigest()


def chain_digest(previous: str, canonical_text: str) -> str:
    """The next link: sha256 of the previous chain and a line's canonical
    text (its fields without ``chain``)."""
    return hashlib.sha256((previous + canonical_text).encode()).hexdigest()


def header_line(workload: OnlineWorkload, capacity: CapacityFacts, *,
                cost_model: str | None = None, gate: GateRecord | None = None,
                policy_settings: Mapping[str, Any] | None = None,
                executor: str = "simulated", hidden: HiddenTruth | None = None,
                layer_offload: Mapping[str, Any] | None = None) -> dict[str, Any]:
    assert workload.policy is not None, "bind the policy before logging"
    assert executor in EXECUTORS, executor
    header = {
        "type": "header",
        "format": LOG_FORMAT,
        "initial_capacity": capacity_to_json(capacity),
        "policy": {"id": workload.policy.policy_id, "version": workload.policy.policy_version},
        "policy_settings": dict(policy_settings or {}),
        "cost_model": cost_model,
        "gate": None if gate is None else {"id": gate.gate_id, "params": dict(gate.params)},
        "workload": online_to_json(workload),
        "executor": executor,
        "output_lengths_sha256": None if hidden is None else hidden_truth_digest(hidden),
    }
    if layer_offload is not None:  # absent unless the run's clock had layer stalls: old bytes
        header["layer_offload"] = dict(layer_offload)
    return header


def iteration_line(
    state: SchedulerState, plan: IterationPlan, result: IterationResult,
    digest: Callable[[SchedulerState], str] = state_digest,
    claimed: Callable[[SchedulerState], dict[str, int]] = claimed_prefix_rows,
) -> dict[str, Any]:
    """``digest``: :func:`state_digest`, or a run's incremental
    :class:`StateDigester` (the same value); ``claimed``: likewise
    :func:`claimed_prefix_rows` or that digester's (called after ``digest``)."""
    plan_doc = plan_to_json(plan, with_work=False)
    work = work_columns(plan.work)
    plan_doc["work"] = work_table(work, len(plan.work))
    result_doc = result_to_json(result, plan, state, with_completed=False)
    result_doc["completed"] = completed_table(completed_columns(result.completed),
                                              len(result.completed), work)
    line = {
        "type": "iteration",
        "decision_id": state.decision_id,
        "state_version": state.state_version,
        "state_digest": digest(state),
        "policy": {"id": plan.policy_id, "version": plan.policy_version},
        "plan": plan_doc,
        "result": result_doc,
    }
    hits = claimed(state)
    if hits:  # absent for runs without prompt token ids: their logs read as before
        line["claimed_prefix_rows"] = hits
    if state.reclaimed_prefix_blocks:  # absent unless a claim reclaimed evictable blocks
        line["reclaimed_prefix_blocks"] = dict(sorted(state.reclaimed_prefix_blocks.items()))
    if state.prefix_hits:  # the memory owner's facts this plan read (replay publishes them)
        line["prefix_hits"] = dict(sorted(state.prefix_hits.items()))
    return line


def cancel_line(request_id: str, state: SchedulerState,
                successor: SchedulerState) -> dict[str, Any]:
    """A cancellation at ``state``; ``capacity`` is the successor's facts
    (the executor freed the request's memory)."""
    return {"type": "cancel", "decision_id": state.decision_id,
            "state_version": state.state_version, "request_id": request_id,
            "capacity": capacity_to_json(successor.capacity)}


class DecisionLogWriter(EngineObserver):
    """An engine observer that streams the log to an open text file.

    ``executor`` names what produced the results; a simulated run passes its
    ``hidden`` truth so the header carries its digest (never the lengths).
    """

    def __init__(self, stream: IO[str], workload: OnlineWorkload, capacity: CapacityFacts, *,
                 cost_model: str | None = None, gate: GateRecord | None = None,
                 policy_settings: Mapping[str, Any] | None = None,
                 executor: str = "simulated", hidden: HiddenTruth | None = None,
                 layer_offload: Mapping[str, Any] | None = None) -> None:
        self._stream = stream
        self._digester = StateDigester()
        self._rejected: list[list[str]] = []  # since the last line
        self._chain = ""
        self._write(header_line(workload, capacity, cost_model=cost_model, gate=gate,
                                policy_settings=policy_settings, executor=executor,
                                hidden=hidden, layer_offload=layer_offload))

    def _write(self, line: dict[str, Any]) -> None:
        if self._rejected:
            line["rejected"] = self._rejected
            self._rejected = []
        text = dumps(line)
        self._chain = chain_digest(self._chain, text)
        # the canonical text, then the chain as the last key
        self._stream.write(f'{text[:-1]},"{CHAIN_KEY}":"{self._chain}"}}\n')

    def on_reject(self, spec: RequestSpec, reason: str, now: float) -> None:
        self._rejected.append([spec.request_id, reason])

    def on_cancel(self, request_id: str, state: SchedulerState, successor: SchedulerState) -> None:
        self._write(cancel_line(request_id, state, successor))

    def on_step(
        self, state: SchedulerState, plan: IterationPlan, result: IterationResult,
        successor: SchedulerState,
    ) -> None:
        # every plan reaches the executor, intent-only ones too (their result
        # carries capacity facts: a preemption frees memory), so each is logged
        digester = self._digester
        self._write(iteration_line(state, plan, result, digester.digest,
                                   digester.claimed_prefix_rows))

    def close(self, state: SchedulerState, *, is_done: bool = True) -> None:
        """End the log. A run that stopped early (``is_done`` False) or left
        rejections unwritten gets a ``summary`` line saying where it ended."""
        if self._rejected or not is_done:
            self._write({"type": "summary", "decision_id": state.decision_id,
                         "state_version": state.state_version, "is_done": is_done})
