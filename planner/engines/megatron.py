"""Megatron-LM arguments -> Layout fields and, when no model is given, the ModelSpec they describe.

Input is the text of an arguments file or a launch script (`split_launch_text`) or a list of
flags. Flags are read with Megatron-LM's defaults and derivations (megatron/training/arguments.py
and TransformerConfig): ffn 4h (or the SwiGLU 8h/3 rounded to 64), tied embeddings unless
--untie-embeddings-and-output-weights, biases unless --disable-bias-linear, dropout 0.1,
LayerNorm, learned absolute positions, vocabulary padded to make-vocab-size-divisible-by x tp,
bf16 gradients accumulated in fp32, global batch = micro batch x dp by default.

Flags that change memory in ways planner does not model are errors (CPU offload) or warnings;
flags known not to change memory are skipped; any other flag is a warning.
"""

from __future__ import annotations

import ast
import math
import re
import reprlib
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from pydantic import ValidationError

from planner.engines import load
from planner.engines.common import (
    Collected,
    EngineImport,
    ExportContext,
    data_parallel_degree,
    prediction_lines,
    require,
    resolve_batch,
)
from planner.engines.shell import first_marker, launch
from planner.errors import PlannerError, short_repr
from planner.physics.rotary import yarn_concentration_factor
from planner.physics.stages import PIPELINE_EDGE_UNITS, layers_on_stage
from planner.specs.bounds import MAX_FILE_BYTES, over_limit
from planner.specs.engine import engine_profile
from planner.specs.layout import (
    CUDA_GRAPH_BITS,
    FP8_RECIPE_CODES,
    MUON_NS_STEPS_DEFAULT,
    MUON_TP_MODE_CODES,
    RECOMPUTE_MODULE_BITS,
    Layout,
)
from planner.specs.model import ModelSpec

# planner's token for NVTE_CUTEDSL_FUSED_GROUPED_MLP=1 in the launch environment (read_launch_text adds it; see
# _fused_mlp); not a Megatron-LM flag
FUSED_MLP_ENV_FLAG = "nvte-cutedsl-fused-grouped-mlp"
# Megatron-Core's overlap_dispatch_backward_with_experts_wgrad (model_parallel_config.py @ d98e8a64; a
# TransformerConfig field, so Megatron-LM's argument factory makes it this flag)
DISPATCH_WGRAD_FLAG = "overlap-dispatch-backward-with-experts-wgrad"

# kind of each flag planner reads: int / float / str / list (nargs +) / bool (store_true) / path (one value)
GDN_SIZE_FLAGS: dict[str, tuple[str, int]] = {
    "linear-num-key-heads": ("num_key_heads", 16), "linear-num-value-heads": ("num_value_heads", 32),
    "linear-key-head-dim": ("key_head_dim", 128), "linear-value-head-dim": ("value_head_dim", 128),
    "linear-conv-kernel-dim": ("conv_kernel", 4),
}
"""The Gated DeltaNet sizes' flags, each with its LinearAttentionSpec field and TransformerConfig's default
(megatron/core/transformer/transformer_config.py @ d98e8a64), which the command line sets through --linear-*
(ArgumentGroupFactory over TransformerConfig); read and written from this one table."""

READ_FLAGS: dict[str, str] = {
    **{f: "int" for f in (
        "moe-mlp-glu-interleave-size",
        "tensor-model-parallel-size", "pipeline-model-parallel-size", "context-parallel-size",
        "expert-model-parallel-size", "expert-tensor-parallel-size", "num-layers-per-virtual-pipeline-stage",
        "virtual-pipeline-model-parallel-size", "num-virtual-stages-per-pipeline-rank", "recompute-num-layers",
        "microbatch-group-size-per-virtual-pipeline-stage",
        "micro-batch-size", "batch-size", "global-batch-size", "seq-length", "num-layers", "hidden-size",
        "num-attention-heads", "ffn-hidden-size", "num-query-groups", "kv-channels", "max-position-embeddings",
        "padded-vocab-size", "vocab-size", "make-vocab-size-divisible-by", "num-experts", "moe-router-topk",
        "moe-ffn-hidden-size", "moe-shared-expert-intermediate-size", "q-lora-rank", "kv-lora-rank",
        "dsa-indexer-n-heads", "dsa-indexer-head-dim", "dsa-indexer-topk", "dsa-indexer-topk-freq",
        "qk-head-dim", "qk-pos-emb-head-dim", "v-head-dim", "decoder-first-pipeline-num-layers",
        "decoder-last-pipeline-num-layers", "mtp-num-layers", "encoder-seq-length", "encoder-num-layers",
        "zero-stage", "pad-vocab-size-to", "checkpoint-num-layers",
        "moe-expert-parallel-size", "topk", "expert-interval",  # Megatron-DeepSpeed's DeepSpeed-MoE flags
        "cpu-offloading-num-layers", *GDN_SIZE_FLAGS, "moe-latent-size", "muon-num-ns-steps",
    )},
    **{f: "float" for f in ("attention-dropout", "hidden-dropout", "moe-expert-capacity-factor",
                            "moe-expert-rank-capacity-factor",
                            "rotary-scaling-factor", "mscale", "mscale-all-dim",  # YaRN's attention factor
                            "activation-func-clamp-value")},
    **{f: "str" for f in (
        "recompute-granularity", "recompute-method", "position-embedding-type", "normalization", "optimizer",
        "attention-backend", "fp8-format", "fp8-recipe", "fp4-format", "fp4-recipe", "data-parallel-sharding-strategy", "main-grads-dtype", "tokenizer-type",
        "moe-layer-freq", "pipeline-model-parallel-layout", "hybrid-layer-pattern", "hybrid-override-pattern",
        "experimental-attention-variant", "linear-attention-freq", "heterogeneous-layers-config-path",
        "heterogeneous-layers-config-encoded-json", "dsa-kernel-backend",
        "exp-avg-dtype", "exp-avg-sq-dtype", "main-params-dtype", "softmax-type", "window-size",
        "window-attn-skip-freq", "step-batch-size-schedule", "pp-partition-method",
        "moe-token-dispatcher-type", "moe-flex-dispatcher-backend", "cuda-graph-impl", "rope-type",
        "linear-attention-type", "sparse-attention-type",  # the variant's spellings before Megatron-LM 6630c7f3
        "muon-tp-mode", "muon-fp32-matmul-prec", "muon-scalar-optimizer",
    )},
    **{f: "path" for f in ("deepspeed_config", "deepscale_config")},  # read for a warning only: may stay unresolved
    **{f: "list" for f in ("recompute-modules", "rampup-batch-size", "cuda-graph-scope", "cuda-graph-modules",
                           "cp-comm-type", "offload-modules")},  # --cp-comm-type: nargs='+', one type or one per layer
    **{f: "bool" for f in (
        "sequence-parallel", "recompute-activations", "checkpoint-activations", "moe-layer-recompute",
        "group-query-attention", "swiglu",
        "untie-embeddings-and-output-weights", "use-distributed-optimizer", "bf16", "fp16", "disable-bias-linear",
        "add-qkv-bias", "qk-layernorm", "overlap-grad-reduce", "tp-comm-overlap", "use-flash-attn",
        "use-torch-fsdp2", "use-megatron-fsdp", "accumulate-allreduce-grads-in-fp32", "grad-reduce-in-bf16",
        "cpu-offloading", "optimizer-cpu-offload", "use-rotary-position-embeddings", "no-position-embedding",
        "multi-latent-attention", "moe-router-enable-expert-bias", "dsa-indexer-use-sparse-loss", "distribute-saved-activations", "squared-relu",
        "openai-gelu", "account-for-embedding-in-pipeline-split", "account-for-loss-in-pipeline-split",
        "fp8-param-gather", "fp4-param-gather", "use-precision-aware-optimizer", "moe-shared-expert-gate", "quick-geglu",
        "enable-gpt-oss",  # megatron/post_training/arguments.py: GPT-OSS's YaRN RoPE (model_builder.py)
        "moe-enable-deepep", "overlap-moe-expert-parallel-comm", "delay-wgrad-compute", "moe-shared-expert-overlap",
        "overlap-dispatch-backward-with-experts-wgrad", "moe-pad-expert-input-to-capacity",
        "moe-paged-stash", "fine-grained-activation-offloading", "enable-cuda-graph", "external-cuda-graph",
        "use-checkpoint-args", "muon-no-split-qkv", "muon-use-syrk",
        "activation-func-fp8-input-store", "fp8-dot-product-attention", "fp8-multi-head-attention",
        "use-transformer-engine-op-fuser", FUSED_MLP_ENV_FLAG, "attention-output-gate",
        # Megatron-DeepSpeed (bigscience-workshop/Megatron-DeepSpeed, microsoft/Megatron-DeepSpeed)
        "deepspeed", "deepspeed-activation-checkpointing", "partition-activations", "embed-layernorm",
        "no-pipeline-parallel", "use-flash-attn-v1", "use-flash-attn-v2", "use-flash-attn-triton", "cpu-optimizer",
        "cpu-torch-adam", "cpu_torch_adam", "checkpoint-in-cpu",
        "deepscale",
    )},
}

# Flags that do not change per-GPU memory (learning rate, data, logging, checkpoints, fusions, RNG).
IGNORED_FLAGS: frozenset[str] = frozenset({
    "lr", "min-lr", "lr-decay-style", "lr-decay-iters", "lr-decay-samples", "lr-warmup-iters", "lr-warmup-samples",
    "lr-warmup-fraction", "lr-warmup-init", "weight-decay", "start-weight-decay", "end-weight-decay",
    # Muon's hyper-parameters: they scale its update, not its work (--muon-nesterov's extra lerp is a fraction of the
    # step's element-wise traffic, physics.muon.LOCAL_STEP_BYTES_PER_ELEMENT), and Lion's betas
    "muon-momentum", "muon-nesterov", "muon-scale-mode", "muon-coefficient-type", "muon-extra-scale-factor",
    "lion-beta1", "lion-beta2", "use-layer-wise-param-layout", "no-use-layer-wise-param-layout",
    "weight-decay-incr-style", "clip-grad", "adam-beta1", "adam-beta2", "adam-eps", "sgd-momentum",
    "init-method-std", "init-method-xavier-uniform", "train-iters", "train-samples", "eval-iters", "eval-interval",
    "save", "load", "save-interval", "log-interval", "data-path", "train-data-path", "valid-data-path",
    "test-data-path", "split", "tokenizer-model", "vocab-file", "merge-file", "data-cache-path", "tensorboard-dir",
    "tensorboard-queue-size", "wandb-project", "wandb-exp-name", "wandb-save-dir", "wandb-entity", "seed",
    "log-throughput", "log-timers-to-tensorboard", "log-validation-ppl-to-tensorboard", "log-memory-to-tensorboard",
    "log-params-norm", "log-num-zeros-in-grad", "log-progress", "log-world-size-to-tensorboard",
    "log-loss-scale-to-tensorboard", "log-batch-size-to-tensorboard", "timing-log-level", "timing-log-option",
    "distributed-backend", "distributed-timeout-minutes", "num-workers", "use-mcore-models", "use-legacy-models",
    "transformer-impl", "ckpt-format", "exit-interval", "exit-duration-in-mins", "exit-signal-handler",
    "rotary-base", "rotary-percent", "rotary-interleaved", "rotary-seq-len-interpolation-factor",
    "rope-scaling-factor", "use-rope-scaling", "norm-epsilon", "apply-layernorm-1p",
    "attention-softmax-in-fp32", "no-masked-softmax-fusion", "no-bias-gelu-fusion", "no-bias-swiglu-fusion",
    "no-bias-dropout-fusion", "no-rope-fusion", "no-persist-layer-norm", "no-gradient-accumulation-fusion",
    "loss-scale", "initial-loss-scale", "min-loss-scale", "loss-scale-window", "hysteresis", "manual-gc",
    "manual-gc-interval", "manual-gc-eval", "overlap-param-gather", "overlap-param-gather-with-optimizer-step",
    "async-save", "no-async-tensor-model-parallel-allreduce", "moe-router-load-balancing-type",
    "moe-aux-loss-coeff", "moe-z-loss-coeff", "moe-grouped-gemm",
    "moe-router-score-function", "moe-router-pre-softmax", "moe-token-drop-policy", "moe-permute-fusion",
    "moe-router-dtype", "moe-router-bias-update-rate",
    "moe-router-num-groups", "moe-router-group-topk", "moe-router-topk-scaling-factor", "moe-input-jitter-eps",
    "eod-mask-loss", "reset-position-ids", "reset-attention-mask", "mock-data", "dataloader-type",
    "profile", "profile-step-start", "profile-step-end", "profile-ranks", "use-pytorch-profiler", "no-load-optim",
    "no-load-rng", "no-save-optim", "no-save-rng", "finetune", "deterministic-mode",
    "cross-entropy-loss-fusion", "cross-entropy-fusion-impl", "calculate-per-token-loss", "use-dist-ckpt",
    "dist-ckpt-format", "dist-ckpt-strictness", "auto-detect-ckpt-format", "spec",
    "no-create-attention-mask-in-dataloader", "defer-embedding-wgrad-compute", "tp-comm-overlap-cfg",
    "tp-comm-bulk-wgrad", "tp-comm-bulk-dgrad", "no-check-for-nan-in-loss-and-grad", "check-for-nan-in-loss-and-grad",
    "bias-dropout-fusion", "masked-softmax-fusion", "bias-gelu-fusion", "apply-query-key-layer-scaling",
    "fp8-margin", "fp8-interval", "fp8-amax-history-len", "fp8-amax-compute-algo",
    "no-fp8-wgrad", "first-last-layers-bf16", "num-layers-at-start-in-bf16", "num-layers-at-end-in-bf16",
    "empty-unused-memory-level", "ddp-bucket-size", "ddp-average-in-collective", "align-grad-reduce",
    "align-param-gather", "num-distributed-optimizer-instances", "use-ring-exchange-p2p",
    "overlap-p2p-communication", "no-overlap-p2p-communication", "decoder-num-layers",
    "decoder-seq-length", "train-sync-interval", "log-straggler", "straggler-minmax-count",
    "enable-one-logger", "one-logger-project", "one-logger-run-name", "ckpt-fully-parallel-save",
    "ckpt-fully-parallel-load", "ckpt-assume-constant-structure", "no-ckpt-fully-parallel-save",
    "retro-project-dir", "micro-batch-size-schedule", "recompute-granularity-selective", "qk-l2-norm",
    "kv-lora-rank-ignored", "no-rope-freq", "hierarchical-context-parallel-sizes",
    "nccl-communicator-config-path", "use-tp-pp-dp-mapping", "high-priority-stream-groups", "keep-fp8-transpose-cache",
    "exit-on-missing-checkpoint", "use-persistent-ckpt-worker", "non-persistent-save-interval",
    "non-persistent-ckpt-type", "non-persistent-global-ckpt-dir", "ckpt-convert-format", "ckpt-convert-save",
    "ckpt-step", "pretrained-checkpoint", "load-main-params-from-ckpt", "data-args-path", "per-split-data-args-path",
    "object-storage-cache-path", "mid-level-dataset-surplus", "s3-cache-path", "train-mode", "tokenizer-prompt-format",
    "tiktoken-pattern", "tiktoken-num-special-tokens", "tiktoken-special-tokens", "legacy-tokenizer",
    "decoupled-lr", "decoupled-min-lr", "mmap-bin-files", "no-mmap-bin-files", "rerun-mode", "lr-wsd-decay-style", "lr-wsd-decay-iters", "lr-wsd-decay-samples",
    # activation details and RoPE scaling that change no shape (gpt-oss: examples/gptoss/02_train.sh)
    "glu-linear-offset", "export-force-local-attention",
    "yarn-original-max-position-embeddings", "yarn-beta-fast", "yarn-beta-slow",
    "no-yarn-correction-range-round-to-int", "disable-bf16-reduced-precision-matmul",
    # the router's fused kernels (docs/cost-model.md 14: the unfused count stays charged), forced balance (the
    # model's experts are balanced already), a weight-decay rule
    "moe-router-fusion", "moe-router-force-load-balancing", "no-weight-decay-cond-type",
    "moe-per-layer-logging", "mtp-loss-scaling-factor", "use-tokenizer-model-from-checkpoint-args", "no-use-tokenizer-model-from-checkpoint-args",
    # Megatron-DeepSpeed: data, logging and kernel checks (BLOOM's tr11-176B-ml.slurm)
    "sync-tp-duplicated-parameters", "abort-on-unmet-fused-kernel-constraints", "kill-switch-path",
    "train-weighted-split-paths-path", "valid-weighted-split-paths-path", "valid-num-workers", "data-impl",
    "tokenizer-name-or-path", "universal-checkpoint", "deepspeed-mpi", "synchronize-each-layer",
    "profile-backward", "contigious-checkpointing", "contiguous-checkpointing", "skip-train-iteration-range",
    "reset-progress", "moe-loss-coeff", "moe-train-capacity-factor", "moe-eval-capacity-factor", "moe-min-capacity",
    "create-moe-param-group", "disable-moe-token-dropping", "mlp-type", "train-tokens", "lr-decay-tokens",
    "lr-warmup-tokens", "override-opt_param-scheduler", "override-lr-scheduler",
    # Megatron-LM's functional tests and the MoE model zoo (MODEL_ARGS files): switches and logging
    "enable-experimental", "save-retain-interval", "logging-level",
    # DeepSeek Sparse Attention's loss and numerics (TransformerConfig @ d98e8a64): no weights, no change of work
    "dsa-indexer-loss-coeff", "dsa-indexer-rope-interleaved",
    "dsa-indexer-rotate-activation", "dsa-indexer-scoring-relu", "dsa-indexer-k-norm-epsilon",
    "dsa-indexer-k-norm-fp32", "dsa-indexer-skip-topk-offset",
})

