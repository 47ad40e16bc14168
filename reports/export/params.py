"""What an export is asked for (ExportParams), what it did (ExportSummary), and its limits: DuckDB's memory and spill, the rows per tile, the steps per batch."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from tracehouse.reports.export.clocks import ClockAlignment
from tracehouse.warehouse import memory
from tracehouse.warehouse.store import Warehouse

from tracehouse.errors import TracehouseError

BATCH = 20_000
# rows of one table per tile of the GPU, host and Python tracks (_row_tiles): what one sorted query holds
TILE_ROWS = int(os.environ.get("TRACEHOUSE_EXPORT_TILE_ROWS", "200000"))
FAR = 1 << 62  # an open window's bound


# DuckDB's memory limit of the export's connections: the memory policy's (warehouse.memory; TRACEHOUSE_MEMORY_LIMIT).
# DuckDB's sorts spill past it, so the peak RSS is about this limit plus ~0.2 GB of Python whatever the run's size
# (bench/results.md, "export")
MEMORY_LIMIT = memory.memory_limit()
# DuckDB's spill files of one export at most (TRACEHOUSE_EXPORT_SPILL): a view past it fails like one out of
# memory (its track not drawn, said). Without a cap, the 300 MB benchmark's analysis tracks spilled 34 GB in
# 30 minutes (bench/results.md, "export")
SPILL_LIMIT = os.environ.get("TRACEHOUSE_EXPORT_SPILL", "4GB")
EXPORT_FORMATS = ("perfetto", "json")
# The per-step analyses (critical path: a walk over the rank's dependency graph; layers: a self-similarity
# search) cost about 0.1 and 0.3 s per step: on a run of thousands of steps they are drawn for the first
# ANALYSIS_STEPS steps of each rank in the selection (--analysis-steps), and the file says so
ANALYSIS_STEPS = 64
# steps per batch of the per-step analyses and per tile of idle gaps and exposed communication
STEP_BATCH = int(os.environ.get("TRACEHOUSE_EXPORT_STEP_BATCH", "64"))
EXT = {"perfetto": ".pftrace", "json": ".json"}


class ExportError(TracehouseError):
    hint = "see `tracehouse export -h`"


def parse_window(text: str) -> tuple[int, int]:
    """`START:END` in ns of the trace's time base (integers; `us`/`ms` suffixes scale them)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)(ns|us|ms)?\s*:\s*(\d+(?:\.\d+)?)(ns|us|ms)?\s*", text or "")
    if not m:
        raise ExportError(
            f"--window {text!r} is not START:END",
            hint="ns in the trace's time base, e.g. "
            "--window 1765000000000000000:1765000000005000000 (or with a us / ms suffix)",
        )
    scale = {"ns": 1, None: 1, "us": 1_000, "ms": 1_000_000}
    start = int(Decimal(m.group(1)) * scale[m.group(2)])
    end = int(Decimal(m.group(3)) * scale[m.group(4)])
    if end <= start:
        raise ExportError(f"--window {text!r}: END must be after START")
    return start, end


@dataclass
class ExportParams:
    """What to export: the selection (rank, step or window: see export_run), the format, whether to draw the
    analysis tracks (of the first analysis_steps steps of each rank), whether to align the ranks' clocks, and
    the sizes of the bounded-memory work (rows per tile of a track, steps per batch of an analysis)."""

    rank: int | None = None
    step: int | None = None
    window: tuple[int, int] | None = None
    fmt: str = "perfetto"
    analysis: bool = True
    analysis_steps: int = ANALYSIS_STEPS
    align: bool = True
    tile_rows: int = TILE_ROWS
    step_batch: int = STEP_BATCH

    def check(self) -> None:
        if self.fmt not in EXPORT_FORMATS:
            raise ExportError(f"unknown format {self.fmt!r}", hint=f"choose {' or '.join(EXPORT_FORMATS)}")
        if self.step is not None and self.window is not None:
            raise ExportError("give --step or --window, not both")


@dataclass
class ExportSummary:
    run_id: str
    path: Path
    fmt: str
    ranks: list[int]
    windows: dict[int, tuple[int, int]]  # per rank, the window exported (FAR bounds: the whole rank)
    notes: list[str] = field(default_factory=list)  # what the file leaves out, and why
    counts: dict[str, int] = field(
        default_factory=dict
    )  # slices per kind: gpu, host, python, flows, analysis ...
    lanes: int = 0  # overlap sub-tracks created
    clocks: ClockAlignment | None = None  # how each rank's times were shifted

    def head(self) -> str:
        what = ", ".join(f"{v} {k}" for k, v in self.counts.items() if v)
        return f"{self.path}\t{self.fmt}\t{len(self.ranks)} rank(s)\t{what}"

    def line(self) -> str:
        what = ", ".join(f"{v} {k}" for k, v in self.counts.items() if v)
        notes = "".join(f"\n  note: {n}" for n in self.notes)
        return f"{self.path}\t{self.fmt}\t{len(self.ranks)} rank(s)\t{what}{notes}"


def spill_dir(warehouse: Warehouse) -> Path:
    """Where this export's DuckDB connections spill (removed when it ends)."""
    return warehouse.staging_dir / f"export-{os.getpid()}"


def export_settings(warehouse: Warehouse) -> dict[str, str]:
    """The DuckDB settings of an export's connection: its memory limit, spilling into spill_dir."""
    return memory.settings(spill_dir(warehouse)) | {"max_temp_directory_size": SPILL_LIMIT}
