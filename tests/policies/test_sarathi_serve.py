"""Sarathi-Serve stall-free scheduling (0x09, Algorithm 3), checked from the
decision log of ``iterserve simulate --decision-log``.

Frontiers are rebuilt from the log's own plan/result lines (an oracle
independent of the scheduler's state code). In every iteration every running
decode gets its DECODE_ROW while tau covers them, and the long prompt is
chunked to min(remaining, tau - decode rows).
"""

from __future__ import annotations

from dataclasses import dataclass

from policy_helpers import write_workload

from iterserve.cli.main import main
from log_rows import row_lines

TAU = 24
DECODE_REALIZED = {"d0": 6, "d1": 9, "d2": 40, "d3": 40}
LONG = "L"
LONG_PROMPT = 200
LATER = "L2"  # a second long prompt: admitted only after L's partial prefill
LATER_PROMPT = 100


@dataclass
class Frontier:
    num_prompt: int
    num_computed: int = 0
    num_emitted: int = 0
    is_running: bool = False
    is_finished: bool = False

    @property
    def is_decoding(self) -> bool:
        return (self.is_running and self.num_emitted > 0
                and self.num_computed == self.num_prompt + self.num_emitted - 1)


def replay_log(lines: list[dict]) -> list[tuple[dict, dict[str, Frontier]]]:
    """(iteration line, frontiers before it) for every logged iteration."""
    header, iterations = lines[0], lines[1:]
    assert header["type"] == "header"
    frontiers = {r["request_id"]: Frontier(r["prompt_tokens"])
                 for r in header["workload"]["requests"]}
    out = []
    for line in iterations:
        assert line["type"] == "iteration"
        before = {rid: Frontier(**vars(f)) for rid, f in frontiers.items()}
        plan, result = line["plan"], line["result"]
        for work in plan["work"]:  # the log agrees with the rebuilt frontiers
            assert work["start"] == frontiers[work["request_id"]].num_computed
        out.append((line, before))
        for intent in plan["intents"]:
            f = frontiers[intent["request_id"]]
            if intent["kind"] == "admit":
                f.is_running = True
            elif intent["kind"] == "preempt_recompute":
                f.is_running, f.num_computed = False, 0
        for item in result["completed"]:
            f = frontiers[item["request_id"]]
            f.num_computed = item["end"]
            f.num_emitted += 1 if item["emitted"] else 0
            if item["finish_reason"] is not None:
                f.is_running, f.is_finished = False, True
    return out


def run_logged(tmp_path) -> list[dict]:
    requests = [{"request_id": rid, "arrival": 0, "prompt_tokens": 1, "max_output_tokens": 64}
                for rid in DECODE_REALIZED]
    requests.append({"request_id": LONG, "arrival": 2, "prompt_tokens": LONG_PROMPT,
                     "max_output_tokens": 4})
    requests.append({"request_id": LATER, "arrival": 3, "prompt_tokens": LATER_PROMPT,
                     "max_output_tokens": 4})
    workload = write_workload(
        tmp_path / "steady.json", requests,
        {"max_num_batched_tokens": 64, "max_num_seqs": 8, "tau": TAU},
        {**DECODE_REALIZED, LONG: 4, LATER: 4},
    )
    log = tmp_path / "decisions.jsonl"
    code = main(["simulate", "--workload", str(workload), "--policy", "sarathi-serve",
                 "--out", str(tmp_path / "out"), "--decision-log", str(log)])
    assert code == 0
    return row_lines(log)


def test_running_decodes_get_a_row_every_iteration_and_the_prompt_gets_the_rest(
        tmp_path) -> None:
    iterations = replay_log(run_logged(tmp_path))
    chunk_widths = []
    for line, before in iterations:
        work = {w["request_id"]: w for w in line["plan"]["work"]}
        decoding = [rid for rid, f in before.items() if f.is_decoding]
        assert len(decoding) <= TAU
        for rid in decoding:
            assert rid in work, f"decode {rid} stalled at decision {line['decision_id']}"
            assert work[rid]["kind"] == "DECODE_ROW"
            assert work[rid]["end"] - work[rid]["start"] == 1
        assert line["plan"]["tokens_used"] <= TAU
        if LONG in work and work[LONG]["kind"] == "PREFILL_CHUNK":
            long = before[LONG]
            decode_rows = sum(1 for w in work.values() if w["kind"] == "DECODE_ROW")
            width = work[LONG]["end"] - work[LONG]["start"]
            assert width == min(LONG_PROMPT - long.num_computed, TAU - decode_rows), (
                f"decision {line['decision_id']}: chunk {width} with {decode_rows} decode rows")
            chunk_widths.append((width, decode_rows))
    assert sum(width for width, _ in chunk_widths) == LONG_PROMPT
    assert {rows for _, rows in chunk_widths} >= {4, 3, 2}, "decode mix never changed"
    assert chunk_widths[0] == (TAU - 4, 4)


def algorithm3(before: dict[str, Frontier], arrivals: dict[str, float],
               now: float) -> dict[str, int]:
    """Expected rows per request: decodes, then running partial prefills,
    then new requests in arrival order, each clamped to tau - n_t."""
    rows = {rid: 1 for rid, f in before.items() if f.is_decoding}
    n_t = len(rows)
    partial = [rid for rid, f in before.items() if f.is_running and not f.is_decoding]
    new = [rid for rid, f in before.items()
           if not f.is_running and not f.is_finished and arrivals[rid] <= now]
    for rid in sorted(partial, key=list(arrivals).index) + sorted(new, key=list(arrivals).index):
        f = before[rid]
        width = min(f.num_prompt - f.num_computed, TAU - n_t)
        if width <= 0:
            break
        rows[rid] = width
        n_t += width
    return rows


def test_every_iteration_follows_algorithm_3_order(tmp_path) -> None:
    lines = run_logged(tmp_path)
    arrivals = {r["request_id"]: r["arrival"] for r in lines[0]["workload"]["requests"]}
    now = 0.0
    saw_admission_behind_partial = False
    for line, before in replay_log(lines):
        got = {w["request_id"]: w["end"] - w["start"] for w in line["plan"]["work"]}
        assert got == algorithm3(before, arrivals, now), f"decision {line['decision_id']}"
        if LATER in got and before[LONG].is_running and not before[LONG].is_decoding:
            saw_admission_behind_partial = True
        now += line["result"]["duration"]
    assert saw_admission_behind_partial, "L2 never shared an iteration with L's last chunk"
