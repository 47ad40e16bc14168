"""Export a run to Perfetto (protobuf) or Chrome-trace JSON, with tracehouse's analysis written into it.

What the file holds, per rank one process (`rank R`), all ranks of the run in one file, every time in the
tables' own time base (the traces' timestamps in ns), except that a rank stamped by another host's clock
is shifted onto the lowest rank's (clock_alignment, sql/export_clock_offset: the offset is the median
difference of the ends of the collectives both ran, applied when it exceeds max(5 x their median absolute
deviation, 20 us) over at least 3 collectives; one shift per host; `--no-align` keeps the raw times).
What was shifted, and every note of what the file leaves out, is said on stderr and in the file: the
description (JSON) of the track `tracehouse export notes` of the lowest rank, or the JSON variant's
top-level key `tracehouse`:
  * GPU activities per (device, stream): `[category] name`, args kernel_id, kind, category, step,
    correlation, launch call, Python launch site, grid / block, bytes. Two activities of one stream that
    overlap in time (programmatic dependent launch, a copy engine) cannot share a Perfetto track (its
    slices nest; Perfetto's JSON importer drops such `X` slices), so an activity that overlaps an earlier
    one goes to a sub-track `stream S (overlap k)`: none is dropped or clipped.
  * host ops (cpu_ops: aten ops, annotations, runtime calls) per thread, Python frames per thread,
    nested as recorded (a range that overlaps without nesting goes to a sub-track likewise);
  * a flow from each launch call to each GPU activity it launched (graph launches: one call, many flows),
    where both are exported (the launch call is the host op kernels.launch_op_id names);
  * analysis tracks (group `tracehouse analysis`): the critical path of each step (one slice per segment of
    sql/critical_path, named by kind: it tiles the path), idle gaps of each device by cause
    (sql/idle_gaps, scope device, tiny gaps left out), exposed communication (sql/export_exposed_comm), the
    layers of each step's main stream (sql/export_layers), data-quality flags (sql/data_quality, as
    instants at their step's start or the rank's start; a run's flag on every rank) and the run report's
    takeaways over their windows.

Selection: the whole run, or a window [START, END) in ns (`--window`), or a step (`--step`: per rank, the
step's host window joined with its GPU span), on all ranks or one (`--rank`). A slice is exported when it
overlaps the window (a zero-length one when it lies in it), whole: durations are never clipped. A flow
is written when both its ends are exported.

Memory: every table is read per rank in tiles of about TILE_ROWS rows by start time (tracks.py), each tile in
start order in record batches and written as it is read; only the open slices of each track (lanes) are held.
A tile's query joins narrow per-rank temp tables (the activities' categories, the launch links), never the
wide host rows (one whole-run query ran a 1 GB run out of 2 GB). DuckDB's memory limit is MEMORY_LIMIT (the memory policy's,
warehouse.memory: TRACEHOUSE_MEMORY_LIMIT), its spill SPILL_LIMIT. No analysis is a whole-rank query: the per-step
ones (critical path, layers, data_quality's per-step flags STEP_FLAGS) are computed per batch of STEP_BATCH
steps over the rank's rows that overlap the batch's span (temp tables: scoped.scope), so their work is that of the
analysed steps, not of the run (on a 300 MB run: critical path of 64 steps 98 s -> 1 s); idle gaps and exposed
communication per tile of STEP_BATCH steps over the rows each tile's figures read (gaps.py: the same
rows as the whole-rank views); data_quality's other flags from the view _data_quality_tables (aggregates of the tables). Each
analysis track is guarded: when its view runs out of memory (or spill space) the track is not written at all
and a note says which and why. The GPU, host and Python tracks are never left out: if they do not fit, the
export fails with one line and writes nothing.

The modules: params (ExportParams: the selection, format and sizes; ExportSummary; the limits), clocks (the
ranks' shifts), writers (Perfetto protobuf and Chrome JSON), scoped (windows, scopes, guarded queries), tracks
(track descriptors and lanes; GPU, host and Python tracks), gaps (idle gaps and exposed communication per
tile) and analysis (the analysis tracks).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import duckdb
from tracehouse.reports.export.analysis import STEP_FLAGS, analysis_tracks
from tracehouse.reports.export.clocks import ClockAlignment, clock_alignment
from tracehouse.reports.export.params import (
    ANALYSIS_STEPS,
    EXPORT_FORMATS,
    EXT,
    FAR,
    MEMORY_LIMIT,
    ExportError,
    ExportParams,
    ExportSummary,
    export_settings,
    parse_window,
    spill_dir,
)
from tracehouse.reports.export.scoped import step_windows
from tracehouse.reports.export.tracks import ExportContext, Tracks, gpu_tracks, host_tracks, python_tracks
from tracehouse.reports.export.writers import open_writer
from tracehouse.warehouse.catalog import focus
from tracehouse.warehouse.engine import open as open_connection
from tracehouse.warehouse.runs import resolve_run
from tracehouse.warehouse.store import Warehouse

__all__ = [
    "ANALYSIS_STEPS",
    "EXPORT_FORMATS",
    "EXT",
    "MEMORY_LIMIT",
    "STEP_FLAGS",
    "ClockAlignment",
    "ExportError",
    "ExportParams",
    "ExportSummary",
    "clock_alignment",
    "export_run",
    "export_settings",
    "parse_window",
    "progress_printer",
    "step_windows",
]


def _windows(con, run_id: str, params: ExportParams) -> dict[int, tuple[int, int]]:
    """Per rank of the selection, the window exported: the step's wall, the --window, or (-FAR, FAR)."""
    rank, step = params.rank, params.step
    ranks = [
        r
        for (r,) in con.execute(
            "SELECT DISTINCT rank FROM kernels WHERE run_id = ? UNION "
            "SELECT DISTINCT rank FROM cpu_ops WHERE run_id = ? ORDER BY 1",
            [run_id, run_id],
        ).fetchall()
    ]
    if rank is not None:
        if rank not in ranks:
            raise ExportError(
                f"run {run_id} has no rank {rank}", hint=f"its ranks: {', '.join(map(str, ranks)) or 'none'}"
            )
        ranks = [rank]
    if step is not None:
        rows = {r: (a, b) for r, st, a, b, _ in step_windows(con, run_id) if st == step and r in ranks}
        if not rows:
            known = [
                s
                for (s,) in con.execute(
                    "SELECT DISTINCT step FROM step_spans WHERE run_id = ? ORDER BY 1", [run_id]
                ).fetchall()
            ]
            raise ExportError(
                f"run {run_id} has no step {step}" + (f" on rank {rank}" if rank is not None else ""),
                hint=f"its steps: {', '.join(map(str, known[:20])) or 'none'}",
            )
        return rows
    lo, hi = params.window if params.window else (-FAR, FAR)
    return {r: (lo, hi) for r in ranks}


