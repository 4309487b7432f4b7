"""The malformed inputs of ``test_bad_inputs.py``: workload files, checkpoints
and flags, each with the words its one-line error must contain (issue 14).

A workload case edits one field of the valid A/B/C fixture (``path`` in dot
notation, ``DROP`` deletes it) or replaces the whole file with raw bytes. A
checkpoint case damages one file of a valid micro checkpoint. A flag case is
an argv whose ``{workload}``, ``{model}``, ``{out}`` and ``{file}`` slots the
test fills in.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

AZURE_SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "traces" / "azure_sample.csv"

DROP = object()
NAN, INF = float("nan"), float("inf")


@dataclass(frozen=True)
class FieldCase:
    path: str
    value: Any
    needles: tuple[str, ...]


def _f(path: str, value: Any, *needles: str) -> FieldCase:
    return FieldCase(path, value, needles or (path.split(".")[-1],))


WORKLOAD_FIELDS: dict[str, FieldCase] = {
    # top level
    "root-list": _f("", [], "workload: must be an object"),
    "root-string": _f("", "workload", "workload: must be an object"),
    "root-null": _f("", None, "workload: must be an object"),
    "workload-id-missing": _f("workload_id", DROP, "workload_id", "missing"),
    "workload-id-int": _f("workload_id", 7, "workload_id", "string"),
    "clock-missing": _f("clock", DROP, "clock", "missing"),
    "clock-unknown": _f("clock", "fortnight", "clock", "'iteration'", "fortnight"),
    "clock-int": _f("clock", 1, "clock"),
    "capacity-missing": _f("capacity", DROP, "capacity", "missing"),
    "capacity-list": _f("capacity", [2, 2], "capacity", "object"),
    "requests-missing": _f("requests", DROP, "requests", "missing"),
    "requests-object": _f("requests", {}, "requests", "list"),
    "unknown-top-field": _f("priority_classes", 3, "priority_classes", "unknown field"),
    "description-int": _f("description", 5, "description", "string"),
    "description-deeply-nested": _f("description", json.loads("[" * 200 + "]" * 200),
                                    "description", "string"),
    # capacity
    "token-budget-missing": _f("capacity.max_num_batched_tokens", DROP, "capacity.max_num_batched_tokens", "missing"),
    "token-budget-zero": _f("capacity.max_num_batched_tokens", 0, "capacity.max_num_batched_tokens", ">= 1"),
    "token-budget-negative": _f("capacity.max_num_batched_tokens", -1, "capacity.max_num_batched_tokens"),
    "token-budget-float": _f("capacity.max_num_batched_tokens", 1.5, "capacity.max_num_batched_tokens", "integer"),
    "token-budget-string": _f("capacity.max_num_batched_tokens", "8", "capacity.max_num_batched_tokens", "integer"),
    "token-budget-bool": _f("capacity.max_num_batched_tokens", True, "capacity.max_num_batched_tokens", "integer"),
    "token-budget-absurd": _f("capacity.max_num_batched_tokens", 10**18, "capacity.max_num_batched_tokens", "limit"),
    "sequence-budget-zero": _f("capacity.max_num_seqs", 0, "capacity.max_num_seqs"),
    "sequence-budget-null": _f("capacity.max_num_seqs", None, "capacity.max_num_seqs"),
    "max-num-seqs-zero": _f("capacity.max_num_seqs", 0, "capacity.max_num_seqs"),
    "chunk-size-negative": _f("capacity.chunk_size", -3, "capacity.chunk_size"),
    "tau-string": _f("capacity.tau", "x", "capacity.tau"),
    "kv-rows-absurd": _f("capacity.kv_rows", 10**40, "capacity.kv_rows", "digits"),
    "long-prefill-zero": _f("capacity.long_prefill_token_threshold", 0,
                            "capacity.long_prefill_token_threshold"),
    "capacity-unknown-field": _f("capacity.tokens", 8, "capacity.tokens", "unknown field"),
    # policy_settings: the schema checks the shape (a mapping of names to numbers or strings)
    "policy-settings-list": _f("policy_settings", [["chunk_size", 4]], "policy_settings",
                               "object"),
    "policy-settings-string": _f("policy_settings", "chunk_size=4", "policy_settings", "object"),
    "policy-settings-value-object": _f("policy_settings.chunk_size", {"rows": 4},
                                       "policy_settings.chunk_size", "number or a string"),
    "policy-settings-value-list": _f("policy_settings.chunk_size", [4],
                                     "policy_settings.chunk_size", "number or a string"),
    "policy-settings-value-bool": _f("policy_settings.chunk_size", True,
                                     "policy_settings.chunk_size", "True"),
    "policy-settings-value-null": _f("policy_settings.chunk_size", None,
                                     "policy_settings.chunk_size", "None"),
    "policy-settings-value-nan": _f("policy_settings.chunk_size", NAN,
                                    "policy_settings.chunk_size", "nan"),
    "policy-settings-empty-name": _f("policy_settings", {"": 4}, "policy_settings['']",
                                     "non-empty"),
    # requests
    "request-not-object": _f("requests.1", 5, "requests[1]", "object"),
    "request-id-missing": _f("requests.0.request_id", DROP, "requests[0].request_id", "missing"),
    "request-id-empty": _f("requests.0.request_id", "", "requests[0].request_id", "non-empty"),
    "request-id-int": _f("requests.0.request_id", 7, "requests[0].request_id"),
    "request-id-duplicate": _f("requests.2.request_id", "A", "duplicate", "'A'"),
    "arrival-missing": _f("requests.0.arrival", DROP, "requests[0].arrival", "missing"),
    "arrival-string": _f("requests.0.arrival", "soon", "requests[0].arrival", "number"),
    "arrival-negative": _f("requests.0.arrival", -1, "requests[0].arrival", ">= 0"),
    "arrival-nan": _f("requests.2.arrival", NAN, "requests[2].arrival", "finite"),
    "arrival-inf": _f("requests.2.arrival", INF, "requests[2].arrival", "finite"),
    "arrival-int-too-large-for-float": _f("requests.0.arrival", 10**400, "requests[0].arrival",
                                          "finite"),
    "arrival-absurd": _f("requests.0.arrival", 1e300, "requests[0].arrival", "limit"),
    "arrival-bool": _f("requests.0.arrival", True, "requests[0].arrival"),
    "prompt-missing": _f("requests.0.prompt_tokens", DROP, "requests[0].prompt_tokens", "missing"),
    "prompt-zero": _f("requests.1.prompt_tokens", 0, "requests[1].prompt_tokens"),
    "prompt-negative": _f("requests.1.prompt_tokens", -5, "requests[1].prompt_tokens"),
    "prompt-absurd": _f("requests.0.prompt_tokens", 10**12, "requests[0].prompt_tokens",
                        "documented limit"),
    "prompt-float": _f("requests.0.prompt_tokens", 2.5, "requests[0].prompt_tokens"),
    "prompt-string": _f("requests.0.prompt_tokens", "12", "requests[0].prompt_tokens"),
    "prompt-empty-list": _f("requests.0.prompt_tokens", [], "requests[0].prompt_tokens"),
    "prompt-negative-id": _f("requests.0.prompt_tokens", [1, -1], "requests[0].prompt_tokens"),
    "prompt-string-id": _f("requests.0.prompt_tokens", [1, "a"], "requests[0].prompt_tokens"),
    "prompt-bool-id": _f("requests.0.prompt_tokens", [True], "requests[0].prompt_tokens"),
    "prompt-huge-id": _f("requests.0.prompt_tokens", [10**40], "requests[0].prompt_tokens"),
    "prompt-object": _f("requests.0.prompt_tokens", {}, "requests[0].prompt_tokens"),
    "max-output-missing": _f("requests.0.max_output_tokens", DROP,
                             "requests[0].max_output_tokens", "missing"),
    "max-output-zero": _f("requests.0.max_output_tokens", 0, "requests[0].max_output_tokens"),
    "max-output-absurd": _f("requests.0.max_output_tokens", 10**12,
                            "requests[0].max_output_tokens", "limit"),
    "max-output-float": _f("requests.0.max_output_tokens", 3.0, "requests[0].max_output_tokens"),
    "client-id-empty": _f("requests.0.client_id", "", "requests[0].client_id", "non-empty string"),
    "client-id-int": _f("requests.0.client_id", 5, "requests[0].client_id"),
    "client-id-null": _f("requests.0.client_id", None, "requests[0].client_id"),
    "priority-float": _f("requests.0.priority", 1.5, "requests[0].priority"),
    "priority-absurd": _f("requests.0.priority", 10**20, "requests[0].priority"),
    "priority-string": _f("requests.0.priority", "high", "requests[0].priority"),
    "slo-list": _f("requests.0.slo", [1, 2], "requests[0].slo", "object"),
    "slo-ttft-negative": _f("requests.0.slo", {"ttft_ms": -5}, "requests[0].slo.ttft_ms"),
    "slo-ttft-zero": _f("requests.0.slo", {"ttft_ms": 0}, "requests[0].slo.ttft_ms"),
    "slo-tbt-string": _f("requests.0.slo", {"tbt_ms": "fast"}, "requests[0].slo.tbt_ms"),
    "slo-unknown-key": _f("requests.0.slo", {"ttft": 250}, "requests[0].slo.ttft"),
    "slo-ttft-nan": _f("requests.0.slo", {"ttft_ms": NAN}, "requests[0].slo.ttft_ms"),
    "forecast-negative": _f("requests.0.output_forecast", -1, "requests[0].output_forecast",
                            ">= 0"),
    "forecast-nan": _f("requests.0.output_forecast", NAN, "requests[0].output_forecast"),
    "forecast-string": _f("requests.0.output_forecast", "x", "requests[0].output_forecast"),
    "forecast-absurd": _f("requests.0.output_forecast", 1e30, "requests[0].output_forecast"),
    "forecast-p90-negative": _f("requests.0.output_forecast_p90", -0.5,
                                "requests[0].output_forecast_p90"),
    "request-unknown-field": _f("requests.0.prompt", "hi", "requests[0].prompt", "unknown field"),
    # hidden truth
    "hidden-list": _f("fixture_only_hidden_truth", [], "fixture_only_hidden_truth", "object"),
    "hidden-unknown-request": _f("fixture_only_hidden_truth.realized_output_tokens.ghost", 4,
                                 "realized_output_tokens", "ghost"),
    "hidden-zero": _f("fixture_only_hidden_truth.realized_output_tokens.A", 0,
                      "realized_output_tokens.A"),
    "hidden-string": _f("fixture_only_hidden_truth.realized_output_tokens.A", "2",
                        "realized_output_tokens.A"),
    "hidden-unknown-key": _f("fixture_only_hidden_truth.realised_output_tokens", {},
                             "realised_output_tokens"),
    # kv
    "kv-list": _f("kv", [], "kv", "object"),
    "kv-num-blocks-missing": _f("kv", {"block_size": 16}, "kv.num_kv_blocks", "missing"),
    "kv-num-blocks-zero": _f("kv", {"num_kv_blocks": 0}, "kv.num_kv_blocks"),
    "kv-num-blocks-absurd": _f("kv", {"num_kv_blocks": 10**18}, "kv.num_kv_blocks", "documented limit"),
    "kv-block-size-zero": _f("kv", {"num_kv_blocks": 8, "block_size": 0}, "kv.block_size"),
    "kv-block-size-absurd": _f("kv", {"num_kv_blocks": 8, "block_size": 10**6}, "kv.block_size"),
    "kv-host-blocks-negative": _f("kv", {"num_kv_blocks": 8, "num_host_blocks": -1},
                                  "kv.num_host_blocks"),
    "kv-bytes-per-row-zero": _f("kv", {"num_kv_blocks": 8, "bytes_per_row": 0}, "kv.bytes_per_row"),
    "kv-preemption-evict": _f("kv", {"num_kv_blocks": 8, "preemption_mode": "evict"},
                             "kv.preemption_mode"),
    **{f"kv-admission-{name}": _f("kv", {"num_kv_blocks": 8, "admission": value}, "kv.admission",
                                  repr(value))
       for name, value in [("bogus", "bogus"), ("watermark-abc", "watermark:abc"),
                           ("watermark-nan", "watermark:nan"), ("watermark-negative", "watermark:-5"),
                           ("none-3", "none:3"), ("max-5", "max:5"), ("watermark-empty", "watermark:"),
                           ("watermark-float", "watermark:1e3"), ("point-empty", "point:"),
                           ("upper-case", "MAX")]},
    "kv-admission-int": _f("kv", {"num_kv_blocks": 8, "admission": 5}, "kv.admission"),
    "kv-unknown-field": _f("kv", {"num_kv_blocks": 8, "bogus": 1}, "kv.bogus", "unknown field"),
    "kv-model-config-not-object": _f("kv", {"num_kv_blocks": 8, "model_config": "llama"},
                                     "kv.model_config"),
    "kv-model-config-no-heads": _f("kv", {"num_kv_blocks": 8, "model_config": {"torch_dtype": "float32"}},
                                   "kv.model_config"),
    "kv-model-config-zero-heads": _f("kv", {"num_kv_blocks": 8, "model_config": {
        "num_attention_heads": 0, "hidden_size": 64, "num_hidden_layers": 2,
        "torch_dtype": "float32"}}, "kv.model_config"),
    "kv-model-config-bad-dtype": _f("kv", {"num_kv_blocks": 8, "model_config": {
        "num_attention_heads": 4, "hidden_size": 64, "num_hidden_layers": 2,
        "torch_dtype": "float7"}}, "kv.model_config", "float7"),
    "kv-bytes-per-row-disagrees": _f("kv", {"num_kv_blocks": 8, "bytes_per_row": 4096, "model_config": {
        "num_attention_heads": 4, "hidden_size": 64, "num_hidden_layers": 2,
        "torch_dtype": "float32"}}, "kv.bytes_per_row", "disagrees"),
}

WORKLOAD_FILES: dict[str, tuple[bytes | None, tuple[str, ...]]] = {
    # name: (file bytes, or None for a directory; needles besides the file name when the
    # file cannot be read as JSON)
    "not-utf8": (b'{"workload_id": "\xff\xfe"}', ("not UTF-8",)),
    "latin1": ('{"workload_id": "caf\xe9"}'.encode("latin-1"), ("not UTF-8",)),
    "not-json": (b'{"workload_id": "x", "clock": ', ("not valid JSON",)),
    "empty-file": (b"", ("not valid JSON",)),
    "nul-bytes": (b"\x00\x00\x00", ("not valid JSON",)),
    "utf8-bom": ('\ufeff{"workload_id": "x"}'.encode(), ("not valid JSON",)),
    "deeply-nested-list": (b"[" * 100_000 + b"]" * 100_000, ("nested too deeply",)),
    "deeply-nested-object": (b'{"a":' * 50_000 + b"1" + b"}" * 50_000, ("nested too deeply",)),
    "integer-past-python-limit": (b'{"workload_id": ' + b"9" * 5000 + b"}", ("not valid JSON",)),
    "json-nan-root": (b"NaN", ("workload: must be an object",)),
    "trailing-garbage": (b"{} {}", ("not valid JSON",)),
    "directory": (None, ("is a directory",)),
}

SIMULATE_FLAGS: dict[str, tuple[list[str], tuple[str, ...]]] = {
    "max-iterations-negative": (["--max-iterations", "-1"], ("--max-iterations", ">= 1")),
    "max-iterations-zero": (["--max-iterations", "0"], ("--max-iterations",)),
    "max-iterations-text": (["--max-iterations", "ten"], ("--max-iterations", "integer")),
    "bytes-per-row-negative": (["--bytes-per-row", "-5"], ("--bytes-per-row", ">= 1")),
    "bytes-per-row-zero": (["--bytes-per-row", "0"], ("--bytes-per-row",)),
    "bytes-per-row-absurd": (["--bytes-per-row", str(10**12)], ("--bytes-per-row", "<=")),
    "bytes-per-row-float": (["--bytes-per-row", "2.5"], ("--bytes-per-row", "integer")),
    "out-is-a-file": (["--out", "{file}"], ("--out", "not a directory")),
    "out-under-a-file": (["--out", "{file}/sub"], ("--out", "parent")),
    "decision-log-is-a-dir": (["--decision-log", "{dir}"], ("--decision-log", "directory")),
    # a place no file can be made in (Linux's /proc): the output named, not a temporary file
    "decision-log-unwritable": (["--decision-log", "/proc/iterserve-none/d.jsonl"],
                                ("/proc/iterserve-none/d.jsonl: cannot write",)),
    "out-unwritable": (["--out", "/proc/iterserve-none"],
                       ("--out /proc/iterserve-none: cannot write",)),
    "window-inverted": (["--window", "1", "0"], ("--window",)),
    "window-nan": (["--window", "nan", "1"], ("--window", "finite")),
    "window-negative": (["--window", "-1", "2"], ("--window", ">= 0")),
    "slo-ttft-nan": (["--slo-ttft-ms", "nan"], ("--slo-ttft-ms", "finite")),
    "slo-tbt-inf": (["--slo-tbt-ms", "inf"], ("--slo-tbt-ms", "finite")),
    "slo-ttft-negative": (["--slo-ttft-ms", "-5"], ("ttft_ms",)),
    "overload-unknown": (["--overload", "drop"], ("accept-all, bounded, slo-feasible",)),
    "cost-model-unknown": (["--cost-model", "cubic:1"], ("fixed, linear",)),
    "cost-model-nan": (["--cost-model", "fixed:nan"], ("iteration_ms", "finite")),
    "max-live-text": (["--overload", "bounded", "--max-live", "many"], ("--max-live",)),
    "policy-unknown": (["--policy", "slackest"], ("slackest", "least-slack")),
    "policy-empty": (["--policy", ""], ("policy",)),
    "unknown-flag": (["--frobnicate"], ("--frobnicate",)),
    "policy-setting-no-equals": (["--policy-setting", "tau"], ("argument --policy-setting", "NAME=VALUE")),
}

SWEEP_FLAGS: dict[str, tuple[list[str], tuple[str, ...]]] = {
    "rates-zero": (["--rates", "0"], ("--rates",)),
    "rates-nan": (["--rates", "nan"], ("--rates", "finite")),
    "rates-absurd": (["--rates", "1e308"], ("--rates", "<= 1000000")),
    # the arrivals at a rate far too low pass the workload's limit on arrival times
    "rates-tiny": (["--rates", "1e-300"], ("--rates 1e-300", "past the workload limit")),
    "alpha-above-one": (["--alpha", "2"], ("--alpha",)),
    "alpha-nan": (["--alpha", "nan"], ("--alpha", "finite")),
    "trials-zero": (["--trials", "0"], ("--trials",)),
    "trials-absurd": (["--trials", str(10**9)], ("--trials", "<=")),
    "workers-zero": (["--workers", "0"], ("--workers",)),
    "seed-negative": (["--seed", "-1"], ("--seed", ">= 0")),
    "out-is-a-file": (["--out", "{file}"], ("--out", "not a directory")),
    "policy-setting-no-equals": (["--policy-setting", "chunk_size"],
                                 ("argument --policy-setting", "NAME=VALUE")),
    "policy-setting-unknown": (["--policy-setting", "chunk_sise=4"], ("chunk_sise",)),
    "policy-setting-zero": (["--policy", "refill", "sarathi", "--policy-setting", "chunk_size=0"],
                            ("'sarathi'", "chunk_size", ">= 1")),
    "ray-blank": (["--ray", " "], ("--ray needs an address",)),
    "ray-with-workers": (["--ray", "127.0.0.1:1"], ("--workers applies to local processes",)),
}

GENERATE_FLAGS: dict[str, tuple[list[str], tuple[str, ...]]] = {
    "max-tokens-negative": (["--max-tokens", "-1"], ("--max-tokens", ">= 1")),
    "max-tokens-zero": (["--max-tokens", "0"], ("--max-tokens",)),
    "max-tokens-absurd": (["--max-tokens", str(10**12)], ("--max-tokens", "<=")),
    "temperature-nan": (["--temperature", "nan"], ("--temperature", "finite")),
    "temperature-inf": (["--temperature", "inf"], ("--temperature", "finite")),
    "temperature-negative": (["--temperature", "-0.5"], ("--temperature", ">= 0")),
    "top-p-two": (["--top-p", "2"], ("--top-p", "<= 1")),
    "top-p-zero": (["--top-p", "0"], ("--top-p", "> 0")),
    "top-p-nan": (["--top-p", "nan"], ("--top-p",)),
    "top-k-zero": (["--top-k", "0"], ("--top-k",)),
    "kv-blocks-zero": (["--kv-blocks", "0"], ("--kv-blocks",)),
    "kv-blocks-absurd": (["--kv-blocks", str(10**18)], ("--kv-blocks", "<=")),
    "block-size-zero": (["--block-size", "0"], ("--block-size",)),
    "seed-negative": (["--seed", "-1"], ("--seed", ">= 0")),
    "seed-text": (["--seed", "lucky"], ("--seed", "integer")),
    "stop-empty": (["--stop", ""], ("--stop", "non-empty")),
    "token-budget-zero": (["--max-num-batched-tokens", "0"], ("--max-num-batched-tokens",)),
    "max-num-seqs-zero": (["--max-num-seqs", "0"], ("--max-num-seqs",)),
    "chunk-size-zero": (["--chunk-size", "0"], ("--chunk-size",)),
    "dtype-float64": (["--dtype", "float64"], ("--dtype", "float64")),  # float16 loads (issue 12)
    "device-tpu": (["--device", "tpu"], ("--device", "tpu")),
    "policy-unknown": (["--policy", "fifo-magic"], ("fifo-magic",)),
    "policy-setting-no-equals": (["--policy-setting", "chunk_size"],
                                 ("argument --policy-setting", "NAME=VALUE")),
    "policy-setting-unknown": (["--policy-setting", "chunk_sise=4"], ("chunk_sise",)),
    "policy-setting-zero": (["--policy", "sarathi", "--policy-setting", "chunk_size=0"],
                            ("'sarathi'", "chunk_size", ">= 1")),
}

@dataclass(frozen=True)
class SettingCase:
    """``iterserve simulate --policy POLICY`` on the A/B/C fixture with this
    ``policy_settings`` section (DROP: none), these extra capacity fields and
    these extra flags."""

    policy: str
    needles: tuple[str, ...]
    settings: Any = DROP
    capacity: tuple[tuple[str, Any], ...] = ()
    flags: tuple[str, ...] = ()


# Names and values are checked by the chosen policy's config when it is made,
# before the run: one line naming the policy or the setting.
POLICY_SETTINGS: dict[str, SettingCase] = {
    "section-name-no-policy-takes": SettingCase("sarathi", ("chunk_sise", "policy_settings"),
                                                settings={"chunk_sise": 4}),
    "section-newline-name": SettingCase("sarathi", ("'chunk\\nsize'",),
                                        settings={"chunk\nsize": 4}),
    "section-chunk-size-zero": SettingCase("sarathi", ("'sarathi'", "chunk_size", ">= 1"),
                                           settings={"chunk_size": 0}),
    "section-chunk-size-float": SettingCase("sarathi", ("chunk_size", "integer", "2.5"),
                                            settings={"chunk_size": 2.5}),
    "section-chunk-size-string": SettingCase("sarathi", ("chunk_size", "'four'"),
                                             settings={"chunk_size": "four"}),
    "section-and-capacity": SettingCase(
        "sarathi", ("workload: capacity.chunk_size", "also set in policy_settings"),
        settings={"chunk_size": 4}, capacity=(("chunk_size", 4),)),
    "section-and-capacity-other-policy": SettingCase(
        "refill", ("capacity.tau", "also set in policy_settings"),
        settings={"tau": 2}, capacity=(("tau", 3),)),
    "legacy-knob-zero": SettingCase("sarathi", ("capacity.chunk_size", ">= 1"),
                                    capacity=(("chunk_size", 0),)),
    "flag-no-equals": SettingCase("sarathi", ("argument --policy-setting", "NAME=VALUE", "'chunk_size'"),
                                  flags=("--policy-setting", "chunk_size")),
    "flag-empty-name": SettingCase("sarathi", ("argument --policy-setting", "NAME=VALUE"),
                                   flags=("--policy-setting", "=4")),
    "flag-missing-value": SettingCase("sarathi", ("--policy-setting", "expected one argument"),
                                      flags=("--policy-setting",)),
    "flag-unknown-name": SettingCase("sarathi", ("chunk_sise", "no policy takes"),
                                     flags=("--policy-setting", "chunk_sise=4")),
    "flag-name-the-policy-lacks": SettingCase("refill", ("'refill'", "chunk_size"),
                                              flags=("--policy-setting", "chunk_size=4")),
    "flag-chunk-size-zero": SettingCase("sarathi", ("'sarathi'", "chunk_size", ">= 1"),
                                        flags=("--policy-setting", "chunk_size=0")),
    "flag-overrides-a-good-section": SettingCase(
        "sarathi", ("chunk_size", ">= 1"), settings={"chunk_size": 4},
        flags=("--policy-setting", "chunk_size=-1")),
}

GENERATE_SOURCES: dict[str, tuple[list[str], tuple[str, ...]]] = {
    "prompt-empty": (["--prompt", ""], ("--prompt", "non-empty")),
    "no-prompt": ([], ("--prompt",)),
    "prompt-and-file": (["--prompt", "hi", "--prompts-file", "{file}"], ("not allowed",)),
    "prompts-file-missing": (["--prompts-file", "{dir}/absent.txt"], ("--prompts-file", "no such")),
    "prompts-file-directory": (["--prompts-file", "{dir}"], ("--prompts-file", "directory")),
    "prompts-file-not-utf8": (["--prompts-file", "{latin1}"], ("--prompts-file", "UTF-8")),
    "prompts-file-blank": (["--prompts-file", "{blank}"], ("--prompts-file", "no prompt")),
}

OTHER_COMMANDS: dict[str, tuple[list[str], tuple[str, ...]]] = {
    "make-model-preset-huge": (["make-model", "{dir}/m", "--preset", "huge"], ("--preset", "huge")),
    "make-model-seed-negative": (["make-model", "{dir}/m", "--seed", "-1"], ("--seed",)),
    "make-model-seed-text": (["make-model", "{dir}/m", "--seed", "x"], ("--seed",)),
    "make-model-dir-is-a-file": (["make-model", "{file}"], ("not a directory",)),
    "policies-unknown": (["policies", "fifo-magic"], ("fifo-magic",)),
    "no-command": ([], ("iterserve",)),
    "unknown-command": (["serve-forever"], ("serve-forever",)),
    "simulate-without-workload": (["simulate", "--policy", "refill", "--out", "{dir}/o"],
                                  ("--workload",)),
    "replay-not-a-decision-log": (["replay", "{file}"],
                                  ("existing.txt: line 1: not valid JSON",)),
    # iterserve workload gen / convert: unreadable inputs and unwritable outputs
    "workload-gen-spec-is-a-dir": (["workload", "gen", "{dir}", "-o", "{dir}/w.json"],
                                   ("is a directory",)),
    "workload-gen-spec-not-utf8": (["workload", "gen", "{latin1}", "-o", "{dir}/w.json"],
                                   ("not UTF-8",)),
    "workload-gen-out-is-a-dir": (["workload", "gen", "{file}", "-o", "{dir}"],
                                  ("--out", "is a directory")),
    "workload-convert-trace-is-a-dir": (
        ["workload", "convert", "{dir}", "--format", "azure", "-o", "{dir}/w.json"],
        ("is a directory",)),
    "workload-convert-jsonl-trace-is-a-dir": (
        ["workload", "convert", "{dir}", "--format", "jsonl", "-o", "{dir}/w.json"],
        ("is a directory",)),
    "workload-convert-out-under-a-file": (
        ["workload", "convert", "{file}", "--format", "azure", "-o", "{file}/w.json"],
        ("--out", "parent")),
    "workload-convert-out-unwritable": (
        ["workload", "convert", str(AZURE_SAMPLE), "--format", "azure", "-o",
         "/proc/iterserve-none.json"], ("-o /proc/iterserve-none.json: cannot write",)),
    "workload-convert-block-size-zero": (
        ["workload", "convert", "{file}", "--format", "azure", "-o", "{dir}/w.json",
         "--block-size", "0"], ("--block-size", ">= 1")),
    "workload-convert-empty-id": (
        ["workload", "convert", "{file}", "--format", "azure", "-o", "{dir}/w.json",
         "--workload-id="], ("--workload-id", "non-empty")),
}

# A decision log's header carries the online workload; ``iterserve replay``
# reads it through the same loader (the log reader itself refuses NaN, before the loader).
DECISION_LOG_HEADERS: dict[str, FieldCase] = {
    "header-client-id-empty": _f("requests.0.client_id", "", "requests[0].client_id",
                                 "non-empty"),
    "header-forecast-negative": _f("requests.1.output_forecast", -3,
                                   "requests[1].output_forecast"),
    "header-prompt-absurd": _f("requests.0.prompt_tokens", 10**12, "requests[0].prompt_tokens",
                               "limit"),
    "header-admission-max-5": _f("kv", {"num_kv_blocks": 8, "admission": "max:5"}, "kv.admission"),
    "header-arrival-string": _f("requests.2.arrival", "soon", "requests[2].arrival", "number"),
    "header-unknown-field": _f("requests.0.realized_output_tokens", 2,
                               "requests[0].realized_output_tokens", "unknown field"),
    "header-capacity-missing": _f("capacity", DROP, "capacity", "missing"),
    "header-policy-settings-list": _f("policy_settings", [["chunk_size", 2]], "policy_settings",
                                      "object"),
    "header-policy-settings-value-object": _f("policy_settings.chunk_size", {"rows": 2},
                                              "policy_settings.chunk_size", "number or a string"),
}
