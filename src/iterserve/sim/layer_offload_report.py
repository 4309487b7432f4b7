"""report.json ``layer_offload`` and its report.md section (0x09B, F64).

Made from a run's :class:`~iterserve.sim.layer_offload.LayerOffloadCost`:
the declared settings, the iterations a layer-readiness stall delayed, the
total stall and each layer's prefetch lateness (nearest-rank p50, withheld
below two iterations, and max). Every figure is the simulated clock's, in
ms: a model of one serial host link, not a measured GPU or host transfer.
"""

from __future__ import annotations

from typing import Any

from iterserve.cost.protocol import MS_PER_S
from iterserve.metrics.percentiles import gated_percentile
from iterserve.sim.layer_offload import LayerOffloadCost

LABEL = ("simulated layer offload (0x09B): every iteration's compute split evenly over the "
         "layers, the offloaded ones fetched over one serial link; modelled on the simulated "
         "clock, not measured GPU/host transfers")


def layer_offload_section(cost: LayerOffloadCost) -> dict[str, Any]:
    """report.json ``layer_offload``; times in ms of the simulated clock."""
    summary = cost.tally.summary()
    offload = cost.offload
    lateness = [sorted(value * MS_PER_S for value in samples) for samples in cost.tally.lateness_s]
    first_offloaded = offload.num_layers - offload.num_offloaded
    return {
        "label": LABEL,
        "settings": offload.to_json(),
        "num_iterations": summary.num_iterations,
        "num_iterations_delayed": summary.num_iterations_delayed,
        "total_stall_ms": summary.total_delay_s * MS_PER_S,
        "transfer_overlap_fraction": summary.overlap_fraction,
        "layers": [{"layer": index, "offloaded": index >= first_offloaded,
                    "lateness_ms": {"p50": gated_percentile(samples, 50).to_dict(),
                                    "max": samples[-1]}}
                   for index, samples in enumerate(lateness)],
    }


def render_layer_offload(section: dict[str, Any]) -> list[str]:
    """report.md's lines for ``section`` (:func:`layer_offload_section`)."""
    settings = section["settings"]
    lines = ["## Layer offload (simulated, 0x09B)", "",
             f"{settings['num_offloaded']} of {settings['num_layers']} layers offloaded, "
             f"{settings['transfer_ms']:g} ms per layer transfer. "
             f"{section['num_iterations_delayed']} of {section['num_iterations']} iterations "
             f"delayed by layer readiness; total stall {section['total_stall_ms']:.6g} ms. "
             f"Modelled on the simulated clock, not measured GPU/host transfers.", ""]
    offloaded = [layer for layer in section["layers"] if layer["offloaded"]]
    if offloaded:
        lines += ["| layer | lateness p50 (ms) | lateness max (ms) |", "|---|---|---|"]
        for layer in offloaded:
            p50 = layer["lateness_ms"]["p50"].get("value")
            shown = "n/a (n < 2)" if p50 is None else f"{p50:.6g}"
            lines.append(f"| {layer['layer']} | {shown} | {layer['lateness_ms']['max']:.6g} |")
        lines.append("")
    return lines
