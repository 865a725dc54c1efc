"""Training validation: published step times, TFLOP/s and memory figures against our predictions.

The cases live in training_cases.yaml and memory_cases.yaml (planner's own inputs, each with its
source and what was assumed where the publication is silent).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

from planner.engines.load import load_hardware, read_package_yaml
from planner.physics.params import count_params
from planner.specs.hardware import HardwareProfile
from planner.specs.layout import Layout, Recompute
from planner.specs.model import ModelSpec
from planner.specs.validation import validate_spec
from planner.training.estimate import estimate
from planner.training.memory import (
    layer_activation_bytes_per_token,
    model_state_bytes,
    stage_params,
)
from planner.training.time import layer_time
from planner.validate import ValidationRow

GIB = 2**30
PACKAGE = "planner.validate"


@lru_cache(maxsize=1)
def training_cases() -> list[dict[str, Any]]:
    return list(read_package_yaml(PACKAGE, "training_cases.yaml")["cases"])


@lru_cache(maxsize=1)
def published_cases() -> list[dict[str, Any]]:
    """The modern and MoE published runs (training_cases_published.yaml, generated from the shared
    reference data by benchmarks/import_published_runs.py)."""
    return list(read_package_yaml(PACKAGE, "training_cases_published.yaml")["cases"])


def all_training_cases() -> list[dict[str, Any]]:
    return training_cases() + published_cases()


@lru_cache(maxsize=1)
def memory_cases() -> dict[str, list[dict[str, Any]]]:
    return dict(read_package_yaml(PACKAGE, "memory_cases.yaml"))


def predict_training_case(case: dict[str, Any], hardware: dict[str, HardwareProfile] | None = None) -> float:
    """Our prediction of the case's published quantity (`hardware` overrides catalog profiles by id,
    which is how the calibration script tries efficiency values)."""
    source = f"{PACKAGE}/training cases:{case['id']}"
    model = validate_spec(ModelSpec, case["model"], source)
    hw = (hardware or {}).get(case["hardware"]) or load_hardware(case["hardware"]).spec
    layout = validate_spec(Layout, case["layout"], source)
    quantity = case["published"]["quantity"]
    if quantity == "layer_forward_backward_seconds":
        t = layer_time(model, hw, layout.to_arrays(), moe_layer=False)
        return float((t.forward + t.backward + t.recompute + t.tp_comm)[0])
    result = estimate(model, hw, layout)
    if quantity == "peak_bytes" and case["published"]["unit"] == "GiB":
        return result.scalar(quantity) / GIB
    return result.scalar(quantity)


def training_rows() -> list[ValidationRow]:
    rows = []
    for case in all_training_cases():
        if not case.get("validated", True):
            continue  # calibration and docs only: features the model does not describe (the case's not_modelled)
        published = case["published"]
        rows.append(
            ValidationRow(
                case_id=case["id"],
                group=case["group"],
                quantity=published["quantity"].replace("_", " "),
                unit=published["unit"],
                predicted=predict_training_case(case) * (1e3 if published["unit"] == "ms" else 1.0),
                published=float(published["value"]),
                tolerance=float(case["tolerance"]),
                source=case["source"],
            )
        )
    return rows


def _gpt(num_layers: int, hidden: int, heads: int, dropout: bool = True) -> ModelSpec:
    """A GPT of the papers' shape (GeLU MLP 4h, vocab 51,200, seq 2048, learned positions)."""
    return ModelSpec(
        name=f"GPT L{num_layers} h{hidden}", num_layers=num_layers, hidden_size=hidden, num_attention_heads=heads,
        ffn_hidden_size=4 * hidden, mlp_kind="standard", vocab_size=51200, tied_embeddings=True,
        position_embedding="learned", norm_kind="layernorm", qkv_bias=True, attention_output_bias=True,
        mlp_bias=True, max_seq_len=2048, dropout=dropout,
    )


def model_state_rows() -> list[ValidationRow]:
    """ZeRO model states, bytes per parameter scaled to the paper's parameter count."""
    model = _gpt(32, 4096, 32)
    psi = count_params(model).total
    rows = []
    for case in memory_cases()["model_states"]:
        layout = Layout(dp=int(case["dp"]), zero=int(case["zero"]), global_batch=int(case["dp"]), seq_len=2048,
                        grad_dtype="fp16", dtype="fp16").to_arrays()
        sp = stage_params(model, layout, np.zeros(1, dtype=np.int64))
        weights, grads, optim = model_state_bytes(layout, sp)
        per_param = float((weights + grads + optim)[0]) / psi
        rows.append(
            ValidationRow(case["id"], case["group"], "model states per GPU", "GB", per_param * case["params"] / 1e9,
                          float(case["published_gb"]), float(case["tolerance"]), case["source"])
        )
    return rows


ACTIVATION_VARIANTS: dict[str, tuple[bool, Recompute]] = {  # Korthikanti's columns -> (sequence_parallel, recompute)
    "tp": (False, "none"),
    "tp_sp": (True, "none"),
    "tp_sp_selective": (True, "selective"),
    "full": (False, "full"),
}


def activation_rows() -> list[ValidationRow]:
    """Per-layer activations x L (no interleaving, no embedding/head terms), flash attention off."""
    rows = []
    for case in memory_cases()["activations"]:
        model = _gpt(int(case["num_layers"]), int(case["hidden_size"]), int(case["num_attention_heads"]))
        sp, recompute = ACTIVATION_VARIANTS[case["variant"]]
        layout = Layout(tp=int(case["tp"]), micro_batch=int(case["micro_batch"]), global_batch=int(case["micro_batch"]),
                        seq_len=int(case["seq_len"]), sequence_parallel=sp, recompute=recompute,
                        flash_attention=False).to_arrays()
        per_token = layer_activation_bytes_per_token(model, layout, moe_layer=False).stored
        total = float(per_token[0]) * case["micro_batch"] * case["seq_len"] * case["num_layers"]
        rows.append(
            ValidationRow(case["id"], case["group"], f"activations ({case['variant']})", "GiB", total / GIB,
                          float(case["published_gib"]), float(case["tolerance"]), case["source"])
        )
    return rows


def rows() -> list[ValidationRow]:
    return model_state_rows() + activation_rows() + training_rows()
