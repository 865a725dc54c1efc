"""`planner search --export FORMAT DIR`: the winner's launch configuration, read back by the importers to the
same layout, and estimated again to the same step time and memory; clean errors (exit 2) otherwise. Also the
layout-independent options search shares with `planner estimate`."""

from __future__ import annotations

import json

import click
import pytest

from planner.cli.estimate import estimate_command
from planner.cli.search import EXPORT_FORMATS, search_cmd
from planner.engines.automodel import import_automodel
from planner.engines.deepspeed import import_deepspeed
from planner.engines.export import DEFAULT_NAMES
from planner.engines.export import EXPORT_FORMATS as EXPORTER_FORMATS
from planner.engines.hf_trainer import import_hf_trainer, parse_command
from planner.engines.load import load_model, parse_toml, parse_yaml
from planner.engines.megatron import import_megatron, split_launch_text
from planner.engines.megatron_bridge import bridge_tokens, parse_bridge_text
from planner.engines.torchtitan import import_torchtitan
from planner.engines.torchtitan_registry import read_registry
from planner.specs.layout import Layout
from planner.training.rules import resolve_layout

SHARED = ("dtype", "grad_dtype", "optimizer", "flash_attention", "overlap_grad_reduce", "tp_comm_overlap")

# (model, gpus, global batch, seq len, extra search options); run for every format that can express them
CASES = [
    ("llama-3.1-8b", 16, 64, 4096, ()),
    ("llama-3.1-8b", 16, 64, 4096, ("--grad-dtype", "fp32", "--no-overlap-grad-reduce", "--tp-comm-overlap",
                                    "--tp", "2,4")),
    ("llama-3.1-8b", 16, 64, 4096, ("--optimizer", "sgd", "--dtype", "fp8", "--no-flash-attention")),
    ("llama-3.1-70b", 64, 128, 8192, ("--tp", "8", "--pp", "4", "--interleave", "2", "--zero", "1")),
    ("mixtral-8x7b", 64, 256, 4096, ("--tp", "2", "--pp", "2")),
]


def _for_format(fmt: str, case: tuple) -> tuple | None:
    """The case as searched for `fmt`: torchtitan trains with Adam only, and splits most layer counts into
    2 virtual stages per rank but not into every count Megatron-LM can (those are export errors, tested below)."""
    extra = case[4]
    if fmt == "deepspeed":  # DeepSpeed runs no expert parallelism or interleaving from its config (export errors)
        extra = _without(extra, "--interleave")
        extra = (*extra, "--zero", "0,1") if "--pp" in extra and "--zero" not in extra else extra
        return (*case[:4], (*extra, "--ep", "1", "--interleave", "1", "--sequence-parallel", "off"))
    if fmt == "hf_trainer":  # the Trainer runs data parallelism (DDP, FSDP) with bf16/fp16 only
        if "fp8" in extra or "--no-flash-attention" in extra:
            return None
        for flag in ("--tp", "--pp", "--interleave", "--zero", "--grad-dtype"):
            extra = _without(extra, flag)
        # the Trainer keeps fp32 gradients under autocast (the exporter changes bf16 to fp32): search with them
        return (*case[:4], (*extra, "--tp", "1", "--pp", "1", "--cp", "1", "--ep", "1", "--zero", "0,2,3",
                            "--recompute", "none,full", "--grad-dtype", "fp32"))
    if fmt not in ("torchtitan", "torchtitan_registry"):
        return case
    if "sgd" in extra:
        return None
    if case[0].startswith("mixtral"):  # no torchtitan flavor: its transformers backend runs MoE with FSDP only
        if fmt == "torchtitan_registry":  # torchtitan main's registries build torchtitan's own models only
            return None
        return (*case[:4], ("--tp", "1", "--pp", "1", "--ep", "1", "--interleave", "1"))
    return (*case[:4], extra if "--interleave" in extra else (*extra, "--interleave", "1,2"))


def _without(extra: tuple, flag: str) -> tuple:
    """`extra` without `flag` and its value."""
    out: list = []
    skip = False
    for item in extra:
        if skip:
            skip = False
        elif item == flag:
            skip = True
        else:
            out.append(item)
    return tuple(out)


PARAMS = [pytest.param(fmt, *_for_format(fmt, case), id=f"{fmt}-{case[0]}-{n}") for n, case in enumerate(CASES)
          for fmt in EXPORT_FORMATS if _for_format(fmt, case) is not None]


def _search(run_cli, model_id, gpus, batch, seq, extra, *more):
    args = ["search", "--model", model_id, "--hardware", "h100-sxm", "--gpus", gpus, "--global-batch", batch,
            "--seq-len", seq, *extra, *more]
    return run_cli(*args)


