"""`planner models` (list the catalog) and `planner models show MODEL`."""

from __future__ import annotations

import io
import shutil
import sys
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from planner.cli import cli
from planner.cli.options import echo_json, format_option
from planner.engines.load import Loaded, load_model, model_catalog
from planner.physics.params import count_params, kv_cache_bytes_per_token, linear_state_bytes_per_sequence


def model_summary(entry: Loaded) -> dict[str, Any]:
    """The JSON object for one model: `id` plus shape and size figures (keys are stable)."""
    spec = entry.spec
    counts = count_params(spec)
    kv_bytes = kv_cache_bytes_per_token(spec, "bf16")
    return {
        "id": entry.id,
        "name": spec.name,
        "source": spec.source,
        "aliases": list(entry.aliases),
        "params": counts.total,
        "active_params": counts.active,
        "num_layers": spec.num_layers,
        "hidden_size": spec.hidden_size,
        "num_attention_heads": spec.num_attention_heads,
        "num_kv_heads": spec.kv_heads,
        "head_dim": spec.head_size if spec.mla is None else None,  # MLA heads: see "mla"
        "ffn_hidden_size": spec.ffn_hidden_size,
        "vocab_size": spec.vocab_size,
        "max_seq_len": spec.max_seq_len,
        "sliding_window_tokens": spec.sliding_window_tokens,
        "sliding_window_layers": spec.sliding_window_layers,
        "kv_cache_bytes_per_token": int(kv_bytes) if float(kv_bytes).is_integer() else kv_bytes,
        "moe": spec.moe.model_dump() if spec.moe is not None else None,
        "mla": spec.mla.model_dump() if spec.mla is not None else None,
        "sparse_attention": spec.sparse_attention.model_dump() if spec.sparse_attention is not None else None,
        "linear_attention": spec.linear_attention.model_dump() if spec.linear_attention is not None else None,
        "num_linear_layers": spec.num_linear_layers,
        "linear_state_bytes_per_sequence": int(linear_state_bytes_per_sequence(spec)),
    }


def format_count(n: int) -> str:
    """1,557,611,200 -> '1.6 B'; 124,439,808 -> '124.4 M'."""
    if n >= 1_000_000_000:
        return f"{n / 1e9:.1f} B"
    if n >= 1_000_000:
        return f"{n / 1e6:.1f} M"
    return f"{n:,}"


def _echo_rich(renderable: Any) -> None:
    """Render with rich into a string, then print through click (so CliRunner captures it)."""
    interactive = sys.stdout.isatty()
    width = shutil.get_terminal_size((160, 24)).columns if interactive else 160
    buffer = io.StringIO()
    Console(file=buffer, width=width, force_terminal=interactive, no_color=not interactive).print(renderable)
    click.echo(buffer.getvalue(), nl=False)


def _context(tokens: int) -> str:
    """Tokens with thousands separators; millions (Llama 4 Scout's 10,485,760) rounded to 0.1 M to keep rows on
    one line ('planner models show ID' prints the exact count)."""
    return f"{tokens:,}" if tokens < 1_000_000 else f"{tokens / 1e6:.1f} M"


def _catalog_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(title="Model catalog", title_justify="left",
                  caption="context: max_seq_len in tokens. KV cache per token, MoE and MLA details: "
                  "planner models show ID", caption_justify="left")
    for header in ("id", "name", "params", "active", "layers", "hidden", "heads/kv", "ffn", "vocab", "context",
                   "aliases"):
        table.add_column(header, justify="right" if header not in ("id", "name", "aliases") else "left",
                         no_wrap=header != "aliases")
    for row in rows:
        ffn = row["moe"]["moe_ffn_hidden_size"] if row["moe"] else row["ffn_hidden_size"]
        table.add_row(
            row["id"], row["name"], format_count(row["params"]), format_count(row["active_params"]),
            str(row["num_layers"]), str(row["hidden_size"]),
            f"{row['num_attention_heads']}/{row['num_kv_heads']}",
            f"{ffn}" + (f" x{row['moe']['num_experts']}" if row["moe"] else ""),
            f"{row['vocab_size']:,}", _context(row["max_seq_len"]), ", ".join(row["aliases"]),
        )
    return table


def _detail_table(row: dict[str, Any]) -> Table:
    table = Table(title=f"{row['id']}: {row['name']}", title_justify="left", show_header=False)
    table.add_column("field")
    table.add_column("value")
    table.add_row("parameters", f"{row['params']:,} ({format_count(row['params'])})")
    table.add_row("active per token", f"{row['active_params']:,} ({format_count(row['active_params'])})")
    for key in ("num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "head_dim",
                "ffn_hidden_size", "vocab_size", "max_seq_len"):
        if row[key] is not None:
            table.add_row(key, f"{row[key]:,}")
    if row["sliding_window_tokens"]:
        table.add_row("sliding window", f"{row['sliding_window_tokens']:,} tokens on {row['sliding_window_layers']} "
                      f"of {row['num_layers']} layers")
    if row.get("linear_attention"):
        la = row["linear_attention"]
        table.add_row("linear attention", f"Gated DeltaNet on {row['num_linear_layers']} of {row['num_layers']} "
                      f"layers (attention every {la['full_attention_interval']}th): {la['num_key_heads']} key x "
                      f"{la['num_value_heads']} value heads of {la['key_head_dim']} / {la['value_head_dim']}, "
                      f"conv {la['conv_kernel']}")
        table.add_row("GDN state", f"{row['linear_state_bytes_per_sequence']:,} bytes/sequence "
                      f"({la['state_bytes_per_element']}-byte elements)")
    table.add_row("KV cache (bf16)", f"{row['kv_cache_bytes_per_token']:,} bytes/token")
    if row["moe"]:
        moe = row["moe"]
        shared_width = moe.get("shared_expert_ffn_hidden_size")
        shared = f"{moe['num_shared_experts']} shared" + (f" x {shared_width}" if shared_width else "")
        if moe.get("shared_expert_gate"):
            shared += " (gated)"
        table.add_row("experts", f"{moe['num_experts']} x {moe['moe_ffn_hidden_size']}, top-{moe['experts_per_token']}, "
                      f"{shared}, {moe['num_dense_layers']} dense layers")
    if row["mla"]:
        table.add_row("MLA", ", ".join(f"{k}={v}" for k, v in row["mla"].items()))
    if row.get("sparse_attention"):
        dsa = row["sparse_attention"]
        table.add_row("sparse attention", f"DeepSeek Sparse Attention: indexer {dsa['index_heads']} heads x "
                      f"{dsa['index_head_dim']}, top-{dsa['topk']:,} keys per query")
    table.add_row("source", row["source"] or "")
    return table


@cli.group("models", invoke_without_command=True)
@format_option()
@click.pass_context
def models(ctx: click.Context, fmt: str) -> None:
    """List the built-in model catalog.

    \b
    Example:
      planner models
      planner models --format json
    """
    if ctx.invoked_subcommand is not None:
        return
    rows = [model_summary(entry) for entry in model_catalog()]
    if fmt == "json":
        echo_json(rows)
    else:
        _echo_rich(_catalog_table(rows))


@models.command("show")
@click.argument("model_ref", metavar="MODEL")
@format_option()
def show(model_ref: str, fmt: str) -> None:
    """Show one model: a catalog id or alias, our YAML spec, or a HuggingFace config.json.

    \b
    Example:
      planner models show llama-3.1-70b
      planner models show ./config.json --format json
    """
    row = model_summary(load_model(model_ref))
    if fmt == "json":
        echo_json(row)
    else:
        _echo_rich(_detail_table(row))