FSDP_STRATEGY_ZERO: dict[str, int] = {"no_shard": 0, "optim": 1, "optim_grads": 2, "optim_grads_params": 3}
# --attention-backend values that pick one fused kernel (Layout.attention_kernel); auto leaves the engine's
ATTENTION_BACKEND_KERNELS: dict[str, str] = {"flash": "flash2", "fused": "fused"}
GPT2_VOCAB = 50257  # GPT2BPETokenizer (Radford et al. 2019): 50,257 tokens
# TikTokenizer without --vocab-size: Megatron-Core's TikTokenTokenizer takes DEFAULT_TIKTOKEN_MAX_VOCAB = 2**17 as its
# vocabulary whatever the file holds (the file's ranks are cut to it, and it asserts the file fills it;
# megatron/core/tokenizers/text/libraries/tiktoken_tokenizer.py, utils/build_tokenizer.py @ d98e8a64)
TIKTOKEN_DEFAULT_VOCAB = 2**17



FUSED_MLP_ENV = "NVTE_CUTEDSL_FUSED_GROUPED_MLP"
FUSED_MLP_GLU_INTERLEAVE = 32  # Transformer Engine's fused kernel takes 32-wide GLU interleaving only


# Launch-script text -> flags ------------------------------------------------------------------
def read_launch_text(text: str, source: str) -> tuple[list[str], list[str]]:
    """The Megatron flags in an arguments file or a launch script, and warnings about reading it.

    The script is read as bash would run it (`planner.engines.shell`): comments, continuations,
    `NAME=value`, bash arrays `NAME=( ... )` / `NAME+=( ... )`, `$NAME`, `${NAME[@]}`, `${NAME:-x}`,
    `$(( ... ))` and `if`/`else` tests on those variables. When a command runs a Python script
    (`torchrun ... pretrain_gpt.py ARGS`), only the arguments after the script are taken; otherwise
    every line is a line of flags. A variable the file does not define is kept as a marker and becomes
    an error if planner needs its value (see `parse_flags`).
    """
    flags, warnings, environment = launch(text, source)
    if environment.get(FUSED_MLP_ENV, "0").strip() not in ("", "0") and f"--{FUSED_MLP_ENV_FLAG}" not in flags:
        # Transformer Engine reads int(NVTE_CUTEDSL_FUSED_GROUPED_MLP) > 0 (ops/fused/grouped_mlp.py); the flag below is
        # planner's own token for it, which _fused_mlp reads beside --use-transformer-engine-op-fuser
        flags = [*flags, f"--{FUSED_MLP_ENV_FLAG}"]
    backend = _environment_attention_backend(environment)
    if backend is not None and "--attention-backend" not in flags:
        flags = [*flags, "--attention-backend", backend]
        warnings = [*warnings, f"{source}: read NVTE_FLASH_ATTN={environment.get('NVTE_FLASH_ATTN', '1')}, "
                    f"NVTE_FUSED_ATTN={environment.get('NVTE_FUSED_ATTN', '1')} as --attention-backend {backend} "
                    "(Transformer Engine's choice among its attention backends; Megatron-Core since 0.10 asserts "
                    "against these variables unless --attention-backend names the same backend)"]
    return flags, warnings


_NAME = r"[A-Za-z_][A-Za-z0-9_]*"  # a shell variable's name
_ASSIGNMENT = re.compile(rf"{_NAME}=")


def is_variable_assignment(word: str) -> bool:
    """Whether a shell word is NAME=value (a variable of a MODEL_ARGS file), not a flag or its value."""
    return _ASSIGNMENT.match(word) is not None


def model_args_yaml(data: Any) -> bool:
    """Whether parsed YAML is a Megatron-LM arguments file in the form of its functional tests and of the Megatron
    MoE model zoo: a `MODEL_ARGS` mapping of flags (with `ENV_VARS` beside it)."""
    return isinstance(data, Mapping) and isinstance(data.get("MODEL_ARGS"), Mapping)


def parse_model_args_text(text: str, source: str, variables: Sequence[str] = ()) -> Mapping[str, Any] | None:
    """A MODEL_ARGS YAML file's data, or None when the text is something else (read_model_args, without its notes)."""
    return read_model_args(text, source, variables)[0]


def read_model_args(text: str, source: str, variables: Sequence[str] = ()) -> tuple[Mapping[str, Any] | None, list[str]]:
    """A MODEL_ARGS YAML file's data, or None when the text is something else (an arguments file, a script), and
    notes. A file that has a `MODEL_ARGS:` line but is not valid YAML is an error saying so.

    A key given twice is read as the harness runs it: its yq query (`.MODEL_ARGS | to_entries`,
    tests/functional_tests/shell_test_utils/_run_training.sh @ d98e8a64) hands every entry to the launcher in order,
    so the flag is passed twice and argparse keeps the last value; a note names the key and its lines (22 of
    Megatron-LM's 333 functional-test files repeat one).

    The harnesses that run these files substitute the environment into the text before reading the YAML (`envsubst`
    in Megatron-LM's tests/functional_tests and in the MoE model zoo's sbatch_benchmarking.sh), so `variables`
    (NAME=value words, given in the engine args) replace `${NAME}` and `$NAME` in the text first; a variable not
    given stays a reference, an error only where planner needs its value."""
    if not _MODEL_ARGS_LINE.search(text):
        return None, []
    defined: dict[str, str] = {}
    for word in variables:
        if not is_variable_assignment(word):
            raise PlannerError(f"{word!r} is not NAME=value (the variables of a MODEL_ARGS file are given as "
                               "NAME=value words in the engine args)", source=source)
        name, _, value = word.partition("=")
        defined[name] = value
    if defined:
        grown = sum(len(defined[n]) for m in _REFERENCE.finditer(text) if (n := m.group(1) or m.group(2)) in defined)
        if len(text) + grown > MAX_FILE_BYTES:
            raise PlannerError(f"with its variables substituted the file would exceed {MAX_FILE_BYTES:,} characters "
                               "(planner's limit for a config file); give shorter values", source=source)
        text = _REFERENCE.sub(lambda m: defined.get(m.group(1) or m.group(2), m.group(0)), text)
    data, repeated = load.parse_engine_yaml_keeping_last(text, source)
    if not model_args_yaml(data):
        raise PlannerError("MODEL_ARGS must be a mapping of --flags to values", source=source, field="MODEL_ARGS")
    mapping: Mapping[str, Any] = data
    notes = [f"{source}: {what}; the harness passes both and Megatron-LM keeps the last value" for what in repeated]
    return mapping, notes


_MODEL_ARGS_LINE = re.compile(r"^MODEL_ARGS:", re.MULTILINE)
_REFERENCE = re.compile(rf"\$\{{({_NAME})\}}|\$({_NAME})")


def unused_variables(text: str, variables: Sequence[str], source: str) -> list[str]:
    """A warning for each NAME=value the MODEL_ARGS file never references (a misspelt variable is not an error in
    envsubst either, but it leaves the reference it was meant for unset)."""
    used = {m.group(1) or m.group(2) for m in _REFERENCE.finditer(text)}
    names = [w.partition("=")[0] for w in variables]
    return [f"{source}: the variable {name} is not used in the file; check its spelling" for name in names
            if name not in used]


_FLAG_NAME = re.compile(r"--[A-Za-z0-9][A-Za-z0-9_-]*")


def model_args_script(data: Mapping[str, Any], source: str) -> str:
    """A MODEL_ARGS YAML (`parse_model_args_text`) as the launch script it stands for, for `read_launch_text`:
    `ENV_VARS` exported, then `pretrain_gpt.py` with each flag as the launchers pass it
    (tests/functional_tests/shell_test_utils/_run_training.sh, the model zoo's sbatch_benchmarking.sh):
    `--flag: true` is the flag alone; false leaves any flag out (the zoo's launcher drops every false value,
    `select(.value != "false")`, and its runtime.conf sets LAYERS_PER_VP=false and PP_FIRST=false where a run has
    no virtual stages or an even split); null leaves a switch out and is refused for a flag that takes a value;
    a list or a bracketed string "[a b]" gives its values; anything else is one value. A `${NAME}` left in a value
    stays a shell variable."""
    lines: list[str] = []
    env = data.get("ENV_VARS") or {}
    if not isinstance(env, Mapping):
        raise PlannerError("ENV_VARS must be a mapping of variable names to values", source=source, field="ENV_VARS")
    for name, value in env.items():
        if not (isinstance(name, str) and re.fullmatch(_NAME, name)):
            raise PlannerError(f"{name!r} is not a variable name", source=source, field="ENV_VARS")
        if isinstance(value, (list, Mapping)):
            raise PlannerError("expected a value", source=source, field=f"ENV_VARS.{name}")
        if value is not None:
            lines.append(f"export {name}={_shell_word(value)}")
    words = ["pretrain_gpt.py"]
    for flag, value in data["MODEL_ARGS"].items():
        if not (isinstance(flag, str) and _FLAG_NAME.fullmatch(flag)):
            raise PlannerError(f"{reprlib.repr(flag)} is not a --flag (letters, digits, '-' and '_')", source=source,
                               field="MODEL_ARGS")
        if value is False:
            continue  # left out, as the model zoo's launcher leaves out every flag set to false
        if value is None:
            kind = READ_FLAGS.get(flag[2:])
            if kind is None or kind == "bool":
                continue  # a switch left off, or a flag planner does not read
            raise PlannerError("expected a value, got null (a variable the harness would substitute is given as "
                               "NAME=value in --engine-args)", source=source, field=f"MODEL_ARGS.{flag}")
        words.append(flag)
        if value is True:
            continue
        if isinstance(value, str) and re.fullmatch(r"\[[^]]+\]", value.strip()):
            value = value.strip()[1:-1].split()  # the functional tests' launcher passes "[a b]" as two values
        items = value if isinstance(value, list) else [value]
        if any(isinstance(item, (list, Mapping)) for item in items):
            raise PlannerError("expected a value or a list of values", source=source, field=f"MODEL_ARGS.{flag}")
        words += [_shell_word(item) for item in items]
    return "\n".join([*lines, " ".join(words)]) + "\n"


_UNDEFINED_IN_FILE = re.compile(rf"\$({_NAME}) is not defined in the file(.*?)define it in the file or")


def in_model_args_terms(err: PlannerError) -> PlannerError:
    """The reader's error about a variable the file does not define, said as a MODEL_ARGS file's user fixes it: the
    harness substitutes the environment into the file, so the value is given as NAME=value in the engine args."""
    message = _UNDEFINED_IN_FILE.sub(
        lambda m: f"${m.group(1)} is not given{m.group(2)}add {m.group(1)}=VALUE to --engine-args (the test harness "
                  "substitutes it into the file) or", err.message)
    return err if message == err.message else PlannerError(message, source=err.source, field=err.field)


def _shell_word(value: Any) -> str:
    """A YAML value as one shell word: `${NAME}` references expanded (double quotes), anything else literal."""
    text = str(value).lower() if isinstance(value, bool) else str(value)
    if "$" in text:
        return '"' + re.sub(r'(["\\`])', r"\\\1", text) + '"'
    return shlex.quote(text)


def _environment_attention_backend(environment: Mapping[str, str]) -> str | None:
    """The attention backend Transformer Engine's NVTE_FLASH_ATTN / NVTE_FUSED_ATTN leave it (each 1 unless set;
    TE picks among the enabled ones): flash when only cuDNN is off, fused when only flash-attn is off, unfused
    when both are; None when neither is set to 0."""
    flash = environment.get("NVTE_FLASH_ATTN", "1").strip() != "0"
    fused = environment.get("NVTE_FUSED_ATTN", "1").strip() != "0"
    if flash and fused:
        return None
    return "flash" if flash else ("fused" if fused else "unfused")


def split_launch_text(text: str, source: str) -> list[str]:
    """The Megatron flags in an arguments file or a launch script (`read_launch_text` without the warnings)."""
    return read_launch_text(text, source)[0]


def _undefined(name: str) -> str:
    if name.isdigit():
        return f"${name} (the script's argument {name}) is not known"
    if name.startswith(("$(", "`")):
        return f"{name} is a command's output, which planner does not run"
    return f"${name} is not defined in the file"


# Flags -> values -------------------------------------------------------------------------------
def parse_flags(tokens: Sequence[str], source: str) -> tuple[dict[str, Any], list[str]]:
    """Flags planner reads (name without '--' -> typed value) and warnings for the flags it does not know."""
    values: dict[str, Any] = {}
    warnings: list[str] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if not tok.startswith("--"):
            name = first_marker(tok)
            if name:
                raise PlannerError(f"{_undefined(name)}, so planner cannot tell which flags it holds; define it in "
                                   "the file or write its value", source=source)
            raise PlannerError(f"unexpected argument {tok!r} (not a --flag or its value)", source=source)
        flag, eq, inline = tok[2:].partition("=")
        i += 1
        vals = [inline] if eq else []
        while i < len(tokens) and not (tokens[i].startswith("--") or (tokens[i].startswith("-") and
                                                                      not _numeric(tokens[i]) and len(tokens[i]) > 1)):
            vals.append(tokens[i])
            i += 1
        kind = READ_FLAGS.get(flag)
        if kind is None:
            if flag not in IGNORED_FLAGS:
                warnings.append(f"{source}: --{flag} is not known to planner and was ignored; if it changes memory, "
                                "the estimate does not include it")
            continue
        for v in vals if kind != "path" else ():
            name = first_marker(v)
            if name:
                raise PlannerError(f"{_undefined(name)}; define it in the file or write the value of --{flag}",
                                   source=source)
        values[flag] = _typed(flag, kind, vals, source)
    return values, warnings


def _numeric(tok: str) -> bool:
    try:
        float(tok)
        return True
    except ValueError:
        return False


def _typed(flag: str, kind: str, vals: list[str], source: str) -> Any:
    if kind == "bool":
        if vals:
            raise PlannerError(f"--{flag} takes no value, got {' '.join(vals)!r}", source=source)
        return True
    if kind == "list":
        if not vals:
            raise PlannerError(f"--{flag} needs at least one value", source=source)
        return vals
    if len(vals) != 1:
        raise PlannerError(f"--{flag} takes one value, got {len(vals)}", source=source)
    try:
        if kind == "int":
            value = int(vals[0])
            if value < (0 if flag in NON_NEGATIVE_FLAGS else 1):
                raise PlannerError(f"--{flag} must be {'>= 0' if flag in NON_NEGATIVE_FLAGS else 'positive'}, got "
                                   f"{value}", source=source)
            problem = over_limit(FLAG_LIMITS.get(flag, "count"), value)
            if problem:
                raise PlannerError(f"--{flag}: {problem}", source=source)
            return value
        if kind == "float":
            number = float(vals[0])
            if not math.isfinite(number):
                raise PlannerError(f"--{flag} needs a finite number, got {vals[0]!r}", source=source)
            return number
    except ValueError:
        noun = {"int": "an integer", "float": "a number"}.get(kind, f"a {kind}")
        raise PlannerError(f"--{flag} needs {noun}, got {vals[0]!r}", source=source) from None
    return vals[0]


# The kind of quantity (planner.specs.bounds.LIMITS) of the flags that size the model or the layout; any other
# int flag (iterations, intervals, seeds) is only bounded by "count".
FLAG_LIMITS: dict[str, str] = {
    **dict.fromkeys(("tensor-model-parallel-size", "pipeline-model-parallel-size", "context-parallel-size",
                     "expert-model-parallel-size", "expert-tensor-parallel-size"), "degree"),
    "micro-batch-size": "micro_batch", "global-batch-size": "global_batch",
    **dict.fromkeys(("seq-length", "max-position-embeddings"), "seq_len"),
    **dict.fromkeys(("num-layers", "num-layers-per-virtual-pipeline-stage", "recompute-num-layers",
                     "decoder-first-pipeline-num-layers", "decoder-last-pipeline-num-layers", "mtp-num-layers"), "layers"),
    "num-virtual-stages-per-pipeline-rank": "interleave",
    "microbatch-group-size-per-virtual-pipeline-stage": "grad_accum",
    **dict.fromkeys(("hidden-size", "ffn-hidden-size", "kv-channels", "moe-ffn-hidden-size",
                     "moe-shared-expert-intermediate-size", "kv-lora-rank", "q-lora-rank", "qk-head-dim",
                     "qk-pos-emb-head-dim", "v-head-dim"), "width"),
    **dict.fromkeys(("num-attention-heads", "num-query-groups"), "heads"),
    **dict.fromkeys(("padded-vocab-size", "vocab-size", "make-vocab-size-divisible-by"), "vocab"),
    **dict.fromkeys(("num-experts", "moe-router-topk"), "experts"),
    "dsa-indexer-n-heads": "heads", "dsa-indexer-head-dim": "width", "dsa-indexer-topk": "seq_len",
    "dsa-indexer-topk-freq": "layers",
}


# int flags that may be 0 (Megatron-LM reads 0 as 'none'); every other int flag is a size or a count >= 1
NON_NEGATIVE_FLAGS: frozenset[str] = frozenset({
    "moe-shared-expert-intermediate-size", "mtp-num-layers", "decoder-first-pipeline-num-layers",
    "decoder-last-pipeline-num-layers", "q-lora-rank", "recompute-num-layers", "zero-stage",
})


# Values -> ModelSpec ---------------------------------------------------------------------------
def ffn_hidden_size(args: Mapping[str, Any]) -> int:
    """Megatron-LM's default when --ffn-hidden-size is absent: 4h, or int(8h/3 / 64) * 64 with --swiglu."""
    if args.get("ffn-hidden-size"):
        return int(args["ffn-hidden-size"])
    h = int(args["hidden-size"])
    return int((4 * h * 2 / 3) / 64) * 64 if args.get("swiglu") else 4 * h