def export_run(
    warehouse: Warehouse,
    run: str,
    path: str | Path,
    params: ExportParams | None = None,
    *,
    progress: Callable[[str], None] | None = None,
    con: duckdb.DuckDBPyConnection | None = None,
    report=None,
    **fields,
) -> ExportSummary:
    """Write the run (or its selection) to `path` in params.fmt; the file appears only when complete. The
    params are an ExportParams, or its fields as keywords (rank=, step=, window=, fmt=, analysis=,
    analysis_steps=, align=, tile_rows=, step_batch=).

    align: shift the ranks of another clock onto the reference rank's (clock_alignment); a --window
    given for every rank is then in the reference rank's time base (with --rank: that rank's own).
    con: a connection opened with export_settings and focused on the run, `run` its resolved id (the
    report's, for `report --with-trace`); it stays open. Default: the export opens and closes its own.
    report: the run report already built for this run: its takeaways are drawn from it (else built here)."""
    params = params or ExportParams(**fields)
    params.check()
    spill = spill_dir(warehouse)
    own = con is None
    if own:
        con = open_connection(warehouse, settings=export_settings(warehouse))
        try:
            run_id = resolve_run(con, run)
            focus(con, [run_id])
        except BaseException:
            con.close()
            raise
    else:
        run_id = run
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        summary = _write(warehouse, con, run_id, params, path, tmp, progress, report)
        os.replace(tmp, path)
        return summary
    except (duckdb.OutOfMemoryException, duckdb.IOException) as e:
        tmp.unlink(missing_ok=True)
        first = str(e).strip().splitlines()[0][:200]
        raise ExportError(
            f"the run's activities did not fit DuckDB's memory limit {MEMORY_LIMIT}: {first}; nothing "
            "written",
            hint="export a --step, a --window or one --rank, or raise TRACEHOUSE_MEMORY_LIMIT",
        ) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        if own:
            con.close()
        if spill.is_dir():
            shutil.rmtree(spill, ignore_errors=True)


def _write(
    warehouse: Warehouse, con, run_id: str, params: ExportParams, path: Path, tmp: Path, progress, report=None
):
    """The export written to `tmp`: the clocks, the windows (temp table export_window), then the GPU, host,
    Python and analysis tracks, and the file's notes."""
    clocks = clock_alignment(con, run_id, params.align)
    windows = _windows(con, run_id, params)
    if params.window is not None and params.rank is None:
        windows = {
            r: (lo + clocks.shifts.get(r, 0), hi + clocks.shifts.get(r, 0)) for r, (lo, hi) in windows.items()
        }
    summary = ExportSummary(run_id, path, params.fmt, sorted(windows), windows)
    summary.clocks = clocks
    summary.notes.extend(n for n in clocks.notes)
    con.execute("CREATE OR REPLACE TEMP TABLE export_window (rank INTEGER, start_ns BIGINT, end_ns BIGINT)")
    con.executemany(
        "INSERT INTO export_window VALUES (?, ?, ?)", [[r, s, e] for r, (s, e) in windows.items()]
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(tmp, "wb", buffering=1 << 20) as handle:
        shifts = {r: s for r, s in clocks.shifts.items() if r in windows}
        writer = open_writer(params.fmt, handle, shifts)
        tracks = Tracks(writer, summary)
        procs = {r: tracks.process(r, f"rank {r}") for r in sorted(windows)}
        ctx = ExportContext(warehouse, con, run_id, params, summary, tracks, procs, windows, progress, report)
        gpu_tracks(ctx)
        host_tracks(ctx)
        python_tracks(ctx)
        if params.analysis:
            analysis_tracks(ctx)
        meta = {"run_id": run_id, "format": params.fmt, **clocks.meta()}
        writer.close(summary.notes, meta, procs[min(procs)])
    return summary


def progress_printer() -> Callable[[str], None] | None:
    if not sys.stderr.isatty():
        return None
    return lambda text: print(f"  {text}", file=sys.stderr)
