"""Fairness measures (0x09A, F52, F53, F63) on hand-built event logs and
through ``iterserve simulate``."""

from __future__ import annotations

import pytest
from fairness_helpers import request, simulate, two_clients, workload

from iterserve.metrics.event_scan import build_timelines
from iterserve.metrics.events import (
    AdmitEvent,
    ArrivalEvent,
    ComputeEvent,
    FinishEvent,
    FirstTokenEvent,
    TokenEvent,
)
from iterserve.metrics.fairness import evaluate_fairness, jain_index
from iterserve.metrics.series import ServiceWeights
from iterserve.metrics.slo import ObservationWindow


def _one_request(rid: str, client: str, done_s: float, start_s: float = 0.0) -> list:
    return [ArrivalEvent(start_s, rid, client_id=client, num_prompt_tokens=2),
            AdmitEvent(start_s, rid), ComputeEvent(done_s, rid, num_rows=2), FirstTokenEvent(done_s, rid),
            FinishEvent(done_s, rid, reason="max_tokens", num_output_tokens=1)]


def _fair(events: list, horizon_s: float | None = None, **weights: float):
    window = ObservationWindow(0.0, 100.0)
    return evaluate_fairness(build_timelines(events).values(), window,
                             ServiceWeights(**weights) if weights else None, None, horizon_s)


def test_weighted_service_counts_prompt_rows_and_outputs_f52() -> None:
    report = _fair(_one_request("a", "A", 1.0), prompt_weight=1, output_weight=2)
    (client,) = report.per_client
    assert client.service == 1 * 2 + 2 * 1
    assert report.max_backlogged_gap is None  # one client: no pair


def test_rebuild_rows_earn_no_service_0x0c() -> None:
    events = [ArrivalEvent(0.0, "a", client_id="A", num_prompt_tokens=2), AdmitEvent(0.0, "a"),
              ComputeEvent(1.0, "a", num_rows=2), FirstTokenEvent(1.0, "a"),
              ComputeEvent(2.0, "a", num_rows=2, is_rebuild=True),
              TokenEvent(3.0, "a", token_index=1),
              FinishEvent(3.0, "a", reason="max_tokens", num_output_tokens=2)]
    (client,) = _fair(events).per_client
    assert client.service == 2 + 1 + 1  # prompt rows, two outputs; the rebuild adds 0


def test_gap_counts_only_jointly_backlogged_intervals() -> None:
    # A served at 1 and 2; B arrives at 2 and is served at 3: the joint interval is [2, 2]
    events = _one_request("a1", "A", 1.0) + _one_request("a2", "A", 2.0, start_s=1.0)
    events += _one_request("b1", "B", 3.0, start_s=2.0)
    assert _fair(events).max_backlogged_gap is None
    events += _one_request("a3", "A", 4.0, start_s=2.0)
    gap = _fair(events).max_backlogged_gap
    assert gap is not None and gap.value == 3 and gap.interval_s == (2.0, 3.0)


def test_starvation_predicate_f63_needs_eligibility_and_a_horizon() -> None:
    events = _one_request("a", "A", 1.0) + _one_request("b", "B", 9.0)
    assert _fair(events, horizon_s=9.0).starved_clients == ("B",)
    assert _fair(events, horizon_s=9.5).starved_clients == ()
    # a client with no offered work is not starved, however long the horizon
    assert "C" not in {c.client_id for c in _fair(events, horizon_s=1.0).per_client}


def test_jain_index() -> None:
    assert jain_index([1.0, 1.0]) == 1.0
    assert jain_index([2.0, 0.0]) == 0.5
    assert jain_index([]) is None


def test_two_clients_fifo_reaches_gap_16_with_totals_16_and_8(tmp_path) -> None:
    fairness = simulate(tmp_path, two_clients(), "refill")["fairness"]
    assert fairness["max_backlogged_gap"]["value"] == 16
    assert fairness["max_backlogged_gap"]["clients"] == ["A", "B"]
    assert {c: v["service"] for c, v in fairness["per_client"].items()} == {"A": 16, "B": 8}


def test_weights_come_from_flags_over_the_workload(tmp_path) -> None:
    report = simulate(tmp_path, two_clients(), "refill", "--output-weight", "3",
                      "--client-weight", "B=2")
    fairness = report["fairness"]
    assert fairness["weights"]["output_weight"] == 3
    assert fairness["per_client"]["A"]["service"] == 8 * (1 + 3)
    assert fairness["per_client"]["B"]["service"] == 4 * (1 + 3) / 2


@pytest.mark.parametrize("flags", [["--client-weight", "B"], ["--client-weight", "B=0"],
                                   ["--prompt-weight", "-1"], ["--starvation-horizon", "0"]])
def test_bad_fairness_flags_are_one_line_exit_2(tmp_path, capsys, flags) -> None:
    from iterserve.cli.main import main

    path = tmp_path / "w.json"
    path.write_text(__import__("json").dumps(two_clients()))
    code = main(["simulate", "--workload", str(path), "--policy", "refill", "--out",
                 str(tmp_path / "o"), "--no-plots", *flags])
    assert code == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_bad_fairness_section_names_the_field(tmp_path, capsys) -> None:
    spec = workload("bad", [request("a", "A")], fairness={"prompt_weight": "x"})
    path = tmp_path / "w.json"
    path.write_text(__import__("json").dumps(spec))
    from iterserve.cli.main import main

    assert main(["simulate", "--workload", str(path), "--policy", "refill", "--out",
                 str(tmp_path / "o"), "--no-plots"]) == 2
    assert "fairness.prompt_weight" in capsys.readouterr().err


def test_policies_vtc_prints_its_contract(capsys) -> None:
    from iterserve.cli.main import main

    assert main(["policies", "vtc"]) == 0
    out = capsys.readouterr().out
    assert "protected_identity: client_id" in out
    assert "Algorithm 2" in out and "no preemption" in out
    assert main(["policies", "vtc-completed"]) == 0
    assert "does NOT transfer" in capsys.readouterr().out


@pytest.mark.parametrize(("section", "value", "named"), [
    ("fairness", {"client_weights": {"A": 0}}, "client_weights"),
    ("fairness", {"starvation_horizon": -1}, "starvation_horizon"),
    ("fairness", {"bogus": 1}, "bogus"),
    ("fixture_only_hidden_truth", {"injected_failures": [{"request_id": "zz", "decision_id": 0}]},
     "request_id"),
    ("fixture_only_hidden_truth", {"injected_failures": [{"request_id": "a"}]},
     "injected_failures"),
])
def test_bad_fairness_workload_sections_are_one_line(tmp_path, capsys, section, value,
                                                      named) -> None:
    from iterserve.cli.main import main

    spec = workload("bad", [request("a", "A")], **{section: value})
    path = tmp_path / "w.json"
    path.write_text(__import__("json").dumps(spec))
    assert main(["simulate", "--workload", str(path), "--policy", "refill", "--out",
                 str(tmp_path / "o"), "--no-plots"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and named in err[0]
