"""Progress of `tracehouse synth --target-size` on a terminal: bytes written of the target, %, ETA.

One line on stderr, redrawn at most a few times a second, then a last line with the total and the time
taken; nothing at all when stderr is not a terminal (a pipe, a log file, CI), as ingest's progress.
"""

from __future__ import annotations

import sys
import time

from tracehouse.ingest.progress import _mb


class SizeProgress:
    """Callable(written, target) for write_scenario's `progress`; `note(text)` says what follows the traces;
    `done(note)` ends the line."""

    def __init__(self, stream=None, interval: float = 0.25, clock=time.monotonic):
        self.stream = stream or sys.stderr
        self.interval = interval
        self.clock = clock
        self.t0 = clock()
        self.last_draw = None
        self.written = self.target = 0

    def line(self, written: int, target: int, now: float) -> str:
        elapsed = now - self.t0
        if not target:
            return f"  synth: {_mb(written)} written ({elapsed:.0f} s)"
        pct = min(100.0, 100.0 * written / target)
        rate = written / elapsed if elapsed > 0 else 0.0
        eta = f", ETA {max(0.0, (target - written) / rate):.0f} s" if rate > 0 and written < target else ""
        return f"  synth: {_mb(written)} of {_mb(target)} ({pct:.0f} %){eta}"

    def __call__(self, written: int, target: int) -> None:
        self.written, self.target = written, target
        now = self.clock()
        if self.last_draw is not None and now - self.last_draw < self.interval:
            return
        self.last_draw = now
        self.stream.write(f"\r\x1b[2K{self.line(written, target, now)}")
        self.stream.flush()

    def note(self, text: str) -> None:
        """What comes after the traces (the ground truth, seconds on a large run), after the last figures."""
        line = self.line(self.written, self.target, self.clock())
        self.stream.write(f"\r\x1b[2K{line}; {text}")
        self.stream.flush()

    def done(self, note: str = "") -> None:
        """The final line: what was written and in how long (plus a note, e.g. the ground truth written)."""
        elapsed = self.clock() - self.t0
        self.stream.write(f"\r\x1b[2K  synth: {_mb(self.written)} of trace JSON in {elapsed:.0f} s{note}\n")
        self.stream.flush()


def size_progress(enabled: bool | None = None) -> SizeProgress | None:
    """A SizeProgress on stderr when it is a terminal (or when enabled says so); None otherwise."""
    if enabled is None:
        enabled = sys.stderr.isatty()
    return SizeProgress() if enabled else None
