"""Training-log readers on real log lines (tests/fixtures/logs, sources in its SOURCES.md).

Expected figures are read off the fixture lines by hand: the first logged step and steps <= 3 are
warm-up; what is left is summarised by its median.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.engines import megatron
from planner.engines.logs import (
    GIB,
    MIB,
    LogReading,
    detect_format,
    hf_training_arguments_fields,
    megatron_flags,
    megatron_job_arguments,
    missing_megatron_arguments,
    plain_text,
    read_log,
)
from planner.errors import PlannerError
from planner.specs.runs import LOG_FORMATS

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"


def _read(name: str, fmt: str | None = None):
    return read_log((LOGS / name).read_text(encoding="utf-8"), name, fmt)


def test_megatron_iterations_arguments_and_world_size():
    r = _read("megatron_mixtral_16xh100.log")
    assert r.format == "megatron"
    assert r.steps_logged == 3 and r.steps_used == (44, 45)  # iteration 43 is the first logged one
    assert r.step_seconds == pytest.approx((5.5338 + 5.7186) / 2)  # median of two: their mean
    assert r.tflops_per_gpu == pytest.approx((236.0 + 228.4) / 2)
    assert r.world_size == 16
    assert r.arguments["expert_model_parallel_size"] == "8"
    assert r.arguments["global_batch_size"] == "128"
    assert r.arguments["fp16"] == "False"


def test_megatron_arguments_become_the_flags_the_importer_reads():
    r = _read("megatron_mixtral_16xh100.log")
    flags = megatron_flags(r.arguments, megatron.READ_FLAGS)
    text = " ".join(flags)
    assert "--expert-model-parallel-size 8" in text
    assert "--global-batch-size 128" in text
    assert "--hidden-size 4096" in text and "--ffn-hidden-size 14336" in text
    assert "--group-query-attention" in flags
    assert "--fp16" not in flags  # printed False
    assert "--recompute-granularity" not in flags  # printed None


A800_LOG = "megatron_gpt345m_4xa800_dp4.log"


def test_megatron_2023_log_steps_after_the_first_interval():
    """GPT-2 345M, 4x A800, log interval 100: every line is the mean of 100 iterations. Iteration 100's
    interval holds the warm-up (and 16 fp16 loss-scale skips): left out as the first logged step."""
    r = _read(A800_LOG)
    assert r.steps_logged == 13
    assert r.steps_used == (1000, 1100, 2000, 2100, 2900, 3000, 3100, 4000, 4100, 4800, 4900, 5000)
    # elapsed time per iteration (ms) of those lines, as printed
    assert r.step_seconds_logged == pytest.approx(tuple(ms / 1e3 for ms in (
        283.9, 291.7, 292.5, 373.8, 531.2, 290.9, 289.2, 286.2, 290.9, 318.3, 288.0, 287.0)))
    assert r.step_seconds == pytest.approx(0.2909)  # median of 12: the 6th and 7th sorted are both 290.9
    assert r.tflops_per_gpu is None  # no --log-throughput in 2023
    assert r.peak_memory_bytes == pytest.approx(8786.0 * MIB)  # [Rank 0] (after 100 iterations) max reserved


def test_megatron_complete_arguments_block():
    r = _read(A800_LOG)
    assert r.arguments_complete
    assert r.arguments["DDP_impl"] == "local"  # an upper-case name inside the block does not end it
    assert (r.arguments["num_layers"], r.arguments["hidden_size"], r.arguments["num_attention_heads"],
            r.arguments["ffn_hidden_size"], r.arguments["seq_length"]) == ("24", "1024", "16", "4096", "1024")
    assert (r.arguments["micro_batch_size"], r.arguments["global_batch_size"]) == ("1", "8")
    assert r.arguments["world_size"] == "4" and r.arguments["vocab_size"] == "None"
    assert r.world_size == 4
    # the start-up lines: world size / degrees, `using torch.float16 for parameters`, the padded vocabulary
    # (`padded vocab (size: 50257) with 47 dummy tokens (new size: 50304)`) and the iteration lines' batch
    assert r.startup == {"data_parallel_size": "4", "tensor_model_parallel_size": "1",
                         "pipeline_model_parallel_size": "1", "fp16": "True", "padded_vocab_size": "50304",
                         "global_batch_size": "8"}


def test_megatron_job_arguments_of_the_2023_log():
    args = megatron_job_arguments(_read(A800_LOG))
    assert "encoder_num_layers" not in args and "encoder_seq_length" not in args  # validate_args' copies
    assert args["padded_vocab_size"] == "50304"
    assert args["attention_backend"] == "unfused"  # transformer_impl local, use_flash_attn False
    flags = megatron_flags(args, megatron.READ_FLAGS)
    text = " ".join(flags)
    for flag in ("--num-layers 24", "--hidden-size 1024", "--num-attention-heads 16", "--ffn-hidden-size 4096",
                 "--seq-length 1024", "--micro-batch-size 1", "--global-batch-size 8",
                 "--tensor-model-parallel-size 1", "--pipeline-model-parallel-size 1", "--padded-vocab-size 50304"):
        assert flag in text
    assert "--fp16" in flags and "--bf16" not in flags and "--use-distributed-optimizer" not in flags
    assert missing_megatron_arguments(args, {}) == []


@pytest.mark.parametrize(("name", "degrees", "median_ms", "used"), [
    # the other three runs of the same document: degrees from their world-size lines, medians by hand of the
    # `elapsed time per iteration (ms)` values after the first line (iteration 100)
    ("megatron_gpt345m_4xa800_tp2pp2.log", ("1", "2", "2"), (1031.7 + 1082.6) / 2, 4),  # 200, 1000, 1100, 2000
    ("megatron_gpt345m_4xa800_tp4.log", ("1", "4", "1"), 2701.1, 19),  # 10th of 19 sorted (iteration 800)
    ("megatron_gpt345m_4xa800_pp4.log", ("1", "1", "4"), 381.3, 19),  # 10th of 19 sorted (iteration 1300)
])
def test_megatron_2023_runs_of_one_source(name, degrees, median_ms, used):
    r = _read(name)
    assert r.arguments_complete and r.world_size == 4
    assert (r.startup["data_parallel_size"], r.startup["tensor_model_parallel_size"],
            r.startup["pipeline_model_parallel_size"]) == degrees
    assert (r.arguments["tensor_model_parallel_size"], r.arguments["pipeline_model_parallel_size"]) == degrees[1:]
    assert len(r.steps_used) == used and r.steps_used[0] > 100
    assert r.step_seconds == pytest.approx(median_ms / 1e3)


@pytest.mark.parametrize(("line", "degrees"), [
    # megatron_gpt345m_4xa800_dp4.log (2023) and megatron_mixtral_16xh100.log (2024)
    ("using world size: 4, data-parallel-size: 4, tensor-model-parallel size: 1, pipeline-model-parallel size: 1 ",
     {"data_parallel_size": "4", "tensor_model_parallel_size": "1", "pipeline_model_parallel_size": "1"}),
    ("using world size: 16, data-parallel size: 4, context-parallel size: 1 tensor-model-parallel size: 4, "
     "pipeline-model-parallel size: 1 ",
     {"data_parallel_size": "4", "context_parallel_size": "1", "tensor_model_parallel_size": "4",
      "pipeline_model_parallel_size": "1"}),
    # Megatron-LM's megatron/training/arguments.py format of 2024-25: no separator after the hierarchical sizes,
    # and encoder degrees that are not the model's
    ("using world size: 4, data-parallel size: 1, context-parallel size: 1, hierarchical context-parallel sizes: "
     "Nonetensor-model-parallel size: 4, encoder-tensor-model-parallel size: 0, pipeline-model-parallel size: 1, "
     "encoder-pipeline-model-parallel size: 0",
     {"data_parallel_size": "1", "context_parallel_size": "1", "tensor_model_parallel_size": "4",
      "pipeline_model_parallel_size": "1"}),
])
def test_megatron_world_size_line_variants(line, degrees):
    text = line + "".join(f"\n iteration {n:8d}/      10 | elapsed time per iteration (ms): 1.0 |" for n in (5, 6))
    r = read_log(text, "x.log", "megatron", warmup_steps=0)
    assert {k: v for k, v in r.startup.items() if k.endswith("parallel_size")} == degrees


def test_a_cut_short_arguments_block_says_what_it_lacks():
    r = _read("megatron_mixtral_16xh100.log")
    assert not r.arguments_complete
    args = megatron_job_arguments(r)
    assert args["tensor_model_parallel_size"] == "4"  # from the world-size line
    assert args["bf16"] == "True"  # `using torch.bfloat16 for parameters`
    # the stored thread cut the block: no num_layers, num_attention_heads, seq_length or micro_batch_size
    assert missing_megatron_arguments(args, {}) == [
        "num_layers", "num_attention_heads", "seq_length (or training.seq_len)",
        "micro_batch_size (or parallel.micro_batch)"]
    job = {"model": "mixtral-8x7b", "training": {"seq_len": 4096}, "parallel": {"micro_batch": 1}}
    assert missing_megatron_arguments(args, job) == []


def test_megatron_without_throughput_field():
    r = _read("megatron_llama2_7b_tp2.log")
    assert r.steps_used == (10,)
    assert r.step_seconds == pytest.approx(14.6427)
    assert r.tflops_per_gpu is None


def test_megatron_log_without_iterations_is_refused():
    with pytest.raises(PlannerError, match="no usable step"):
        _read("megatron_no_steps.log")


def test_torchtitan_steps_after_warmup():
    r = _read("torchtitan_llama3_8b.log")
    assert r.format == "torchtitan"
    assert r.steps_used == (210, 220, 230, 240, 250)
    assert r.tokens_per_second_per_gpu == 5864  # median of 5593, 5868, 5869, 5864, 5862
    assert r.tflops_per_gpu == pytest.approx(339.59)
    assert r.peak_memory_bytes == pytest.approx(49.66 * GIB)


# torchtitan's colours as its metrics logger writes them around each field (pytorch/torchtitan
# torchtitan/tools/utils.py @ 02581674 class Color: red step, green loss, yellow memory, blue tps, cyan tflops,
# magenta mfu, reset "\033[39m"; on unless --metrics.disable_color_printing)
_TITAN_COLOURS = {"step:": "\x1b[31m", "loss:": "\x1b[32m", "memory:": "\x1b[33m", "tps:": "\x1b[34m",
                  "tflops:": "\x1b[36m", "mfu:": "\x1b[35m"}


def _coloured(text: str, escape: str = "\x1b") -> str:
    lines = []
    for line in text.splitlines():
        if " step: " in line:
            for field, code in _TITAN_COLOURS.items():
                line = line.replace(field, code.replace("\x1b", escape) + field, 1)
            line += "\x1b[39m".replace("\x1b", escape)
        lines.append(line)
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("escape", ["\x1b", ""], ids=["escape codes", "escape character dropped"])
def test_torchtitan_coloured_log_reads_as_the_plain_one(escape):
    text = (LOGS / "torchtitan_llama3_8b.log").read_text(encoding="utf-8")
    coloured = _coloured(text, escape)
    assert coloured != text and ("\x1b" in coloured) == bool(escape)
    assert detect_format(coloured, "coloured.log") == "torchtitan"
    assert read_log(coloured, "coloured.log") == read_log(text, "coloured.log")


def test_plain_text_keeps_brackets_that_are_not_colour_codes():
    line = "[rank0]:[titan] [model] lr=[0.0001] [m] step: 1 [2025-09-11 14:09:46,954794][I]"
    assert plain_text(line) == line
    assert plain_text("\x1b]0;title\x07\x1b[1;31mstep:\x1b[0m 5 \x1b[2K") == "step: 5 "


def test_torchtitan_without_a_flop_count():
    r = _read("torchtitan_flux_no_flops.log")
    assert r.steps_used == (8200, 8300)
    assert r.tokens_per_second_per_gpu == 1561403  # median of 1,567,390 and 1,555,416
    assert r.tflops_per_gpu is None
    assert r.peak_memory_bytes == pytest.approx(76.90 * GIB)
    assert any("no FLOP count" in w for w in r.warnings)


def test_torchtitan_fork_with_its_own_log_prefix():
    r = _read("torchtitan_aurora_xpu.log")
    assert r.format == "torchtitan" and r.steps_used == (4, 5)
    assert r.tokens_per_second_per_gpu == pytest.approx((6563 + 6634) / 2)
    assert r.tflops_per_gpu == pytest.approx((60.90 + 61.57) / 2)
    assert r.warnings == ()


def test_torchtitan_only_warmup_is_refused():
    with pytest.raises(PlannerError, match="no usable step.*4"):
        _read("torchtitan_moe_warmup.log")


def test_deepspeed_current_samples_per_second():
    r = _read("deepspeed_timer.log")
    assert r.format == "deepspeed"
    assert r.steps_used == (18, 19, 20, 21, 22)
    assert r.samples_per_second == pytest.approx(155.10475468488542)
    assert r.peak_memory_bytes == pytest.approx(2.62 * GIB)


def test_deepspeed_older_format():
    r = _read("deepspeed_timer_2022.log")
    assert r.steps_used == (50,)
    assert r.samples_per_second == pytest.approx(83.73838805358588)


def test_nemo2_train_step_timing():
    r = _read("nemo2_esm2_2x8xh100.log")
    assert r.format == "nemo"
    assert r.steps_used == (29, 30, 31, 32, 33, 34)
    assert r.step_seconds == pytest.approx((0.1902 + 0.1903) / 2)  # median of six
    assert r.startup["global_batch_size"] == "32"
    assert r.peak_memory_bytes is None


def test_nemo2_line_with_throughput_and_an_srun_prefix():
    # NeMo 2 with its throughput callback, under srun's task label (the form of NVIDIA's 25.09 container logs)
    line = ("[2025-11-20T14:55:{s:02d}+08:00] retraining/0 Training epoch 0, iteration {i}/99 | lr: 1.469e-05 | "
            "global_batch_size: 128 | global_step: {i} | reduced_train_loss: 6.265 | train_step_timing in s: {t} | "
            "tokens_per_sec_per_gpu: {x} | consumed_samples: 12544")
    text = "\n".join(line.format(s=i, i=i, t=t, x=x) for i, t, x in
                     ((3, 15.0, "9.0e+03"), (10, 12.22, "1.073e+04"), (11, 12.21, "1.074e+04"), (12, 12.21, "1.073e+04")))
    r = read_log(text, "nemo.log")
    assert r.format == "nemo" and r.steps_used == (10, 11, 12)  # 3, the first logged, is warm-up
    assert r.step_seconds == pytest.approx(12.21)  # median of 12.22, 12.21, 12.21
    assert r.tokens_per_second_per_gpu == pytest.approx(1.073e4)


def test_deepspeed_global_step_format():
    r = _read("deepspeed_timer_2023_global_step.log")
    assert r.format == "deepspeed"
    assert r.steps_used == (450, 460, 470)  # global steps; 10, the first logged, is warm-up
    assert r.samples_per_second == pytest.approx(25.73380362582048)  # median of the three CurrSamplesPerSec
    assert r.peak_memory_bytes == pytest.approx(38.49 * GIB)


def test_hf_trainer_saved_metrics_json():
    r = _read("hf_trainer_train_results.json")
    assert r.format == "hf_trainer"
    assert r.steps_per_second == pytest.approx(0.023) and r.step_seconds == pytest.approx(1 / 0.023)
    assert r.samples_per_second == pytest.approx(0.749)


def test_hf_trainer_metrics_after_a_progress_bar_with_scalar_reprs():
    # ProgressCallback writes str(dict) after tqdm's carriage-return updates; numpy 2 and torch scalars print as
    # their reprs (transformers src/transformers/trainer_callback.py ProgressCallback.on_log)
    text = ("100%|##########| 40/40 [00:20<00:00,  1.98it/s]\r{'train_runtime': np.float64(20.25), "
            "'train_samples_per_second': 15.8, 'train_steps_per_second': tensor(1.975, device='cuda:0'), "
            "'train_loss': 2.5, 'epoch': 1.0}\n")
    r = read_log(text, "hf.log")
    assert r.format == "hf_trainer"
    assert r.steps_per_second == pytest.approx(1.975) and r.samples_per_second == pytest.approx(15.8)


@pytest.mark.parametrize("text", [
    "{[1]: 2, 'train_runtime': 1}",  # an unhashable key: literal_eval raises TypeError
    "{'train_runtime': 1, 'train_steps_per_second': np.float64()}",
    "{'train_runtime': 1, 'train_steps_per_second': " + "(" * 5000 + "}",
])
def test_hf_trainer_metrics_that_are_not_a_dict_of_numbers(text):
    with pytest.raises(PlannerError, match="no usable step"):
        read_log(text, "hf.log")


def test_hf_trainer_final_metrics():
    r = _read("hf_trainer_gaudi.log")
    assert r.format == "hf_trainer"
    assert r.step_seconds == pytest.approx(1 / 2.169)
    assert r.samples_per_second == pytest.approx(69.181)
    assert any("warm-up" in w for w in r.warnings)


def test_hf_trainer_before_steps_per_second_warns():
    r = _read("hf_trainer_ddp_gpt2.log")
    assert r.step_seconds is None and r.samples_per_second == pytest.approx(1.963)
    assert any("11818" in w for w in r.warnings)


def test_automodel_step_lines_whole_job_rate():
    r = _read("automodel_sft_8gpu.log")
    assert r.format == "automodel"
    assert r.steps_logged == 7 and r.steps_used == (10, 11, 12, 13, 14, 15)  # step 9 is the first logged
    # the whole job's tps (not the /gpu share) of steps 10-15: median of six, the mean of the middle two
    assert r.tokens_per_second == pytest.approx((9885.22 + 10558.09) / 2)
    assert r.tokens_per_second_per_data_rank is None and r.step_seconds is None
    assert r.peak_memory_bytes == pytest.approx(29.67 * GIB)  # the largest mem of the steps used
    assert any("max_memory_allocated" in w for w in r.warnings) and any("padding" in w for w in r.warnings)


def test_automodel_older_lines_without_per_gpu():
    r = _read("automodel_finetune_guide.log")
    assert r.steps_used == (8, 12, 16, 20)  # step 4, the first logged, is warm-up; the checkpoint lines are not steps
    assert r.tokens_per_second is None
    assert r.tokens_per_second_per_data_rank == pytest.approx((9148.28 + 9196.97) / 2)
    assert r.peak_memory_bytes == pytest.approx(16.47 * GIB)
    assert any("#399" in w for w in r.warnings)


def test_automodel_per_gpu_only_and_validation_lines():
    # `tps r/gpu` alone (the form of docs/guides/llm/agent-sft.mdx @ 36044ad3); a `[val]` line is no step
    text = "\n".join(f"step {i} | epoch 0 | loss 1.2 | grad_norm 1.7 | lr 8.19e-06 | mem {m} GiB | tps {t}/gpu  | "
                     f"num_label_tokens 46638" for i, m, t in ((5, "35.89", "2734.08"), (6, "48.55", "2075.14"),
                                                              (7, "36.24", "830.26")))
    text += "\n[val] step 7 | epoch 0 | loss 1.1862 | lr 8.19e-06 | num_label_tokens 4707\n"
    r = read_log(text, "a.log")
    assert r.format == "automodel" and r.steps_used == (6, 7)
    assert r.tokens_per_second_per_data_rank == pytest.approx((2075.14 + 830.26) / 2)
    assert not any("#399" in w for w in r.warnings)


def test_automodel_training_jsonl_step_time_is_tokens_over_tps():
    r = _read("automodel_gpt_oss_20b_h100_training.jsonl")
    assert r.format == "automodel" and r.steps_logged == 100
    assert r.steps_used == tuple(range(4, 100))  # steps 0-3 are warm-up
    # each record's timestamp is written at the end of its step: the median gap between records (steps 4-99) is
    # the same wall time as num_tokens_per_step / tps
    assert r.step_seconds == pytest.approx(1.100, abs=0.002)
    assert len(r.step_seconds_logged) == 96
    assert r.peak_memory_bytes == pytest.approx(59.09213829040527 * GIB)


def test_automodel_jsonl_without_token_counts_reads_the_rate():
    text = "\n".join(f'{{"step": {i}, "epoch": 0, "tps": {t}, "mem": 10.5}}' for i, t in ((3, 100.0), (4, 2000.0), (5, 2200.0), (6, 2100.0)))
    r = read_log(text, "training.jsonl")
    assert r.step_seconds is None and r.tokens_per_second == pytest.approx(2100.0)


@pytest.mark.parametrize(("text", "match"), [
    ('{"step": 4, "tps": 10}\n{"step": 5, "tps": 10\n', "not a JSON object"),
    ('{"step": 4, "tps": 10}\n{"step": "5", "tps": 10}\n', "step is '5'"),
    ('{"step": 4, "tps": 10}\n{"step": 5, "tps": 0}\n', "must be positive"),
    ('{"step": 1, "tps": 10}\n{"step": 2, "tps": 10}\n', "all warm-up"),
    ("step 5 | epoch 0 | loss 1 | mem 2 GiB | tps nan(1/gpu)\n", "not a finite number"),
])
def test_automodel_bad_records_are_one_line_errors(text, match):
    with pytest.raises(PlannerError, match=match):
        read_log(text, "training.jsonl", "automodel")


def test_automodel_benchmark_recipe_lines():
    # the lines of recipes/llm/benchmark.py @ 36044ad3 (_log_iteration_metrics and the loop's rank-0 line)
    lines = []
    for i, seconds, gib in ((0, 9.1, 60.2), (1, 2.31, 61.0), (2, 2.30, 61.0), (3, 2.29, 61.0), (4, 2.35, 61.4),
                            (5, 2.33, 61.4)):
        lines += [f"Rank 0 | Iteration {i} | num_label_tokens=65536 | Max Memory Allocated: {gib:.2f} GB | loss=3.2",
                  f"Max iter time: {seconds:.6f} seconds", "MFU: 41.000000%"]
    lines.append("Average iteration time: 2.316 seconds (excluding first 2 warmup iterations)")
    r = read_log("\n".join(lines), "bench.log")
    assert r.format == "automodel" and r.steps_used == (4, 5)  # iterations 0-3 are warm-up
    assert r.step_seconds == pytest.approx((2.35 + 2.33) / 2)
    assert r.peak_memory_bytes == pytest.approx(61.4 * GIB)
    summary = read_log(lines[-1], "bench.log")
    assert summary.step_seconds == pytest.approx(2.316) and any("average" in w for w in summary.warnings)


@pytest.mark.parametrize(("name", "fmt"), [
    ("megatron_mixtral_16xh100.log", "megatron"), ("torchtitan_llama3_8b.log", "torchtitan"),
    ("deepspeed_timer.log", "deepspeed"), ("hf_trainer_gaudi.log", "hf_trainer"),
    ("deepspeed_timer_2023_global_step.log", "deepspeed"), ("hf_trainer_train_results.json", "hf_trainer"),
    ("torchtitan_flux_no_flops.log", "torchtitan"), ("torchtitan_aurora_xpu.log", "torchtitan"),
    ("nemo2_esm2_2x8xh100.log", "nemo"), ("automodel_sft_8gpu.log", "automodel"),
    ("automodel_finetune_guide.log", "automodel"), ("automodel_gpt_oss_20b_h100_training.jsonl", "automodel"),
])
def test_format_is_detected(name, fmt):
    assert detect_format((LOGS / name).read_text(encoding="utf-8"), name) == fmt


@pytest.mark.parametrize("fmt", LOG_FORMATS)
def test_every_log_format_the_runs_file_names_has_a_reader(fmt):
    with pytest.raises(PlannerError) as err:  # an empty log: no usable step, in the words of that format's reader
        read_log("", "x.log", fmt)
    assert "unknown log format" not in str(err.value)


def test_unknown_text_is_refused():
    with pytest.raises(PlannerError, match="not a log planner can read"):
        read_log("hello\n", "x.log")


def test_hf_training_arguments():
    fields = hf_training_arguments_fields({"per_device_train_batch_size": 4, "gradient_accumulation_steps": 8,
                                           "bf16": True, "gradient_checkpointing": True, "fsdp": "full_shard auto_wrap"},
                                          gpus=16)
    assert fields == {"micro_batch": 4, "global_batch": 4 * 8 * 16, "dtype": "bf16", "recompute": "full", "zero": 3}
    # the optimizer: bitsandbytes' 8-bit AdamW keeps uint8 moments; one planner does not model leaves Adam's default
    assert hf_training_arguments_fields({"optim": "paged_adamw_8bit"}, gpus=8) == {
        "optimizer": "adam", "optimizer_state_dtype": "int8"}
    assert hf_training_arguments_fields({"optim": "sgd"}, gpus=8) == {"optimizer": "sgd"}
    assert hf_training_arguments_fields({"optim": "adafactor"}, gpus=8) == {}


def test_a_muon_runs_printed_arguments_say_its_layer_wise_optimizer_and_qkv_split():
    # Megatron-LM's validate_args turns --optimizer muon --use-distributed-optimizer into use_distributed_optimizer
    # False and use_layer_wise_distributed_optimizer True, and prints --muon-no-split-qkv under its dest
    printed = {"num_layers": "4", "hidden_size": "256", "num_attention_heads": "4", "seq_length": "1024",
               "max_position_embeddings": "1024", "micro_batch_size": "1", "global_batch_size": "8", "bf16": "True",
               "vocab_size": "1024", "optimizer": "muon", "use_distributed_optimizer": "False",
               "use_layer_wise_distributed_optimizer": "True", "muon_split_qkv": "False", "muon_num_ns_steps": "5",
               "muon_tp_mode": "blockwise"}
    reading = LogReading(format="megatron", source="muon.log", steps_logged=0, steps_used=(), arguments=printed)
    flags = megatron_flags(megatron_job_arguments(reading), megatron.READ_FLAGS)
    fields = megatron.import_megatron(flags, gpus=8, given={}, model=None, source="muon.log").fields
    assert (fields["optimizer"], fields["zero"], fields["muon_tp_mode"], fields["muon_split_qkv"]) == (
        "muon", 1, "blockwise", False)
