"""The analysis tracks of an export (group `tracehouse analysis` of each rank): the critical path and layers
of each analysed step and data_quality's per-step flags (per batch of params.step_batch steps over the batch's
rows: scoped.scope), idle gaps and exposed communication (reports.export.gaps), data-quality flags as instants,
and the run report's takeaways over their windows."""

from __future__ import annotations

from tracehouse.reports.export import scoped
from tracehouse.reports.export.gaps import gap_and_comm_tracks
from tracehouse.reports.export.params import FAR, export_settings, spill_dir
from tracehouse.reports.export.tracks import ExportContext
from tracehouse.reports.run import build_run_report
from tracehouse.warehouse.derived import is_derived
from tracehouse.warehouse.engine import open as open_connection

CP_DESCRIPTION = (
    "sql/critical_path: the chain of dependencies that determined when the step's GPU work ended; "
    "its segments tile the path (one slice per segment)"
)
# data_quality's flags that are about one step and read a per-step analysis (critical_path, step_queueing): they
# are computed per batch of analysed steps over the batch's rows (scoped.scope); every other flag reads the
# tables and their aggregates (the view _data_quality_tables) and is computed once
STEP_FLAGS = ("critical_path_one_host_call", "gpu_queueing")
FLAG_COLUMNS = "flag, severity, rank, step, message, array_to_string(affects, ', ')"
CP_ARGS = ("step", "seq", "kind", "category", "edge", "kernel_id", "op_id", "stream")


def _run_flags(con, run_id: str) -> list:
    """data_quality's rows but the STEP_FLAGS: the view _data_quality_tables, whose flags read the tables and
    their aggregates only (streaming, in bounded memory), never a per-step analysis."""
    return scoped.fetch(
        con,
        f"""
        SELECT {FLAG_COLUMNS} FROM _data_quality_tables
        WHERE run_id = ?
        ORDER BY rank NULLS FIRST, step NULLS FIRST, flag""",
        [run_id],
    )


