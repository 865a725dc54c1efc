"""Predicted vs published: each validator module returns `ValidationRow`s for its reference cases."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ValidationRow:
    """One published figure beside our prediction of it."""

    case_id: str
    group: str  # e.g. "ZeRO memory", "Narayanan 2021 Table 1", "TensorRT-LLM throughput"
    quantity: str  # what is compared, e.g. "step time", "TTFT"
    unit: str
    predicted: float
    published: float
    tolerance: float  # allowed relative error, e.g. 0.10
    source: str

    @property
    def error(self) -> float:
        """Signed relative error (predicted - published) / published."""
        return (self.predicted - self.published) / self.published

    @property
    def passed(self) -> bool:
        return abs(self.error) <= self.tolerance
