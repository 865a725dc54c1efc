"""Numeric formats and their storage size in bytes per element."""

from __future__ import annotations

from typing import Literal

Dtype = Literal["fp32", "tf32", "bf16", "fp16", "fp8", "fp4", "int8", "int4"]

BYTES_PER_ELEMENT: dict[str, float] = {
    "fp32": 4.0,
    "tf32": 4.0,  # stored as fp32; tf32 is a matmul mode
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "fp4": 0.5,  # E2M1 values; NVFP4's block scales are counted where its weights are (serving.inputs)
    "int8": 1.0,
    "int4": 0.5,
}


def bytes_per_element(dtype: str) -> float:
    return BYTES_PER_ELEMENT[dtype]
