"""Synthetic Kineto traces with known ground truth (see synth/truth.py for ground_truth.json)."""
from __future__ import annotations

from .scenario import SCENARIOS, write_scenario

__all__ = ["SCENARIOS", "write_scenario"]
