"""`planner hardware`: list the built-in hardware catalog, or show one profile in full.

Thin: the catalog and profiles come from `planner.engines.load`; this module only renders them.
Bandwidths are per GPU and ONE direction, peaks are dense, as in `planner.specs.hardware`.
"""

from __future__ import annotations

import io
import os
import shutil
import sys
from typing import Any

import click
from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

from planner.cli import cli
from planner.cli.options import echo_json, format_option
from planner.engines.load import Loaded, hardware_catalog, load_hardware
from planner.physics.kernels import GEMM_FIXED_SECONDS, attention_half_saturation_tokens, peak_16bit_flops
from planner.specs.hardware import Fp8AttentionSpeedup, HardwareProfile

GIB = 2**30


# Data (what --format json prints) ------------------------------------------------
def profile_summary(entry: Loaded) -> dict[str, Any]:
    """The headline figures of one profile; the keys of the JSON list and of `show --format json`."""
    hw: HardwareProfile = entry.spec
    return {
        "id": entry.id,
        "name": hw.name,
        "accelerator": hw.accelerator.name,
        "memory_bytes": hw.accelerator.memory_bytes,
        "memory_bandwidth_bytes_per_s": hw.accelerator.memory_bandwidth_bytes_per_s,
        "peak_flops": dict(hw.accelerator.peak_flops_per_s),
        "gpus_per_node": hw.node.gpus_per_node,
        "intra_node_link": hw.node.link_kind,
        "intra_node_bandwidth_bytes_per_s": hw.node.bandwidth_bytes_per_s,
        "inter_node_bandwidth_bytes_per_s": hw.inter_node_bandwidth_bytes_per_s,
        "aliases": list(entry.aliases),
    }


def profile_details(entry: Loaded) -> dict[str, Any]:
    """The summary plus latencies, the network, efficiencies with notes, sources, and the full spec."""
    hw: HardwareProfile = entry.spec
    data = profile_summary(entry)
    data.update(
        {
            "description": hw.description,
            "loaded_from": entry.source,
            "intra_node_latency_s": hw.node.latency_s,
            "inter_node_latency_s": hw.inter_node_latency_s,
            "network": hw.network.model_dump(mode="json") if hw.network else None,
            "efficiency": hw.efficiency.model_dump(mode="json"),
            "sources": _sources(hw),
            "price_per_gpu_hour_usd": hw.price_per_gpu_hour_usd,
            "price_source": hw.price_source,
            "spec": hw.model_dump(mode="json"),
        }
    )
    return data


def _sources(hw: HardwareProfile) -> dict[str, str]:
    sources = {"accelerator": hw.accelerator.source, "node": hw.node.source}
    if hw.network is not None:
        sources["network"] = hw.network.source
    if hw.price_source:
        sources["price"] = hw.price_source
    return sources


# Rendering -----------------------------------------------------------------------
def _echo_rich(*renderables: RenderableType) -> None:
    """Render with rich, then write through click.echo (so CliRunner captures it and pipes get no colour).

    Wide (160 columns) when stdout is not a terminal and COLUMNS is unset, so piped tables do not wrap.
    """
    tty = sys.stdout.isatty()
    width = shutil.get_terminal_size((160, 24)).columns if tty or "COLUMNS" in os.environ else 160
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, force_terminal=tty, color_system="auto" if tty else None)
    for renderable in renderables:
        console.print(renderable)
    click.echo(buffer.getvalue(), nl=False)


def _tflops(flops_per_s: float | None) -> str:
    return "-" if flops_per_s is None else f"{flops_per_s / 1e12:,.6g}"


def _bf16_cell(hw: HardwareProfile) -> str:
    peaks = hw.accelerator.peak_flops_per_s
    if "bf16" in peaks:
        return _tflops(peaks["bf16"])
    return f"{_tflops(peaks['fp16'])} (fp16)"