def _import(fmt: str, path, model, gpus: int) -> Layout:
    text = path.read_text()
    if fmt == "megatron":
        got = import_megatron(split_launch_text(text, path.name), gpus=gpus, given={}, model=model, source=path.name)
    elif fmt == "megatron_bridge":
        data = parse_bridge_text(text, path.name)
        assert data is not None
        got = import_megatron(bridge_tokens(data, path.name)[0], gpus=gpus, given={}, model=model, source=path.name)
    elif fmt == "deepspeed":
        got = import_deepspeed(json.loads(text), gpus=gpus, given={}, source=path.name)
    elif fmt == "hf_trainer":
        got = import_hf_trainer(parse_command(text, path.name), None, gpus=gpus, given={}, source=path.name)
    elif fmt == "automodel":
        got = import_automodel(parse_yaml(text, path.name), gpus=gpus, given={}, model=model, source=path.name)
    elif fmt == "torchtitan_registry":
        registry = read_registry(text, next(line.split("def ")[1].split("(")[0] for line in text.splitlines()
                                            if line.startswith("def ")), source=path.name)
        got = import_torchtitan(registry.config, [], gpus=gpus, given={}, model=model, source=path.name)
    else:
        got = import_torchtitan(parse_toml(text, path.name), [], gpus=gpus, given={}, model=model, source=path.name)
    return resolve_layout(model, gpus, **got.fields)


def _estimate_args(model_id: str, layout: Layout) -> list[str]:
    """`planner estimate` flags that give exactly `layout`."""
    args = ["estimate", "--model", model_id, "--hardware", "h100-sxm", "--gpus", str(layout.gpus), "--format", "json"]
    for key in ("tp", "pp", "cp", "dp", "ep", "zero", "micro_batch", "global_batch", "seq_len", "interleave"):
        args += [f"--{key.replace('_', '-')}", str(getattr(layout, key))]
    args += ["--recompute", layout.recompute, "--schedule", layout.schedule, "--dtype", layout.dtype,
             "--grad-dtype", layout.grad_dtype, "--optimizer", layout.optimizer, "--engine", layout.engine]
    for flag, on in (("sequence-parallel", layout.sequence_parallel), ("flash-attention", layout.flash_attention),
                     ("overlap-grad-reduce", layout.overlap_grad_reduce), ("tp-comm-overlap", layout.overlap_tp_comm)):
        args.append(f"--{flag}" if on else f"--no-{flag}")
    if layout.recompute_layers_per_stage is not None:
        args += ["--recompute-layers", str(layout.recompute_layers_per_stage)]
    args += ["--etp", str(layout.etp)] if layout.etp is not None else []
    if layout.dtype == "fp8":
        args += ["--fp8-recipe", layout.fp8_recipe,
                 "--fp8-param-gather" if layout.fp8_param_gather else "--no-fp8-param-gather"]
    args += ["--moe-dispatcher", layout.moe_dispatcher,
             "--moe-ep-overlap" if layout.moe_ep_overlap else "--no-moe-ep-overlap",
             "--optimizer-state-dtype", layout.optimizer_state_dtype]
    return args


