"""Megatron-LM's MODEL_ARGS YAML (its functional and release tests, the Megatron MoE model zoo) read as the
harness that runs it reads it: the environment substituted into the text, then each `--flag: value` passed to
pretrain_gpt.py (tests/functional_tests/shell_test_utils/_run_training.sh @ Megatron-LM d98e8a64; the zoo's
sbatch_benchmarking.sh @ yanring/Megatron-MoE-ModelZoo e8650517).

Fixtures: tests/fixtures/engines/upstream/megatron/ and .../megatron/model_args/ (repository, path and commit in
tests/fixtures/engines/upstream/SOURCES.md).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from planner.engines.load import load_model, parse_yaml
from planner.engines.megatron import (
    import_megatron,
    model_args_script,
    padded_vocab,
    parse_model_args_text,
    read_launch_text,
    read_model_args,
)
from planner.errors import PlannerError
from planner.physics.params import count_params

UPSTREAM = Path(__file__).resolve().parents[1] / "fixtures" / "engines" / "upstream" / "megatron"
MODEL_ARGS = UPSTREAM / "model_args"
ZOO = MODEL_ARGS / "moe_model_zoo_qwen3_235b_a22b.yaml"
# best_practice/qwen3/run_h100_235b.sh of the model zoo (same commit) sets TP=2 PP=8 VPP=4 EP=32 MBS=1 GBS=2048
# SEQ_LEN=4096 MOE_GROUPED_GEMM=true on 32 nodes; the file's --num-layers-per-virtual-pipeline-stage takes
# LAYERS_PER_VP: (94 layers + embedding + loss) / PP 8 = 12 per stage, 3 per virtual stage gives VPP 4
ZOO_VARIABLES = "TP=2 PP=8 LAYERS_PER_VP=3 EP=32 CP=1 MBS=1 GBS=2048 SEQ_LEN=4096 MOE_GROUPED_GEMM=true"
ZOO_NEXT = MODEL_ARGS / "moe_model_zoo_qwen3_next_80b_a3b.yaml"
ZOO_NEXT_VARIABLES = "TP=1 PP=4 LAYERS_PER_VP=4 EP=32 CP=1 MBS=1 GBS=256 SEQ_LEN=4096 MOE_GROUPED_GEMM=true"

# a 4-layer model's flags, and DeepSeek Sparse Attention's over MLA, for the tests that build arguments by hand
TINY = ["--num-layers", "4", "--hidden-size", "256", "--num-attention-heads", "4", "--seq-length", "1024",
        "--max-position-embeddings", "1024", "--micro-batch-size", "1", "--global-batch-size", "8", "--bf16",
        "--vocab-size", "1024"]
TINY_DSA = ["--multi-latent-attention", "--q-lora-rank", "64", "--kv-lora-rank", "32",
            "--experimental-attention-variant", "dsa", "--dsa-indexer-n-heads", "4", "--dsa-indexer-head-dim", "32",
            "--dsa-indexer-topk", "64"]

FILES = [
    UPSTREAM / "a2a_ovlp_8experts_etp1_ep4.model_config.yaml",
    UPSTREAM / "tp4_ep2_etp2_pp2_scoped_cudagraph.model_config.yaml",
    UPSTREAM / "tp2_pp2_ep4_etp1_selective_recompute.model_config.yaml",
    UPSTREAM / "tp2_pp2_cp2_etp4_dp_last.model_config.yaml",
    MODEL_ARGS / "gpt3_mcore_te_tp2_pp2_cp2.yaml",
    MODEL_ARGS / "deepseekv3_proxy_flex_tp1pp4emp16etp1cp1_release.yaml",
    MODEL_ARGS / "gpt3_mcore_te_tp2_pp2_dsa.yaml",
    ZOO,
    ZOO_NEXT,
    MODEL_ARGS / "gpt_grpo_tp1tp2_pp1_dp8_583m_throughputtest.yaml",
    MODEL_ARGS / "gpt3_mcore_te_tp1_pp4_vp1_tunable_overlap.yaml",
    MODEL_ARGS / "gpt3_moe_mcore_te_ep8_resume_torch_dist_dist_muon.yaml",
    MODEL_ARGS / "gpt3_moe_mcore_te_ep8_resume_torch_dist_muon.yaml",
]


def _launcher_words(text: str) -> list[str]:
    """What the functional tests' launcher passes for MODEL_ARGS, written from its shell (not from planner): a
    true value is the bare flag, false is dropped (the zoo's yq filter), a value in [ ] is its space-separated
    items, anything else one word. Flags whose value holds a `$` (a variable left for the harness) are left out."""
    words: list[str] = []
    for flag, value in yaml.safe_load(text)["MODEL_ARGS"].items():
        if value is True:
            words.append(flag)
        elif value is False or value is None or "$" in str(value):
            continue
        elif isinstance(value, str) and value.startswith("["):
            words += [flag, *value.strip("[]").split()]
        else:
            words += [flag, str(value).strip()]
    return words


def _flags_without_variables(tokens: list[str]) -> list[str]:
    """The reader's words less each flag whose value is a variable it could not substitute (marked with NUL)."""
    kept: list[str] = []
    i = 0
    while i < len(tokens):
        j = i + 1
        while j < len(tokens) and not tokens[j].startswith("--"):
            j += 1
        if not any("\x00" in t for t in tokens[i:j]):
            kept += tokens[i:j]
        i = j
    return kept


def _read(path: Path, variables: str = "") -> list[str]:
    text = path.read_text()
    data = parse_model_args_text(text, path.name, variables.split())
    assert data is not None
    tokens, _ = read_launch_text(model_args_script(data, path.name), path.name)
    return tokens


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_model_args_become_the_words_the_launcher_passes(path: Path) -> None:
    variables = {ZOO: ZOO_VARIABLES, ZOO_NEXT: ZOO_NEXT_VARIABLES}.get(path, "")
    expected = _launcher_words(re.sub(r"\$\{?(\w+)\}?", lambda m: dict(
        w.split("=") for w in variables.split()).get(m.group(1), m.group(0)), path.read_text()))
    got = _flags_without_variables(_read(path, variables))
    assert [_number_or_word(w) for w in got] == [_number_or_word(w) for w in expected]


def _number_or_word(word: str) -> float | str:
    """A word as the number it spells, if it spells one: YAML 1.2 (yq, planner) reads `1e-2` as a number that
    planner writes back as 0.01, PyYAML's YAML 1.1 keeps it as the text 1e-2; Megatron's argparse reads both alike."""
    try:
        return float(word)
    except ValueError:
        return word


GRPO = MODEL_ARGS / "gpt_grpo_tp1tp2_pp1_dp8_583m_throughputtest.yaml"


def test_tiktokenizer_file_with_repeated_keys_reads_as_the_harness_runs_it(run_cli) -> None:
    """Megatron-LM's 583M GRPO throughput test: TikTokenizer without --vocab-size (Megatron-Core's TikTokenTokenizer
    then has 2**17 tokens), and three flags given twice, which yq hands to the launcher twice and argparse keeps the
    last of. By hand (GPT defaults: biases, LayerNorm, GeLU MLP of 4h, learned positions, tied embeddings), per layer:
    qkv 1152 x 3456 + 3456, proj 1152^2 + 1152, fc1 1152 x 4608 + 4608, fc2 4608 x 1152 + 1152, two LayerNorms
    4 x 1152 = 15,940,224; embedding 131,072 x 1152 (a multiple of 128 x tp 1 already), positions 1,024 x 1152,
    the final LayerNorm 2,304."""
    result = run_cli("check", "--megatron-args", GRPO, "--hardware", "h100-sxm", "--gpus", "8", "--format", "json")
    assert result.exit_code == 0, result.output
    job = json.loads(result.stdout)[0]
    assert job["params"] == 24 * 15_940_224 + 131_072 * 1152 + 1_024 * 1152 + 2_304
    assert (job["config"]["micro_batch"], job["config"]["global_batch"], job["config"]["seq_len"]) == (1, 16, 1024)
    twice = [w for w in job["warnings"] if "given twice" in w]
    assert len(twice) == 3 and any("'--micro-batch-size' is given twice (lines 19 and 54)" in w for w in twice)
    assert any("--use-checkpoint-args" in w for w in job["warnings"])


def test_tunable_overlap_file_runs_its_five_micro_batches_in_one_group(run_cli) -> None:
    """gpt3_mcore_te_tp1_pp4_vp1_tunable_overlap: 12 layers on pp 4 with one layer per virtual stage (v 3), global
    batch 40 of micro-batches of 4 on dp 2: m = 5, not a multiple of pp, which Megatron-Core's interleaved schedule
    takes in one group of 5 (--microbatch-group-size-per-virtual-pipeline-stage 5). Parameters as in the gpt3 case
    above (12 x 3,152,384 per layer), with GPT-2's 50,257 tokens padded to 50,304 (tp 1): 64,109,568."""
    path = MODEL_ARGS / "gpt3_mcore_te_tp1_pp4_vp1_tunable_overlap.yaml"
    result = run_cli("check", "--megatron-args", path, "--hardware", "h100-sxm", "--gpus", "8", "--format", "json")
    assert result.exit_code == 0, result.output
    job = json.loads(result.stdout)[0]
    config = job["config"]
    assert job["params"] == 12 * 3_152_384 + 50_304 * 512 + 1_024 * 512 + 1_024
    assert (config["pp"], config["dp"], config["interleave"], config["microbatch_group_size"]) == (4, 2, 3, 5)
    without = run_cli("check", "--megatron-args", path, "--hardware", "h100-sxm", "--gpus", "8", "--engine-args",
                      "--microbatch-group-size-per-virtual-pipeline-stage 4")
    assert without.exit_code == 2 and "leaving a last group of at least pp" in without.output


def test_a_repeated_flag_keeps_its_last_value() -> None:
    text = "MODEL_ARGS:\n  --micro-batch-size: 1\n  --bf16: true\n  --micro-batch-size: 2\n"
    data, notes = read_model_args(text, "t.yaml")
    assert data is not None and data["MODEL_ARGS"]["--micro-batch-size"] == 2
    assert notes == ["t.yaml: key '--micro-batch-size' is given twice (lines 2 and 4); the harness passes both and "
                     "Megatron-LM keeps the last value"]


def test_planner_files_still_refuse_a_repeated_key() -> None:
    with pytest.raises(PlannerError, match="duplicate key 'gpus' at lines 1 and 2"):
        parse_yaml("gpus: 8\ngpus: 16\n", "job.yaml")


def test_plain_arguments_and_bridge_files_are_not_model_args() -> None:
    assert parse_model_args_text("--num-layers 4\n--hidden-size 64\n", "args.txt") is None
    assert parse_model_args_text("model:\n  num_layers: 4\ntrain:\n  global_batch_size: 8\n", "run.yaml") is None
    # a line MODEL_ARGS: that is not the top-level mapping of flags is said to be wrong, not read as something else
    with pytest.raises(PlannerError, match="MODEL_ARGS must be a mapping"):
        parse_model_args_text("MODEL_ARGS:\n  - --bf16\n", "t.yaml")


def test_gpt3_functional_test_reads_its_layout_and_exact_model(run_cli) -> None:
    """gpt3_mcore_te_tp2_pp2_cp2: 12 layers of width 512, 8 heads, NullTokenizer with --vocab-size 50257,
    learned positions for 1,024 tokens, biases and LayerNorm (GPT defaults), tied embeddings. By hand, per layer:
    qkv 512 x 1536 + 1536, proj 512^2 + 512, fc1 512 x 2048 + 2048, fc2 2048 x 512 + 512, two LayerNorms 4 x 512
    = 3,152,384; the vocabulary padded to a multiple of 128 x tp 2 is 50,432 rows of 512; positions 1,024 x 512;
    the final LayerNorm 1,024: 12 x 3,152,384 + 50,432 x 512 + 524,288 + 1,024 = 64,175,104."""
    result = run_cli("check", "--megatron-args", MODEL_ARGS / "gpt3_mcore_te_tp2_pp2_cp2.yaml", "--hardware",
                     "h100-sxm", "--gpus", "16", "--format", "json")
    assert result.exit_code == 0, result.output
    job = json.loads(result.stdout)[0]
    config = job["config"]
    assert job["params"] == 12 * 3_152_384 + 50_432 * 512 + 1_024 * 512 + 1_024
    assert (config["tp"], config["pp"], config["cp"], config["dp"]) == (2, 2, 2, 2)
    assert (config["micro_batch"], config["global_batch"], config["seq_len"]) == (4, 32, 1024)
    assert config["sequence_parallel"] and config["dtype"] == "bf16" and config["attention_kernel"].startswith("flash")


def test_deepseek_v3_proxy_release_test_reads_hybridep_and_its_pipeline_layout(run_cli) -> None:
    """The DeepSeek-V3 proxy of Megatron-LM's release tests: 14 layers with MLA, 64 experts of which 8 routed,
    the flex dispatcher's HybridEP backend, tp 2, pp 4 with an explicit layout, ep 16 with expert TP 1, one MTP
    layer. Its tokenizer is a SentencePiece model planner does not read, so the vocabulary is asked for."""
    path = MODEL_ARGS / "deepseekv3_proxy_flex_tp1pp4emp16etp1cp1_release.yaml"
    refused = run_cli("check", "--megatron-args", path, "--hardware", "h100-sxm", "--gpus", "64")
    assert refused.exit_code == 2 and "--padded-vocab-size" in refused.output
    result = run_cli("check", "--megatron-args", path, "--hardware", "h100-sxm", "--gpus", "64", "--engine-args",
                     "--padded-vocab-size 258560", "--format", "json")
    assert result.exit_code in (0, 1), result.output
    config = json.loads(result.stdout)[0]["config"]
    assert (config["tp"], config["pp"], config["ep"], config["etp"], config["dp"]) == (2, 4, 16, 1, 8)
    assert config["moe_dispatcher"] == "hybridep"
    assert (config["micro_batch"], config["global_batch"], config["seq_len"]) == (1, 512, 4096)


def test_model_zoo_file_takes_the_harness_variables_from_the_engine_args(run_cli) -> None:
    """The zoo's Qwen3-235B-A22B file leaves the layout to variables its run scripts export. Given as NAME=value
    words, they are substituted before the YAML is read; with the vocabulary Qwen3's config.json pads to, the
    flags describe exactly the catalog's Qwen3-235B-A22B (counted independently from its HF config)."""
    result = run_cli("check", "--megatron-args", ZOO, "--hardware", "h100-sxm", "--gpus", "256", "--engine-args",
                     f"{ZOO_VARIABLES} --padded-vocab-size 151936 --recompute-granularity full "
                     "--recompute-method uniform --recompute-num-layers 1", "--format", "json")
    assert result.exit_code in (0, 1), result.output
    job = json.loads(result.stdout)[0]
    config = job["config"]
    counts = count_params(load_model("qwen3-235b-a22b").spec)
    assert job["params"] == counts.embedding + counts.head + 94 * counts.moe_layer
    assert (config["tp"], config["pp"], config["interleave"], config["ep"], config["etp"], config["dp"]) == (
        2, 8, 4, 32, 1, 16)
    assert (config["micro_batch"], config["global_batch"], config["seq_len"]) == (1, 2048, 4096)
    assert config["recompute"] == "full"


def test_a_variable_not_given_is_named_with_how_to_give_it(run_cli) -> None:
    result = run_cli("check", "--megatron-args", ZOO, "--hardware", "h100-sxm", "--gpus", "256", "--engine-args",
                     "--padded-vocab-size 151936")
    assert result.exit_code == 2
    assert result.output.count("error:") == 1
    assert "$TP is not given; add TP=VALUE to --engine-args" in result.output
    assert "--tensor-model-parallel-size" in result.output


def test_variables_substitute_both_reference_forms_and_leave_others() -> None:
    text = "MODEL_ARGS:\n  --num-layers: ${L}\n  --hidden-size: $H\n  --save: ${OUT}/ckpt\n"
    data = parse_model_args_text(text, "t.yaml", ["L=4", "H=256"])
    assert data is not None
    assert data["MODEL_ARGS"] == {"--num-layers": 4, "--hidden-size": 256, "--save": "${OUT}/ckpt"}


@pytest.mark.parametrize(("text", "field", "why"), [
    ("MODEL_ARGS:\n  num-layers: 4\n", "MODEL_ARGS", "is not a --flag"),
    ("MODEL_ARGS:\n  --num-layers: {a: 1}\n", "MODEL_ARGS.--num-layers", "expected a value or a list of values"),
    ("MODEL_ARGS:\n  --num-layers:\n", "MODEL_ARGS.--num-layers", "expected a value, got null"),
    ("ENV_VARS: [A]\nMODEL_ARGS:\n  --bf16: true\n", "ENV_VARS", "must be a mapping"),
    ("ENV_VARS:\n  1A: x\nMODEL_ARGS:\n  --bf16: true\n", "ENV_VARS", "is not a variable name"),
    ("MODEL_ARGS:\n  --tensor-model-parallel-size 8 --foo: true\n", "MODEL_ARGS", "is not a --flag"),
    ("MODEL_ARGS:\n  \"--foo'\": true\n", "MODEL_ARGS", "is not a --flag"),
    ("ENV_VARS:\n  A: {b: 1}\nMODEL_ARGS:\n  --bf16: true\n", "ENV_VARS.A", "expected a value"),
])
def test_malformed_model_args_name_the_field(text: str, field: str, why: str) -> None:
    data = parse_model_args_text(text, "t.yaml")
    assert data is not None
    with pytest.raises(PlannerError, match=re.escape(why)) as info:
        model_args_script(data, "t.yaml")
    assert info.value.field == field and info.value.source == "t.yaml"


def test_a_flag_that_takes_a_value_set_false_is_left_out_as_the_zoo_launcher_does() -> None:
    """yanring/Megatron-MoE-ModelZoo @ e8650517: sbatch_benchmarking.sh keeps `select(.value != "false")` of
    MODEL_ARGS, and runtime_configs/benchmarking/runtime.conf exports LAYERS_PER_VP=false for VPP 1, which its
    Qwen3-235B-A22B.yaml substitutes into --num-layers-per-virtual-pipeline-stage."""
    data = parse_model_args_text("MODEL_ARGS:\n  --bf16: true\n  --num-layers-per-virtual-pipeline-stage: ${V}\n",
                                 "t.yaml", ["V=false"])
    assert data is not None
    tokens, _ = read_launch_text(model_args_script(data, "t.yaml"), "t.yaml")
    assert tokens == ["--bf16"]


def test_switches_set_false_or_empty_are_left_out() -> None:
    data = parse_model_args_text("MODEL_ARGS:\n  --bf16: true\n  --sequence-parallel: false\n  --fp16:\n", "t.yaml")
    assert data is not None
    tokens, _ = read_launch_text(model_args_script(data, "t.yaml"), "t.yaml")
    assert tokens == ["--bf16"]


def test_substitution_is_bounded_before_it_is_done() -> None:
    text = "MODEL_ARGS:\n  --save: " + "${X}" * 20_000 + "\n"
    with pytest.raises(PlannerError, match="with its variables substituted the file would exceed"):
        parse_model_args_text(text, "t.yaml", ["X=" + "a" * 1_000])


def test_deepseek_sparse_attention_functional_test_reads_the_indexer(run_cli) -> None:
    """gpt3_mcore_te_tp2_pp2_dsa: MLA (query latent 192, K/V latent 64, heads of 16 + 8 rotary, values 16) with
    --experimental-attention-variant dsa, an indexer of 64 heads of 128 keeping 2,048 keys; no
    --dsa-kernel-backend, so Megatron-Core would run the PyTorch fallback, which the warning says planner does
    not time."""
    path = MODEL_ARGS / "gpt3_mcore_te_tp2_pp2_dsa.yaml"
    result = run_cli("check", "--megatron-args", path, "--hardware", "h100-sxm", "--gpus", "8", "--format", "json")
    assert result.exit_code in (0, 1), result.output
    assert "--dsa-kernel-backend none" in result.stderr
    assert "without --dsa-indexer-use-sparse-loss" in result.stderr  # the file trains the dense indexer loss
    config = json.loads(result.stdout)[0]["config"]
    assert (config["tp"], config["pp"], config["cp"]) == (2, 2, 1)
    tokens = _read(path)
    imported = import_megatron(tokens, gpus=8, given={}, model=None, source="dsa.yaml")
    assert imported.model is not None and imported.model.sparse_attention is not None
    dsa, mla = imported.model.sparse_attention, imported.model.mla
    assert (dsa.index_heads, dsa.index_head_dim, dsa.topk) == (64, 128, 2048)
    assert mla is not None and (mla.q_lora_rank, mla.kv_lora_rank, mla.qk_nope_head_dim) == (192, 64, 16)


@pytest.mark.parametrize(("flags", "why"), [
    (["--experimental-attention-variant", "gdn2", "--linear-attention-freq", "4"], "Gated DeltaNet-2"),
    (["--linear-attention-freq", "4"], "linear-attention layers"),
    (["--heterogeneous-layers-config-path", "nemotron_super.json"], "Llama-Nemotron's block configs"),
    (["--multi-latent-attention", "--q-lora-rank", "64", "--kv-lora-rank", "32", "--experimental-attention-variant",
      "dsa", "--dsa-indexer-n-heads", "4", "--dsa-indexer-head-dim", "32", "--dsa-indexer-topk", "64",
      "--dsa-indexer-topk-freq", "4"], "reuse another layer's top-k"),
    (["--multi-latent-attention", "--q-lora-rank", "64", "--kv-lora-rank", "32", "--experimental-attention-variant",
      "dsa"], "needs --dsa-indexer-n-heads, --dsa-indexer-head-dim, --dsa-indexer-topk"),
    (["--experimental-attention-variant", "dsa", "--dsa-indexer-n-heads", "4", "--dsa-indexer-head-dim", "32",
      "--dsa-indexer-topk", "64"], "add --multi-latent-attention and --q-lora-rank"),
])
def test_layers_planner_does_not_model_are_refused(flags: list[str], why: str) -> None:
    with pytest.raises(PlannerError, match=re.escape(why)):
        import_megatron([*TINY, *flags], gpus=8, given={}, model=None, source="args")


def test_dsa_with_ring_context_parallelism_is_warned() -> None:
    """Megatron-Core asserts all-gather CP for DSA; its default --cp-comm-type is p2p."""
    flags = [*TINY, *TINY_DSA, "--dsa-indexer-use-sparse-loss", "--dsa-kernel-backend", "cudnn",
             "--context-parallel-size", "2"]
    ring = import_megatron(flags, gpus=8, given={}, model=None, source="args")
    assert any("--cp-comm-type p2p" in w for w in ring.warnings)
    gathered = import_megatron([*flags, "--cp-comm-type", "allgather"], gpus=8, given={}, model=None, source="args")
    assert not any("cp-comm-type" in w or "sparse-loss" in w or "kernel-backend" in w for w in gathered.warnings)


def test_engine_args_keep_hashes_and_equals_inside_flag_values(run_cli) -> None:
    """The variables are the NAME=value words that open the engine args; after them a word with '=' or '#' is a flag's
    value, kept whole as bash keeps it (a '#' inside a word starts no comment)."""
    path = MODEL_ARGS / "gpt3_mcore_te_tp2_pp2_cp2.yaml"
    args = ["check", "--megatron-args", path, "--hardware", "h100-sxm", "--gpus", "16", "--engine-args"]
    refused = run_cli(*args, "TENSORBOARD_PATH=/tb --data-path a#b --pipeline-model-parallel-size 5")
    assert refused.exit_code == 2 and "--pipeline-model-parallel-size" in refused.stderr  # 12 layers, not 5 stages
    valued = run_cli(*args, "--data-path a=b --wandb-exp-name TP=8 --pipeline-model-parallel-size 4")
    assert valued.exit_code in (0, 1), valued.output
    assert json.loads(run_cli(*args, "--pipeline-model-parallel-size 4", "--format", "json").stdout)[0]["config"][
        "pp"] == 4
    unused = run_cli(*args, "TENSORBORD_PATH=/tb")
    assert "the variable TENSORBORD_PATH is not used in the file" in unused.stderr


def test_cp_comm_type_takes_one_type_per_layer_and_dsa_backends_are_checked() -> None:
    """--cp-comm-type is nargs='+' in Megatron-LM (one type, or one per layer); --dsa-kernel-backend takes none,
    tilelang or cudnn."""
    base = [*TINY, "--context-parallel-size", "2"]
    import_megatron([*base, "--cp-comm-type", "a2a", "a2a", "p2p", "p2p"], gpus=8, given={}, model=None, source="a")
    dsa = TINY_DSA
    per_layer = import_megatron([*base, *dsa, "--cp-comm-type", *["allgather"] * 4], gpus=8, given={}, model=None,
                                source="a")
    assert not any("cp-comm-type" in w for w in per_layer.warnings)
    with pytest.raises(PlannerError, match="takes none, tilelang or cudnn"):
        import_megatron([*base, *dsa, "--dsa-kernel-backend", "bogus"], gpus=8, given={}, model=None, source="a")


def test_gated_deltanet_model_round_trips_through_megatron_arguments(run_cli, tmp_path):
    """Qwen3.5-35B-A3B (tests/fixtures/hf, provenance in tests/engines/test_hf_qwen3_5.py) exported as Megatron-LM
    arguments: --experimental-attention-variant gdn, --linear-attention-freq 4 and the --linear-* sizes
    (TransformerConfig fields, megatron/core/transformer/transformer_config.py @ d98e8a64), --attention-output-gate;
    read back, the model and the estimate are the same."""
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "hf" / "qwen3.5-35b-a3b.json"
    out = tmp_path / "args.sh"
    layout = ["--hardware", "h100-sxm", "--gpus", "16", "--tp", "2", "--pp", "2", "--ep", "4", "--zero", "1",
              "--global-batch", "64", "--seq-len", "4096"]
    exported = run_cli("export", "--model", str(fixture), *layout, "--to", "megatron", "--out", str(out))
    assert exported.exit_code == 0, exported.output
    text = out.read_text()
    for flag in ("--experimental-attention-variant gdn", "--linear-attention-freq 4", "--linear-num-key-heads 16",
                 "--linear-num-value-heads 32", "--attention-output-gate"):
        assert flag in text
    checked = run_cli("check", "--megatron-args", str(out), "--hardware", "h100-sxm", "--gpus", "16", "--format",
                      "json", "--no-suggest")
    assert checked.exit_code in (0, 1), checked.output
    back = json.loads(checked.stdout)[0]
    direct = run_cli("check", "--megatron-args", str(out), "--model", str(fixture), "--hardware", "h100-sxm",
                     "--gpus", "16", "--format", "json", "--no-suggest")
    assert direct.exit_code in (0, 1), direct.output
    given = json.loads(direct.stdout)[0]
    assert back["params"] == given["params"] == 34_660_610_688
    assert back["time"]["step_seconds"] == pytest.approx(given["time"]["step_seconds"], rel=1e-12)


@pytest.mark.parametrize("args,message", [
    ("--experimental-attention-variant gdn", "needs --linear-attention-freq"),
    ("--experimental-attention-variant gdn --linear-attention-freq ([1]*3+[0])*6", "list pattern"),
    ("--linear-attention-freq 4", "no --experimental-attention-variant gdn"),
    ("--experimental-attention-variant gdn2 --linear-attention-freq 4", "Gated DeltaNet-2"),
])
def test_gated_deltanet_flags_that_cannot_be_read(run_cli, tmp_path, args, message):
    path = tmp_path / "args.txt"
    path.write_text("--num-layers 24 --hidden-size 1024 --num-attention-heads 8 --seq-length 4096 "
                    "--max-position-embeddings 4096 --micro-batch-size 1 --global-batch-size 8 " + args)
    result = run_cli("check", "--megatron-args", str(path), "--hardware", "h100-sxm", "--gpus", "8")
    assert result.exit_code == 2 and message in result.stderr, result.output



def test_the_zoo_qwen3_next_file_reads_its_deprecated_linear_attention_flag() -> None:
    """Its --linear-attention-type gated_delta_net is the spelling NVIDIA/Megatron-LM 6630c7f3 (2025-11-28) merged
    into --experimental-attention-variant, which validate_args still maps; with --linear-attention-freq 4 every
    fourth of its 48 layers keeps softmax attention. The other sizes are the file's own lines."""
    data = parse_model_args_text(ZOO_NEXT.read_text(), ZOO_NEXT.name, ZOO_NEXT_VARIABLES.split())
    assert data is not None
    tokens, _ = read_launch_text(model_args_script(data, ZOO_NEXT.name), ZOO_NEXT.name)
    model = import_megatron(tokens + ["--padded-vocab-size", "151936"], gpus=128, given={}, model=None,
                            source=ZOO_NEXT.name).model
    assert model.linear_attention is not None and model.linear_attention.full_attention_interval == 4
    assert model.num_attention_layers == 12 and model.attention_output_gate and model.qk_norm
    assert (model.linear_attention.num_key_heads, model.linear_attention.num_value_heads) == (16, 32)
    assert model.moe is not None and (model.moe.num_experts, model.moe.experts_per_token) == (512, 10)
    assert model.moe.shared_ffn_width == 512 and model.mtp_layers == 1


def test_a_deprecated_variant_flag_that_disagrees_with_the_new_one_is_refused() -> None:
    base = ("--num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 64 --vocab-size 128 --bf16 "
            "--linear-attention-freq 2 --linear-attention-type gated_delta_net --experimental-attention-variant dsa")
    with pytest.raises(PlannerError, match="--linear-attention-type gated_delta_net and --experimental-attention-"
                                           "variant dsa disagree"):
        import_megatron(base.split(), gpus=1, given={}, model=None, source="t")


@pytest.mark.parametrize(("args", "tp", "rows"), [
    ({"tokenizer-type": "TikTokenizer"}, 1, 131_072),  # 2**17, already a multiple of 128
    ({"tokenizer-type": "TikTokenizer"}, 3, 131_328),  # up to a multiple of 384: 342 x 384
    ({"tokenizer-type": "TikTokenizer", "vocab-size": 100_000}, 2, 100_096),  # --vocab-size wins: 391 x 256
])
def test_tiktokenizer_vocabulary(args, tp, rows) -> None:
    assert padded_vocab(args, tp, "t") == rows


MUON = MODEL_ARGS / "gpt3_moe_mcore_te_ep8_resume_torch_dist_muon.yaml"
DIST_MUON = MODEL_ARGS / "gpt3_moe_mcore_te_ep8_resume_torch_dist_dist_muon.yaml"


@pytest.mark.parametrize(("path", "zero", "optimizer_bytes"), [
    # with --use-distributed-optimizer (Megatron-LM's layer-wise distributed Muon): the dense parameters' master and
    # momentum over the 8 data-parallel ranks, 38,937,600 x 8 / 8; the experts' over their expert-data-parallel group
    # of 8 / ep 8 = 1 rank, 12 x 8 x 1,048,576 / 8 x 8; Adam's second moment for the embedding, positions and final
    # LayerNorm, 26,280,960 x 4 / 8
    (DIST_MUON, 1, 38_937_600 + 100_663_296 + 13_140_480),
    # without it every rank keeps all of its parameters' states
    (MUON, 0, 38_937_600 * 8 + 100_663_296 + 26_280_960 * 4),
])
def test_muon_functional_tests_read_as_muon_with_its_state_bytes(run_cli, path, zero, optimizer_bytes) -> None:
    """Megatron-LM's Muon functional tests (moe/gpt3_moe_mcore_te_ep8_resume_torch_dist_[dist_]muon): 12 layers of
    width 512, 8 heads, GPT-2's 50,257 tokens padded to 50,304, learned positions for 1,024, LayerNorm, no linear
    biases, 8 experts (top 2) of width 1,024 with GeLU, ep 8 on 8 GPUs. By hand, per layer: qkv 512 x 1,536 + proj
    512^2 = 1,048,576, router 8 x 512, experts 8 x 2 x 512 x 1,024 = 8,388,608, two LayerNorms 2,048: 9,443,328;
    the embedding 50,304 x 512, positions 1,024 x 512, the final LayerNorm 1,024: 139,600,896 in all, of which the
    experts 100,663,296 and the parameters Muon leaves to Adam (embedding, positions, final norm) 26,280,960."""
    result = run_cli("check", "--megatron-args", path, "--hardware", "h100-sxm", "--gpus", "8", "--format", "json")
    assert result.exit_code == 0, result.output
    job = json.loads(result.stdout)[0]
    assert job["params"] == 12 * 9_443_328 + 50_304 * 512 + 1_024 * 512 + 1_024
    assert (job["config"]["optimizer"], job["config"]["zero"], job["config"]["ep"]) == ("muon", zero, 8)
    assert job["memory"]["optimizer_bytes"] == optimizer_bytes
    adam = run_cli("check", "--megatron-args", path, "--hardware", "h100-sxm", "--gpus", "8", "--format", "json",
                   "--engine-args", "--optimizer adam")
    # Adam: 12 bytes for every parameter, the same shards
    dense, experts = 139_600_896 - 100_663_296, 100_663_296 // 8
    expected = 12 * (dense / 8 + experts) if zero else 12 * (dense + experts)
    assert json.loads(adam.stdout)[0]["memory"]["optimizer_bytes"] == expected


def test_dist_muon_is_the_layer_wise_distributed_optimizer_and_refuses_fsdp() -> None:
    # Megatron-LM (arguments.py @ d98e8a64): 'dist_muon' is read as muon with use_layer_wise_distributed_optimizer
    fields = import_megatron([*TINY, "--optimizer", "dist_muon"], gpus=8, given={}, model=None, source="args").fields
    assert (fields["optimizer"], fields["zero"]) == ("muon", 1)
    for flag in ("--use-torch-fsdp2", "--use-megatron-fsdp"):
        with pytest.raises(PlannerError, match="Emerging optimizer does not support"):
            import_megatron([*TINY, "--optimizer", "muon", flag], gpus=8, given={}, model=None, source="args")
    with pytest.raises(PlannerError, match="emerging optimizer with fp16"):
        import_megatron([*TINY[:-3], "--fp16", "--vocab-size", "1024", "--optimizer", "muon"], gpus=8, given={},
                        model=None, source="args")
    fields = import_megatron([*TINY, "--optimizer", "muon", "--muon-num-ns-steps", "8", "--muon-tp-mode", "distributed",
                              "--muon-no-split-qkv"], gpus=8, given={}, model=None, source="args").fields
    assert (fields["muon_ns_steps"], fields["muon_tp_mode"], fields["muon_split_qkv"]) == (8, "distributed", False)
    with pytest.raises(PlannerError, match="--optimizer lion is not modelled"):
        import_megatron([*TINY, "--optimizer", "lion"], gpus=8, given={}, model=None, source="args")


def test_a_hybrid_stack_is_refused_by_what_its_pattern_holds() -> None:
    # Megatron-LM's hybrid models give the depth by the pattern alone (its hybrid functional tests have no
    # --num-layers): the refusal names the stack, not a missing --num-layers
    assert TINY[:2] == ["--num-layers", "4"]
    args = [*TINY[2:], "--hybrid-layer-pattern", "M-M*-/M"]
    with pytest.raises(PlannerError, match=r"describes a hybrid stack \(2 Mamba, 1 attention, 2 MLP\); planner has "
                       r"no Mamba \(state-space\) layer"):
        import_megatron(args, gpus=8, given={}, model=None, source="args")
    with pytest.raises(PlannerError, match=r"\(2 Gated DeltaNet, 2 attention\); planner reads Gated DeltaNet hybrids "
                       "from Hugging Face configs"):
        import_megatron([*TINY, "--hybrid-override-pattern", "GG**"], gpus=8, given={}, model=None, source="args")