class _RankAnalysis:
    """The analysis tracks of one rank's window: its group track, the per-step analyses of its first
    params.analysis_steps steps (in batches), idle gaps and exposed communication, and its flags."""

    def __init__(self, ctx: ExportContext, rank: int, walls, counts: dict[str, int]):
        self.ctx, self.rank, self.walls, self.counts = ctx, rank, walls, counts
        self.pid = rank + 1
        self.lo, self.hi = ctx.windows[rank]
        self.group = ctx.tracks.track(
            ctx.procs[rank],
            ("analysis", rank),
            "tracehouse analysis",
            self.pid,
            "tracehouse's findings, from the views of sql/ (docs/interpretation.md)",
        )
        self.cp_track = self.layer_track = None
        self.step_flags: list = []

    def analysed_steps(self) -> list[int]:
        """The rank's steps in the window, the first params.analysis_steps of them (a cut is noted)."""
        ctx, rank, lo = self.ctx, self.rank, self.lo
        steps = scoped.steps_in(ctx.con, ctx.run_id, rank, lo, self.hi)
        limit = ctx.params.analysis_steps
        if len(steps) <= limit:
            return steps
        note = (
            f"rank {rank}: critical path, layers and per-step data-quality flags ({', '.join(STEP_FLAGS)}) "
            f"of the first {limit} of its {len(steps)} steps in the selection (--analysis-steps N, "
            "or --step / --window for others)"
        )
        ctx.summary.notes.append(note)
        at = (
            lo
            if lo > -FAR
            else ctx.con.execute(
                "SELECT min(start_ns) FROM step_spans WHERE run_id = ? AND rank = ?", [ctx.run_id, rank]
            ).fetchone()[0]
        )
        ctx.tracks.w.instant(self.group, at, "note: per-step analyses cut", "note", {"message": note})
        return steps[:limit]

    def step_batch(self, batch: list[int]) -> None:
        """Critical path, layers and per-step flags of a batch of steps, over the rows of the batch's span only
        (scoped.scope): the views' work and memory are those of the batch, whatever the run's size."""
        ctx, rank, run_id = self.ctx, self.rank, self.ctx.run_id
        steps = f"steps {batch[0]}..{batch[-1]}"
        ctx.say(f"rank {rank}: critical path, layers and step flags of {steps}")
        span = scoped.batch_span(ctx.con, run_id, rank, batch, self.walls)
        in_steps = ", ".join(map(str, batch))

        def guarded(what: str, sql: str):
            return scoped.guard(
                ctx.summary, f"rank {rank}: {what} of {steps}", scoped.fetch, ctx.con, sql, [run_id, rank]
            )

        with scoped.scope(ctx.con, run_id, rank, span):
            cp = guarded(
                "critical path",
                f"""
                SELECT step, seq, kind, category, name, start_ns, dur_ns, kernel_id, op_id, stream, edge
                FROM critical_path WHERE run_id = ? AND rank = ? AND step IN ({in_steps})
                ORDER BY start_ns, step, seq""",
            )
            layers = guarded(
                "layers",
                f"""
                SELECT step, device, stream, layer, period, start_ns, end_ns - start_ns AS dur_ns
                FROM export_layers WHERE run_id = ? AND rank = ? AND step IN ({in_steps})
                ORDER BY start_ns, layer""",
            )
            self.step_flags += (
                guarded(
                    "data-quality flags",
                    f"""
                SELECT {FLAG_COLUMNS} FROM data_quality
                WHERE run_id = ? AND rank = ? AND step IN ({in_steps}) AND flag IN {STEP_FLAGS!r}
                ORDER BY step, flag""",
                )
                or []
            )
        for row in cp or ():
            self.critical_path_segment(row)
        for row in layers or ():
            self.layer(*row)

    def critical_path_segment(self, row: tuple) -> None:
        st, seq, kind, cat, name, start, dur, kid, op, stream, edge = row
        tracks = self.ctx.tracks
        self.cp_track = self.cp_track or tracks.track(
            self.group, ("cp", self.rank), "critical path", self.pid, CP_DESCRIPTION
        )
        label = (
            kind
            + (f" [{cat}]" if cat else "")
            + (f" {name}" if name else "")
            + (f" ({edge})" if edge else "")
        )
        args = dict(zip(CP_ARGS, (st, seq, kind, cat, edge, kid, op, stream)))
        tracks.slice_on(self.cp_track, start, dur, label, "critical_path", args)
        self.counts["critical_path"] += 1

    def layer(self, st, device, stream, layer, period, start, dur) -> None:
        tracks = self.ctx.tracks
        self.layer_track = self.layer_track or tracks.track(
            self.group,
            ("layers", self.rank),
            "layers",
            self.pid,
            "sql/export_layers: the repeating layer of each step's main stream",
        )
        args = {"step": st, "layer": layer, "period": period, "device": device, "stream": stream}
        tracks.slice_on(self.layer_track, start, dur, f"layer {layer}", "layer", args)
        self.counts["layers"] += 1

    def write(self, run_flags: list, starts: dict) -> None:
        steps = self.analysed_steps()
        batch_size = self.ctx.params.step_batch
        for i in range(0, len(steps), batch_size):
            self.step_batch(steps[i : i + batch_size])
        gaps, comm = gap_and_comm_tracks(self.ctx, self.rank, self.group, self.walls)
        self.counts["idle_gaps"] += gaps
        self.counts["exposed_comm"] += comm
        any_step = {st for r, st, a, b, _ in self.walls if r == self.rank and a < self.hi and b > self.lo}
        self.counts["flags"] += self.flags(run_flags + self.step_flags, starts, any_step)

    def flags(self, flag_rows, starts, steps) -> int:
        """data_quality rows of the rank (and the run's), as instants at their step's start (step_spans) or,
        for a rank's or the run's flag, at the rank's first step start (the window's start when later)."""
        rank, tracks = self.rank, self.ctx.tracks
        first = min((at for (r, _), at in starts.items() if r == rank), default=None)
        n = 0
        for flag, severity, frank, fstep, message, affects in flag_rows:
            if (frank is not None and frank != rank) or (fstep is not None and fstep not in steps):
                continue
            at = (
                starts.get((rank, fstep))
                if fstep is not None
                else (None if first is None else max(self.lo, first))
            )
            if at is None:
                continue
            track = tracks.track(
                self.group,
                ("flags", rank),
                "data quality",
                self.pid,
                "sql/data_quality: why some figures cannot be trusted as they stand",
            )
            args = {
                "flag": flag,
                "severity": severity,
                "rank": frank,
                "step": fstep,
                "affects": affects,
                "message": message,
            }
            tracks.w.instant(track, int(at), f"{severity}: {flag}", "data_quality", args)
            n += 1
        return n


