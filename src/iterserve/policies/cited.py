"""Contracts of methods iterserve cites but does not run (0x0E K_m).

They sit beside the runnable registry so a comparison can name what a
cited method assumes, and so nothing can make one: they are not in
``POLICIES`` and each is marked ``runnable: False``. Sources are the
papers; nothing here is reproduced.
"""

from __future__ import annotations

from iterserve.plan import PolicyContract

_NOT_RUN = """    evidence_class: source-reported only; not run or reproduced here
    runnable: False
"""

PREBLE = PolicyContract.parse("""
    granularity: request placement across GPUs; local iteration scheduling per GPU
    protected_identity: request_id; exact prompt-prefix identity (tree of token blocks)
    visible_state: global prefix tree, per-GPU load and cached prefixes
    decision_output: target GPU per request; local wait-queue order
    unknown_future: output lengths; future prefix sharing
    objective: reuse exact shared prefixes while balancing distributed load
    metric: average and P99 request latency
    denominator: requests of the evaluated workloads
    assumptions: prompts share long exact prefixes; a prefix hit is usable on the chosen GPU
    premises: no theorem; an E2 (exploit or explore) placement heuristic
    foreign_owners: prefix cache and KV residency per GPU (M5.3); the cluster router
    source: Srivatsa et al., Preble: Efficient Distributed Prompt Scheduling for LLM Serving
    source_version: arXiv 2407.00023 (ICLR 2025)
    non_claims: iterserve runs one engine; no placement, no distributed prefix tree
""" + _NOT_RUN)

LAYERKV = PolicyContract.parse("""
    granularity: iteration; per-layer KV residency
    protected_identity: request_id; layer index of each KV block
    visible_state: predicted decode slack (SLO-aware), per-layer KV residency on GPU / host
    decision_output: prefill admissions with layer-wise KV allocation and offload
    unknown_future: output lengths; offload transfer completion
    objective: lower TTFT queueing when full-stack KV residency limits admission
    metric: TTFT (mean, tail) and SLO violation rate
    denominator: requests of the evaluated workloads
    assumptions: host link bandwidth hides layer offload; slack predictor is calibrated
    premises: no theorem; positive predicted slack cannot make an offloaded layer resident
    foreign_owners: KV residency and transfers (M5.3), readiness facts (0x09B)
    source: Xiong et al., LayerKV: Optimizing Large Language Model Serving with Layer-wise
        KV Cache Management
    source_version: arXiv 2410.00428 (2024)
    non_claims: iterserve has readiness facts (0x09B) but no layer-wise offload scheduler
""" + _NOT_RUN)

DISTSERVE = PolicyContract.parse("""
    granularity: request phase placed on separate prefill and decode instances
    protected_identity: request_id; KV transfer between instances
    visible_state: per-phase instance queues, SLO targets, profiled latency model
    decision_output: parallelism and placement per phase; KV handoff
    unknown_future: output lengths; arrival rate
    objective: per-GPU goodput under TTFT and TPOT SLOs
    metric: goodput: highest request rate meeting the SLO attainment goal, per GPU
    denominator: GPUs of the deployment; requests meeting both TTFT and TPOT
    assumptions: KV transfer bandwidth between instances; a profiled latency model for placement
    premises: no theorem; placement by simulation search over parallelism configurations
    foreign_owners: cluster placement, inter-instance KV transfer
    source: Zhong et al., DistServe: Disaggregating Prefill and Decoding for Goodput-optimized
        Large Language Model Serving
    source_version: OSDI 2024 (arXiv 2401.09670)
    non_claims: iterserve colocates prefill and decode in one engine; no disaggregation
""" + _NOT_RUN)

#: cited method name -> its contract (none of them is runnable)
CITED_METHODS: dict[str, PolicyContract] = {
    "preble": PREBLE,
    "layerkv": LAYERKV,
    "distserve": DISTSERVE,
}