def padded_vocab(args: Mapping[str, Any], tp: int, source: str) -> int:
    """--padded-vocab-size (or Megatron-DeepSpeed's --pad-vocab-size-to) as given, else the tokenizer's
    vocabulary padded up to a multiple of make-vocab-size-divisible-by (128) x tp, as Megatron-LM's
    vocab_size_with_padding does; without --tokenizer-type, pretrain_gpt.py's GPT2BPETokenizer; TikTokenizer without
    --vocab-size, its 2**17 tokens."""
    if args.get("padded-vocab-size"):
        return int(args["padded-vocab-size"])
    if args.get("pad-vocab-size-to"):  # Megatron-DeepSpeed (BigScience): the padded size, written out
        return int(args["pad-vocab-size-to"])
    vocab = args.get("vocab-size")
    if vocab is None:
        # pretrain_gpt.py passes args_defaults={'tokenizer_type': 'GPT2BPETokenizer'} to initialize_megatron,
        # so a GPT script without --tokenizer-type runs GPT-2's BPE (NVIDIA's examples/gpt3 scripts rely on it)
        tokenizer = args.get("tokenizer-type", "GPT2BPETokenizer")
        if tokenizer == "GPT2BPETokenizer":
            vocab = GPT2_VOCAB
        elif tokenizer == "TikTokenizer":
            vocab = TIKTOKEN_DEFAULT_VOCAB
        else:
            raise PlannerError(f"the vocabulary size comes from {args['tokenizer-type']}, which planner does not read; "
                               "add --vocab-size N (or --padded-vocab-size N) to the arguments, or give the model with "
                               "--model", source=source)
    multiple = int(args.get("make-vocab-size-divisible-by", 128)) * tp
    return -(-int(vocab) // multiple) * multiple


MAX_PATTERN_LAYERS = 100_000  # a --moe-layer-freq list longer than this is refused before it is built


def moe_layer_pattern(freq: Any, num_layers: int, source: str) -> list[int]:
    """--moe-layer-freq as Megatron-Core reads it: an integer N puts experts on every N-th layer (layer i is
    MoE when i % N == 0), a list expression such as '([0]*3+[1]*58)' or '([0,1]*24)' gives each layer (1 MoE,
    0 dense) and must have num_layers entries (Megatron-LM asserts it). The expression is read, never run:
    list literals of 0/1, + and * by an integer only."""
    text = str(1 if freq is None else freq).strip().strip("'\"")
    bad = PlannerError(f"--moe-layer-freq {freq!r}: expected an integer or a list expression of 0/1 such as "
                       "'([0]*3+[1]*58)'", source=source)
    if len(text) > 10_000:
        raise bad
    if "[" in text and re.search(r"[^,\d\[\]()+*]", text):
        # Megatron-LM's _eval_pattern allows only digits, commas, brackets, parentheses, + and * (no spaces)
        raise PlannerError(f"--moe-layer-freq {freq!r}: Megatron-LM accepts only digits, commas, [ ], ( ), + and * "
                           "in a pattern (no spaces); write it as '([0]*3+[1]*58)'", source=source)
    try:
        tree = ast.parse(text, mode="eval").body
    except (SyntaxError, RecursionError, MemoryError, ValueError):
        raise bad from None

    def value(node: ast.AST) -> int | list[int]:
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.List):  # Megatron's eval would make a tuple, which its length check refuses
            items = [value(e) for e in node.elts]
            if all(isinstance(i, int) and i in (0, 1) for i in items):
                return [int(i) for i in items]  # type: ignore[arg-type]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Mult):
            left, right = value(node.left), value(node.right)
            if isinstance(node.op, ast.Add) and isinstance(left, list) and isinstance(right, list) \
                    and len(left) + len(right) <= MAX_PATTERN_LAYERS:  # a sum of long lists is bounded too
                return left + right
            if isinstance(node.op, ast.Mult) and isinstance(left, int) and isinstance(right, list):
                left, right = right, left
            if isinstance(node.op, ast.Mult) and isinstance(left, list) and isinstance(right, int) \
                    and 0 <= right and len(left) * right <= MAX_PATTERN_LAYERS:
                return left * right
        raise bad

    try:
        got = value(tree)
    except RecursionError:  # a sum of thousands of lists
        raise bad from None
    if isinstance(got, int):
        if got < 1:
            raise bad
        return [int(i % got == 0) for i in range(num_layers)]
    if len(got) != num_layers:
        raise PlannerError(f"--moe-layer-freq {freq!r} gives {len(got)} layers and --num-layers is {num_layers} "
                           "(Megatron-LM asserts they match)", source=source)
    return got


def _dense_layers(freq: Any, num_layers: int, source: str) -> int:
    """Dense layers of --moe-layer-freq (moe_layer_pattern). planner places them before the MoE layers; where the
    pattern mixes them (Llama 4's '([0,1]*24)'), import_megatron says so."""
    return moe_layer_pattern(freq, num_layers, source).count(0)


def moe_layers_interleaved(freq: Any, num_layers: int, source: str) -> bool:
    """True where some dense layer comes after a MoE layer in --moe-layer-freq."""
    pattern = moe_layer_pattern(freq, num_layers, source)
    return pattern != sorted(pattern)


def _sliding_window(args: Mapping[str, Any], layers: int, source: str) -> dict[str, Any]:
    """--window-size LEFT,RIGHT (causal: RIGHT 0) with --window-attn-skip-freq N: one full-attention layer
    after every N - 1 sliding-window ones (TransformerConfig.window_attn_skip_freq); without it, every layer
    slides. A window of LEFT tokens before the query plus the query itself is LEFT + 1 tokens."""
    window = args.get("window-size")
    if window is None:
        return {}
    parts = str(window).strip("()[] ").split(",")
    try:
        left, right = (int(p) for p in parts)
    except ValueError:
        raise PlannerError(f"--window-size {window!r}: expected LEFT,RIGHT (e.g. 127,0)", source=source) from None
    if right != 0 or left < 0:
        raise PlannerError(f"--window-size {window}: planner models causal sliding windows (LEFT,0)", source=source)
    freq = args.get("window-attn-skip-freq")
    if freq is None:
        swa = layers
    else:
        try:
            every = int(freq)
        except ValueError:
            raise PlannerError(f"--window-attn-skip-freq {freq!r}: planner reads an integer N (one full-attention "
                               "layer in N); give the model with --model for a custom pattern", source=source) from None
        if every < 1:
            raise PlannerError(f"--window-attn-skip-freq must be positive, got {every}", source=source)
        swa = layers - layers // every
    return {"sliding_window_tokens": left + 1, "sliding_window_layers": swa} if swa else {}


# Megatron-Core's hybrid stack letters (megatron/core/ssm/mamba_hybrid_layer_allocation.py @ d98e8a64, Symbols)
HYBRID_LAYERS = {"M": "Mamba", "G": "Gated DeltaNet", "*": "attention", "D": "DeepSeek sparse attention",
                 "+": "MLA", "-": "MLP", "E": "MoE"}


def _hybrid_refusal(flag: str, pattern: str) -> str:
    """Why a hybrid stack (Nemotron-H, Megatron's hybrid models) is refused: what its pattern holds."""
    body = pattern.split("/")[0]  # MTP layers follow a '/'
    counts = {name: body.count(letter) for letter, name in HYBRID_LAYERS.items() if body.count(letter)}
    held = ", ".join(f"{n} {name}" for name, n in counts.items()) or "no layer planner knows"
    why = ("planner has no Mamba (state-space) layer" if "Mamba" in counts else
           "planner reads Gated DeltaNet hybrids from Hugging Face configs (Qwen3-Next, Qwen3.5), not from a hybrid "
           "pattern")
    return (f"--{flag} {reprlib.repr(pattern)} describes a hybrid stack ({held}); {why}, so it is not modelled: give a "
            "transformer model with --model, or drop the pattern")


