"""``iterserve bench --url`` against a real ``iterserve serve`` on 127.0.0.1
(issue 13 item 5): the counts the client recorded (submitted, finished,
rejected, output tokens, per client) equal the server's /metrics scraped
afterwards, and the run directory meets a ``simulate`` run of the same
workload in ``iterserve compare``: refused, naming only the coordinates that
differ (model, hardware, evidence class), while two bench runs are ranked."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from server_helpers import free_port

from iterserve.cli.main import main
from iterserve.metrics.event_scan import build_timelines
from iterserve.metrics.events import EventLog
from iterserve.server.metrics import parse_metrics

OUTCOMES = ("finished", "cancelled", "rejected", "aborted")


def _workload(path: Path, num_requests: int = 6, spacing_ms: float = 20.0) -> Path:
    """Two clients, token-id prompts on even requests, synthetic on odd ones."""
    requests = []
    for i in range(num_requests):
        prompt = [10 + i, 11, 12, 13, 14] if i % 2 == 0 else 5
        requests.append({"request_id": f"r{i}", "arrival": i * spacing_ms,
                         "prompt_tokens": prompt, "max_output_tokens": 3 + i % 3,
                         "client_id": "alice" if i % 3 else "bob"})
    path.write_text(json.dumps({"workload_id": "bench-url", "clock": "ms",
                                "capacity": {"max_num_batched_tokens": 64, "max_num_seqs": 8},
                                "requests": requests}))
    return path


def _bench(served, workload: Path, out: Path, *extra: str) -> dict:
    assert main(["bench", "--url", served.base_url, str(workload), "--out", str(out),
                 *extra]) == 0
    return json.loads((out / "report.json").read_text())


def _scrape(served) -> dict[str, float]:
    assert served.engine.wait_idle(30)
    return parse_metrics(httpx.get(served.base_url + "/metrics", timeout=10).text,
                         ("model_name",))


def _server_count(samples: dict[str, float], outcome: str, client: str | None = None) -> float:
    if client is None:
        return samples.get(f'iterserve:requests_total{{outcome="{outcome}"}}', 0.0)
    return samples.get(f'iterserve:client_requests_total{{client="{client}",outcome="{outcome}"}}',
                       0.0)


def _tokens(samples: dict[str, float], client: str | None = None) -> float:
    if client is None:
        return samples["vllm:generation_tokens_total"]
    return samples.get(f'iterserve:client_generation_tokens_total{{client="{client}"}}', 0.0)


@pytest.mark.slow
def test_bench_counts_match_the_servers_metrics(serve, tmp_path):
    served = serve()
    report = _bench(served, _workload(tmp_path / "w.json"), tmp_path / "run")
    counts = report["outcomes"]
    samples = _scrape(served)
    assert counts["num_sent"] == samples["iterserve:requests_submitted_total"] == 6
    assert counts["num_finished"] == _server_count(samples, "finished") == 6
    assert counts["num_rejected"] == _server_count(samples, "rejected") == 0
    assert counts["num_output_tokens"] == _tokens(samples) == sum(3 + i % 3 for i in range(6))
    for client, per in counts["per_client"].items():
        assert per["num_finished"] == _server_count(samples, "finished", client)
        assert per["num_output_tokens"] == _tokens(samples, client)
    assert set(counts["per_client"]) == {"alice", "bob"}
    assert counts["num_prompt_tokens_server"] == counts["num_prompt_tokens_declared"] == 30
    assert report["replay"]["prompt_kinds"] == {"token_ids": 3, "synthetic_token_ids": 3}
    timelines = build_timelines(EventLog.read_jsonl(tmp_path / "run" / "events.jsonl"))
    assert {t.request_id: t.num_output_tokens for t in timelines.values()} == \
        {f"r{i}": 3 + i % 3 for i in range(6)}
    assert report["coordinates"]["evidence_class"] == "measured here"
    assert report["coordinates"]["model"] == "served model tiny"
    assert report["summary"]["latency_ms"]["queue"]["p50"]["status"] != "ok"  # not observable
    assert report["summary"]["latency_ms"]["ttft"]["mean"] > 0
    text = (tmp_path / "run" / "report.md").read_text()
    assert "## Outcomes (client side)" in text and "## Not observable from the client" in text
    assert "Preemptions" not in text and "| 6 | 6 | 0 |" in text


@pytest.mark.slow
def test_bench_rejections_match_the_servers_metrics(serve, tmp_path):
    served = serve(overload="bounded", max_live=2)
    workload = _workload(tmp_path / "w.json", num_requests=8, spacing_ms=0.0)
    report = _bench(served, workload, tmp_path / "run")
    counts = report["outcomes"]
    samples = _scrape(served)
    assert counts["num_rejected"] > 0 and counts["num_finished"] > 0
    assert counts["num_rejected"] == _server_count(samples, "rejected")
    assert counts["num_finished"] == _server_count(samples, "finished")
    assert counts["num_sent"] == samples["iterserve:requests_submitted_total"] == 8
    assert counts["num_output_tokens"] == _tokens(samples)
    for client, per in counts["per_client"].items():
        assert per["num_rejected"] == _server_count(samples, "rejected", client)
    assert report["summary"]["requests"]["num_rejected"] == counts["num_rejected"]


@pytest.mark.slow
def test_compare_meets_a_bench_run_and_a_simulate_run_of_one_workload(serve, tmp_path):
    served = serve()
    workload = _workload(tmp_path / "w.json")
    _bench(served, workload, tmp_path / "bench-a")
    _bench(served, workload, tmp_path / "bench-b")
    _bench(served, workload, tmp_path / "bench-chat", "--endpoint", "chat")
    assert main(["simulate", "--workload", str(workload), "--policy", "vllm", "--out",
                 str(tmp_path / "sim"), "--no-plots"]) == 0
    out = tmp_path / "cmp"
    assert main(["compare", *(str(tmp_path / name) for name in
                              ("sim", "bench-a", "bench-b", "bench-chat")), "--out", str(out)]) == 0
    result = json.loads((out / "compare.json").read_text())
    refused = {(r["a"].split(":")[0], r["b"].split(":")[0]): r["differing"]
               for r in result["refused"]}
    outside = ["model", "hardware", "evidence_class"]
    assert refused == {("sim", "bench-a"): outside, ("sim", "bench-b"): outside,
                       ("sim", "bench-chat"): ["model", "hardware", "workload", "evidence_class"],
                       ("bench-a", "bench-chat"): ["workload"],
                       ("bench-b", "bench-chat"): ["workload"]}
    assert result["num_comparable_pairs"] == 1
    [ranked] = [group for group in result["rankings"] if group]
    ttft = next(r for r in ranked if r["metric"][:2] == ["ttft", "ms"] and
                r["metric"][3] == "mean")
    assert {label.split(":")[0] for label, _ in ttft["order"]} == {"bench-a", "bench-b"}
    chat = json.loads((tmp_path / "bench-chat" / "report.json").read_text())
    assert chat["outcomes"]["num_finished"] == 6  # the role-only first chunk is no token
    assert chat["outcomes"]["num_output_tokens"] == sum(3 + i % 3 for i in range(6))


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    workload = _workload(tmp_path / "w.json")
    nowhere = f"http://127.0.0.1:{free_port()}"
    cases = [
        (["--url", nowhere, str(workload)], "cannot reach"),
        (["--url", "localhost:8000", str(workload)], "expected http://"),
        (["--url", nowhere, str(tmp_path / "missing.json")], "no such file"),
        (["--url", nowhere, str(workload), "--time-scale", "0"], "--time-scale"),
        (["--url", nowhere, str(workload), "--max-concurrency", "0"], "--max-concurrency"),
        (["--url", nowhere, str(workload), "--endpoint", "embeddings"], "--endpoint"),
    ]
    for argv, needle in cases:
        assert main(["bench", *argv, "--out", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err
        assert needle in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_requests_the_server_refuses_are_counted_and_warned_about(serve, tmp_path, capsys):
    served = serve()
    workload = _workload(tmp_path / "w.json")
    document = json.loads(workload.read_text())
    document["requests"][0]["prompt_tokens"] = [10**6, 5, 6]  # outside any tiny vocabulary
    workload.write_text(json.dumps(document))
    report = _bench(served, workload, tmp_path / "run")
    counts = report["outcomes"]
    assert counts["num_http_error"] == 1 and counts["http_errors_by_status"] == {"400": 1}
    assert counts["num_finished"] == 5 == _server_count(_scrape(served), "finished")
    err = capsys.readouterr().err
    assert "1 of 6 requests failed; first: r0: http_error: HTTP 400" in err
    assert "outside the vocabulary" in err


def test_an_unknown_model_or_a_missing_key_is_refused_before_sending(serve, tmp_path, capsys):
    served = serve(api_key="sesame")
    workload = _workload(tmp_path / "w.json")
    assert main(["bench", "--url", served.base_url, str(workload), "--out",
                 str(tmp_path / "out")]) == 2
    assert "API key" in capsys.readouterr().err
    assert main(["bench", "--url", served.base_url, str(workload), "--out",
                 str(tmp_path / "out"), "--api-key", "sesame", "--model", "nope"]) == 2
    assert "the server serves tiny" in capsys.readouterr().err
    assert served.engine.num_submitted == 0
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_slo_evaluation_and_the_load_coordinates_of_a_scaled_capped_replay(serve, tmp_path):
    served = serve()
    workload = _workload(tmp_path / "w.json")
    plain = _bench(served, workload, tmp_path / "plain", "--slo-ttft-ms", "60000",
                   "--slo-tbt-ms", "60000")
    scaled = _bench(served, workload, tmp_path / "scaled", "--time-scale", "0.5",
                    "--max-concurrency", "2")
    assert plain["metrics"]["attainment"]["offered_load"] == 1.0
    assert any(r["metric"] == "slo_attainment" for r in plain["results"])
    assert "metrics" not in scaled  # the workload declares no SLO
    assert "SLO evaluation" in (tmp_path / "plain" / "report.md").read_text()
    assert scaled["coordinates"]["load"].endswith("at most 2 in flight")
    assert scaled["coordinates"]["arrivals"] != plain["coordinates"]["arrivals"]
    assert scaled["coordinates"]["workload"] == plain["coordinates"]["workload"]
    assert scaled["outcomes"]["num_finished"] == 6
    sent = [json.loads(line) for line in (tmp_path / "scaled" / "requests.jsonl").open()]
    assert [r["scheduled_s"] for r in sent] == pytest.approx([i * 0.010 for i in range(6)])