def _catalog_table(entries: list[Loaded]) -> Table:
    table = Table(
        title="Hardware catalog",
        caption="Peaks dense (no sparsity). Link bandwidths per GPU, one direction (intra: within a node, "
        "inter: to other nodes). "
        "Details: planner hardware show ID",
        caption_justify="left",
    )
    table.add_column("id", no_wrap=True, style="bold")
    table.add_column("accelerator", no_wrap=True)
    for header in ("memory GiB", "HBM TB/s", "bf16 TFLOP/s", "fp8 TFLOP/s", "GPUs/node",
                   "intra GB/s (1-dir)", "inter GB/s (1-dir)"):
        table.add_column(header, justify="right")
    for entry in entries:
        hw: HardwareProfile = entry.spec
        acc = hw.accelerator
        table.add_row(
            Text(entry.id),
            Text(acc.name),
            f"{acc.memory_bytes / GIB:.1f}",
            f"{acc.memory_bandwidth_bytes_per_s / 1e12:.2f}",
            _bf16_cell(hw),
            _tflops(acc.peak_flops_per_s.get("fp8")),
            str(hw.node.gpus_per_node),
            f"{hw.node.bandwidth_bytes_per_s / 1e9:g} ({hw.node.link_kind})",
            f"{hw.inter_node_bandwidth_bytes_per_s / 1e9:g}",
        )
    return table


def _key_values(title: str, rows: list[tuple[str, str]]) -> Table:
    table = Table(title=title, title_justify="left", show_header=False, box=None, padding=(0, 2))
    table.add_column(style="bold", no_wrap=True)
    table.add_column()
    for key, value in rows:
        table.add_row(Text(key), Text(value))
    return table


def _profile_renderables(entry: Loaded) -> list[RenderableType]:
    hw: HardwareProfile = entry.spec
    acc, node, net = hw.accelerator, hw.node, hw.network
    out: list[RenderableType] = []

    head = [("id", entry.id), ("name", hw.name)]
    if hw.description:
        head.append(("description", hw.description))
    if entry.aliases:
        head.append(("aliases", ", ".join(entry.aliases)))
    head.append(("loaded from", entry.source))
    out.append(_key_values(f"Hardware profile {entry.id}", head))

    accel = [
        ("accelerator", acc.name),
        ("memory", f"{acc.memory_bytes:,} bytes = {acc.memory_bytes / GIB:.2f} GiB = {acc.memory_bytes / 1e9:.2f} GB"),
        ("memory bandwidth", f"{acc.memory_bandwidth_bytes_per_s / 1e12:.3g} TB/s"),
    ]
    accel += [(f"peak {dtype} (dense)", f"{flops / 1e12:,.6g} TFLOP/s") for dtype, flops in acc.peak_flops_per_s.items()]
    out.append(_key_values("Accelerator", accel))

    nodes = [
        ("GPUs per node", str(node.gpus_per_node)),
        ("link", node.link_kind),
        ("bandwidth per GPU", f"{node.bandwidth_bytes_per_s / 1e9:g} GB/s one direction "
                              f"({2 * node.bandwidth_bytes_per_s / 1e9:g} GB/s bidirectional)"),
        ("latency per step", f"{node.latency_s * 1e6:g} us"),
    ]
    out.append(_key_values("Node (intra-node fabric)", nodes))

    if net is None:
        out.append(_key_values("Network", [("scale-out", "none: a single-node system; "
                                                            "cross-node groups use the node figures")]))
    else:
        network: list[tuple[str, str]] = [("kind", net.kind)]
        if net.nics_per_node and net.nic_bits_per_s:
            network.append(("NICs per node", f"{net.nics_per_node} x {net.nic_bits_per_s / 1e9:g} Gb/s"))
        network += [
            ("bandwidth per GPU", f"{net.bandwidth_bytes_per_s / 1e9:g} GB/s one direction"),
            ("latency per step", f"{net.latency_s * 1e6:g} us"),
        ]
        out.append(_key_values("Network (scale-out)", network))

    if hw.price_per_gpu_hour_usd is not None:
        out.append(_key_values("Price", [("per GPU-hour", f"${hw.price_per_gpu_hour_usd:.2f}")]))

    eff = hw.efficiency
    table = Table(title="Efficiency (achievable fraction of the datasheet figure)", title_justify="left")
    table.add_column("what", no_wrap=True, style="bold")
    table.add_column("value", no_wrap=True)
    table.add_column("note")
    fixed_flop = peak_16bit_flops(hw) * GEMM_FIXED_SECONDS
    table.add_row("matmul", Text(f"{eff.matmul.peak_fraction:g} x GEMM/(GEMM + {fixed_flop:.3g} FLOP)"),
                  Text(eff.matmul.note))
    if eff.matmul_fp8 is not None:
        table.add_row("matmul fp8", f"{eff.matmul_fp8.fraction:g} of the fp8 peak", Text(eff.matmul_fp8.note))
    if eff.matmul_fp4 is not None:
        table.add_row("matmul fp4", f"{eff.matmul_fp4.fraction:g} of the fp4 peak", Text(eff.matmul_fp4.note))
    half_causal, half_full = attention_half_saturation_tokens(hw)
    curve = f"{eff.attention.fraction:g} x s/(s + {half_causal:g}) causal, s/(s + {half_full:g}) full mask"
    for label, fraction in (("attention", eff.attention), ("memory bandwidth", eff.memory_bandwidth),
                            ("intra-node link", eff.intra_node_link), ("inter-node link", eff.inter_node_link)):
        table.add_row(label, curve if label == "attention" else f"{fraction.fraction:g}", Text(fraction.note))
        if label == "attention" and eff.attention_flash2 is not None:
            table.add_row("attention (FA2)", f"{eff.attention_flash2.fraction:g}", Text(eff.attention_flash2.note))
        if label == "attention" and eff.attention_fp8 is not None:
            table.add_row("attention (fp8)", _fp8_attention_cell(eff.attention_fp8), Text(eff.attention_fp8.note))
    if acc.power_limit is not None:
        limit = acc.power_limit
        table.add_row("power limit", f"{limit.watts:g} W of {limit.nominal_watts:g} W: compute-bound kernels "
                      f"x {limit.compute_fraction:g}", Text(limit.note))
    out.append(table)

    sources = Table(title="Sources", title_justify="left")
    sources.add_column("block", no_wrap=True, style="bold")
    sources.add_column("where the figures come from")
    for block, text in _sources(hw).items():
        sources.add_row(block, Text(text))
    out.append(sources)
    return out