@pytest.mark.parametrize(("fmt", "model_id", "gpus", "batch", "seq", "extra"), PARAMS)
def test_search_export_import_estimate_roundtrip(run_cli, tmp_path, fmt, model_id, gpus, batch, seq, extra):
    out = tmp_path / "launch" / "configs"  # created, parents too
    # searched under the engine that runs the file, so the winner is a layout that engine runs
    result = _search(run_cli, model_id, gpus, batch, seq, extra, "--format", "json", "--top", "1",
                     "--engine", {"hf_trainer": "fsdp", "torchtitan_registry": "torchtitan",
                                   "megatron_bridge": "megatron"}.get(fmt, fmt), "--export",
                     fmt, out)
    assert result.exit_code == 0, result.output
    best = json.loads(result.stdout)["candidates"][0]  # stdout stays the JSON document
    path = out / DEFAULT_NAMES[fmt]
    assert f"wrote {path}" in result.stderr.splitlines()
    assert "error" not in result.stderr

    model = load_model(model_id).spec
    cfg = {k: v for k, v in best["config"].items() if k not in ("gpus", "num_micro_batches")}
    winner = Layout(**cfg)
    imported = _import(fmt, path, model, gpus)
    changed = {name for name in Layout.model_fields if getattr(imported, name) != getattr(winner, name)}
    if fmt in ("torchtitan", "torchtitan_registry"):  # torchtitan fixes some settings itself; each change is noted
        assert changed <= {"grad_dtype", "zero", "sequence_parallel", "overlap_grad_reduce", "flash_attention"}, changed
        assert bool(changed) == ("note:" in result.stderr) == ("# Note:" in path.read_text())
    elif fmt == "hf_trainer":  # DDP/FSDP keep fp32 gradients and overlap their reduction; each change is noted
        assert changed <= {"grad_dtype", "overlap_grad_reduce", "overlap_tp_comm"}, changed
        assert bool(changed) == ("note:" in result.stderr) == ("Note:" in path.read_text())
    elif fmt == "automodel":  # FSDP2 (ZeRO-1 under PP), bf16 gradients, no TP overlap; each change is noted
        assert changed <= {"grad_dtype", "zero", "overlap_grad_reduce", "overlap_tp_comm"}, changed
        assert bool(changed) == ("note:" in result.stderr) == ("Note:" in path.read_text())
    elif fmt == "megatron_bridge":  # the precision recipe's gradient reduction and fp8 gathering; each noted
        assert changed <= {"grad_dtype", "fp8_param_gather"}, changed
        assert bool(changed) == ("note:" in result.stderr) == ("Note:" in path.read_text())
    elif fmt == "deepspeed":  # AutoTP has no sequence parallelism or TP overlap; each change is noted
        assert changed <= {"overlap_tp_comm", "grad_dtype", "zero"}, changed
        assert bool(changed) == ("note:" in result.stderr) == ("Note:" in path.read_text())
    else:
        assert imported == winner, changed

    again = run_cli(*_estimate_args(model_id, imported))
    assert again.exit_code == 0, again.output
    est = json.loads(again.stdout)
    if not changed:
        assert est["time"]["step_seconds"] == pytest.approx(best["time"]["step_seconds"], rel=1e-9)
        assert est["memory"]["total_bytes"] == pytest.approx(best["memory"]["total_bytes"], rel=1e-9)
        assert est["config"] == best["config"]
    # the header carries planner's prediction for the layout in the file
    text = path.read_text()
    peak_gib = max(s["total_bytes"] for s in est["stages"]) / 2**30
    assert f"Predicted peak memory: {peak_gib:.1f} GiB per GPU" in text
    assert f"Predicted step time: {est['time']['step_seconds']:.3f} s" in text
    assert est["fits"] is True


def test_torchtitan_export_of_a_layout_it_runs_unchanged(run_cli, tmp_path):
    """With the settings torchtitan fixes given to the search, the file holds exactly the winner."""
    result = _search(run_cli, "llama-3.1-8b", 16, 64, 8192, ("--grad-dtype", "fp32", "--zero", "0,3", "--tp", "1"),
                     "--format", "json", "--top", "1", "--engine", "torchtitan", "--export", "torchtitan", tmp_path)
    assert result.exit_code == 0, result.output
    best = json.loads(result.stdout)["candidates"][0]
    assert "note:" not in result.stderr
    model = load_model("llama-3.1-8b").spec
    cfg = {k: v for k, v in best["config"].items() if k not in ("gpus", "num_micro_batches")}
    assert _import("torchtitan", tmp_path / "torchtitan.toml", model, 16) == Layout(**cfg)


def test_table_output_unchanged_and_path_on_stderr(run_cli, tmp_path):
    base = ("llama-3.1-8b", 16, 64, 4096, ())
    plain = _search(run_cli, *base, "--top", "3")
    exported = _search(run_cli, *base, "--top", "3", "--export", "megatron", tmp_path)
    assert exported.exit_code == 0, exported.output
    strip = [line for line in exported.stdout.splitlines() if "Search took" not in line]
    assert strip == [line for line in plain.stdout.splitlines() if "Search took" not in line]
    assert str(tmp_path) not in exported.stdout
    assert exported.stderr.strip() == f"wrote {tmp_path / 'megatron_args.sh'}"


def _one_error_line(result, *needles: str) -> None:
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_export_when_nothing_fits_is_an_error_with_nothing_printed(run_cli, tmp_path):
    out = tmp_path / "out"
    result = _search(run_cli, "llama-3.1-405b", 64, 256, 8192, (), "--export", "megatron", out)
    _one_error_line(result, "no layout fits; run without --export to see what to change")
    assert result.stdout == ""  # an error prints no table (docs/errors.md); the search without --export does
    assert not out.exists()


def test_failed_export_leaves_no_plot_and_prints_no_table(run_cli, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    plot = tmp_path / "p.png"
    result = _search(run_cli, "llama-3.1-8b", 8, 64, 4096, (), "--plot", plot, "--export", "megatron",
                     blocker / "sub")
    _one_error_line(result, f"{blocker / 'sub' / 'megatron_args.sh'}: cannot write")
    assert result.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]