def analysis_tracks(ctx: ExportContext) -> None:
    con, run_id, summary = ctx.con, ctx.run_id, ctx.summary
    counts = dict.fromkeys(("critical_path", "idle_gaps", "exposed_comm", "layers", "flags", "takeaways"), 0)
    ctx.say("data-quality flags")
    # the flags of the run and its ranks (streaming aggregates); the per-step ones come with each step batch
    run_flags = (
        scoped.guard(summary, "data-quality flags of the run and its ranks", _run_flags, con, run_id) or []
    )
    starts = {
        (r, st): at
        for r, st, at in con.execute(
            "SELECT rank, step, start_ns FROM step_spans WHERE run_id = ?", [run_id]
        ).fetchall()
    }
    walls = scoped.step_windows(con, run_id)
    for rank in sorted(ctx.windows):
        _RankAnalysis(ctx, rank, walls, counts).write(run_flags, starts)
    drawn = scoped.guard(summary, "the run report's takeaways", _takeaways, ctx)
    counts["takeaways"] = max(drawn or 0, 0)
    if drawn is not None and drawn < 0:
        summary.notes.append(
            "no report takeaways: the run is not derived (ingest does not derive, or its derive "
            "failed); run `tracehouse derive RUN` or `tracehouse report` once, then export again"
        )
    summary.counts.update(counts)


def _takeaways(ctx: ExportContext) -> int:
    """The run report's takeaways, each over its window on its rank (the report's step rank for step windows,
    the lowest exported rank for the whole trace); of ctx.report when the caller built it; -1 when the run
    is not derived (computing the report's analyses of a whole run here would cost more than the export)."""
    report = ctx.report if ctx.report is not None else _report_of(ctx)
    if report is None:
        return -1
    return sum(_takeaway(ctx, t) for t in report.takeaways)


def _report_of(ctx: ExportContext):
    """The run report, built on a connection of its own within the export's memory and spill (it reads views
    that are not kept too, the serving section's, over the whole run); None where the run is not derived
    (`tracehouse derive`, the first report or `ingest --wait` derives it)."""
    if not is_derived(ctx.warehouse, ctx.run_id):
        return None
    ctx.say("the run report's takeaways")
    spill = spill_dir(ctx.warehouse) / "report"
    spill.mkdir(parents=True, exist_ok=True)  # DuckDB makes the last folder only
    settings = {**export_settings(ctx.warehouse), "temp_directory": str(spill)}
    con = open_connection(ctx.warehouse, runs=[ctx.run_id], settings=settings)
    try:
        return build_run_report(con, ctx.run_id)
    finally:
        con.close()


def _takeaway(ctx: ExportContext, t) -> int:
    """The takeaway as a slice over its window (1), or nothing (0) when it has none in the export."""
    w, windows, tracks = t.where, ctx.windows, ctx.tracks
    if w is None or w.start_ns is None or w.end_ns is None:
        return 0
    if w.rank is not None and w.rank not in windows:
        return 0
    rank = w.rank if w.rank is not None else min(windows)
    start, end = w.start_ns, w.end_ns
    lo, hi = windows[rank]
    if not (start < hi and (end > lo or start >= lo)):
        return 0
    group = tracks.track(ctx.procs[rank], ("analysis", rank), "tracehouse analysis", rank + 1)
    track = tracks.track(
        group,
        ("takeaways", rank),
        "report takeaways",
        rank + 1,
        "the run report's takeaways (reports/takeaways.py) over the windows they name",
    )
    args = {
        "figure": t.figure,
        "value": t.value,
        "subject": t.subject,
        "window_of": t.window_of,
        "step": w.step,
        "text": t.text,
        "export": w.command,
    }
    tracks.slice_on(track, start, end - start, t.text[:120], "takeaway", args)
    return 1
