"""``iterserve compare`` (0x0E, F66-F67): runs of one workload under equal
coordinates are ranked; a pair that differs in the model, the workload,
the SLO or a denominator is refused and the coordinate named; the
source-reported headline registry has no comparable pair and no order."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from matplotlib.axes import Axes

from iterserve.cli.main import main
from iterserve.lab.compare import compare_runs
from iterserve.lab.coordinates import COMPARISON_SET, ResultRecord, is_comparable
from iterserve.lab.inputs import load_runs

ROOT = Path(__file__).resolve().parents[2]
BURST = ROOT / "examples" / "burst_0x07.json"
REGISTRY = Path(__file__).parent / "fixtures" / "source_reported_results.json"


def simulate(tmp_path: Path, name: str, *extra: str, workload: Path = BURST,
             policy: str = "vllm") -> Path:
    out = tmp_path / name
    assert main(["simulate", "--workload", str(workload), "--policy", policy, "--out", str(out),
                 "--no-plots", "--cost-model", "fixed:10", *extra]) == 0
    return out


def compare_text(capsys, *paths: Path) -> str:
    capsys.readouterr()
    assert main(["compare", *map(str, paths)]) == 0
    return capsys.readouterr().out


def test_a_report_carries_its_coordinates_and_results(tmp_path) -> None:
    report = json.loads((simulate(tmp_path, "a") / "report.json").read_text())
    coords = report["coordinates"]
    assert coords["evidence_class"] == "simulated"
    assert coords["source_version"].startswith("iterserve ")
    assert coords["workload"].startswith("sha256:") and coords["arrivals"].startswith("sha256:")
    assert coords["hardware"] == "simulated executor, cost model fixed:10"
    assert coords["slo"] == '{"tbt_ms":20.0,"ttft_ms":30.0}'
    assert coords["load"] == "6 requests over 0.0 ms units"
    ttft = [r for r in report["results"] if r["metric"] == "ttft" and r["percentile"] == "p50"]
    assert ttft == [{"metric": "ttft", "unit": "ms", "denominator": "requests completed in window",
                     "percentile": "p50", "value": report["summary"]["latency_ms"]["ttft"]["p50"]
                     ["value"], "higher_is_better": False}]


def test_two_policies_on_one_workload_are_ranked(tmp_path, capsys) -> None:
    a, b = simulate(tmp_path, "a"), simulate(tmp_path, "b", policy="edf")
    runs = load_runs(a) + load_runs(b)
    comparison = compare_runs(runs)
    assert comparison.num_comparable_pairs == 1 and len(comparison.groups) == 1
    ranking = {r.metric: r for r in comparison.rankings[0]}
    attainment = next(r for key, r in ranking.items() if key[0] == "slo_attainment")
    values = dict(attainment.order)
    best, worst = attainment.order[0][1], attainment.order[-1][1]
    assert best >= worst and set(values) == {runs[0].label, runs[1].label}
    text = compare_text(capsys, a, b)
    assert "1 comparable" in text and "Refused" not in text


@pytest.mark.parametrize(("name", "extra", "coordinate"), [
    ("cost-model", ["--cost-model", "fixed:20"], "model"),
    ("slo", ["--slo-ttft-ms", "60"], "slo"),
])
def test_a_pair_differing_in_a_coordinate_is_refused_and_named(tmp_path, capsys, name, extra,
                                                               coordinate) -> None:
    a, b = simulate(tmp_path, "a"), simulate(tmp_path, name, *extra)
    comparison = compare_runs(load_runs(a) + load_runs(b))
    assert comparison.num_comparable_pairs == 0 and comparison.rankings == ((), ())
    assert coordinate in comparison.verdicts[0].differing
    assert f"differ in {coordinate}" in compare_text(capsys, a, b)
    assert main(["compare", str(a), str(b), "--out", str(tmp_path / "cmp")]) == 0
    refused = json.loads((tmp_path / "cmp" / "compare.json").read_text())["refused"]
    assert [entry["failure"] for entry in refused] == ["FC12"]


def test_a_different_workload_is_refused_by_its_hash(tmp_path, capsys) -> None:
    document = json.loads(BURST.read_text())
    document["requests"][0]["prompt_tokens"] = 2
    other = tmp_path / "other.json"
    other.write_text(json.dumps(document))
    a, b = simulate(tmp_path, "a"), simulate(tmp_path, "b", workload=other)
    verdict = compare_runs(load_runs(a) + load_runs(b)).verdicts[0]
    assert verdict.differing[0] == "workload" and "arrivals" not in verdict.differing


def test_a_different_denominator_is_refused(tmp_path) -> None:
    a, b = simulate(tmp_path, "a"), simulate(tmp_path, "b", policy="edf")
    report = json.loads((b / "report.json").read_text())
    for result in report["results"]:
        result["denominator"] = "requests offered"
    (b / "report.json").write_text(json.dumps(report))
    verdict = compare_runs(load_runs(a) + load_runs(b)).verdicts[0]
    assert verdict.differing == ("denominator",)


def test_source_reported_registry_has_no_comparable_pair_and_no_order(capsys) -> None:
    runs = load_runs(REGISTRY)
    assert [run.label for run in runs] == [
        "ORCA", "vLLM", "SARATHI decode", "SARATHI pipeline", "Sarathi-Serve", "FastServe",
        "VTC", "Preble", "LayerKV"]  # nine records of the eight contracts (0x0E)
    assert all(r.evidence_class == "source-reported" for run in runs for r in run.records)
    comparison = compare_runs(runs)
    assert len(comparison.verdicts) == 9 * 8 // 2 and comparison.num_comparable_pairs == 0
    assert all(rankings == () for rankings in comparison.rankings)
    text = compare_text(capsys, REGISTRY)
    assert "No comparable pair: no ordering is produced." in text and " > " not in text
    assert "| ORCA | no | no |" in text and "| VTC | yes | no |" in text
    assert "## Refused pairs (not ranked: FC12 incomparable-ranking)" in text


def test_registry_flags_are_read_and_none_is_reproduced_here() -> None:
    """Complete by hand: ORCA leaves arrivals and load unstated, both SARATHI records
    the workload, Preble the load, LayerKV four coordinates; the other four state all."""
    flags = {run.label: run.flags for run in load_runs(REGISTRY)}
    complete = {label for label, flag in flags.items() if flag and flag.coordinates_complete}
    assert complete == {"vLLM", "Sarathi-Serve", "FastServe", "VTC"}
    assert not any(flag is None or flag.reproduced_locally for flag in flags.values())


def _registry_with(tmp_path: Path, **changes) -> Path:
    document = json.loads(REGISTRY.read_text())
    document["results"][0].update(changes)  # ORCA: source-reported, coordinates incomplete
    path = tmp_path / "registry.json"
    path.write_text(json.dumps(document))
    return path


@pytest.mark.parametrize(("changes", "needle"), [
    ({"coordinates_complete": True}, "unstated arrivals, load"),
    ({"arrivals": "Poisson", "load": "10 req/s"}, "every coordinate stated"),
    ({"reproduced_locally": True, "reproduction": "sim run 1"},
     "FC13 local-measurement-overclaim: a source-reported value is not reproduced here"),
    ({"evidence_class": "measured here", "reproduced_locally": True}, "needs reproduction"),
    ({"reproduction": "sim run 1"}, "needs reproduced_locally"),
    ({"reproduced_locally": "no"}, "must be true or false"),
])
def test_a_registry_flag_that_the_record_contradicts_is_refused(tmp_path, capsys, changes,
                                                               needle) -> None:
    path = _registry_with(tmp_path, **changes)
    assert main(["compare", str(path)]) == 2
    err = capsys.readouterr().err
    assert needle in err and "results[0]" in err and len(err.strip().splitlines()) == 1


def test_a_measured_reproduction_with_its_run_is_accepted(tmp_path) -> None:
    path = _registry_with(tmp_path, evidence_class="measured here", reproduced_locally=True,
                          reproduction="bench run 2026-12-04")
    flags = load_runs(path)[0].flags
    assert flags is not None and flags.reproduction == "bench run 2026-12-04"


def test_comparable_is_equality_on_every_coordinate_of_the_set() -> None:
    record = load_runs(REGISTRY)[0].records[0]
    assert is_comparable(record, record)
    for name in COMPARISON_SET:
        other = "simulated" if name == "evidence_class" else "other"
        changed = ResultRecord(**{**record.to_json(), name: other})
        assert not is_comparable(record, changed), name


def test_compare_refuses_a_report_without_coordinates(tmp_path, capsys) -> None:
    run = simulate(tmp_path, "a")
    report = json.loads((run / "report.json").read_text())
    del report["coordinates"]
    (run / "report.json").write_text(json.dumps(report))
    assert main(["compare", str(run)]) == 2
    err = capsys.readouterr().err
    assert "no coordinates" in err and len(err.strip().splitlines()) == 1


def test_compare_writes_table_json_and_plots(tmp_path, capsys, monkeypatch) -> None:
    """Each panel's bars carry their values, the ones compare.json ranks."""
    labelled: list[list[float]] = []
    bar_label = Axes.bar_label

    def spy(axis, bars, *args, **kwargs):
        labelled.append([bar.get_height() for bar in bars])
        return bar_label(axis, bars, *args, **kwargs)

    monkeypatch.setattr(Axes, "bar_label", spy)
    a, b = simulate(tmp_path, "a"), simulate(tmp_path, "b", policy="edf")
    out = tmp_path / "cmp"
    assert main(["compare", str(a), str(b), "--out", str(out)]) == 0
    document = json.loads((out / "compare.json").read_text())
    assert document["num_comparable_pairs"] == 1
    assert (out / "compare_group1.png").stat().st_size > 0
    ranked = [sorted(value for _, value in ranking["order"])
              for ranking in document["rankings"][0] if len(ranking["order"]) == 2]
    assert labelled and all(sorted(heights) in ranked for heights in labelled)


@pytest.mark.parametrize("where", ["file", "proc"])
def test_an_unwritable_out_fails_in_one_line_before_the_table(tmp_path, capsys, where) -> None:
    """--out a file (refused at the flag) or a place no directory can be made
    in (Linux's /proc): one line on stderr, nothing on stdout."""
    a = simulate(tmp_path, "a")
    out = tmp_path / "taken.txt" if where == "file" else Path("/proc/iterserve-none")
    if where == "file":
        out.write_text("keep me\n")
    capsys.readouterr()
    assert main(["compare", str(a), "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1
    assert str(out) in captured.err
