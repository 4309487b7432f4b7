"""Reports a person reads without an SLO (issue 15, step 7): the run
summary in every simulate report, iteration-clock units, suspended requests
in the queue plot, slot occupancy vs token-budget utilisation, the sweep's
offered-rate warning and the progress bar."""

from __future__ import annotations

import io
import json
import statistics
from pathlib import Path

import pytest
from lab_helpers import REPO_ROOT
from rich.console import Console

from iterserve.cli.main import main
from iterserve.cli.progress import RunProgress
from iterserve.metrics import plots

SMALL_KV = REPO_ROOT / "examples" / "small_kv.json"
BURST = REPO_ROOT / "examples" / "burst_0x07.json"
LATENCIES = ("ttft", "tbt", "tpot", "end_to_end", "queue")


@pytest.fixture(scope="module")
def small_kv_run(tmp_path_factory) -> tuple[Path, dict, dict]:
    """small_kv (iteration clock, no SLO, PRESERVE_EXACT preemptions), with
    every figure captured as it is saved."""
    out = tmp_path_factory.mktemp("small_kv")
    figures = {}
    original = plots._save

    def capture(figure, path):  # noqa: ANN001, ANN202
        figures[Path(path).stem] = figure
        return original(figure, path)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(plots, "_save", capture)
        assert main(["simulate", "--workload", str(SMALL_KV), "--policy", "vllm",
                     "--out", str(out)]) == 0
    return out, json.loads((out / "report.json").read_text()), figures


def test_a_run_without_slo_reports_distributions_throughput_preemptions_kv(small_kv_run):
    out, report, _ = small_kv_run
    assert "metrics" not in report  # no SLO: no outcome ledger
    summary = report["summary"]
    assert summary["time_unit"] == "iteration" and "latency_ms" not in summary
    latency = summary["latency_iterations"]
    assert set(latency) == set(LATENCIES)
    # the figures come from the run: TTFT equals first-token cut - arrival per request
    ttft = [r["first_token_cut"] - r["arrival"] for r in report["requests"].values()]
    assert latency["ttft"]["mean"] == pytest.approx(statistics.fmean(ttft))
    assert latency["ttft"]["n"] == 40 and latency["ttft"]["p95"]["status"] == "ok"
    assert latency["ttft"]["p99"] == {"status": "insufficient_sample", "n": 40}
    assert summary["requests"]["num_completed"] == 40
    emitted = sum(r["emitted_tokens"] for r in report["requests"].values())
    assert summary["throughput"]["emitted_token_throughput_per_iteration"] == pytest.approx(
        emitted / summary["throughput"]["window_iterations"])
    assert summary["preemptions"]["swap"] == report["kv"]["preemptions"]["swap"] > 0
    assert summary["kv_blocks"]["num_blocks_total"] == report["kv"]["num_blocks_total"]
    assert 0 < summary["kv_blocks"]["mean_usage_fraction"] <= 1
    text = (out / "report.md").read_text()
    for heading in ("## Latency (iterations", "## Throughput", "## Preemptions and KV",
                    "| time to first token (TTFT) |", "| arrival to first admission (queue time) |",
                    "| arrival to last token (end-to-end) |",
                    "| mean time per output token after the first (TPOT) |",
                    "No SLO declared", "n=40<100"):
        assert heading in text, heading


def test_iteration_clock_axes_count_iterations(small_kv_run):
    _, _, figures = small_kv_run
    labels = {name: [axis.get_xlabel() for axis in figure.axes]
              for name, figure in figures.items()}
    assert set(labels) >= {"latency_cdfs", "batch_composition", "queue_and_kv", "client_service"}
    for name, xlabels in labels.items():
        shown = [label for label in xlabels if label]
        assert shown and all("(iterations)" in label for label in shown), (name, xlabels)
        assert not any("(s)" in label or "(ms)" in label for label in xlabels), (name, xlabels)


def test_queue_plot_shows_suspended_requests(small_kv_run):
    _, report, figures = small_kv_run
    queue_axis = figures["queue_and_kv"].axes[0]
    lines = {line.get_label(): line for line in queue_axis.get_lines()}
    assert "suspended (preempted)" in lines
    assert max(lines["suspended (preempted)"].get_ydata()) >= 1
    assert report["kv"]["preemptions"]["swap"] > 0


