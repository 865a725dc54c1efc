"""Pydantic specs: the model (architecture), the hardware, the layout."""

from planner.specs.hardware import HardwareProfile
from planner.specs.layout import Layout
from planner.specs.model import ModelSpec

__all__ = ["HardwareProfile", "Layout", "ModelSpec"]
