"""Interval arithmetic the synthesizer's ground truth shares (integer ns)."""

from __future__ import annotations

from collections.abc import Iterable


def union_ns(intervals: Iterable[tuple[int, int]], lo: int | None = None, hi: int | None = None) -> int:
    """Length of the union of [start, end) intervals, clipped to [lo, hi] where given."""
    total, reach = 0, lo
    for s, e in sorted(intervals):
        if reach is not None:
            s = max(s, reach)
        if hi is not None:
            e = min(e, hi)
        if e > s:
            total += e - s
            reach = e
    return total