def test_slot_occupancy_and_token_budget_utilisation_are_named_apart(small_kv_run):
    out, report, figures = small_kv_run
    summary = report["summary"]
    slots, rows = summary["logical_slot_occupancy"], summary["batched_tokens_utilisation"]
    assert "sequences" in slots["label"] and "token rows" in rows["label"]
    assert "sequences" in report["slot_occupancy_label"]
    assert slots["num_used"] == report["useful_slot_iterations"]
    assert slots["num_available"] == report["available_slot_iterations"]
    assert report["batched_tokens_utilisation"] == rows
    assert rows["num_used"] == sum(report["token_rows"].values())
    assert slots["fraction"] != rows["fraction"]
    for line in (out / "report.md").read_text().splitlines():
        if "slot occupancy" in line:
            assert "sequences" in line, line
    title = figures["batch_composition"].axes[0].get_title()
    assert "token-budget utilisation" in title and "slot occupancy" not in title


def test_ms_clock_summary_matches_the_slo_evaluation(tmp_path):
    out = tmp_path / "out"
    assert main(["simulate", "--workload", str(BURST), "--policy", "least-slack",
                 "--cost-model", "fixed:10", "--out", str(out), "--no-plots"]) == 0
    report = json.loads((out / "report.json").read_text())
    summary, metrics = report["summary"], report["metrics"]
    assert summary["time_unit"] == "s"
    assert summary["latency_ms"] == metrics["latency_ms"]  # one sample definition
    assert summary["throughput"]["request_throughput_per_s"] == pytest.approx(
        metrics["rates"]["request_throughput_per_s"])
    text = (out / "report.md").read_text()
    assert "## Latency (ms" in text and "offered-load attainment" in text


def test_sweep_warns_when_the_workload_is_too_small_for_the_rate(tmp_path, capsys):
    raw = json.loads(BURST.read_text())
    for request in raw["requests"]:
        request["slo"] = {"ttft_ms": 60_000, "tbt_ms": 60_000}  # every rate meets it
    workload = tmp_path / "w.json"
    workload.write_text(json.dumps(raw))
    out = tmp_path / "sweep"
    assert main(["sweep", "--workload", str(workload), "--policy", "edf", "--rates", "2",
                 "10000", "--trials", "1", "--cost-model", "fixed:10", "--workers", "1",
                 "--out", str(out)]) == 0
    sweep = json.loads((out / "sweep.json").read_text())
    low, high = sweep["policies"]["edf"]["rates"]
    assert low["meets_alpha"] and high["meets_alpha"]
    assert low["offered_rate_sustained"] and not high["offered_rate_sustained"]
    assert high["mean_observed_offered_rate_per_s"] < 0.5 * 10000
    assert sweep["policies"]["edf"]["capacity_rate_per_s"] == 2.0  # not the nominal 10000
    err = capsys.readouterr().err
    assert "warning: edf at 10000 req/s: observed offered rate" in err
    assert len(sweep["warnings"]) == 1


class _FakeClock:
    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


def _steps(progress: RunProgress, n: int, clock: _FakeClock, dt_s: float) -> None:
    from iterserve.records.state import SchedulerState

    state = SchedulerState(0, 0, 0.0, (), (), (), ("a",), {}, 1, 1)
    for _ in range(n):
        clock.now_s += dt_s
        progress.on_step(state, None, None, state)  # type: ignore[arg-type]


def test_progress_bar_appears_only_on_a_terminal_after_the_delay():
    clock = _FakeClock()
    stream = io.StringIO()
    shown = RunProgress(10, Console(file=stream, force_terminal=True), delay_s=2.0, clock=clock)
    _steps(shown, 64, clock, 0.01)  # 0.64 s: still silent
    assert not shown.is_shown
    _steps(shown, 256, clock, 0.01)
    assert shown.is_shown
    shown.phase("writing the report")  # after the run: what the command does now
    shown.close()
    assert "simulate" in stream.getvalue() and "writing the report" in stream.getvalue()
    piped = io.StringIO()
    hidden = RunProgress(10, Console(file=piped, force_terminal=False), delay_s=0.0, clock=clock)
    _steps(hidden, 256, clock, 1.0)
    hidden.phase("writing the report")
    hidden.close()
    assert not hidden.is_shown and piped.getvalue() == ""


def test_progress_counts_every_cut_s_finished_requests():
    """Each cut lists only the requests that finished in it (they are
    retired at the next), so the bar sums them: one per step here."""
    clock = _FakeClock()
    progress = RunProgress(400, Console(file=io.StringIO(), force_terminal=True), delay_s=0.0,
                           clock=clock)
    _steps(progress, 320, clock, 0.01)
    assert progress.num_finished == 320
    assert progress.is_shown
    progress.close()


def test_simulate_prints_no_progress_when_stderr_is_captured(tmp_path, capsys):
    assert main(["simulate", "--workload", str(SMALL_KV), "--policy", "vllm",
                 "--out", str(tmp_path / "o"), "--no-plots"]) == 0
    assert capsys.readouterr().err == ""
