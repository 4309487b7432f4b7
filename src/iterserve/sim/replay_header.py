"""What a decision log's header names, rebuilt for replay: the policy bound
to the logged cost model, the overload gate, the online workload and, when
results are re-derived, the simulated executor with the workload file's
hidden truth (checked against the header's digest) and, where the header
records ``layer_offload``, the cost model stretched by its layer stalls."""

from __future__ import annotations

import warnings
from pathlib import Path

from iterserve.admission.gate import ArrivalGate
from iterserve.admission.overload import OverloadConfigError, engine_gate, make_gate
from iterserve.cost import ClockedCost, CostModelError, parse_cost_model
from iterserve.engine.decision_log import hidden_truth_digest
from iterserve.engine.log_reader import LogLine, MalformedLog, ReplayDivergence
from iterserve.plan import Policy
from iterserve.policies.deadline import bind_cost_model
from iterserve.policies.registry import UnknownPolicy, make_policy, settings_for
from iterserve.policies.settings import PolicyConfigError
from iterserve.policies.starvation_guard import inner_identity
from iterserve.records.codec import capacity_to_json, dumps
from iterserve.records.spec import HiddenTruth, OnlineWorkload, RequestSpec, WorkloadManifest
from iterserve.records.vocabulary import RenamedWarning
from iterserve.records.workload import WorkloadError, load_workload, parse_workload
from iterserve.sim.executor import SimulatedExecutor
from iterserve.sim.factory import make_simulated_executor
from iterserve.sim.layer_offload import LayerOffloadCost, offload_from_json


def rebuild_policy(header: LogLine, workload: OnlineWorkload) -> Policy:
    """The logged policy made with the logged settings (a log written before
    the header recorded them: the workload's, as that run read them), bound
    to the logged cost model."""
    logged = header.fields["policy"]
    inner = inner_identity(logged["id"], logged["version"])
    if inner is not None:  # bind_fairness composes the guard again from the workload
        logged = {"id": inner[0], "version": inner[1]}
    settings = header.fields.get("policy_settings")
    if settings is not None and not isinstance(settings, dict):
        raise ReplayDivergence(f"{header.where}: policy_settings: must be an object")
    try:
        if settings is None:
            settings = settings_for(logged["id"], workload, strict=False)
        policy = make_policy(logged["id"], **settings)
    except UnknownPolicy as exc:
        raise ReplayDivergence(f"{header.where}: policy: {exc}") from None
    except PolicyConfigError as exc:
        raise ReplayDivergence(f"{header.where}: policy cannot be rebuilt ({exc})") from None
    if policy.policy_version != logged["version"]:
        raise ReplayDivergence(
            f"{header.where}: log policy {logged['id']}@{logged['version']}, "
            f"installed version is {policy.policy_version}"
        )
    spec = header.fields.get("cost_model")
    if spec is None:
        return policy
    try:
        return bind_cost_model(policy, parse_cost_model(spec))
    except CostModelError as exc:
        raise ReplayDivergence(f"{header.where}: cost_model cannot be rebuilt ({exc})") from None


def rebuild_gate(header: LogLine) -> ArrivalGate | None:
    record = header.fields.get("gate")
    if record is None:
        return None
    try:
        return engine_gate(make_gate(record["id"], record["params"]))
    except (OverloadConfigError, CostModelError) as exc:
        raise ReplayDivergence(f"{header.where}: gate {record['id']!r} cannot be rebuilt "
                               f"({exc})") from None


def rebuild_simulated_executor(header: LogLine, manifest: WorkloadManifest,
                        workload_path: Path) -> SimulatedExecutor:
    """The run's simulated executor: the header's online workload and cost
    model with the workload file's hidden truth (checked by its digest)."""
    if header.fields.get("executor", "simulated") != "simulated":
        raise ReplayDivergence(f"{header.where}: a {header.fields['executor']} run's results "
                               f"cannot be re-derived from a workload file; replay without "
                               f"--workload to check its digest chain")
    hidden = _hidden_truth(workload_path)
    logged_digest = header.fields.get("output_lengths_sha256")
    if logged_digest is not None and logged_digest != hidden_truth_digest(hidden):
        raise ReplayDivergence(f"{header.where}: output_lengths_sha256 does not match the hidden "
                               f"truth in {workload_path}")
    spec = header.fields.get("cost_model")
    try:
        cost = None if spec is None else ClockedCost(parse_cost_model(spec),
                                                      manifest.online.clock)
    except CostModelError as exc:
        raise ReplayDivergence(f"{header.where}: cost_model cannot be rebuilt ({exc})") from None
    cost = _with_layer_offload(header, cost)
    executor = make_simulated_executor(WorkloadManifest(manifest.online, hidden), cost)
    logged, derived = header.fields["initial_capacity"], capacity_to_json(executor.capacity())
    if dumps(logged) != dumps(derived):
        raise ReplayDivergence(f"{header.where}: initial_capacity logged {dumps(logged)}, "
                               f"the simulated executor has {dumps(derived)}")
    return executor


def _with_layer_offload(header: LogLine, cost: ClockedCost | None) -> ClockedCost | None:
    """``cost`` stretched by the header's ``layer_offload`` (0x09B); a log
    without one (every log before the flag) is timed by ``cost`` alone."""
    record = header.fields.get("layer_offload")
    if record is None:
        return cost
    try:
        if cost is None:
            raise CostModelError("it needs the header's cost_model")
        return LayerOffloadCost(cost, offload_from_json(record))
    except ValueError as exc:  # CostModelError is one
        raise ReplayDivergence(f"{header.where}: layer_offload cannot be rebuilt "
                               f"({exc})") from None


def header_manifest(header: LogLine) -> WorkloadManifest:
    """The workload a log's header records. A log written before the one
    vocabulary holds the older field names: read without a warning, since
    nobody can rewrite a log (a workload file still warns)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RenamedWarning)
            return parse_workload(header.fields["workload"])
    except WorkloadError as exc:
        raise MalformedLog(f"{header.where}: {exc}") from None  # exc names "workload: FIELD"


def arrival_requests(header: LogLine, line: LogLine) -> tuple[RequestSpec, ...]:
    """The requests of an online run's ``arrival`` line, read as the
    header's workload reads its requests (the same checks and errors)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RenamedWarning)
            manifest = parse_workload({**header.fields["workload"],
                                       "requests": line.fields["requests"]})
    except WorkloadError as exc:
        raise MalformedLog(f"{line.where}: {exc}") from None
    return manifest.online.requests


def _hidden_truth(path: Path) -> HiddenTruth:
    try:
        return load_workload(path).hidden
    except OSError as exc:
        raise ReplayDivergence(f"--workload {path}: {exc.strerror or exc}") from None
