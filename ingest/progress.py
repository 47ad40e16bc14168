"""Ingest progress on a terminal: one line per rank, redrawn a few times a second, quiet when piped.

Self-contained on purpose (it changes nothing in the pipeline): it watches what ingest writes anyway.
Each rank's worker first copies the file's event array to `<warehouse>/staging/<pid>-*/work/rank-N/
events.json`; that file's size against the trace's uncompressed size (a plain file's size, a gzip's
ISIZE footer) is the rank's progress in bytes, with an ETA from the rate so far. Once the copy is
decoded the file goes away and the rank is `decoding`; the pipeline's own `ingested FILE` message
marks it done, and `analysing run ...` the stored analyses that follow (with the seconds so far).
"""

from __future__ import annotations

import os
import struct
import sys
import threading
import time
from pathlib import Path
from typing import Self


def expected_json_bytes(path: Path) -> int:
    """About how many bytes of JSON the file holds: its size, or a gzip's ISIZE (mod 4 GiB: when that is
    smaller than the compressed size, the file is over 4 GiB inflated and 8 × compressed is the guess)."""
    size = path.stat().st_size
    if not path.name.endswith(".gz") or size < 18:
        return size
    with open(path, "rb") as f:
        f.seek(-4, os.SEEK_END)
        (isize,) = struct.unpack("<I", f.read(4))
    return isize if isize >= size else size * 8


def _mb(n: float) -> str:
    return f"{n / 1e6:,.0f} MB" if n >= 1e7 else f"{n / 1e6:.1f} MB"


class IngestProgress:
    """Draws the lines on `stream` (a terminal) while ingest runs; feed it the pipeline's messages."""

    def __init__(
        self, warehouse_root: Path, files: list[tuple[Path, int]], stream=None, interval: float = 0.25
    ):
        self.root = Path(warehouse_root)
        self.stream = stream or sys.stderr
        self.interval = interval
        self.files = files  # (path, rank), in the order the runs are ingested
        self.expected = {str(p): expected_json_bytes(p) for p, _ in files}
        self.started = {str(p): None for p, _ in files}
        self.done: set[str] = set()
        self.note, self.note_at = "", 0.0
        self.drawn = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self.t0 = time.monotonic()

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._draw(final=True)

    def message(self, text: str) -> None:
        with self._lock:
            if text.startswith("ingested "):
                self.done.add(text[len("ingested ") :])
            else:
                self.note, self.note_at = text, time.monotonic()

    def _staging(self) -> Path | None:
        folder = self.root / "staging"
        try:
            mine = [p for p in folder.iterdir() if p.name.startswith(f"{os.getpid()}-")]
        except OSError:
            return None
        return max(mine, key=lambda p: p.stat().st_mtime) if mine else None

    def lines(self) -> list[str]:
        stage = self._staging()
        now = time.monotonic()
        out = []
        for path, rank in self.files:
            key = str(path)
            total = self.expected[key]
            if key in self.done:
                state = f"done ({_mb(total)})"
            else:
                folder = stage / "work" / f"rank-{rank}" if stage else None
                try:
                    copied = (folder / "events.json").stat().st_size
                except (OSError, TypeError):
                    copied = None
                if self.started[key] is None and (
                    copied is not None or (folder is not None and folder.is_dir())
                ):
                    self.started[key] = now
                elapsed = now - self.started[key] if self.started[key] is not None else 0.0
                if self.started[key] is None:
                    state = "waiting"
                elif copied is None:  # the event array is read: DuckDB decodes, links and steps it
                    state = f"decoding and linking events ({elapsed:.0f} s)"
                else:
                    pct = min(100.0, 100.0 * copied / total) if total else 0.0
                    rate = copied / max(1e-3, elapsed)
                    eta = (
                        f", ETA {max(0.0, (total - copied) / rate):.0f} s"
                        if rate > 0 and copied < total
                        else ""
                    )
                    state = f"reading {_mb(copied)} of {_mb(total)} ({pct:.0f} %){eta}"
            out.append(f"  rank {rank} {path.name[:48]}: {state}")
        if self.note:
            out.append(f"  {self.note} ({now - self.note_at:.0f} s)")
        return out

    def _draw(self, final: bool = False) -> None:
        with self._lock:
            lines = self.lines()
        text = ""
        if self.drawn:
            text += f"\x1b[{self.drawn}F"  # back to the first line drawn last time
        text += "".join(f"\x1b[2K{line}\n" for line in lines)
        self.stream.write(text)
        self.stream.flush()
        self.drawn = len(lines)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._draw()
