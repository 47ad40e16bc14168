"""Synthetic Kineto traces with known ground truth (see synth/truth.py for ground_truth.json)."""

from __future__ import annotations

from .scenario import SCENARIOS, write_scenario
from .truth import load_truth, truth_path

__all__ = ["SCENARIOS", "load_truth", "truth_path", "write_scenario"]
