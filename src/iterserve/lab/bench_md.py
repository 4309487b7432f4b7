"""report.md of a bench run: what the client saw, for a person to read.

The request counts, throughput and latency tables are the ones ``simulate``
writes (:func:`iterserve.metrics.summary_md.render_summary`); the server-side
sections (preemptions, KV, budget use) are replaced by the list of what a
client cannot observe, and the outcome table by the client's own outcomes.
"""

from __future__ import annotations

from typing import Any

from iterserve.lab.bench_client import OUTCOMES
from iterserve.lab.bench_report import NOT_OBSERVABLE
from iterserve.metrics import Report, render_markdown
from iterserve.metrics.run_summary import RunSummary
from iterserve.metrics.summary_md import KV_HEADING, render_summary

_SERVER_SIDE = KV_HEADING


def render_bench(report: dict[str, Any], summary: RunSummary | None,
                 metrics: Report | None) -> str:
    server = report["server"]
    lines = [f"# {report['workload_id']}: {report['label']}", "",
             f"Measured against {server['url']} ({server['endpoint']}, model "
             f"{server['model']}, server version {server['version'] or 'unknown'}).", "",
             *_outcome_lines(report["outcomes"]), ""]
    if summary is None:
        return "\n".join([*lines, "Nothing was sent: no events.", ""])
    rendered = render_summary(summary)
    cut = rendered.index(_SERVER_SIDE) if _SERVER_SIDE in rendered else len(rendered)
    lines += [*rendered[:cut], "## Not observable from the client", "",
              *(f"- {name}: {why}" for name, why in NOT_OBSERVABLE.items()), ""]
    text = "\n".join(lines)
    if metrics is not None:
        text += "\n" + render_markdown(
            [metrics], title=f"Judged against the latency targets (SLO evaluation): "
                             f"{report['label']}")
    return text


def _outcome_lines(counts: dict[str, Any]) -> list[str]:
    header = ["sent", *OUTCOMES, "output tokens", "unattributed tokens"]
    values = [counts["num_sent"], *(counts[f"num_{name}"] for name in OUTCOMES),
              counts["num_output_tokens"], counts["num_tokens_unattributed"]]
    return ["## Outcomes (client side)", "", "| " + " | ".join(header) + " |",
            "|" + "---:|" * len(header), "| " + " | ".join(str(v) for v in values) + " |"]