def model_from_args(args: Mapping[str, Any], *, tp: int, source: str) -> ModelSpec:
    """The ModelSpec a Megatron-LM GPT argument list describes (Megatron's defaults where a flag is absent)."""
    for flag in ("hybrid-layer-pattern", "hybrid-override-pattern"):  # before the sizes: such a file gives no
        if args.get(flag):  # --num-layers (the pattern's length is the depth)
            raise PlannerError(_hybrid_refusal(flag, str(args[flag])), source=source)
    for flag in ("num-layers", "hidden-size", "num-attention-heads"):
        if args.get(flag) is None:
            raise PlannerError(f"--{flag} is missing, so the arguments do not define a model; add it or give the "
                               "model with --model", source=source)
    h, a, layers = int(args["hidden-size"]), int(args["num-attention-heads"]), int(args["num-layers"])
    kv = int(args.get("num-query-groups", 1)) if args.get("group-query-attention") else None
    head_dim = args.get("kv-channels")
    position = args.get("position-embedding-type", "rope" if args.get("use-rotary-position-embeddings") else
                        "learned_absolute")
    if args.get("no-position-embedding"):
        position = "none"
    if args.get("enable-gpt-oss") and "position-embedding-type" not in args:
        # post_training/model_builder.py sets config.position_embedding_type = "yarn" (ModelOpt's builder; a plain
        # pretraining run that also names its position type runs that one)
        position = "yarn"
    positions = {"learned_absolute": "learned", "rope": "rotary", "yarn": "rotary", "mrope": "rotary", "none": "none",
                 "alibi": "alibi"}  # alibi: Megatron-DeepSpeed's PositionEmbeddingType
    if position not in positions:
        raise PlannerError(f"--position-embedding-type {position} is not modelled (planner knows learned_absolute, "
                           "rope, yarn, mrope, alibi, none)", source=source)
    norm = str(args.get("normalization", "RMSNorm" if args.get("multi-latent-attention") else "LayerNorm"))
    if norm not in ("LayerNorm", "RMSNorm"):
        raise PlannerError(f"--normalization {norm} is not modelled (LayerNorm or RMSNorm)", source=source)
    bias = not args.get("disable-bias-linear")
    if args.get("swiglu") and args.get("quick-geglu"):
        raise PlannerError("--swiglu and --quick-geglu are both set (Megatron-LM asserts not args.swiglu); keep one",
                           source=source)
    gated = bool(args.get("swiglu") or args.get("quick-geglu"))  # quick-geglu: gated_linear_unit + quick_gelu
    ffn = ffn_hidden_size(args)
    moe = None
    # one expert is a dense MLP: Megatron-DeepSpeed's --num-experts defaults to [1] and its dense examples pass 1
    if args.get("num-experts") and int(args["num-experts"]) > 1:
        moe_ffn = int(args.get("moe-ffn-hidden-size") or ffn)
        shared = int(args.get("moe-shared-expert-intermediate-size") or 0)
        # Megatron-Core runs the shared experts as one MLP of this width: whole experts when it is a multiple of
        # the expert size (DeepSeek), else one shared expert of its own width (Qwen2-MoE).
        shared_experts, shared_width = (shared // moe_ffn, None) if shared % moe_ffn == 0 else (1, shared)
        # Megatron-DeepSpeed's DeepSpeed-MoE: top-1 unless --topk, and experts on every --expert-interval-th
        # layer (default 2; megatron/model/transformer.py get_num_experts_per_layer), counted here as that many
        # MoE layers after the dense ones
        deepspeed_moe = bool(args.get("deepspeed"))
        topk = args.get("moe-router-topk") or args.get("topk") or (1 if deepspeed_moe else 2)
        dense = (layers - layers // int(args.get("expert-interval", 2)) if deepspeed_moe
                 else _dense_layers(args.get("moe-layer-freq"), layers, source))
        moe = dict(num_experts=int(args["num-experts"]), experts_per_token=int(topk),
                   moe_ffn_hidden_size=moe_ffn, num_shared_experts=shared_experts,
                   shared_expert_ffn_hidden_size=shared_width,
                   shared_expert_gate=bool(args.get("moe-shared-expert-gate")) and shared > 0,
                   num_dense_layers=dense, router_bias=bool(args.get("moe-router-enable-expert-bias")))
    mla = None
    if args.get("multi-latent-attention"):
        if args.get("kv-lora-rank") is None:
            raise PlannerError("--multi-latent-attention needs --kv-lora-rank (planner does not guess it)",
                               source=source)
        mla = dict(q_lora_rank=args.get("q-lora-rank"), kv_lora_rank=int(args["kv-lora-rank"]),
                   qk_nope_head_dim=int(args.get("qk-head-dim", 128)),
                   qk_rope_head_dim=int(args.get("qk-pos-emb-head-dim", 64)),
                   v_head_dim=int(args.get("v-head-dim", 128)))
    sparse = _sparse_attention(args, source)
    dropout = float(args.get("attention-dropout", 0.1)) > 0 or float(args.get("hidden-dropout", 0.1)) > 0
    spec: dict[str, Any] = dict(
        name=f"Megatron-LM arguments ({source})", source=source, num_layers=layers, hidden_size=h,
        num_attention_heads=a, num_kv_heads=kv, ffn_hidden_size=ffn,
        head_dim=int(head_dim) if head_dim and (mla is not None or int(head_dim) != h // a) else None,
        mlp_kind="gated" if gated else "standard",
        embedding_norm=bool(args.get("embed-layernorm")),
        attention_sinks=args.get("softmax-type") == "learnable",  # one learnable sink logit per head and layer
        **_sliding_window(args, layers, source),
        vocab_size=padded_vocab(args, tp, source),
        tied_embeddings=not args.get("untie-embeddings-and-output-weights"),
        position_embedding=positions[position], norm_kind="rmsnorm" if norm == "RMSNorm" else "layernorm",
        qk_norm=bool(args.get("qk-layernorm")), qkv_bias=bias or bool(args.get("add-qkv-bias")),
        attention_output_bias=bias, mlp_bias=bias,
        max_seq_len=int(args.get("max-position-embeddings") or args.get("seq-length") or 0) or None,
        dropout=dropout, moe=moe, mla=mla, sparse_attention=sparse,  # validated below: a bad value is one error
        mtp_layers=int(args.get("mtp-num-layers") or 0),
        attention_output_gate=bool(args.get("attention-output-gate")),
        rotary_attention_factor=_yarn_attention_factor(args, position, source),
        activation_clamp=args.get("activation-func-clamp-value"),  # TransformerConfig.activation_func_clamp_value
    )
    linear = _linear_attention(args, source)
    if linear is not None and linear["full_attention_interval"] > 1:  # 1: softmax attention on every layer
        spec["linear_attention"] = linear
    if spec["max_seq_len"] is None:
        raise PlannerError("--max-position-embeddings (or --seq-length) is missing", source=source)
    try:
        return ModelSpec(**spec)
    except ValidationError as err:
        from planner.specs.validation import describe_validation_error

        raise PlannerError(f"the arguments describe an invalid model: {describe_validation_error(err)}",
                           source=source) from None


def _yarn_attention_factor(args: Mapping[str, Any], position: str, source: str) -> float:
    """YaRN's attention (concentration) factor of --position-embedding-type yarn, as Megatron-Core takes it
    (yarn_rotary_pos_embedding._yarn_get_concentration_factor @ d98e8a64): the factor at --mscale over the factor at
    --mscale-all-dim for the context scale --rotary-scaling-factor (defaults 1, 1 and 0, training/arguments.py);
    --enable-gpt-oss sets 32, 1 and 0 (post_training/model_builder.py). MLA's --rope-type yarn is the same formula
    (DeepSeek's recipes set --mscale and --mscale-all-dim alike: 1). 1 for plain RoPE."""
    if args.get("enable-gpt-oss") and position == "yarn":
        return yarn_concentration_factor(32.0, 1.0, 0.0)
    mla_yarn = args.get("multi-latent-attention") and args.get("rope-type", "yarn") == "yarn"
    if position != "yarn" and not mla_yarn:
        return 1.0
    values = []
    for flag, default in (("rotary-scaling-factor", 1.0), ("mscale", 1.0), ("mscale-all-dim", 0.0)):
        value = float(args.get(flag, default))  # parse_flags has read it as a finite number
        if value < 0:
            raise PlannerError(f"--{flag} {value:g} is negative; give a non-negative number", source=source)
        values.append(value)
    scale, mscale, mscale_all_dim = values
    factor = yarn_concentration_factor(scale, mscale, mscale_all_dim)
    if not (math.isfinite(factor) and 0 < factor <= 100):
        raise PlannerError(f"--rotary-scaling-factor {scale:g} with --mscale {mscale:g} and --mscale-all-dim "
                           f"{mscale_all_dim:g} give YaRN an attention factor of {factor:g}; planner takes (0, 100]: "
                           "give the context scale and the mscale values of the model", source=source)
    return factor


def _linear_attention(args: Mapping[str, Any], source: str) -> dict[str, int] | None:
    """Gated DeltaNet layers from --experimental-attention-variant gdn: --linear-attention-freq N puts softmax
    attention on the layers i with (i + 1) % N == 0 and GDN on the others (Megatron-Core
    experimental_attention_variant_module_specs.py @ d98e8a64, the integer form; TransformerConfig asserts it is
    set for gdn); the sizes are the --linear-* flags, TransformerConfig's defaults where absent."""
    if args.get("experimental-attention-variant") not in GDN_VARIANTS:
        return None
    freq = args.get("linear-attention-freq")
    if freq is None:
        raise PlannerError("--experimental-attention-variant gdn needs --linear-attention-freq (Megatron-Core asserts "
                           "it): N puts softmax attention on every Nth layer", source=source)
    text = str(freq).strip()
    if "[" in text:
        raise PlannerError(f"--linear-attention-freq {text}: a list pattern is not modelled; planner places softmax "
                           "attention on every Nth layer (give the integer N)", source=source)
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise PlannerError(f"--linear-attention-freq {text!r}: expected a positive integer N (softmax attention on "
                           "every Nth layer)", source=source)
    sizes = {field: int(args.get(flag) or default) for flag, (field, default) in GDN_SIZE_FLAGS.items()}
    return {**sizes, "full_attention_interval": int(text), "state_bytes_per_element": 2}


def _sparse_attention(args: Mapping[str, Any], source: str) -> dict[str, int] | None:
    """DeepSeek Sparse Attention from --experimental-attention-variant dsa and its --dsa-indexer-* sizes (each
    required: TransformerConfig leaves them None), on MLA with a query latent."""
    if args.get("experimental-attention-variant") != "dsa":
        return None
    missing = [f"--{flag}" for flag in ("dsa-indexer-n-heads", "dsa-indexer-head-dim", "dsa-indexer-topk")
               if args.get(flag) is None]
    if missing:
        raise PlannerError(f"--experimental-attention-variant dsa needs {', '.join(missing)}", source=source)
    if not args.get("multi-latent-attention") or not args.get("q-lora-rank"):
        raise PlannerError("--experimental-attention-variant dsa runs on multi-latent attention with a query latent; "
                           "add --multi-latent-attention and --q-lora-rank", source=source)
    return {"index_heads": int(args["dsa-indexer-n-heads"]), "index_head_dim": int(args["dsa-indexer-head-dim"]),
            "topk": int(args["dsa-indexer-topk"])}


_ARCH_CHECK: dict[str, str] = {
    "num-layers": "num_layers", "hidden-size": "hidden_size", "num-attention-heads": "num_attention_heads",
    "ffn-hidden-size": "ffn_hidden_size", "num-experts": "moe.num_experts",
}


def _check_given_model(args: Mapping[str, Any], model: ModelSpec, source: str) -> None:
    """With --model given, architecture flags in the arguments must agree with it."""
    for flag, attr in _ARCH_CHECK.items():
        if flag not in args:
            continue
        value: Any = model
        for part in attr.split("."):
            value = getattr(value, part, None) if value is not None else None
        if value != args[flag]:
            raise PlannerError(f"--{flag} {args[flag]} disagrees with the model's {attr} ({value}); drop --model to "
                               "use the architecture in the arguments, or fix them", source=source)
    if args.get("group-query-attention") and "num-query-groups" in args and args["num-query-groups"] != model.kv_heads:
        raise PlannerError(f"--num-query-groups {args['num-query-groups']} disagrees with the model's kv heads "
                           f"({model.kv_heads}); drop --model or fix the arguments", source=source)


# Values -> Layout fields -----------------------------------------------------------------------
def _layout_fields(args: Mapping[str, Any], got: Collected) -> None:
    src = got.source
    if "moe-expert-parallel-size" in args and "expert-model-parallel-size" not in args:
        args = {**args, "expert-model-parallel-size": args["moe-expert-parallel-size"]}  # Megatron-DeepSpeed
    for flag, name in (("tensor-model-parallel-size", "tp"), ("pipeline-model-parallel-size", "pp"),
                       ("context-parallel-size", "cp"), ("expert-model-parallel-size", "ep"),
                       ("micro-batch-size", "micro_batch"), ("batch-size", "micro_batch"),
                       ("seq-length", "seq_len"),
                       ("microbatch-group-size-per-virtual-pipeline-stage", "microbatch_group_size")):
        if flag in args:
            got.set(name, int(args[flag]), f"--{flag}")
    for flag, name in (("sequence-parallel", "sequence_parallel"), ("overlap-grad-reduce", "overlap_grad_reduce"),
                       ("tp-comm-overlap", "overlap_tp_comm")):  # store_true flags: absent means off
        got.set(name, bool(args.get(flag)), f"--{flag}", explicit=flag in args)
    got.set("schedule", "1f1b", "Megatron-LM's pipeline schedule", explicit=False)
    # precision
    if args.get("bf16") and args.get("fp16"):
        raise PlannerError("--bf16 and --fp16 are both set; keep one", source=src)
    if args.get("fp8-format") and args.get("fp4-format"):
        raise PlannerError("--fp4-format and --fp8-format are both set (Megatron-LM refuses the pair); keep one",
                           source=src)
    if args.get("fp4-format"):
        _fp4_format(args, src)
    if args.get("bf16") or args.get("fp16") or args.get("fp8-format") or args.get("fp4-format"):
        dtype = ("fp8" if args.get("fp8-format") else "fp4" if args.get("fp4-format")
                 else "bf16" if args.get("bf16") else "fp16")
        got.set("dtype", dtype, f"--{dtype}-format" if dtype in ("fp8", "fp4")
                else f"--{'bf16' if args.get('bf16') else 'fp16'}")
        if dtype == "fp8":  # Megatron-LM's --fp8-recipe: delayed unless the arguments say (training/arguments.py)
            recipe = str(args.get("fp8-recipe") or "delayed")
            if recipe not in FP8_RECIPE_CODES:
                raise PlannerError(f"--fp8-recipe {recipe}: Megatron-LM takes {', '.join(FP8_RECIPE_CODES)}", source=src)
            got.set("fp8_recipe", recipe, "--fp8-recipe" if args.get("fp8-recipe") else "Megatron-LM's --fp8-recipe default",
                    explicit="fp8-recipe" in args)
    grad_flags = [f for f in ("grad-reduce-in-bf16", "main-grads-dtype", "accumulate-allreduce-grads-in-fp32")
                  if f in args]
    if args.get("fp16"):
        grad = "fp32" if args.get("accumulate-allreduce-grads-in-fp32") else "fp16"
    else:  # Megatron-LM: bf16 accumulates and reduces gradients in fp32 unless told otherwise
        grad = "bf16" if args.get("grad-reduce-in-bf16") or args.get("main-grads-dtype") == "bf16" else "fp32"
    got.set("grad_dtype", grad, "--" + (grad_flags[0] if grad_flags else "bf16"), explicit=bool(grad_flags) or
            "dtype" in got.values)
    optimizer = str(args.get("optimizer", "adam"))
    layer_wise = optimizer == "dist_muon"  # Megatron-LM: deprecated, read as --optimizer muon with the layer-wise
    if layer_wise:  # distributed optimizer (megatron/training/arguments.py @ d98e8a64, the emerging-optimizer check)
        optimizer = "muon"
    if optimizer not in ("adam", "sgd", "muon"):
        raise PlannerError(f"--optimizer {optimizer} is not modelled (adam, sgd or muon)", source=src)
    got.set("optimizer", optimizer, "--optimizer", explicit="optimizer" in args)
    if optimizer == "muon":
        _muon(args, got)
    # sharding
    zero = 0
    if args.get("use-distributed-optimizer") or layer_wise:  # with muon: the layer-wise distributed optimizer
        zero = 1
    if args.get("use-torch-fsdp2"):
        zero = 3
    if args.get("use-megatron-fsdp"):
        strategy = str(args.get("data-parallel-sharding-strategy", "optim_grads_params"))
        if strategy not in FSDP_STRATEGY_ZERO:
            raise PlannerError(f"--data-parallel-sharding-strategy {strategy} is not known", source=src)
        zero = FSDP_STRATEGY_ZERO[strategy]
    zero_flags = [f for f in ("use-distributed-optimizer", "use-torch-fsdp2", "use-megatron-fsdp") if f in args]
    if args.get("deepspeed"):
        _deepspeed_engine(args, got)
    else:
        got.set("zero", zero, "--" + (zero_flags[-1] if zero_flags else "use-distributed-optimizer"),
                explicit=bool(zero_flags))
    if args.get("fp8-param-gather"):
        if args.get("use-torch-fsdp2"):
            got.warn("--fp8-param-gather with --use-torch-fsdp2: Megatron-LM turns it off (Transformer Engine >= 2.0 "
                     "gathers FSDP2 parameters in bf16); read as off")
        elif got.values.get("dtype") != "fp8":
            raise PlannerError("--fp8-param-gather keeps fp8 weights, which needs fp8 training; add --fp8-format "
                               "hybrid (or e4m3) or remove it", source=src)
        elif not (zero_flags or args.get("deepspeed")):
            raise PlannerError("--fp8-param-gather needs --use-distributed-optimizer or FSDP (Megatron-LM asserts "
                               "it); add --use-distributed-optimizer", source=src)
        else:
            got.set("fp8_param_gather", True, "--fp8-param-gather")
    if args.get("fp4-param-gather"):
        if got.values.get("dtype") != "fp4":
            raise PlannerError("--fp4-param-gather keeps NVFP4 weights, which needs fp4 training; add --fp4-format "
                               "e2m1 or remove it (Megatron-LM refuses it alone)", source=src)
        if not (zero_flags or args.get("deepspeed")):
            got.warn("--fp4-param-gather without --use-distributed-optimizer or FSDP: planner counts NVFP4 weights "
                     "only where they are all-gathered from shards; read as off")
        else:
            got.set("fp8_param_gather", True, "--fp4-param-gather")
    _fp8_attention(args, got)
    # attention kernel: Megatron-LM picks flash/fused attention (Transformer Engine) unless told otherwise
    # Megatron-DeepSpeed runs its fused softmax unless --use-flash-attn(-v1/-v2/-triton) is given
    flash_flags = ("use-flash-attn", "use-flash-attn-v1", "use-flash-attn-v2", "use-flash-attn-triton")
    default = "flash" if any(args.get(f) for f in flash_flags) else ("unfused" if args.get("deepspeed") else "auto")
    backend = str(args.get("attention-backend", default))
    got.set("flash_attention", backend not in ("unfused", "local"), "--attention-backend",
            explicit="attention-backend" in args or any(f in args for f in flash_flags) or "deepspeed" in args)
    # Megatron-Core's AttnBackend (megatron/core/models/common/language_module/language_module.py @ d98e8a64):
    # flash sets NVTE_FLASH_ATTN=1, NVTE_FUSED_ATTN=0 (Transformer Engine's flash-attn backend, FlashAttention-2),
    # fused the reverse (cuDNN attention); auto lets Transformer Engine choose (cuDNN on Hopper): the engine's
    # (only the flag itself: --use-flash-attn is parsed but read by nothing in Megatron-Core @ d98e8a64, so under
    # Transformer Engine its choice, the engine's, runs)
    if "attention-backend" in args and backend in ATTENTION_BACKEND_KERNELS:
        got.set("attention_kernel", ATTENTION_BACKEND_KERNELS[backend], "--attention-backend")
    _recompute(args, got)
    if args.get("activation-func-fp8-input-store"):
        # The fused SwiGLU saves its input cast to fp8 (megatron/core/fusions/fused_bias_swiglu.py @ d98e8a64). A
        # recomputed expert activation (moe_act) is not that function's save but the checkpoint's, which keeps
        # fc1's 16-bit output (CheckpointWithoutOutput in moe/experts.py): there the flag saves nothing.
        if "moe_act" in (got.values.get("recompute_modules") or ()):
            got.warn("--activation-func-fp8-input-store with --recompute-modules moe_act: the recompute checkpoint "
                     "keeps the experts' activation input in 16 bits; read as off")
        else:
            got.set("activation_input_fp8", True, "--activation-func-fp8-input-store")
    if args.get("softmax-type") not in (None, "vanilla", "off-by-one", "learnable"):
        raise PlannerError(f"--softmax-type {args['softmax-type']} is not known (vanilla, off-by-one, learnable)",
                           source=src)
    if args.get("cpu-offloading"):  # Megatron-Core CPU offloading of the activations of N layers
        got.set("offload_activation_layers", int(args.get("cpu-offloading-num-layers") or 0),
                "--cpu-offloading-num-layers")
    if args.get("optimizer-cpu-offload"):
        got.set("offload_optimizer", True, "--optimizer-cpu-offload")
    for flag, why, fatal in (
        ("distribute-saved-activations", "checkpoints split across tensor-parallel ranks are not modelled (the "
         "activation figure is an upper bound)", False),
        ("rampup-batch-size", "planner uses the final --global-batch-size", False),
        ("step-batch-size-schedule", "planner uses the final --global-batch-size", False),
        ("cpu-optimizer", "the optimizer on the CPU (DeepSpeed CPU Adam) is not modelled", True),
        ("cpu-torch-adam", "the optimizer on the CPU is not modelled", True),
        ("cpu_torch_adam", "the optimizer on the CPU is not modelled", True),
        ("checkpoint-in-cpu", "activation checkpoints offloaded to the CPU are not modelled", True),
        ("partition-activations", "checkpoints split across tensor-parallel ranks are not modelled (the "
         "activation figure is an upper bound)", False),
    ):
        if args.get(flag):
            if fatal:
                raise PlannerError(f"--{flag}: {why}; remove it to check the on-GPU layout", source=src)
            got.warn(f"--{flag}: {why}")
    if "num-query-groups" in args and not args.get("group-query-attention"):
        got.warn("--num-query-groups is ignored without --group-query-attention (as Megatron-LM does)")
    _moe_flags(args, got)
    _cuda_graphs(args, got)
    _optimizer_precision(args, got)


FLEX_BACKENDS = ("deepep", "hybridep")  # --moe-flex-dispatcher-backend (NVIDIA/Megatron-LM c1e938b0)


def _moe_flags(args: Mapping[str, Any], got: Collected) -> None:
    """Expert TP, the token dispatcher, the EP all-to-all and shared-expert overlaps and token drop, as
    Megatron-Core's TransformerConfig reads them (megatron/core/transformer/transformer_config.py and
    model_parallel_config.py at c1e938b0, 2026-05-13). Absent flags: etp = tp, the allgather dispatcher
    (set by import_megatron for MoE models), no overlap, dropless."""
    src = got.source
    if "expert-tensor-parallel-size" in args:
        got.set("etp", int(args["expert-tensor-parallel-size"]), "--expert-tensor-parallel-size")
    kind = args.get("moe-token-dispatcher-type")
    backend = args.get("moe-flex-dispatcher-backend")
    if args.get("moe-enable-deepep"):  # deprecated spelling of the flex dispatcher's DeepEP backend
        if kind != "flex":
            raise PlannerError("--moe-enable-deepep needs --moe-token-dispatcher-type flex (Megatron-Core raises "
                               "'DeepEP backend is only supported with flex token dispatcher')", source=src)
        if backend == "hybridep":
            raise PlannerError("--moe-enable-deepep with --moe-flex-dispatcher-backend hybridep (Megatron-Core "
                               "raises 'Only one backend is supported'); keep one", source=src)
        backend = "deepep"
    if kind is not None:
        if kind == "alltoall_seq":  # removed from Megatron-Core in 2025: the same all-to-all over the sequence
            got.warn("--moe-token-dispatcher-type alltoall_seq is read as alltoall")
            kind = "alltoall"
        if kind not in ("alltoall", "allgather", "flex"):
            raise PlannerError(f"--moe-token-dispatcher-type must be alltoall, allgather or flex, got {kind!r}",
                               source=src)
        if kind == "flex":
            backend = backend or "deepep"  # TransformerConfig.moe_flex_dispatcher_backend default
            if backend == "ncclep":  # Megatron-LM main (d98e8a64, 2026-08): NCCL's device-initiated EP
                got.warn("--moe-flex-dispatcher-backend ncclep is not modelled; read as the alltoall dispatcher")
                backend = "alltoall"
            if backend not in (*FLEX_BACKENDS, "alltoall"):
                raise PlannerError(f"--moe-flex-dispatcher-backend must be deepep or hybridep, got {backend!r}",
                                   source=src)
            kind = backend
        elif backend is not None:
            got.warn(f"--moe-flex-dispatcher-backend {backend} applies to the flex dispatcher only; ignored with "
                     f"--moe-token-dispatcher-type {kind}")
        got.set("moe_dispatcher", kind, "--moe-token-dispatcher-type")
    elif backend is not None:
        got.warn("--moe-flex-dispatcher-backend applies to --moe-token-dispatcher-type flex only; ignored")
    overlap = bool(args.get("overlap-moe-expert-parallel-comm"))
    delay, side_stream = bool(args.get("delay-wgrad-compute")), bool(args.get(DISPATCH_WGRAD_FLAG))
    if delay and not overlap:
        raise PlannerError("--delay-wgrad-compute needs --overlap-moe-expert-parallel-comm (Megatron-Core asserts "
                           f"it); add it, or remove --delay-wgrad-compute (without the overlap --{DISPATCH_WGRAD_FLAG} "
                           "runs the experts' weight gradients beside the dispatch's backward)", source=src)
    if side_stream and overlap:
        raise PlannerError(f"--{DISPATCH_WGRAD_FLAG} with --overlap-moe-expert-parallel-comm: Megatron-Core asserts the "
                           "overlap off with it (transformer_config.py); use --delay-wgrad-compute with the overlap",
                           source=src)
    got.set("moe_ep_overlap", overlap, "--overlap-moe-expert-parallel-comm",
            explicit="overlap-moe-expert-parallel-comm" in args)
    # Megatron-Core runs the experts' weight gradients after the dispatch's backward only when told to
    # (delay_wgrad_compute and overlap_dispatch_backward_with_experts_wgrad default False), where planner's layout
    # pairs it with the overlap: an overlap without --delay-wgrad-compute is read as Megatron runs it (false), and
    # the side stream without the overlap as true; the rest is the layout's default (null)
    if overlap and not delay:
        got.set("moe_delay_wgrad", False, "--overlap-moe-expert-parallel-comm without --delay-wgrad-compute")
    elif side_stream:
        got.set("moe_delay_wgrad", True, f"--{DISPATCH_WGRAD_FLAG}")
    got.set("moe_shared_expert_overlap", bool(args.get("moe-shared-expert-overlap")), "--moe-shared-expert-overlap",
            explicit="moe-shared-expert-overlap" in args)
    factor = args.get("moe-expert-capacity-factor")
    pad = bool(args.get("moe-pad-expert-input-to-capacity"))
    if pad and (factor is None or factor < 0):
        raise PlannerError("--moe-pad-expert-input-to-capacity needs --moe-expert-capacity-factor (Megatron-Core "
                           "raises 'moe_expert_capacity_factor must be set')", source=src)
    if factor is None or factor < 0:  # TransformerConfig: a negative factor means dropless
        return
    if factor == 0 or factor > 64:
        raise PlannerError(f"--moe-expert-capacity-factor must be above 0 (a negative value means dropless) and at "
                           f"most 64, got {factor:g}", source=src)
    if not pad:
        # Tokens beyond capacity are dropped, but the experts' inputs keep their routed (dynamic) sizes: with
        # balanced routing that is the dropless load, which planner's dropless model counts.
        got.warn(f"--moe-expert-capacity-factor {factor:g} without --moe-pad-expert-input-to-capacity: experts are "
                 "not padded to capacity, so planner counts dropless routing (the balanced load)")
        return
    got.set("moe_capacity_factor", float(factor), "--moe-expert-capacity-factor")


def _fp4_format(args: Mapping[str, Any], src: str) -> None:
    """--fp4-format e2m1 with --fp4-recipe nvfp4 (its default): Transformer Engine's NVFP4BlockScaling. The
    'custom' recipe runs a quantizer factory of the user's (megatron/core/transformer/transformer_config.py
    @ d98e8a64), whose cost planner cannot know."""
    if str(args["fp4-format"]) != "e2m1":
        raise PlannerError(f"--fp4-format {args['fp4-format']}: Megatron-LM takes e2m1", source=src)
    recipe = str(args.get("fp4-recipe") or "nvfp4")
    if recipe != "nvfp4":
        raise PlannerError(f"--fp4-recipe {recipe}: planner models NVFP4 training (--fp4-recipe nvfp4) only; a custom "
                           "quantizer factory's kernels are unknown to it", source=src)


def _fp8_attention(args: Mapping[str, Any], got: Collected) -> None:
    """--fp8-dot-product-attention: Megatron-Core hands fp8_dpa to Transformer Engine's delayed, current-scaling
    and MXFP8 recipes, not to Float8BlockScaling (megatron/core/fp8_utils.py @ d98e8a64), whose attention stays
    16-bit. --fp8-multi-head-attention (fp8_mha) runs the same fp8 kernel and also hands its output to the
    projection in fp8; read as FP8 attention."""
    flags = [f for f in ("fp8-dot-product-attention", "fp8-multi-head-attention") if args.get(f)]
    if not flags:
        return
    flag = "--" + flags[0]
    if got.values.get("dtype") != "fp8":
        raise PlannerError(f"{flag} runs the attention in fp8, which needs fp8 training; add --fp8-format hybrid (or "
                           "e4m3) or remove it", source=got.source)
    if got.values.get("fp8_recipe") == "blockwise":
        got.warn(f"{flag} with --fp8-recipe blockwise: Megatron-Core's Float8BlockScaling recipe takes no fp8_dpa "
                 "(megatron/core/fp8_utils.py), so the attention runs in 16 bits; read as off")
        return
    if "fp8-multi-head-attention" in flags:
        got.warn("--fp8-multi-head-attention read as --fp8-dot-product-attention (the fp8 output handed to the "
                 "projection is not modelled)")
    got.set("fp8_attention", True, flag)


def _fused_mlp(args: Mapping[str, Any], got: Collected, moe: bool) -> None:
    """Transformer Engine's fused grouped MLP (Layout.moe_fused_mlp). Megatron-Core builds a MoE model's experts from
    Transformer Engine ops under --use-transformer-engine-op-fuser (megatron/core/transformer/moe/experts.py
    @ d98e8a64), and Transformer Engine fuses fc1, the gated activation and fc2 into its CuTe DSL kernels when
    NVTE_CUTEDSL_FUSED_GROUPED_MLP=1 is in the environment, the recipe is MXFP8 and the GLU halves are interleaved
    in blocks of 32 (--moe-mlp-glu-interleave-size 32); otherwise its fuser leaves the basic ops, the unfused path
    (transformer_engine/pytorch/ops/fused/grouped_mlp.py fuse_grouped_mlp_ops @ d0067d0). The environment variable
    comes from the launch script (read_launch_text) or, in an arguments file, planner's --nvte-cutedsl-fused-grouped-mlp."""
    fuser = bool(args.get("use-transformer-engine-op-fuser"))
    env = bool(args.get(FUSED_MLP_ENV_FLAG))
    if not (fuser and moe):
        if env and moe:
            got.warn(f"{FUSED_MLP_ENV}=1 without --use-transformer-engine-op-fuser: Megatron-Core builds the experts "
                     "without Transformer Engine's op fuser, so the variable changes nothing; read as unfused")
        return
    unfused = None
    if not env:
        unfused = (f"the fused kernel also needs {FUSED_MLP_ENV}=1 in the launch environment, which this file does not "
                   f"set (set it in the script, or pass --{FUSED_MLP_ENV_FLAG})")
    elif got.values.get("dtype") != "fp8" or got.values.get("fp8_recipe") != "mxfp8":
        recipe = got.values.get("fp8_recipe") if got.values.get("dtype") == "fp8" else got.values.get("dtype")
        unfused = f"Transformer Engine fuses the experts under MXFP8 only, and this file trains with {recipe}"
    elif args.get("moe-mlp-glu-interleave-size") != FUSED_MLP_GLU_INTERLEAVE:
        unfused = (f"the fused kernel takes GLU halves interleaved in blocks of {FUSED_MLP_GLU_INTERLEAVE} "
                   f"(--moe-mlp-glu-interleave-size {FUSED_MLP_GLU_INTERLEAVE}), and this file gives "
                   f"{args.get('moe-mlp-glu-interleave-size', 'none')}")
    if unfused is not None:
        got.warn(f"--use-transformer-engine-op-fuser: {unfused}; read as the unfused experts")
        return
    got.set("moe_fused_mlp", True, f"--use-transformer-engine-op-fuser with {FUSED_MLP_ENV}=1")


# --cuda-graph-scope names (megatron/core/transformer/enums.py CudaGraphScope at c1e938b0) -> planner's scope
_GRAPH_SCOPES = ("attn", "mlp", "moe", "moe_router", "moe_preprocess")


def _cuda_graphs(args: Mapping[str, Any], got: Collected) -> None:
    """--cuda-graph-impl local|transformer_engine (or the deprecated --enable-cuda-graph / --external-cuda-graph)
    with --cuda-graph-scope (--cuda-graph-modules on Megatron-LM main): no scope = the whole layer."""
    src = got.source
    impl = str(args.get("cuda-graph-impl", "none"))
    old = [f for f in ("enable-cuda-graph", "external-cuda-graph") if args.get(f)]
    if old:
        if impl != "none":
            raise PlannerError(f"--{old[0]} with --cuda-graph-impl {impl} (Megatron-LM asserts 'Do not use "
                               "--enable-cuda-graph or --external-cuda-graph with --cuda-graph-impl'); keep "
                               "--cuda-graph-impl", source=src)
        if len(old) > 1:
            raise PlannerError("--enable-cuda-graph and --external-cuda-graph are both set (Megatron-LM asserts "
                               "they cannot be); keep one", source=src)
        impl = "local" if old[0] == "enable-cuda-graph" else "transformer_engine"
    if impl not in ("none", "local", "transformer_engine", "full_iteration"):
        raise PlannerError(f"--cuda-graph-impl must be none, local or transformer_engine, got {impl!r}", source=src)
    if "cuda-graph-scope" in args and "cuda-graph-modules" in args:
        raise PlannerError("--cuda-graph-scope and --cuda-graph-modules cannot be used together (Megatron-LM asserts "
                           "it); keep --cuda-graph-modules", source=src)
    flag = "--cuda-graph-modules" if "cuda-graph-modules" in args else "--cuda-graph-scope"
    names = [str(n) for n in (args.get("cuda-graph-modules") or args.get("cuda-graph-scope") or [])]
    if impl == "none":
        if names:
            got.warn(f"{flag} without --cuda-graph-impl captures nothing (Megatron-LM's default impl is none); "
                     "ignored")
        got.set("cuda_graph_scope", (), "--cuda-graph-impl", explicit=False)
        return
    if impl == "full_iteration" or "full_iteration" in names:
        got.warn("a whole-iteration CUDA graph is modelled as every layer captured (cuda_graph_scope full)")
        got.set("cuda_graph_scope", ("full",), "--cuda-graph-impl")
        return
    if "full" in names and names != ["full"]:
        raise PlannerError(f"{flag} full with other scopes (Megatron-Core asserts 'full' stands alone: it is the "
                           "whole layer); keep full or the list", source=src)
    unknown = [n for n in names if n not in (*_GRAPH_SCOPES, "full", "mamba")]
    if unknown:
        raise PlannerError(f"{flag} {' '.join(unknown)} is not known (attn, mlp, moe, moe_router, moe_preprocess, "
                           "full_iteration)", source=src)
    if "mamba" in names:
        got.warn(f"{flag} mamba: planner models transformer layers; ignored")
    scope = [n for n in _GRAPH_SCOPES if n in names]
    if not scope:
        got.set("cuda_graph_scope", ("full",), "--cuda-graph-impl")
        return
    if impl == "local" and ("moe_router" in scope or "moe_preprocess" in scope):
        scope = [n for n in _GRAPH_SCOPES if n in {*scope, "moe_router", "moe_preprocess"}]  # local captures both
    if "moe" in scope and "moe_router" in scope:
        raise PlannerError(f"{flag} moe and moe_router together (Megatron-Core asserts 'must not contain both')",
                           source=src)
    if "moe_preprocess" in scope and "moe_router" not in scope:
        raise PlannerError(f"{flag} moe_preprocess needs moe_router (Megatron-Core asserts it)", source=src)
    got.set("cuda_graph_scope", tuple(scope), flag)


def _muon(args: Mapping[str, Any], got: Collected) -> None:
    """--optimizer muon (or dist_muon) and its settings (megatron/training/arguments.py @ d98e8a64): Megatron-LM
    asserts the emerging optimizers run without Torch-FSDP2 and Megatron-FSDP, and with --use-distributed-optimizer
    swaps in its layer-wise distributed optimizer (planner's zero 1)."""
    src = got.source
    for flag in ("use-torch-fsdp2", "use-megatron-fsdp"):
        if args.get(flag):
            raise PlannerError(f"--optimizer muon with --{flag}: Megatron-LM asserts 'Emerging optimizer does not "
                               "support' it; use --use-distributed-optimizer (the layer-wise distributed optimizer)",
                               source=src)
    if args.get("fp16"):
        raise PlannerError("--optimizer muon with --fp16: Megatron-Core refuses it ('emerging optimizer with fp16 is "
                           "not supported'); use --bf16", source=src)
    if "muon-num-ns-steps" in args:
        got.set("muon_ns_steps", int(args["muon-num-ns-steps"]), "--muon-num-ns-steps")
    if "muon-tp-mode" in args:
        mode = str(args["muon-tp-mode"])
        if mode not in MUON_TP_MODE_CODES:
            raise PlannerError(f"--muon-tp-mode {mode} is not one of {', '.join(MUON_TP_MODE_CODES)}", source=src)
        got.set("muon_tp_mode", mode, "--muon-tp-mode")
    if args.get("muon-no-split-qkv"):
        got.set("muon_split_qkv", False, "--muon-no-split-qkv")
    if args.get("muon-use-syrk"):
        got.warn("--muon-use-syrk: the Triton SYRK kernel computes the symmetric Gram products in about half the FLOP; "
                 "planner counts full GEMMs (an upper bound on the Newton-Schulz time)")
    prec = str(args.get("muon-fp32-matmul-prec", "medium"))
    if prec != "medium":
        got.warn(f"--muon-fp32-matmul-prec {prec}: planner counts the Newton-Schulz GEMMs in bf16, as 'medium' runs "
                 "them")
    scalar = str(args.get("muon-scalar-optimizer", "adam"))
    if scalar != "adam":
        got.warn(f"--muon-scalar-optimizer {scalar}: planner counts the embedding and output layer with Adam's two "
                 "moments (Lion keeps one)")


def _optimizer_precision(args: Mapping[str, Any], got: Collected) -> None:
    """--use-precision-aware-optimizer with --exp-avg-dtype / --exp-avg-sq-dtype / --main-params-dtype
    (megatron/core/optimizer/optimizer_config.py at c1e938b0: without it every one must be fp32; with it adam
    and the distributed optimizer only). planner holds both moments in one dtype, fp32 or bf16."""
    src = got.source
    dtypes = {f: str(args.get(f, "fp32")) for f in ("exp-avg-dtype", "exp-avg-sq-dtype", "main-params-dtype")}
    for flag, value in dtypes.items():
        allowed = ("fp32", "fp16") if flag == "main-params-dtype" else ("fp32", "fp16", "bf16", "fp8")
        if value not in allowed:
            raise PlannerError(f"--{flag} must be {', '.join(allowed)}, got {value!r}", source=src)
    lowered = [f for f, v in dtypes.items() if v != "fp32"]
    if args.get("optimizer-cpu-offload") and not args.get("use-precision-aware-optimizer"):
        raise PlannerError("--optimizer-cpu-offload needs --use-precision-aware-optimizer (Megatron-LM asserts 'the "
                           "hybrid device optimizer reuses the code path of this flag'); add it", source=src)
    if not args.get("use-precision-aware-optimizer"):
        if lowered:
            raise PlannerError(f"--{lowered[0]} {dtypes[lowered[0]]} needs --use-precision-aware-optimizer "
                               "(Megatron-LM asserts it can only be fp32 otherwise)", source=src)
        return
    if str(args.get("optimizer", "adam")) != "adam":
        raise PlannerError("--use-precision-aware-optimizer needs --optimizer adam (Megatron-LM asserts it)",
                           source=src)
    if not any(args.get(f) for f in ("use-distributed-optimizer", "use-megatron-fsdp", "use-torch-fsdp2",
                                     "deepspeed")):
        raise PlannerError("--use-precision-aware-optimizer needs --use-distributed-optimizer (Megatron-LM asserts "
                           "'only supported with distributed optimizer')", source=src)
    moments = [dtypes["exp-avg-dtype"], dtypes["exp-avg-sq-dtype"]]
    if "fp32" in moments:
        if moments != ["fp32", "fp32"]:
            got.warn(f"--exp-avg-dtype {moments[0]} with --exp-avg-sq-dtype {moments[1]}: planner holds both moments "
                     "in one dtype and counts fp32 (an upper bound)")
    else:
        if any(m != "bf16" for m in moments):
            got.warn(f"Adam moments in {'/'.join(sorted(set(moments)))} are counted as bf16 (2 bytes each; fp8 "
                     "moments take less)")
        got.set("optimizer_state_dtype", "bf16", "--exp-avg-dtype")
    if dtypes["main-params-dtype"] != "fp32":
        got.warn("--main-params-dtype fp16: planner counts fp32 master weights (an upper bound by 2 bytes per "
                 "parameter)")


def _deepspeed_engine(args: Mapping[str, Any], got: Collected) -> None:
    """Megatron-DeepSpeed (--deepspeed): DeepSpeed wraps the optimizer. The stage is --zero-stage (default 1
    in Megatron-DeepSpeed's megatron/arguments.py), which the launch scripts also write into the JSON they
    pass with --deepspeed_config; planner does not read that JSON (check it with --deepspeed too).
    bf16 without ZeRO runs DeepSpeed's BF16_Optimizer, which shards the fp32 master weights and optimizer
    states over data parallelism as ZeRO 1 and accumulates gradients in a full fp32 buffer (DeepSpeed's
    bf16 default before grad_accum_dtype followed the model dtype; BLOOM-176B's launcher: 'bf16 must use
    z0! it implements its own zero stage 1 equivalent')."""
    src = got.source
    stage = int(args.get("zero-stage", 1))
    if stage not in (0, 1, 2, 3):
        raise PlannerError(f"--zero-stage must be 0, 1, 2 or 3, got {stage}", source=src)
    origin = "--zero-stage" if "zero-stage" in args else "--deepspeed (Megatron-DeepSpeed's --zero-stage default 1)"
    if stage == 0 and args.get("bf16"):
        got.set("zero", 1, "--zero-stage 0 with --bf16 (DeepSpeed's BF16_Optimizer shards optimizer states as ZeRO 1)")
        got.set("grad_dtype", "fp32", "--bf16 with --deepspeed (BF16_Optimizer's fp32 gradient buffer)")
    else:
        got.set("zero", stage, origin)
    if args.get("no-pipeline-parallel") and int(args.get("pipeline-model-parallel-size", 1)) > 1:
        raise PlannerError("--no-pipeline-parallel with --pipeline-model-parallel-size > 1; Megatron-DeepSpeed then "
                           "builds no pipeline: set --pipeline-model-parallel-size 1", source=src)
    if args.get("deepspeed_config") or args.get("deepscale_config"):
        got.warn("--deepspeed_config is not read: the ZeRO stage comes from --zero-stage and the batch from "
                 "--micro-batch-size/--global-batch-size; check the JSON itself with planner check --deepspeed")


def _recompute(args: Mapping[str, Any], got: Collected) -> None:
    src = got.source
    granularity = args.get("recompute-granularity")
    method = args.get("recompute-method")
    if args.get("recompute-activations"):
        granularity = "selective"
    if args.get("checkpoint-activations") and granularity is None:
        # Megatron-LM's deprecated flag and Megatron-DeepSpeed's: every layer (--checkpoint-num-layers, 1)
        granularity, method = "full", "uniform"
        if not args.get("deepspeed"):
            got.warn("--checkpoint-activations (deprecated in Megatron-LM) is read as --recompute-granularity full "
                     "--recompute-method uniform")
        if args.get("recompute-num-layers") is None:
            got.set("recompute", "full", "--checkpoint-activations")
            return
    extra_modules: list[str] = []
    if args.get("moe-layer-recompute"):
        # Deprecated spelling of selective recompute of the MoE layer: TransformerConfig.__post_init__ turns it
        # into recompute_granularity "selective" with "moe" appended to the modules, and raises with full
        # (NVIDIA/Megatron-LM megatron/core/transformer/transformer_config.py @ d98e8a64).
        if granularity == "full":
            raise PlannerError("--moe-layer-recompute with --recompute-granularity full (Megatron-Core raises 'Do not "
                               "set --moe-layer-recompute with full recompute granularity'); keep one", source=src)
        granularity, extra_modules = "selective", ["moe"]
    if granularity is None:
        got.set("recompute", "none", "--recompute-granularity", explicit=False)
        return
    if granularity not in ("full", "selective"):
        raise PlannerError(f"--recompute-granularity must be full or selective, got {granularity}", source=src)
    if granularity == "selective":
        modules = list(args.get("recompute-modules") or ["core_attn"])
        modules += [m for m in extra_modules if m not in modules]
        known = set(RECOMPUTE_MODULE_BITS)
        unknown = [m for m in modules if m not in known]
        if unknown:
            raise PlannerError(f"--recompute-modules {' '.join(unknown)} is not known to planner (it knows "
                               f"{', '.join(known)})", source=src)
        got.set("recompute", "selective", "--recompute-granularity")
        if list(modules) != ["core_attn"]:
            got.set("recompute_modules", tuple(modules), "--recompute-modules")
        return
    if method not in ("uniform", "block"):
        raise PlannerError("--recompute-granularity full needs --recompute-method uniform or block (Megatron-LM "
                           "rejects it otherwise)", source=src)
    if args.get("recompute-num-layers") is None:
        raise PlannerError("--recompute-granularity full needs --recompute-num-layers (Megatron-LM rejects it "
                           "otherwise)", source=src)
    got.set("recompute", "full", "--recompute-granularity")
    if method == "block":
        got.values["_block_layers"] = int(args["recompute-num-layers"])


def megatron_split(args: Mapping[str, Any], layers: int, pp: int, source: str) -> list[int] | None:
    """Transformer layers per pipeline stage as Megatron-LM places them (validate_args and
    TransformerConfig), or None where planner reads no fixed rule (one stage, a custom layout, or
    Megatron-DeepSpeed's PipelineModule partition other than 'type:transformer|embedding').

    Without --decoder-first/last-pipeline-num-layers the layers (plus one for the embedding / the loss with
    --account-for-embedding/loss-in-pipeline-split) must divide by pp: Megatron-LM asserts 'Number of layers
    should be divisible by the pipeline-model-parallel size'. With them, the first/last stage take the
    given counts and the stages between divide the rest evenly."""
    if pp == 1 or args.get("pipeline-model-parallel-layout") or args.get("hybrid-layer-pattern"):
        return None
    if args.get("deepspeed") and not args.get("no-pipeline-parallel"):
        method = str(args.get("pp-partition-method", "parameters")).strip("'\"")
        if method.replace(" ", "") in ("type:transformer|embedding", "type:transformer|embed") and (layers + 2) % pp == 0:
            per = (layers + 2) // pp  # the embedding and the (tied) head each count as a layer
            return [per - 1] + [per] * (pp - 2) + [per - 1]
        return None
    first = args.get("decoder-first-pipeline-num-layers")
    last = args.get("decoder-last-pipeline-num-layers")
    if first is not None or last is not None:
        fixed = (first or 0) + (last or 0)
        between = pp - (first is not None) - (last is not None)
        rest = layers - fixed
        if rest < 0 or (between == 0 and rest) or (between and rest % between):
            raise PlannerError(f"--decoder-first/last-pipeline-num-layers leave {rest} of the {layers} layers for "
                               f"the {between} stages between, which do not divide them evenly (Megatron-LM asserts "
                               "it); change the counts", source=source)
        middle = rest // between if between else 0
        return [middle if first is None else first] + [middle] * (pp - 2) + [middle if last is None else last]
    embed = int(bool(args.get("account-for-embedding-in-pipeline-split")))
    loss = int(bool(args.get("account-for-loss-in-pipeline-split")))
    total = layers + embed + loss
    if total % pp:
        counted = f"{layers} layers" + (f" (+{embed + loss} for the embedding/loss)" if embed + loss else "")
        raise PlannerError(f"{counted} do not divide by --pipeline-model-parallel-size {pp} (Megatron-LM asserts "
                           "'Number of layers should be divisible by the pipeline-model-parallel size'); give "
                           "--decoder-first-pipeline-num-layers and/or --decoder-last-pipeline-num-layers for an uneven "
                           "split, or change pp", source=source)
    per = total // pp
    return [per - embed] + [per] * (pp - 2) + [per - loss]


def _edge_units(args: Mapping[str, Any]) -> int:
    """Layers --account-for-embedding-in-pipeline-split and --account-for-loss-in-pipeline-split add to the count
    Megatron-LM divides over the pipeline (validate_args; Megatron-Core get_transformer_layer_offset)."""
    return int(bool(args.get("account-for-embedding-in-pipeline-split"))) + int(
        bool(args.get("account-for-loss-in-pipeline-split")))


def edge_unit_split(model: ModelSpec, layout: Layout) -> bool:
    """Whether Megatron-LM places planner's interleaved split only with the embedding and the loss counted as
    pipeline layers (--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split): the layers
    do not divide into pp x v virtual stages, the layers plus those two do, and planner's split (one layer fewer
    on the first and the last stage, physics.stages.layers_on_stage) is the one Megatron then builds. Llama 3.1
    405B's 126 layers on pp 8 x v 8 (Megatron-Bridge's H100 recipe) or pp 16 x v 8 (its GB200 recipe)."""
    layers, pp, v = model.num_layers, layout.pp, layout.interleave
    if pp == 1 or v == 1 or layers % (pp * v) == 0:
        return False
    units = layers + PIPELINE_EDGE_UNITS
    if units % (pp * v):
        return False
    per = units // pp
    return planner_split(layers, pp) == [per - 1] + [per] * (pp - 2) + [per - 1]


def planner_split(layers: int, pp: int) -> list[int]:
    """Layers per stage as planner's cost model places them (`planner.physics.stages.layers_on_stage`)."""
    return [int(n) for n in layers_on_stage(layers, np.asarray(pp), np.arange(pp))]


def _layout_stages(args: Mapping[str, Any], layers: int, pp: int, source: str) -> list[list[str]] | None:
    """The parsed --pipeline-model-parallel-layout where it applies (pp > 1), else None."""
    layout = args.get("pipeline-model-parallel-layout")
    if not layout or pp == 1:
        return None
    return pipeline_layout(layout, pp, layers, source, mtp_layers=_mtp_flag(args))


def _check_split(args: Mapping[str, Any], layers: int, pp: int, interleave: int, got: Collected,
                 stages: list[list[str]] | None) -> None:
    if stages is not None and not args.get("hybrid-layer-pattern"):
        placed = layout_split(stages, pp)
        if placed != planner_split(layers, pp):
            got.warn(f"--pipeline-model-parallel-layout places {placed} transformer layers on the {pp} pipeline ranks; "
                     f"planner models its own split {planner_split(layers, pp)}, so the per-stage figures are approximate")
        return
    split = megatron_split(args, layers, pp, got.source)
    if split is None:
        if pp > 1 and args.get("deepspeed"):
            got.warn(f"the pipeline partition is not read; planner places {planner_split(layers, pp)} layers on the "
                     f"{pp} stages")
        return
    if interleave > 1:
        return  # interleaved splits are validated by _interleave
    if split != planner_split(layers, pp):
        got.warn(f"Megatron-LM places {split} layers on the {pp} pipeline stages; planner models its own split "
                 f"{planner_split(layers, pp)}, so the per-stage figures are approximate")


LAYOUT_LAYERS = {"E": "embedding", "L": "loss", "t": "decoder", "m": "mtp"}
"""The letters of --pipeline-model-parallel-layout (Megatron-Core PipelineParallelLayerLayout, c1e938b0)."""


def pipeline_layout(text: str, pp: int, layers: int, source: str, *, mtp_layers: int | None = None) -> list[list[str]]:
    """--pipeline-model-parallel-layout as Megatron-Core reads it: commas are cosmetic, '(...)*n' and 'x*n'
    repeat, '|' ends a virtual stage; the stages go round the pp ranks (stage i on rank i % pp), so there are
    pp x v of them. Megatron asserts the count divides by pp, one embedding first, one loss last, exactly
    num_layers decoder layers, and --mtp-num-layers MTP layers (none without the flag) after every decoder
    layer (PipelineParallelLayerLayout.validate_layer_layout); so does this. Returns each stage's letters in
    order."""
    flat = str(text).strip("'\"").replace(",", "")
    produced = [0]  # what the repeats of one pass have written: bounded over the pass, not only per repeat

    def repeat(match: re.Match[str]) -> str:
        count = int(match.group(2)) if len(match.group(2)) < 7 else MAX_PATTERN_LAYERS + 1
        produced[0] += len(match.group(1)) * count
        if produced[0] > MAX_PATTERN_LAYERS:
            raise PlannerError(f"--pipeline-model-parallel-layout {text!r}: a repeat longer than {MAX_PATTERN_LAYERS:,} "
                               "layers (all the repeats of the text together)", source=source)
        return match.group(1) * count

    flat = re.sub(r"\(([^)]+)\)\*(\d+)", repeat, flat)
    produced[0] = 0
    flat = re.sub(r"(.)\*(\d+)", repeat, flat)
    if len(flat) > MAX_PATTERN_LAYERS:
        raise PlannerError(f"--pipeline-model-parallel-layout {text!r}: longer than {MAX_PATTERN_LAYERS:,} layers",
                           source=source)
    stages = [list(stage) for stage in flat.split("|")]
    bad = sorted({c for stage in stages for c in stage if c not in LAYOUT_LAYERS})
    if bad:
        raise PlannerError(f"--pipeline-model-parallel-layout {text!r}: {', '.join(map(repr, bad))} is not a layer "
                           "letter (E embedding, t transformer, m MTP, L loss; '|' ends a stage)", source=source)
    letters = [c for stage in stages for c in stage]
    if len(stages) % pp:
        raise PlannerError(f"--pipeline-model-parallel-layout has {len(stages)} stages, which do not divide by "
                           f"--pipeline-model-parallel-size {pp} (Megatron-Core asserts it)", source=source)
    if not letters or letters[0] != "E" or letters[-1] != "L" or letters.count("E") != 1 or letters.count("L") != 1:
        raise PlannerError("--pipeline-model-parallel-layout must start with the embedding (E) and end with the loss "
                           "(L), each once (Megatron-Core asserts it)", source=source)
    if letters.count("t") != layers:
        raise PlannerError(f"--pipeline-model-parallel-layout places {letters.count('t')} transformer layers (t) and the "
                           f"model has {layers} (Megatron-Core asserts they match)", source=source)
    if letters.count("m") != (mtp_layers or 0):
        raise PlannerError(f"--pipeline-model-parallel-layout places {letters.count('m')} MTP layers (m) and "
                           f"--mtp-num-layers is {mtp_layers} (Megatron-Core asserts they match)", source=source)
    if "m" in letters and "t" in letters[letters.index("m"):]:
        raise PlannerError("--pipeline-model-parallel-layout places a transformer layer (t) after an MTP layer (m); "
                           "Megatron-Core asserts the decoder layers come first", source=source)
    return stages


def _mtp_flag(args: Mapping[str, Any]) -> int | None:
    """--mtp-num-layers as given (None when absent)."""
    value = args.get("mtp-num-layers")
    return None if value is None else int(value)


def layout_split(stages: list[list[str]], pp: int) -> list[int]:
    """Transformer layers on each pp rank of a parsed layout (stage i on rank i % pp)."""
    return [sum(stage.count("t") for i, stage in enumerate(stages) if i % pp == rank) for rank in range(pp)]


def _interleave(args: Mapping[str, Any], layers: int, pp: int, source: str,
                stages: list[list[str]] | None) -> int | None:
    if stages is not None:
        if args.get("num-layers-per-virtual-pipeline-stage") or args.get("num-virtual-stages-per-pipeline-rank"):
            raise PlannerError("--pipeline-model-parallel-layout with --num-layers-per-virtual-pipeline-stage or "
                               "--num-virtual-stages-per-pipeline-rank (Megatron-LM asserts the layout is given alone); "
                               "keep the layout", source=source)
        return len(stages) // pp
    per_stage = args.get("num-layers-per-virtual-pipeline-stage")
    if per_stage:
        # validate_args counts the embedding and the loss as layers under --account-for-*-in-pipeline-split
        units = layers + _edge_units(args)
        if units % pp or (units // pp) % per_stage:
            counted = f"{layers}" + (f" (+{units - layers} for the embedding/loss)" if units > layers else "")
            raise PlannerError(f"--num-layers-per-virtual-pipeline-stage {per_stage} does not divide the "
                               f"{counted} / {pp} layers per pipeline stage", source=source)
        chunks: int = (units // pp) // per_stage
        return chunks
    v = args.get("num-virtual-stages-per-pipeline-rank") or args.get("virtual-pipeline-model-parallel-size")
    return int(v) if v else None


def _mtp_layers(args: Mapping[str, Any], model: ModelSpec, given: Mapping[str, Any], merged: dict[str, Any],
                source: str) -> None:
    """--mtp-num-layers: Megatron-LM trains multi-token-prediction layers only when asked, so an absent flag
    is 0 whatever the model has; a count equal to the model's is the layout's default (null)."""
    layers = int(args.get("mtp-num-layers") or 0)
    if given.get("mtp_layers") is not None and given["mtp_layers"] != layers:
        raise PlannerError(f"parallel.mtp_layers = {given['mtp_layers']} contradicts --mtp-num-layers = {layers} in "
                           "the engine file (absent: 0); remove it from the job or change the file", source=source)
    merged["mtp_layers"] = None if layers == model.mtp_layers else layers


def _graphs(fields: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(fields.get("cuda_graph_scope") or ())


def moe_conflict(model: ModelSpec, fields: Mapping[str, Any]) -> str | None:
    """What Megatron-Core asserts against in these layout fields (Layout keyword arguments, defaults where
    absent), as one message naming the flags; None when it runs them. From TransformerConfig.__post_init__
    and OptimizerConfig (NVIDIA/Megatron-LM c1e938b0, 2026-05-13)."""
    get = fields.get
    dispatcher, pp = get("moe_dispatcher", "alltoall"), int(get("pp") or 1)
    recompute, modules = get("recompute", "none"), tuple(get("recompute_modules") or ())
    graphs = _graphs(fields)
    given_mtp = get("mtp_layers")
    mtp = model.mtp_layers if given_mtp is None else int(given_mtp)
    # What the overlap needs besides are the layout rules of the megatron engine (training.rules:
    # ep_overlap_needs_ep, engine_ep_overlap_dispatcher, engine_ep_overlap_pipeline, engine_ep_overlap_conflict),
    # which every layout passes before it is costed or written; one condition of Megatron-Core c1e938b0 is not there.
    if get("moe_ep_overlap") and model.moe is not None and mtp > 0 and pp == 1:
        return ("--overlap-moe-expert-parallel-comm needs pp > 1 with an MTP layer (Megatron-Core c1e938b0 asserts "
                "it); change the layout or turn the overlap off")
    if get("moe_shared_expert_overlap") and dispatcher == "allgather" and model.moe and model.moe.num_shared_experts:
        return ("--moe-shared-expert-overlap works with the alltoall or flex dispatcher only (Megatron-Core raises "
                "it with allgather)")
    if get("moe_capacity_factor") is not None and dispatcher == "deepep":
        return ("--moe-pad-expert-input-to-capacity with the flex dispatcher's DeepEP backend (Megatron-Core raises "
                "'does not support moe_pad_expert_input_to_capacity'); use hybridep/alltoall or drop no tokens")
    if graphs and graphs != ("full",):
        if model.moe is None and {"moe", "moe_router", "moe_preprocess"} & set(graphs):
            return "--cuda-graph-scope moe/moe_router need a MoE model (Megatron-Core asserts it)"
        if model.moe is not None and model.moe.num_dense_layers == 0 and "mlp" in graphs:
            return "--cuda-graph-scope mlp captures dense layers, and every layer of this model is MoE (Megatron-Core asserts it)"
        if "moe" in graphs and get("moe_capacity_factor") is None:
            return "--cuda-graph-scope moe needs token drop with padding (Megatron-Core: 'only supported with drop-padding MoE')"
        if "moe" in graphs and "moe_router" in graphs:
            return "--cuda-graph-scope moe and moe_router together (Megatron-Core asserts 'must not contain both')"
        if "moe_preprocess" in graphs and "moe_router" not in graphs:
            return "--cuda-graph-scope moe_preprocess needs moe_router (Megatron-Core asserts it)"
        if "moe_preprocess" in graphs and dispatcher == "alltoall" and get("moe_capacity_factor") is not None:
            return ("--cuda-graph-scope moe_preprocess with the alltoall dispatcher and a capacity factor (Megatron-Core "
                    "asserts against its host synchronisation)")
        if recompute == "selective" and "moe" in modules and "moe_router" in graphs:
            return "--recompute-modules moe with --cuda-graph-scope moe_router (Megatron-Core asserts against it)"
    if graphs:
        if recompute == "full":
            return "CUDA graphs with full recompute (Megatron-Core: only with a whole-iteration graph); use selective"
        if int(get("offload_activation_layers") or 0) > 0:
            return "CUDA graphs with --cpu-offloading (Megatron-Core raises 'CUDA graphs not supported with CPU offloading')"
    if (get("optimizer_state_dtype", "fp32") != "fp32" or get("offload_optimizer")) and int(get("zero") or 0) < 1:
        return ("--use-precision-aware-optimizer (bf16 moments, or the optimizer's CPU offload) needs the distributed "
                "optimizer (zero >= 1; Megatron-LM asserts it)")
    return None


# Megatron-Core's experimental attention variants planner does not model (TransformerConfig.
# experimental_attention_variant @ d98e8a64: 'dsa', DeepSeek Sparse Attention, and 'gdn', Gated DeltaNet with its
# deprecated alias 'gated_delta_net', are read) and what each puts in place of softmax attention
ATTENTION_VARIANTS: dict[str, str] = {
    "gdn2": "Gated DeltaNet-2 linear-attention layers",
}
GDN_VARIANTS = ("gdn", "gated_delta_net")


def _attention_variant_aliases(args: dict[str, Any], source: str) -> None:
    """--linear-attention-type and --sparse-attention-type, the flags that NVIDIA/Megatron-LM commit 6630c7f3
    (2025-11-28) merged into --experimental-attention-variant; its validate_args still takes the first as the
    variant ('--linear-attention-type is deprecated'), and the MoE model zoo's Qwen3-Next-80B-A3B.yaml writes it."""
    for old, choices in (("linear-attention-type", ("gated_delta_net",)), ("sparse-attention-type", ("dsa",))):
        if old not in args:
            continue
        value = args.pop(old)
        if value not in choices:
            raise PlannerError(f"--{old} {short_repr(value)} is not one of Megatron-LM's choices ("
                               f"{', '.join(choices)})", source=source)
        variant = args.get("experimental-attention-variant")
        if variant is not None and variant != value and not (variant in GDN_VARIANTS and value in GDN_VARIANTS):
            raise PlannerError(f"--{old} {value} and --experimental-attention-variant {variant} disagree; keep "
                               "--experimental-attention-variant", source=source)
        args.setdefault("experimental-attention-variant", value)


# Megatron-Core run settings that change a MoE run's time or memory and that planner has no term for
# (TransformerConfig @ d98e8a64): read for a warning that names what the estimate leaves out.
UNMODELLED_RUN_FLAGS: dict[str, str] = {
    "moe-expert-rank-capacity-factor": "a token budget per expert-parallel rank (HybridEP drops the tokens beyond it; "
    "NCCL EP keeps static receive buffers of it); planner counts the dropless load, or the per-expert capacity of "
    "--moe-expert-capacity-factor",
    "moe-paged-stash": "the routed experts' saved activations kept in pages of a preallocated buffer (some on the "
    "host with a host factor); planner counts them as the tensors the experts save",
    "fine-grained-activation-offloading": "the inputs of the modules named by --offload-modules moved to the host; "
    "planner offloads whole layers only (--cpu-offloading-num-layers)",
}


def _refuse_unmodelled_layers(args: Mapping[str, Any], source: str) -> None:
    """Flags that put layers planner does not model in the network: refused, since reading the rest as softmax
    attention would size and time another model."""
    if args.get("moe-latent-size") is not None:
        raise PlannerError(f"--moe-latent-size {args['moe-latent-size']}: MoE latent projections (the routed experts "
                           "run on a down-projected hidden state, Nemotron-3's latent MoE) are not modelled; planner's "
                           "experts take the hidden state itself", source=source)
    variant = args.get("experimental-attention-variant")
    if variant == "dsa" and int(args.get("dsa-indexer-topk-freq") or 1) > 1:
        raise PlannerError(f"--dsa-indexer-topk-freq {args['dsa-indexer-topk-freq']}: layers that reuse another "
                           "layer's top-k (shared indexers) are not modelled; planner models an indexer on every "
                           "layer", source=source)
    if variant is not None and variant != "dsa" and variant not in GDN_VARIANTS:  # DSA and GDN: model_from_args
        what = ATTENTION_VARIANTS.get(str(variant), f"the attention variant {variant!r}")
        raise PlannerError(f"--experimental-attention-variant {variant}: {what}, which planner does not model; "
                           "planner models softmax-attention layers and Gated DeltaNet (gdn)", source=source)
    if args.get("linear-attention-freq") is not None and variant not in GDN_VARIANTS:
        raise PlannerError("--linear-attention-freq places linear-attention layers, and no "
                           "--experimental-attention-variant gdn says which; add it", source=source)
    for flag in ("heterogeneous-layers-config-path", "heterogeneous-layers-config-encoded-json"):
        if args.get(flag) is not None:
            raise PlannerError(f"--{flag}: layers that differ in shape or are replaced (Llama-Nemotron's block "
                               "configs) are not modelled; planner's layers share one shape", source=source)


def _sparse_attention_settings(args: Mapping[str, Any], got: Collected, source: str) -> None:
    """DeepSeek Sparse Attention's run settings: the kernel backend checked (TransformerConfig.dsa_kernel_backend),
    and a warning for each setting Megatron-Core runs otherwise than planner times."""
    backend = args.get("dsa-kernel-backend", "none")
    if backend not in ("none", "tilelang", "cudnn"):
        raise PlannerError(f"--dsa-kernel-backend {backend}: Megatron-Core takes none, tilelang or cudnn "
                           "(TransformerConfig.dsa_kernel_backend)", source=source)
    if backend == "none":
        got.warn("--dsa-kernel-backend none (Megatron-Core's default) runs DeepSeek Sparse Attention's PyTorch "
                 "fallback, which materialises the fp32 scores; planner times the fused kernels "
                 "(--dsa-kernel-backend cudnn or tilelang)")
    if not args.get("dsa-indexer-use-sparse-loss"):
        got.warn("without --dsa-indexer-use-sparse-loss the indexer's KL loss covers every causal pair (DSA's "
                 "dense warm-up); planner times the sparse loss of its main stage, whose backward covers each "
                 "query's top-k keys")
    types = args.get("cp-comm-type") or ["p2p"]  # Megatron-LM's default
    if int(args.get("context-parallel-size") or 1) > 1 and any(t != "allgather" for t in types):
        got.warn(f"--cp-comm-type {' '.join(types)}: Megatron-Core runs DeepSeek Sparse Attention with all-gather "
                 "context parallelism only (transformer_config.py asserts it); planner times that")


def import_megatron(
    tokens: Sequence[str],
    *,
    gpus: int,
    given: Mapping[str, Any],
    model: ModelSpec | None,
    source: str,
) -> EngineImport:
    """Megatron-LM flags, the GPU count, the job's own fields and (optionally) the model -> Layout fields and
    the model (built from the flags when `model` is None)."""
    args, warnings = parse_flags(tokens, source)
    _attention_variant_aliases(args, source)
    _refuse_unmodelled_layers(args, source)
    for alias, flag in (("encoder-seq-length", "seq-length"), ("encoder-num-layers", "num-layers")):
        if alias in args:  # Megatron-LM's validate_args: the GPT model's length and depth, when the other is absent
            if flag in args:
                raise PlannerError(f"--{alias} and --{flag} are both set (Megatron-LM asserts one is None); keep "
                                   f"--{flag}", source=source)
            args[flag] = args.pop(alias)
    got = Collected(source=source, warnings=list(warnings))
    got.set("engine", "megatron", "the engine file", explicit=False)  # the engine that reads it runs it
    if args.get("experimental-attention-variant") == "dsa":
        _sparse_attention_settings(args, got, source)
    _layout_fields(args, got)
    moe = model.moe is not None if model is not None else int(args.get("num-experts") or 0) > 1
    _fused_mlp(args, got, moe)
    for flag, what in UNMODELLED_RUN_FLAGS.items():
        if args.get(flag) not in (None, False):
            got.warn(f"--{flag}: {what}; not modelled, the estimate runs without it")
    if args.get("use-checkpoint-args"):
        # load_args_from_checkpoint (megatron/training/checkpointing.py @ d98e8a64) sets num_layers, the widths,
        # heads and query groups, positions, biases, normalization, the MoE shape and MTP from the checkpoint
        got.warn("--use-checkpoint-args: Megatron-LM takes the architecture (layers, widths, heads, positions, biases, "
                 "the experts' shape) from the checkpoint it loads, over these flags; planner reads the flags as given, "
                 "so check that they describe the checkpoint's model")
    if moe and not args.get("deepspeed"):  # Megatron-DeepSpeed's DeepSpeed-MoE dispatches by all-to-all
        got.set("moe_dispatcher", engine_profile("megatron").moe.default_dispatcher,
                "Megatron-Core's default --moe-token-dispatcher-type", explicit=False)
    block = got.values.pop("_block_layers", None)
    merged = got.merge({k: v for k, v in given.items() if k != "global_batch"})
    tp = int(merged.get("tp", 1))
    if tp == 1 and got.values.get("sequence_parallel"):
        merged["sequence_parallel"] = False  # Megatron-LM's validate_args turns it off without tensor parallelism
    if model is None:
        model = model_from_args(args, tp=tp, source=source)
        if model.moe is not None and not args.get("deepspeed") and moe_layers_interleaved(
                args.get("moe-layer-freq"), model.num_layers, source):
            got.warn(f"--moe-layer-freq {args['moe-layer-freq']} mixes dense and MoE layers; planner places the "
                     f"{model.moe.num_dense_layers} dense layers first (totals exact; per-stage figures approximate "
                     "with pipeline parallelism)")
    else:
        _check_given_model(args, model, source)
    pp = int(merged.get("pp", 1))
    stages = _layout_stages(args, model.num_layers, pp, source)
    v = _interleave(args, model.num_layers, pp, source, stages)
    _check_split(args, model.num_layers, pp, v or 1, got, stages)
    if args.get("deepspeed") and model.moe is not None and pp > 1:
        got.warn("DeepSpeed-MoE puts experts on every --expert-interval-th layer; planner counts them after the "
                 "dense layers, so per-stage figures are approximate with pipeline parallelism")
    if v and v > 1:
        flag = next((f"--{name}" for name in ("pipeline-model-parallel-layout", "num-layers-per-virtual-pipeline-stage",
                                               "num-virtual-stages-per-pipeline-rank")
                     if args.get(name)), "--virtual-pipeline-model-parallel-size")
        flag = f"the virtual stages per rank that {flag} gives"
        merged = Collected(source, {"interleave": v}, {"interleave": flag}
                           ).merge(merged)
    if merged.get("etp") is not None and merged["etp"] == tp:
        merged["etp"] = None  # Megatron-LM's default: the expert layers take tp
    if merged.get("etp") is not None and model.moe is None and "etp" in got.values:
        # Megatron-Core builds the expert groups whatever the model, and a dense model has no layer that uses them
        # (the functional tests gpt3_mcore_te_tp2_pp2_cp2_etp4_* train a dense GPT with it).
        got.warn(f"--expert-tensor-parallel-size {merged['etp']} is ignored: the model has no experts")
        merged["etp"] = None
    _mtp_layers(args, model, given, merged, source)
    if block is not None:
        per_stage = -(-model.num_layers // pp)
        merged["recompute_layers_per_stage"] = min(block * int(merged.get("interleave", 1)), per_stage)
    dp = data_parallel_degree(gpus, merged, source)
    merged["dp"] = dp
    global_batch = args.get("global-batch-size")
    if args.get("step-batch-size-schedule") and global_batch is not None:
        raise PlannerError("--step-batch-size-schedule and --global-batch-size are both set (Megatron-LM raises "
                           "'Cannot specify both'); keep one", source=source)
    if global_batch is not None and "global_batch" in given and given["global_batch"] != global_batch:
        raise PlannerError(f"training.global_batch = {given['global_batch']} contradicts --global-batch-size = "
                           f"{global_batch} in the engine file; remove it from the job or change the file", source=source)
    schedule = args.get("step-batch-size-schedule")
    if schedule and global_batch is None and "global_batch" not in given:
        try:  # "THRESHOLD:BS THRESHOLD:BS ...": planner takes the final batch size
            global_batch = int(str(schedule).split()[-1].split(":")[1])
        except (IndexError, ValueError):
            raise PlannerError(f"--step-batch-size-schedule {schedule!r}: expected 'THRESHOLD:BS ...'",
                               source=source) from None
    global_batch = global_batch if global_batch is not None else given.get("global_batch")
    merged["global_batch"], merged["micro_batch"] = resolve_batch(
        global_batch=global_batch, micro_batch=int(merged.get("micro_batch", 1)), grad_accum=None, dp=dp,
        source=source, names=("--global-batch-size", "--micro-batch-size", "gradient accumulation"),
    )
    require(merged, "seq_len", source, "add --seq-length to the arguments or training.seq_len to the job")
    problem = moe_conflict(model, merged)
    if problem:
        raise PlannerError(problem, source=source)
    if merged.get("dtype") is None:
        raise PlannerError("neither --bf16 nor --fp16 is set, so Megatron-LM would train in fp32, which planner does "
                           "not model; add --bf16 (or give training.dtype if the launcher adds it)", source=source)
    return EngineImport(format="megatron", source=source, fields=merged, model=model, warnings=tuple(got.warnings),
                        origins=dict(got.origin))


# --- writer ----------------------------------------------------------------------------------------
# Layout + model -> Megatron-LM arguments, as a bash array to source in a launch script.
#
# The file defines MEGATRON_ARGS=( ... ) with the model and layout flags (the
# arrangement of Megatron-LM's own example scripts); data, tokenizer, learning-rate
# and checkpoint flags stay the user's. `planner.engines.megatron` reads it back
# to the same layout.

ZERO_FLAGS: dict[int, list[str]] = {
    0: [],
    1: ["--use-distributed-optimizer"],
    # validate_args: "Megatron-FSDP requires the `fsdp_dtensor` checkpointing format"
    2: ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", "optim_grads", "--ckpt-format", "fsdp_dtensor"],
    3: ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", "optim_grads_params", "--ckpt-format",
        "fsdp_dtensor"],
}
POSITION = {"rotary": "rope", "learned": "learned_absolute", "none": "none"}
MAX_YARN_EXPONENT = 700.0  # exp(700) ~ 1e304, inside a float: a factor above 71 has no context scale to write


def engine_layout(model: ModelSpec, layout: Layout) -> tuple[Layout, tuple[str, ...]]:
    """Megatron-LM runs every layout field except the GPipe schedule, and keeps gradients in the compute
    precision or fp32: fp16 training has fp16 or fp32 (--accumulate-allreduce-grads-in-fp32) gradients,
    bf16/fp8 training bf16 (--grad-reduce-in-bf16) or fp32 ones."""
    changes: dict[str, object] = {}
    notes: list[str] = []
    if layout.schedule == "gpipe":
        if layout.pp > 1:
            raise PlannerError("Megatron-LM has no GPipe schedule; use schedule 1f1b")
        changes["schedule"] = "1f1b"  # one stage: no pipeline schedule at all
    half = "fp16" if layout.dtype == "fp16" else "bf16"
    if layout.grad_dtype not in (half, "fp32"):
        changes["grad_dtype"] = half
        notes.append(f"grad_dtype {layout.grad_dtype} -> {half}: Megatron-LM keeps {layout.dtype} gradients in "
                     f"{half} or fp32")
    if layout.dtype == "fp8" and layout.fp8_recipe == "rowwise":
        raise PlannerError("fp8_recipe rowwise: torchao's per-row float8 recipe, which Transformer Engine has no form "
                           "of (its recipes scale per tensor, per 32 elements or per 1 x 128 block); export for "
                           "torchtitan, or choose tensorwise, delayed, mxfp8 or blockwise")
    if layout.master_weights_dtype != "fp32":
        raise PlannerError("master_weights_dtype bf16: Megatron-LM's optimizer keeps its own main weights "
                           "(--main-params-dtype fp32 or fp16); use fp32, or export for DeepSpeed or torchtitan")
    changes.update(_canonical_moe(model, layout))
    if layout.moe_shared_expert_overlap and not (model.moe and model.moe.num_shared_experts):
        changes["moe_shared_expert_overlap"] = False
        notes.append("moe_shared_expert_overlap -> false: the model has no shared experts")
    layout = layout.model_copy(update=changes) if changes else layout
    problem = moe_conflict(model, layout.model_dump())
    if problem:
        raise PlannerError(problem)
    _split_flags(model, layout)  # raises when Megatron-LM cannot place planner's split
    if layout.recompute_layers_per_stage is not None and layout.recompute_layers_per_stage % layout.interleave:
        raise PlannerError(f"recompute_layers_per_stage({layout.recompute_layers_per_stage}) is not a multiple of "
                           f"interleave({layout.interleave}); Megatron-LM recomputes the same number of layers in "
                           "each virtual stage")
    return layout, tuple(notes)


def _canonical_moe(model: ModelSpec, layout: Layout) -> dict[str, object]:
    """The same settings as the reader spells them: etp equal to tp is unset, an MTP count equal to the model's
    is unset, the CUDA-graph scope in Megatron's order with 'full' standing alone (it is the whole layer)."""
    changes: dict[str, object] = {}
    if layout.etp is not None and layout.etp == layout.tp:
        changes["etp"] = None
    if layout.mtp_layers is not None and layout.mtp_layers == model.mtp_layers:
        changes["mtp_layers"] = None
    scope = layout.cuda_graph_scope
    canonical = ("full",) if "full" in scope else tuple(n for n in CUDA_GRAPH_BITS if n in scope)
    if canonical != scope:
        changes["cuda_graph_scope"] = canonical
    return changes


DISPATCHER_FLAGS: dict[str, list[str]] = {
    "alltoall": ["--moe-token-dispatcher-type", "alltoall"],
    "allgather": ["--moe-token-dispatcher-type", "allgather"],
    "deepep": ["--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend", "deepep"],
    "hybridep": ["--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend", "hybridep"],
}


def moe_flags(model: ModelSpec, lay: Layout) -> list[list[str]]:
    """Expert TP, dispatcher, overlaps, token drop, CUDA graphs, precision-aware optimizer and MTP flags:
    what `_moe_flags`, `_cuda_graphs`, `_optimizer_precision` and `_mtp_layers` read back to `lay`. The
    dispatcher is always written for a MoE model (Megatron's default, allgather, is not planner's)."""
    flags: list[list[str]] = []
    if lay.etp is not None and lay.etp != lay.tp:
        flags.append(["--expert-tensor-parallel-size", str(lay.etp)])
    if model.moe is not None or lay.moe_dispatcher != "alltoall":
        flags.append(DISPATCHER_FLAGS[lay.moe_dispatcher])
    moe = model.moe is not None  # a dense model's MoE settings change nothing: no MoE flags on its command line
    if moe and lay.moe_ep_overlap:
        flags.append(["--overlap-moe-expert-parallel-comm"])
    if moe and lay.resolved_moe_delay_wgrad:
        flags.append(["--delay-wgrad-compute" if lay.moe_ep_overlap else f"--{DISPATCH_WGRAD_FLAG}"])
    if moe and lay.moe_shared_expert_overlap:
        flags.append(["--moe-shared-expert-overlap"])
    if moe and lay.moe_capacity_factor is not None:
        flags.append(["--moe-expert-capacity-factor", repr(lay.moe_capacity_factor),
                      "--moe-pad-expert-input-to-capacity"])
    if lay.cuda_graph_scope:
        flags.append(["--cuda-graph-impl", "transformer_engine"])
        if lay.cuda_graph_scope != ("full",):  # no scope: the whole layer
            flags.append(["--cuda-graph-scope", *lay.cuda_graph_scope])
    if lay.optimizer_state_dtype == "bf16":
        flags.append(["--use-precision-aware-optimizer", "--exp-avg-dtype", "bf16", "--exp-avg-sq-dtype", "bf16"])
    elif lay.offload_optimizer:  # validate_args: the CPU offload runs on the precision-aware optimizer's code path
        flags.append(["--use-precision-aware-optimizer"])
    mtp = model.mtp_layers if lay.mtp_layers is None else lay.mtp_layers
    if mtp:
        flags.append(["--mtp-num-layers", str(mtp)])
    if lay.moe_fused_mlp:  # with NVTE_CUTEDSL_FUSED_GROUPED_MLP=1, which render() exports
        flags.append(["--use-transformer-engine-op-fuser", "--moe-mlp-glu-interleave-size",
                      str(FUSED_MLP_GLU_INTERLEAVE)])
    return flags


def _split_flags(model: ModelSpec, layout: Layout) -> list[list[str]]:
    """The flags that make Megatron-LM place planner's layer split: the uneven first/last stage counts, or, for an
    interleaved split whose virtual stages the layers alone do not fill evenly, the embedding and the loss counted
    as layers (edge_unit_split); then the layers per virtual stage. Raises where no flags of Megatron-LM do."""
    if layout.interleave > 1 and edge_unit_split(model, layout):
        per_virtual = (model.num_layers + PIPELINE_EDGE_UNITS) // (layout.pp * layout.interleave)
        return [["--account-for-embedding-in-pipeline-split"], ["--account-for-loss-in-pipeline-split"],
                ["--num-layers-per-virtual-pipeline-stage", str(per_virtual)]]
    if layout.interleave == 1:
        return _uneven_flags(model, layout)
    if model.num_layers % (layout.pp * layout.interleave):
        return [["--pipeline-model-parallel-layout", layout_text(model, layout)]]
    return [["--num-layers-per-virtual-pipeline-stage", str(model.num_layers // (layout.pp * layout.interleave))]]


def layout_text(model: ModelSpec, layout: Layout) -> str:
    """--pipeline-model-parallel-layout for planner's split of an interleaved pipeline whose layers do not fill the
    virtual stages evenly. Each rank holds planner's layers (physics.stages.layers_on_stage), the first also the
    embedding and the last the loss (with the MTP layers before it), each counted as a pipeline unit as Megatron-Core
    counts them (physics.stages.PIPELINE_EDGE_UNITS); a rank's units go over its v chunks in order, as evenly as they
    go, the earlier chunks taking the remainder. The stages go round the ranks (chunk c of rank r is stage
    c * pp + r, as Megatron-Core reads the text: pipeline_layout). Raises where a stage would hold nothing."""
    pp, v = layout.pp, layout.interleave
    mtp = model.mtp_layers if layout.mtp_layers is None else layout.mtp_layers
    chunks: list[list[str]] = []  # per rank, its chunks' texts
    for rank, n in enumerate(planner_split(model.num_layers, pp)):
        units = (["E"] if rank == 0 else []) + ["t"] * n + (["m" * (mtp or 0) + "L"] if rank == pp - 1 else [])
        if len(units) < v:
            raise PlannerError(f"pp({pp}) x interleave({v}) leaves rank {rank} {len(units)} pipeline units (layers, "
                               f"the embedding, the loss) for its {v} virtual stages: Megatron-LM's "
                               "--pipeline-model-parallel-layout cannot hold an empty stage; use a smaller interleave")
        texts, at = [], 0
        for c in range(v):
            size = len(units) // v + (c < len(units) % v)
            part = units[at:at + size]
            at += size
            count = part.count("t")
            body = "t" if count == 1 else f"t*{count}" if count else ""
            texts.append(("E" if part[0] == "E" else "") + body + (part[-1] if part[-1].endswith("L") else ""))
        chunks.append(texts)
    return "|".join(chunks[rank][c] for c in range(v) for rank in range(pp))


def _uneven_flags(model: ModelSpec, layout: Layout) -> list[list[str]]:
    """--decoder-first/last-pipeline-num-layers for planner's split when the layers do not divide by pp.

    Megatron-LM asserts even stages unless these flags are given, and then divides what the first and last
    stage leave evenly over the stages between; planner's split (the remainder on the middle stages first)
    is expressible when every stage between holds the same count. Otherwise no Megatron-LM file runs it."""
    layers, pp = model.num_layers, layout.pp
    if pp == 1 or layers % pp == 0:
        return []
    split = planner_split(layers, pp)
    if len(set(split[1:-1])) > 1:
        raise PlannerError(f"pp({pp}) with num_layers({layers}): planner places {split} layers on the stages, which "
                           "Megatron-LM cannot express (it takes uneven counts only on the first and last stage); "
                           "choose a pp that divides the layers, or one that leaves the remainder on every middle "
                           "stage")
    return [["--decoder-first-pipeline-num-layers", str(split[0])],
            ["--decoder-last-pipeline-num-layers", str(split[-1])]]


def _vocab_divisor(vocab: int, tp: int) -> int:
    """The largest make-vocab-size-divisible-by (<= Megatron's default 128) that leaves `vocab` unpadded."""
    for d in (128, 64, 32, 16, 8, 4, 2, 1):
        if vocab % (d * tp) == 0:
            return d
    return 1


def _window_flags(model: ModelSpec) -> list[list[str]] | None:
    """--window-size and --window-attn-skip-freq for the model's sliding-window layers (the reader's rule:
    every layer, or all but one in N), or None when the count has no such spelling."""
    layers, swa, tokens = model.num_layers, model.sliding_window_layers, model.sliding_window_tokens
    assert tokens is not None
    size = ["--window-size", f"{tokens - 1},0"]
    if swa == layers:
        return [size]
    every = next((n for n in range(2, layers + 1) if layers - layers // n == swa), None)
    return None if every is None else [size, ["--window-attn-skip-freq", str(every)]]


def model_flags(model: ModelSpec, tp: int) -> tuple[list[list[str]], list[str]]:
    """Megatron flags that describe the architecture, and what they cannot express."""
    flags: list[list[str]] = [
        ["--num-layers", str(model.num_layers)],
        ["--hidden-size", str(model.hidden_size)],
        ["--ffn-hidden-size", str(model.ffn_hidden_size)],
        ["--num-attention-heads", str(model.num_attention_heads)],
    ]
    missing: list[str] = []
    if model.num_kv_heads is not None and model.num_kv_heads != model.num_attention_heads:
        flags += [["--group-query-attention"], ["--num-query-groups", str(model.num_kv_heads)]]
    if model.head_dim is not None and model.head_dim != model.hidden_size // model.num_attention_heads:
        flags.append(["--kv-channels", str(model.head_dim)])
    if model.mlp_kind == "gated":
        flags.append(["--swiglu"])
    if not model.tied_embeddings:
        flags.append(["--untie-embeddings-and-output-weights"])
    # the context scale s whose factor 0.1 ln(s) + 1 it is, at Megatron's default --mscale and --mscale-all-dim
    exponent = (model.rotary_attention_factor - 1.0) / 0.1
    yarn = model.rotary_attention_factor != 1.0
    if yarn and (model.mla is not None or exponent < 0 or exponent > MAX_YARN_EXPONENT):
        missing.append(f"YaRN's attention factor {model.rotary_attention_factor:g} (written as plain RoPE)")
        yarn = False
    flags.append(["--position-embedding-type", "yarn" if yarn else POSITION.get(model.position_embedding, "none")])
    if yarn:
        flags.append(["--rotary-scaling-factor", f"{math.exp(exponent):.12g}"])
    if model.activation_clamp is not None and model.moe is not None:
        flags.append(["--activation-func-clamp-value", f"{model.activation_clamp:g}"])
    elif model.activation_clamp is not None:  # TransformerConfig: "only supported with MoE" for SwiGLU
        missing.append(f"the activation clamp {model.activation_clamp:g} (Megatron-Core clamps only MoE layers)")
    if model.position_embedding == "alibi":
        missing.append("ALiBi positions (written as none; they add no weights)")
    flags.append(["--normalization", "RMSNorm" if model.norm_kind == "rmsnorm" else "LayerNorm"])
    if not (model.attention_output_bias or model.mlp_bias):
        flags.append(["--disable-bias-linear"])
        if model.qkv_bias:
            flags.append(["--add-qkv-bias"])
    elif not (model.attention_output_bias and model.mlp_bias and model.qkv_bias):
        missing.append("biases on only some projections")
    if model.qk_norm:
        flags.append(["--qk-layernorm"])
    flags += [["--vocab-size", str(model.vocab_size)],
              ["--make-vocab-size-divisible-by", str(_vocab_divisor(model.vocab_size, tp))],
              ["--max-position-embeddings", str(model.max_seq_len)]]
    if not model.dropout:
        flags += [["--attention-dropout", "0.0"], ["--hidden-dropout", "0.0"]]
    if model.moe is not None:
        moe = model.moe
        flags += [["--num-experts", str(moe.num_experts)], ["--moe-router-topk", str(moe.experts_per_token)],
                  ["--moe-ffn-hidden-size", str(moe.moe_ffn_hidden_size)]]
        if moe.num_shared_experts:
            flags.append(["--moe-shared-expert-intermediate-size", str(moe.shared_ffn_width)])
        if moe.shared_expert_gate:
            flags.append(["--moe-shared-expert-gate"])
        if moe.num_dense_layers:
            flags.append(["--moe-layer-freq",
                          f"([0]*{moe.num_dense_layers}+[1]*{model.num_layers - moe.num_dense_layers})"])
        if moe.router_bias:  # aux-loss-free balancing: TransformerConfig allows the expert bias with sigmoid scores
            flags += [["--moe-router-enable-expert-bias"], ["--moe-router-score-function", "sigmoid"]]
        # grouped expert GEMMs, as Megatron-Core's MoE recipes run them (and --recompute-modules moe_act needs them:
        # TransformerConfig raises 'moe_act in recompute_modules is only supported with moe_grouped_gemm')
        flags.append(["--moe-grouped-gemm"])
    if model.mla is not None:
        mla = model.mla
        flags.append(["--multi-latent-attention"])
        if mla.q_lora_rank is not None:
            flags.append(["--q-lora-rank", str(mla.q_lora_rank)])
        flags += [["--kv-lora-rank", str(mla.kv_lora_rank)], ["--qk-head-dim", str(mla.qk_nope_head_dim)],
                  ["--qk-pos-emb-head-dim", str(mla.qk_rope_head_dim)], ["--v-head-dim", str(mla.v_head_dim)]]
    if model.sparse_attention is not None:  # Megatron-Core's DSA, with the fused cuDNN kernels planner times
        dsa = model.sparse_attention
        flags += [["--experimental-attention-variant", "dsa"], ["--dsa-indexer-n-heads", str(dsa.index_heads)],
                  ["--dsa-indexer-head-dim", str(dsa.index_head_dim)], ["--dsa-indexer-topk", str(dsa.topk)],
                  ["--dsa-indexer-use-sparse-loss"], ["--dsa-kernel-backend", "cudnn"]]
    if model.attention_output_gate:
        flags.append(["--attention-output-gate"])
    if model.linear_attention is not None:  # Megatron-Core's Gated DeltaNet (experimental_attention_variant gdn)
        la = model.linear_attention
        flags += [["--experimental-attention-variant", "gdn"],
                  ["--linear-attention-freq", str(la.full_attention_interval)]]
        flags += [[f"--{flag}", str(getattr(la, field))] for flag, (field, _) in GDN_SIZE_FLAGS.items()]
    if model.sliding_window_layers:
        window = _window_flags(model)
        if window is None:
            missing.append("sliding-window attention on these layers")
        else:
            flags += window
    if model.norms_per_layer != 2 or model.embedding_norm:
        missing.append("extra norm layers")
    if model.norm_kind == "layernorm_no_bias":
        missing.append("LayerNorm without bias (written as LayerNorm)")
    if model.qk_norm and model.qk_norm_shape == "all_heads":
        missing.append("q/k norms with weights per head (Megatron's --qk-layernorm shares head_dim weights)")
    if model.attention_sinks:
        flags.append(["--softmax-type", "learnable"])
    if model.lm_head_bias:
        missing.append("a bias on the output layer")
    if model.parallel_attention_mlp:
        missing.append("the parallel attention/MLP block")
    return flags, missing


def layout_flags(model: ModelSpec, lay: Layout) -> list[list[str]]:
    flags: list[list[str]] = [
        ["--tensor-model-parallel-size", str(lay.tp)],
        ["--pipeline-model-parallel-size", str(lay.pp)],
        ["--context-parallel-size", str(lay.cp)],
    ]
    if lay.cp > 1 and model.sparse_attention is not None:  # Megatron-Core's DSA runs all-gather CP only
        flags.append(["--cp-comm-type", "allgather"])
    if lay.ep > 1:
        flags.append(["--expert-model-parallel-size", str(lay.ep)])
    flags += _split_flags(model, lay)
    if lay.interleave > 1 and lay.microbatch_group_size is not None:
        flags.append(["--microbatch-group-size-per-virtual-pipeline-stage", str(lay.microbatch_group_size)])
    if lay.sequence_parallel:
        flags.append(["--sequence-parallel"])
    if lay.recompute == "selective":
        flags.append(["--recompute-granularity", "selective"])
        if lay.recompute_modules is not None:
            flags.append(["--recompute-modules", *lay.recompute_modules])
    elif lay.recompute == "full":
        flags.append(["--recompute-granularity", "full"])
        if lay.recompute_layers_per_stage is None:
            flags += [["--recompute-method", "uniform"], ["--recompute-num-layers", "1"]]
        else:
            flags += [["--recompute-method", "block"],
                      ["--recompute-num-layers", str(lay.recompute_layers_per_stage // lay.interleave)]]
    flags += [["--micro-batch-size", str(lay.micro_batch)], ["--global-batch-size", str(lay.global_batch)],
              ["--seq-length", str(lay.seq_len)]]
    if lay.dtype == "fp16":
        flags.append(["--fp16"])
        if lay.grad_dtype == "fp32":
            flags.append(["--accumulate-allreduce-grads-in-fp32"])
    else:
        flags.append(["--bf16"])
        if lay.dtype == "fp8":
            flags.append(["--fp8-format", "hybrid"])
            flags.append(["--fp8-recipe", lay.fp8_recipe])
            if lay.fp8_param_gather:
                flags.append(["--fp8-param-gather"])
            if lay.fp8_attention:
                flags.append(["--fp8-dot-product-attention"])
        elif lay.dtype == "fp4":
            flags.append(["--fp4-format", "e2m1"])
            flags.append(["--fp4-recipe", "nvfp4"])
            if lay.fp8_param_gather:
                flags.append(["--fp4-param-gather"])
        if lay.grad_dtype != "fp32":
            flags.append(["--grad-reduce-in-bf16"])
    if lay.activation_input_fp8:
        if lay.recompute_modules is not None and "moe_act" in lay.recompute_modules:
            raise PlannerError("activation_input_fp8 with recompute module moe_act: Megatron-LM's recompute "
                               "checkpoint keeps the experts' activation input in 16 bits; drop moe_act from "
                               "recompute_modules or set activation_input_fp8 false")
        flags.append(["--activation-func-fp8-input-store"])
    if ZERO_FLAGS[lay.zero]:
        flags.append(ZERO_FLAGS[lay.zero])
    if lay.optimizer != "adam":
        flags.append(["--optimizer", lay.optimizer])
    if lay.optimizer == "muon":  # zero 1 above: --use-distributed-optimizer, the layer-wise distributed Muon
        if lay.muon_ns_steps != MUON_NS_STEPS_DEFAULT:
            flags.append(["--muon-num-ns-steps", str(lay.muon_ns_steps)])
        if lay.muon_tp_mode != "duplicated":
            flags.append(["--muon-tp-mode", lay.muon_tp_mode])
        if not lay.muon_split_qkv:
            flags.append(["--muon-no-split-qkv"])
    if not lay.flash_attention:
        flags.append(["--attention-backend", "unfused"])
    elif lay.attention_kernel is not None:
        flags.append(["--attention-backend", "flash" if lay.attention_kernel == "flash2" else "fused"])
    if lay.overlap_grad_reduce:
        flags.append(["--overlap-grad-reduce"])
    if lay.overlap_tp_comm:
        flags.append(["--tp-comm-overlap"])
    if lay.offload_activation_layers:
        flags.append(["--cpu-offloading", "--cpu-offloading-num-layers", str(lay.offload_activation_layers)])
    if lay.offload_optimizer:
        flags.append(["--optimizer-cpu-offload"])
    return flags + moe_flags(model, lay)


def render(ctx: ExportContext) -> str:
    model_part, missing = model_flags(ctx.model, ctx.layout.tp)
    notes = list(prediction_lines(ctx))
    if missing:
        notes.append(f"Note: Megatron-LM arguments cannot express this model's {', '.join(missing)}; check with "
                     f"--model {ctx.model_id}.")
    lay = ctx.layout
    nodes = -(-lay.gpus // ctx.hardware.node.gpus_per_node)
    per_node = min(lay.gpus, ctx.hardware.node.gpus_per_node)
    out = ["# Megatron-LM arguments (bash). Source this file and pass \"${MEGATRON_ARGS[@]}\" to pretrain_gpt.py."]
    out += [f"# {line}" for line in notes]
    if lay.moe_fused_mlp:  # Transformer Engine's fused grouped MLP is switched on by the environment
        out += ["", f"export {FUSED_MLP_ENV}=1"]
    out += ["", "MEGATRON_ARGS=(", "    # model"]
    out += [f"    {' '.join(shlex.quote(part) for part in flag)}" for flag in model_part]
    out += ["    # layout"]
    out += [f"    {' '.join(shlex.quote(part) for part in flag)}" for flag in layout_flags(ctx.model, lay)]
    out += [")", "",
            f"# torchrun --nnodes {nodes} --nproc-per-node {per_node} pretrain_gpt.py \"${{MEGATRON_ARGS[@]}}\" \\",
            "#     <data, tokenizer, learning-rate and checkpoint flags>", ""]
    return "\n".join(out)
