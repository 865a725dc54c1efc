"""Serving validation: published TensorRT-LLM throughput and first-token latency against our predictions.

The cases live in inference_cases.yaml (planner's own inputs, with their sources and how each
publication's wording was read). Predictions come from the same `estimate_inference` the CLI uses.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Any

from planner.engines.load import load_hardware, load_model, parse_yaml
from planner.physics.params import kv_cache_bytes_per_token
from planner.serving.estimate import InferenceArrays, estimate_inference
from planner.serving.rules import check_layout
from planner.specs.hardware import HardwareProfile
from planner.specs.serving import ServingLayout
from planner.validate import ValidationRow

PACKAGE = "planner.validate"
CASES_FILE = "inference_cases.yaml"

_QUANTITY_LABELS = {
    "output_tokens_per_second_per_gpu": "output tokens/s per GPU",
    "ttft_seconds": "TTFT",
    "tpot_seconds": "TPOT",
}
_UNIT_SCALE = {"ms": 1e-3, "s": 1.0, "tokens/s/GPU": 1.0}


@lru_cache(maxsize=1)
def inference_cases() -> dict[str, Any]:
    """The parsed case file: {'cases': [...], 'kv_cache_cases': [...]}."""
    text = resources.files(PACKAGE).joinpath(CASES_FILE).read_text(encoding="utf-8")
    return dict(parse_yaml(text, f"{PACKAGE}/{CASES_FILE}"))


def case_layout(case: dict[str, Any]) -> ServingLayout:
    return ServingLayout(
        tp=case["tp"], pp=case["pp"], concurrency=case["batch"], input_len=case["input_len"],
        output_len=case["output_len"], weight_dtype=case["weight_dtype"], kv_dtype=case["kv_dtype"],
        batching=case["batching"], decode_attention=case["decode_attention"],
    )


def case_arrays(case: dict[str, Any]) -> InferenceArrays:
    return InferenceArrays.from_layout(case_layout(case))


def predict_case(case: dict[str, Any], hardware: dict[str, HardwareProfile] | None = None) -> float:
    """Our prediction of the case's measured quantity, in SI units (seconds, tokens/s per GPU).

    `hardware` overrides catalog profiles by id (how alternative efficiency values are tried).
    """
    model = load_model(case["model"]).spec
    hw = (hardware or {}).get(case["hardware"]) or load_hardware(case["hardware"]).spec
    check_layout(model, case_layout(case))
    x = case_arrays(case)
    serving = estimate_inference(model, hw, x).serving(case["batching"])
    return float(getattr(serving, case["measured"]["name"]))


def predict_cases(cases: list[dict[str, Any]], hardware: dict[str, HardwareProfile] | None = None) -> list[float]:
    """`predict_case` for many cases at once: one array evaluation per (model, hardware) pair (what the
    calibration's many trials need); the same numbers as predict_case, case by case."""
    out: list[float] = [0.0] * len(cases)
    groups: dict[tuple[str, str], list[int]] = {}
    for i, case in enumerate(cases):
        groups.setdefault((case["model"], case["hardware"]), []).append(i)
    for (model_id, hw_id), idx in groups.items():
        model = load_model(model_id).spec
        hw = (hardware or {}).get(hw_id) or load_hardware(hw_id).spec
        picked = [cases[i] for i in idx]
        x = InferenceArrays.build(
            tp=[c["tp"] for c in picked], pp=[c["pp"] for c in picked], concurrency=[c["batch"] for c in picked],
            input_len=[c["input_len"] for c in picked], output_len=[c["output_len"] for c in picked],
            weight_dtype=[c["weight_dtype"] for c in picked], kv_dtype=[c["kv_dtype"] for c in picked],
            per_head_decode_attention=[c["decode_attention"] == "per-head" for c in picked],
        )
        est = estimate_inference(model, hw, x)
        for j, (i, case) in enumerate(zip(idx, picked, strict=True)):
            out[i] = float(getattr(est.serving(case["batching"]), case["measured"]["name"])[j])
    return out


def measured_si(case: dict[str, Any]) -> float:
    measured = case["measured"]
    return float(measured["value"]) * _UNIT_SCALE[measured["unit"]]


def serving_rows(hardware: dict[str, HardwareProfile] | None = None) -> list[ValidationRow]:
    rows = []
    for case in inference_cases()["cases"]:
        measured = case["measured"]
        scale = _UNIT_SCALE[measured["unit"]]
        rows.append(
            ValidationRow(
                case_id=case["id"],
                group=case["group"],
                quantity=_QUANTITY_LABELS[measured["name"]],
                unit=measured["unit"],
                predicted=predict_case(case, hardware) / scale,
                published=float(measured["value"]),
                tolerance=float(case["tolerance"]),
                source=case["source"],
            )
        )
    return rows


def kv_cache_rows() -> list[ValidationRow]:
    return [
        ValidationRow(
            case_id=case["id"],
            group="KV cache bytes per token (derived)",
            quantity="KV-cache bytes per token",
            unit="bytes",
            predicted=float(kv_cache_bytes_per_token(load_model(case["model"]).spec, case["kv_dtype"])),
            published=float(case["bytes_per_token"]),
            tolerance=0.0,
            source="derived: 2 x layers x kv_heads x head_dim x bytes (published_runs.yaml "
            f"{case['reference_id']})",
        )
        for case in inference_cases()["kv_cache_cases"]
    ]


def rows() -> list[ValidationRow]:
    """Every inference validation row: serving measurements, then the exact KV-cache sizes."""
    return serving_rows() + kv_cache_rows()