def _fp8_attention_cell(table: Fp8AttentionSpeedup) -> str:
    """The measured fp8 speed-ups, one line per head dimension and scaling: 'hd128 per-tensor 1.01-1.37x'."""
    lines = []
    for name, rows in (("per-tensor", table.per_tensor), ("MXFP8", table.mxfp8)):
        for dim, row in zip(table.head_dims, rows or []):
            lines.append(f"hd{dim} {name} {min(row):g}-{max(row):g}x")
    lines.append(f"({table.block_tokens[0]:,}-{table.block_tokens[-1]:,} keys)")
    return "\n".join(lines)


# Commands --------------------------------------------------------------------------
@cli.group("hardware", invoke_without_command=True)
@format_option()
@click.pass_context
def hardware(ctx: click.Context, fmt: str) -> None:
    """List the built-in hardware profiles (GPU, node, network, efficiencies).

    Peaks are dense FLOP/s; link bandwidths are per GPU in ONE direction (half
    the bidirectional figure datasheets quote). Use 'planner hardware show ID'
    for one profile with its efficiency notes and sources.

    \b
    Examples:
      planner hardware
      planner hardware --format json
    """
    if ctx.invoked_subcommand is not None:
        return
    entries = hardware_catalog()
    if fmt == "json":
        echo_json([profile_summary(entry) for entry in entries])
    else:
        _echo_rich(_catalog_table(entries))


@hardware.command("show", short_help="Show one profile with its efficiencies and sources.")
@click.argument("hw_ref", metavar="HW")
@format_option()
def show(hw_ref: str, fmt: str) -> None:
    """Show one hardware profile: figures, efficiencies with their notes, and sources.

    HW is a catalog id or alias (see 'planner hardware') or a YAML profile file.

    \b
    Examples:
      planner hardware show h100-sxm
      planner hardware show my-cluster.yaml --format json
    """
    entry = load_hardware(hw_ref)
    if fmt == "json":
        echo_json(profile_details(entry))
    else:
        _echo_rich(*_profile_renderables(entry))