@pytest.mark.parametrize(
    ("extra", "fmt", "needle"),
    [
        (("--dtype", "fp16"), "torchtitan", "fp16"),
        (("--optimizer", "sgd"), "torchtitan", "sgd"),
        (("--schedule", "gpipe", "--pp", "2"), "megatron", "no GPipe schedule"),
        (("--tp", "2", "--pp", "2", "--interleave", "4"), "torchtitan", "8 virtual stages"),
        # torchtitan keeps fp32 gradients: the best bf16-gradient layout at tp 2 (72 GiB of 75) no longer fits
        (("--zero", "0", "--grad-dtype", "bf16", "--tp", "2"), "torchtitan", "--grad-dtype fp32"),
    ],
)
def test_export_the_engine_cannot_run_is_an_error(run_cli, tmp_path, extra, fmt, needle):
    gpus = 8 if fmt == "torchtitan" and extra[:2] == ("--zero", "0") else 16
    result = _search(run_cli, "llama-3.1-8b", gpus, 64, 4096, extra, "--export", fmt, tmp_path / "out")
    _one_error_line(result, f"cannot export the best layout to {fmt}", needle)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("value", "needle"), [(("foo", "d"), "'foo' is not one of"), (("megatron",), "requires 2")])
def test_export_bad_arguments(run_cli, tmp_path, value, needle):
    result = _search(run_cli, "llama-3.1-8b", 16, 64, 4096, (), "--export", *value)
    _one_error_line(result, needle)


def test_export_into_a_file_is_an_error(run_cli, tmp_path):
    target = tmp_path / "a_file"
    target.write_text("")
    _one_error_line(_search(run_cli, "llama-3.1-8b", 16, 64, 4096, (), "--export", "deepspeed", target), "is a file")


def test_export_formats_match_the_exporters():
    assert tuple(EXPORT_FORMATS) == tuple(EXPORTER_FORMATS)


# the layout-independent options of `planner estimate` -----------------------------------------------------------
def _params(command: click.Command) -> dict[str, click.Parameter]:
    return {p.name: p for p in command.params}


@pytest.mark.parametrize("name", SHARED)
def test_search_takes_estimates_layout_independent_options(name):
    mine, theirs = _params(search_cmd)[name], _params(estimate_command)[name]
    assert (mine.opts, mine.secondary_opts, mine.default, mine.help) == (
        theirs.opts, theirs.secondary_opts, theirs.default, theirs.help)
    assert mine.type.to_info_dict() == theirs.type.to_info_dict()


@pytest.mark.parametrize(
    "extra",
    [
        ("--optimizer", "sgd"),
        ("--no-overlap-grad-reduce", "--zero", "0,1"),  # ZeRO 3 is modelled as always overlapped
        ("--no-tp-comm-overlap", "--tp", "2,4"),  # the search overlaps TP where the engine can
        ("--grad-dtype", "fp32", "--no-flash-attention", "--dtype", "fp8"),
        ("--grad-dtype", "fp16", "--dtype", "fp16"),
    ],
)
def test_options_reach_the_grid(run_cli, extra):
    """Each option changes what the search costs and is in the candidates' layouts (that the top candidate then
    equals `planner estimate` with the same options is tested in test_search.py)."""
    base = ("llama-3.1-8b", 16, 64, 4096)
    plain = json.loads(_search(run_cli, *base, (), "--format", "json", "--top", "1").stdout)
    result = _search(run_cli, *base, extra, "--format", "json", "--top", "1")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    best = doc["candidates"][0]
    if "fp16" not in extra:  # fp16 costs what bf16 does
        assert best["time"]["step_seconds"] != plain["candidates"][0]["time"]["step_seconds"] or \
            best["memory"]["total_bytes"] != plain["candidates"][0]["memory"]["total_bytes"]
    cfg = best["config"]
    for flag, key in (("--optimizer", "optimizer"), ("--grad-dtype", "grad_dtype"), ("--dtype", "dtype")):
        if flag in extra:
            assert cfg[key] == extra[extra.index(flag) + 1] == doc["problem"][key]
    assert cfg["overlap_grad_reduce"] is ("--no-overlap-grad-reduce" not in extra)
    assert cfg["overlap_tp_comm"] is (cfg["sequence_parallel"] and "--no-tp-comm-overlap" not in extra)
    assert cfg["flash_attention"] is ("--no-flash-attention" not in extra)


def test_folded_winner_exports_to_megatron(run_cli, tmp_path):
    result = _search(run_cli, "mixtral-8x7b", 64, 256, 4096, ("--tp", "2", "--pp", "2", "--etp", "1"), "--format",
                     "json", "--top", "1", "--export", "megatron", tmp_path)
    assert result.exit_code == 0, result.output
    cfg = {k: v for k, v in json.loads(result.stdout)["candidates"][0]["config"].items()
           if k not in ("gpus", "num_micro_batches")}
    winner = Layout(**cfg)
    assert winner.expert_tp == 1 and winner.tp == 2
    assert _import("megatron", tmp_path / DEFAULT_NAMES["megatron"], load_model("mixtral-8x7b").spec, 64) == winner
