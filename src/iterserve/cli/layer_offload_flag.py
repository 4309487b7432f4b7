"""``simulate --layer-offload`` (0x09B, F64): the flag, its check against
the workload's clock, the run's "hardware" coordinate and the report
section (report.json ``layer_offload``, a report.md section). Off, nothing
here touches a run or its outputs."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from iterserve.records.spec import OnlineWorkload
from iterserve.sim.layer_offload import (
    FLAG_FORMAT,
    LayerOffload,
    LayerOffloadCost,
    parse_layer_offload,
)
from iterserve.sim.layer_offload_report import layer_offload_section, render_layer_offload


class LayerOffloadFlagError(ValueError):
    """--layer-offload does not fit the workload (one line, exit 2)."""


def add_layer_offload_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--layer-offload", type=_layer_offload, default=None,
                        metavar=FLAG_FORMAT,
                        help="simulate layer-wise residency (0x09B) on the ms clock: each "
                             "step's predicted compute is split evenly over LAYERS layers and "
                             "the last OFFLOADED of them are fetched from the host every step, "
                             "one at a time over one link, TRANSFER_MS each; a layer waits for "
                             "its data, so stalls lengthen the step. report.json gains "
                             "layer_offload (delayed steps, stall ms, per-layer lateness). A "
                             "model on the simulated clock, not measured transfers")


def _layer_offload(text: str) -> LayerOffload:
    try:
        return parse_layer_offload(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def check_layer_offload(offload: LayerOffload | None, online: OnlineWorkload) -> None:
    if offload is not None and online.clock != "ms":
        raise LayerOffloadFlagError(
            f"--layer-offload needs a workload on the ms clock, this one's is "
            f"{online.clock!r} (one iteration lasts one unit there, so a layer stall could "
            f"not show)")


def with_offload_hardware(coordinates: dict[str, Any], offload: LayerOffload | None
                          ) -> dict[str, Any]:
    """The run's 0x0E ``hardware`` coordinate naming the offload when on."""
    if offload is not None:
        coordinates["hardware"] += (f"; layer offload {offload.num_offloaded} of "
                                    f"{offload.num_layers} layers, {offload.transfer_ms:g} ms "
                                    f"per layer transfer")
    return coordinates


def write_layer_offload(out: Path, cost: LayerOffloadCost) -> dict[str, Any]:
    """report.json ``layer_offload``; its section appended to ``out``'s report.md."""
    section = layer_offload_section(cost)
    with (out / "report.md").open("a", encoding="utf-8") as text:
        text.write("\n" + "\n".join(render_layer_offload(section)))
    return section
