"""The run report: one run's triage view and step breakdown, from the views in sql/.

`build_run_report` reads every figure from the catalogue into a typed context (RunReport); the
templates (reports/templates/run.*.j2) only lay it out, and JSON is the same context as data. The
connection comes from warehouse.engine.open (DuckDB or Spark behind it); every view it reads exists on
both engines, so no section asks whether its view is there.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from tracehouse.reports.gains import add_gains
from tracehouse.reports.render import render
from tracehouse.reports.run_header import parallelism, versions
from tracehouse.reports.run_model import (
    CategoryRow,
    FusionRow,
    KernelRow,
    LayerPosition,
    OverlapRow,
    PathRow,
    PhaseSection,
    QualityFlag,
    RunReport,
    SkewRow,
    StepSection,
    StreamRow,
    TimelineActivity,
    TimelineLane,
)
from tracehouse.reports.serving import serving_section
from tracehouse.reports.step_path import describe_path_comm
from tracehouse.reports.step_path import fill as fill_step_path
from tracehouse.reports.takeaways import FindingWindow, Takeaway, export_command, takeaways
from tracehouse.warehouse.engine import Connection, focused, step_scope
from tracehouse.warehouse.stored import reads_report_rows, representative_step

from tracehouse.errors import TracehouseError


def _rows(con, sql: str, params: list | dict) -> list[dict]:
    cursor = con.execute(sql, params)
    columns = [d[0] for d in cursor.description]
    return [dict(zip(columns, row)) for row in cursor.fetchall()]


def check_phase(con: Connection, run_id: str, phase: str) -> None:
    """--phase naming a phase the run does not have is an error naming those it has, not an empty report."""
    have = [
        r[0]
        for r in con.execute(
            "SELECT DISTINCT phase FROM category_summary WHERE run_id = ? ORDER BY 1", [run_id]
        ).fetchall()
    ]
    if phase not in have:
        shown = ", ".join(have) if have else "none (no GPU activity)"
        raise TracehouseError(
            f"run {run_id} has no {phase} phase; its phases: {shown}",
            hint="leave out --phase for the whole run" if have else "",
        )


def build_run_report(
    con: Connection, run_id: str, phase: str | None = None, mapping_run: str | None = None
) -> RunReport:
    """The report's figures, from a connection of warehouse.engine.open (a report's: runs=...).
    The views are computed for this run (and the mapping run) only, whatever runs the connection sees
    (warehouse.engine.focused), and its focus is given back after."""
    with focused(con, [run_id] + ([mapping_run] if mapping_run else []), compute_once=True) as on:
        return _build_run_report(on, run_id, phase, mapping_run)


SERVING_ENGINES = ("sglang", "vllm", "tensorrt-llm")
SERVING_PHASES = ("prefill", "decode", "mixed")


def is_serving(run: dict, phases: list[str]) -> bool:
    """A serving run, whose page shows the serving section (step time by batch size, roofline, requests):
    its engine is a serving one (runs.framework), or the run or its steps are in a serving phase (runs.phase,
    the phases of category_summary). A training or plain PyTorch run gets no serving section."""
    return (
        run.get("framework") in SERVING_ENGINES
        or run.get("phase") in SERVING_PHASES
        or any(p in SERVING_PHASES for p in phases)
    )


def _build_run_report(con: Connection, run_id: str, phase: str | None, mapping_run: str | None) -> RunReport:
    run = _rows(con, "SELECT * FROM runs WHERE run_id = ?", [run_id])[0]
    phase_clause, phase_params = ("AND phase = ?", [phase]) if phase else ("", [])
    if phase:
        check_phase(con, run_id, phase)
    bar, top_kernels, always_shown = con.execute(
        "SELECT report_bar, top_kernels, always_shown FROM report_params"
    ).fetchone()  # sql/report_params
    phases = []
    for (ph,) in con.execute(
        f"SELECT DISTINCT phase FROM category_summary WHERE run_id = ? {phase_clause} ORDER BY 1",
        [run_id] + phase_params,
    ).fetchall():
        kernels = [
            KernelRow(**r)
            for r in _rows(
                con,
                """
            SELECT name, category, gpu_time_ns, share, launches, median_ns, python_site, python_site_share, launch_call
            FROM (SELECT *, row_number() OVER (ORDER BY gpu_time_ns DESC, name) AS rank_in_phase
                  FROM kernel_summary WHERE run_id = ? AND phase = ?)
            WHERE run_id = ? AND phase = ? AND (share >= ? OR rank_in_phase <= ?)
            ORDER BY gpu_time_ns DESC, name LIMIT ?""",
                [run_id, ph, run_id, ph, bar, always_shown, top_kernels],
            )
        ]
        categories = [
            CategoryRow(**r)
            for r in _rows(
                con,
                """
            SELECT category, gpu_time_ns, share FROM category_summary WHERE run_id = ? AND phase = ?
            ORDER BY gpu_time_ns DESC, category""",
                [run_id, ph],
            )
        ]
        total, n = con.execute(
            "SELECT sum(gpu_time_ns), sum(activities) FROM category_summary WHERE run_id = ? AND phase = ?",
            [run_id, ph],
        ).fetchone()
        phases.append(PhaseSection(ph, int(total or 0), int(n or 0), kernels, categories))
    gpu_total = sum(p.gpu_time_ns for p in phases)
    # uncategorized (sql/uncategorized): `other` because no rule matched, over the phases shown
    shown = [p.phase for p in phases]
    other = int(
        con.execute(
            f"""
        SELECT coalesce(sum(uncategorized_ns), 0) FROM uncategorized
        WHERE run_id = ? AND phase IN ({", ".join("?" for _ in shown) or "NULL"})""",
            [run_id] + shown,
        ).fetchone()[0]
    )
    report = RunReport(
        run_id=run_id,
        mode="mapping/formal" if mapping_run else "single-trace",
        framework=run.get("framework"),
        model=run.get("model"),
        hardware=run.get("hardware"),
        world_size=run.get("world_size"),
        n_ranks=run.get("n_ranks") or 1,
        parallelism=parallelism(run),
        phase_filter=phase,
        capture_mode=run.get("capture_mode"),
        commit=run.get("commit"),
        labels=dict(run.get("labels") or {}),
        files=[{"name": f["name"], "rank": f["rank"], "size": f["size"]} for f in (run.get("files") or [])],
        warnings=dict(run.get("warnings") or {}),
        gpu_time_ns=gpu_total,
        attributed_share=(run.get("attributed_gpu_ns") / gpu_total)
        if run.get("attributed_gpu_ns") is not None and gpu_total
        else None,
        other_share=other / gpu_total if gpu_total else None,
        phases=phases,
        overlap=_overlap(con, run_id, phase_clause, phase_params),
        fusion=_fusion(con, run_id, phase_clause, phase_params),
        step=None,
        rank_skew=_skew(con, run_id) if (run.get("n_ranks") or 1) > 1 else [],
    )
    report.step, report.quality = _step(con, run_id, phase)
    describe_path_comm(report)
    add_gains(con, report)
    report.trace_start_ns = run.get("trace_start_ns")
    report.versions = versions(run)
    report.serving = serving_section(con, run_id, phase) if is_serving(run, shown) else None
    report.n_streams = int(
        con.execute(
            "SELECT count(*) FILTER (WHERE carries_work) FROM stream_share WHERE run_id = ?", [run_id]
        ).fetchone()[0]
        or 0
    )
    if mapping_run:
        _apply_mapping(con, report, mapping_run)
        # a mapping run gives the replays their sites: the flag that says they have none no longer holds
        report.quality = [q for q in report.quality if q.flag != "graph_replays_without_captures"]
    report.takeaways, report.withheld = takeaways(report, _Windows(con, run_id, report.trace_start_ns))
    _finding_windows(con, report)
    return report


def _finding_windows(con, report: RunReport) -> None:
    """Give every finding its window in the trace's time base and the export command for exactly it: a step
    is exported with --step (its wall, step_breakdown), anything else with --window."""
    run_id, origin = report.run_id, report.trace_start_ns or 0
    walls = {
        (r, st): (a, b)
        for r, st, a, b in con.execute(
            "SELECT rank, step, wall_start_ns, wall_end_ns FROM step_breakdown WHERE run_id = ?", [run_id]
        ).fetchall()
    }
    first, last = con.execute(
        "SELECT min(trace_start_ns), max(trace_end_ns) FROM runs WHERE run_id = ?", [run_id]
    ).fetchone()

    def at(rank, step, start=None, end=None) -> FindingWindow:
        if step is not None and rank is not None and (rank, step) in walls and start is None:
            a, b = walls[(rank, step)]
            return FindingWindow(rank, step, a, b, export_command(run_id, rank, step, None, None))
        if start is None or end is None or end <= start:
            return FindingWindow(rank, step, first, last, export_command(run_id, rank, None, None, None))
        return FindingWindow(rank, step, start, end, export_command(run_id, rank, None, start, end))

    for t in report.takeaways:
        start, end = _abs(t, origin)
        whole_step = t.step is not None and (start, end) == walls.get((t.rank, t.step))
        t.where = at(t.rank, t.step) if whole_step else at(t.rank, t.step, start, end)
    for q in report.quality:
        q.where = at(q.rank, q.step)
    s = report.step
    if s is not None:
        s.window = at(s.rank, s.step)
        if s.largest_gap:
            s.gap_window = at(s.rank, s.step, s.largest_gap["start_ns"], s.largest_gap["end_ns"])


def _abs(t: Takeaway, origin: int) -> tuple[int | None, int | None]:
    if t.window_start_ns is None or t.window_end_ns is None:
        return None, None
    return t.window_start_ns + origin, t.window_end_ns + origin


class _Windows:
    """Where a takeaway's subject lies in time (ns from the trace's start), for its evidence."""

    def __init__(self, con, run_id: str, origin: int | None):
        self.con, self.run_id, self.origin = con, run_id, origin or 0

    def kernel(self, name: str) -> tuple[int | None, int | None]:
        first, last = self.con.execute(
            "SELECT min(start_ns), max(end_ns) FROM kernels WHERE run_id = ? AND name = ?",
            [self.run_id, name],
        ).fetchone()
        return self.rel(first), self.rel(last)

    def trace(self) -> tuple[int | None, int | None]:
        first, last = self.con.execute(
            "SELECT min(trace_start_ns), max(trace_end_ns) FROM runs WHERE run_id = ?", [self.run_id]
        ).fetchone()
        return self.rel(first), self.rel(last)

    def rel(self, ns: int | None) -> int | None:
        return None if ns is None else int(ns) - self.origin


def _quality(con, run_id: str, key: list | None) -> list[QualityFlag]:
    """The run's data_quality rows: the whole run's and ranks', and those of the step shown (key)."""
    where, params = (
        ("AND (step IS NULL OR (rank = ? AND step = ?))", key[1:]) if key else ("AND step IS NULL", [])
    )
    rows = _rows(
        con,
        f"""
        SELECT flag, severity, rank, step, affects, evidence, message FROM data_quality
        WHERE run_id = ? {where}
        ORDER BY CASE severity WHEN 'error' THEN 0 WHEN 'warning' THEN 1 ELSE 2 END, flag, rank NULLS FIRST, step""",
        [run_id] + params,
    )
    for r in rows:
        r["affects"] = list(r["affects"] or [])
        r["evidence"] = {k: v for k, v in dict(r["evidence"] or {}).items() if v is not None}
    return [QualityFlag(**r) for r in rows]


def _apply_mapping(con, report: RunReport, mapping_run: str) -> None:
    """Mapping/formal mode: Python locations from a graph-off run (the view mapping_sites)."""
    sites = {
        (r["phase"], r["name"]): r
        for r in _rows(
            con,
            "SELECT phase, name, site, site_share, mapped_share FROM mapping_sites "
            "WHERE target_run = ? AND mapping_run = ?",
            [report.run_id, mapping_run],
        )
    }
    for phase in report.phases:
        for k in phase.kernels:
            found = sites.get((phase.phase, k.name))
            if found and found["site"]:
                k.python_site, k.python_site_share = found["site"], found["site_share"]
    for o in report.overlap:
        found = sites.get((o.phase, o.name))
        if found and found["site"]:
            o.python_site = found["site"]
    report.mapping_run = mapping_run


def _overlap(con, run_id: str, phase_clause: str, params: list) -> list[OverlapRow]:
    return [
        OverlapRow(**r)
        for r in _rows(
            con,
            f"""
        SELECT phase, name, category, share, exclusive_ratio, hidden_ratio, verdict, priority, dependency_risk,
               recommendation, python_site, fusion_pattern
        FROM overlap_opportunity WHERE run_id = ? AND reportable {phase_clause}
        ORDER BY phase, share DESC, name""",
            [run_id] + params,
        )
    ]


def _fusion(con, run_id: str, phase_clause: str, params: list) -> list[FusionRow]:
    return [
        FusionRow(**r)
        for r in _rows(
            con,
            f"""
        SELECT phase, pattern_name, pattern_id, pattern_framework AS framework, status, share, occurrences,
               coalesce(evidence_sequence, evidence) AS evidence,
               fused_kernel, source_path, python_site
        FROM fusion_match WHERE run_id = ? AND coalesce(framework_match, true) {phase_clause}
        ORDER BY phase, CASE status WHEN 'Confirmed' THEN 0 WHEN 'Likely' THEN 1 ELSE 2 END, share DESC NULLS LAST,
                 pattern_name, pattern_framework""",
            [run_id] + params,
        )
    ]


def _skew(con, run_id: str) -> list[SkewRow]:
    return [
        SkewRow(**r)
        for r in _rows(
            con,
            """
        SELECT rank, instances, times_last, mean_start_lateness_ns, wait_ns, wait_share, imposed_wait_ns,
               imposed_wait_share, others_waiting_share
        FROM rank_skew_summary WHERE run_id = ? ORDER BY rank""",
            [run_id],
        )
    ]


def _step(con, run_id: str, phase: str | None) -> tuple[StepSection | None, list[QualityFlag]]:
    """The step section and the data-quality flags of the run and of that step (read while the step's
    views are scoped to it: a step flag reads the step's critical path, computed once)."""
    s = representative_step(con, run_id, phase)
    if s is None:
        return None, _quality(con, run_id, None)
    key = [run_id, s["rank"], s["step"]]
    with step_scope(con, key):
        section = _step_section(con, s, key)
        fill_step_path(con, key, section)
        return section, _quality(con, run_id, key)


def _step_section(con, s: dict, key: list) -> StepSection:
    wall = s["wall_ns"] or 1
    # the component summary (sql/step_components): attention, moe, gemm, communication, norm and `other`
    # as such, the remaining categories as one `rest (...)` row
    components = [
        CategoryRow(r["component"], int(r["gpu_time_ns"]), r["share_of_wall"])
        for r in _rows(
            con,
            """
        SELECT component, gpu_time_ns, share_of_wall FROM step_components WHERE run_id = ? AND rank = ? AND step = ?
        ORDER BY gpu_time_ns DESC, component""",
            key,
        )
    ]
    top_gap = _rows(
        con,
        """
        SELECT class, gap_start_ns AS start_ns, gap_end_ns AS end_ns, gap_ns, next_name, host_op, host_op_ns
        FROM idle_gaps
        WHERE run_id = ? AND rank = ? AND step = ? AND scope = 'device'
        ORDER BY gap_ns DESC, gap_start_ns LIMIT 1""",
        key,
    )
    streams = [
        StreamRow(**r)
        for r in _rows(
            con,
            """
        SELECT device, stream, stream_name AS name, activities, busy_ns, exclusive_ns, share_of_span,
               coalesce(is_critical, false) AS critical
        FROM stream_summary WHERE run_id = ? AND rank = ? AND step = ? ORDER BY busy_ns DESC, device, stream""",
            key,
        )
    ]
    critical_stream = next((st.stream for st in streams if st.critical), None)
    period = repeats = layer_span = total_layers = None
    layer: list[LayerPosition] = []
    found = _rows(
        con,
        "SELECT period, repeats, layer_span_ns, total_layers FROM layer_pattern_summary "
        "WHERE run_id = ? AND rank = ? AND step = ? AND is_main_stream",
        key,
    )
    if found and found[0]["period"]:
        period, repeats = found[0]["period"], found[0]["repeats"]
        layer_span, total_layers = found[0]["layer_span_ns"], found[0]["total_layers"]
        layer = [
            LayerPosition(**r)
            for r in _rows(
                con,
                """
            SELECT position, name, category, median_ns FROM layer_pattern
            WHERE run_id = ? AND rank = ? AND step = ? AND is_main_stream ORDER BY position""",
                key,
            )
        ]
    gaps = _rows(
        con,
        """
        SELECT class, count(*) AS gaps, sum(gap_ns) AS total_ns
        FROM idle_gaps WHERE run_id = ? AND rank = ? AND step = ? AND scope = 'device'
        GROUP BY class ORDER BY total_ns DESC, class""",
        key,
    )
    for g in gaps:
        g["share_of_wall"] = g["total_ns"] / wall
    path = [
        PathRow(**r)
        for r in _rows(
            con,
            """
        SELECT kind, category, time_ns, share FROM critical_path_summary
        WHERE run_id = ? AND rank = ? AND step = ? ORDER BY time_ns DESC, kind, category""",
            key,
        )
    ]
    critical_ids = {
        r[0]
        for r in con.execute(
            "SELECT kernel_id FROM critical_path WHERE run_id = ? AND rank = ? AND step = ? AND kind = 'gpu'",
            key,
        ).fetchall()
    }
    gap_spans = _rows(
        con,
        """
        SELECT class, gap_start_ns AS start_ns, gap_end_ns AS end_ns, next_name FROM idle_gaps
        WHERE run_id = ? AND rank = ? AND step = ? AND scope = 'device' AND class <> 'tiny'
        ORDER BY gap_ns DESC, gap_start_ns LIMIT 2000""",
        key,
    )
    path_segments = _rows(
        con,
        """
        SELECT kind, category, name, start_ns, start_ns + dur_ns AS end_ns FROM critical_path
        WHERE run_id = ? AND rank = ? AND step = ? ORDER BY seq LIMIT 4000""",
        key,
    )
    lanes = _lanes(con, key, streams, critical_ids, (s["wall_start_ns"], s["wall_end_ns"]))
    return StepSection(
        rank=s["rank"],
        step=s["step"],
        name=s["name"],
        phase=s["phase"],
        steps_in_run=s["steps_in_run"],
        wall_start_ns=s["wall_start_ns"],
        wall_end_ns=s["wall_end_ns"],
        largest_gap=top_gap[0] if top_gap else None,
        wall_ns=s["wall_ns"],
        host_setup_ns=s["host_setup_ns"],
        gpu_queued_ns=s["gpu_queued_ns"] or 0,
        compute_ns=s["compute_ns"],
        exposed_comm_ns=s["exposed_comm_ns"],
        exposed_memory_ns=s["exposed_memory_ns"],
        gpu_idle_ns=s["gpu_idle_ns"],
        host_tail_ns=s["host_tail_ns"],
        gpu_utilization=s["gpu_utilization"],
        other_steps_ns=s["other_steps_ns"],
        gpu_window_ns=s.get("gpu_window_ns"),
        activities=s["activities"],
        components=components,
        streams=streams,
        critical_stream=critical_stream,
        layer_period=period,
        layer_repeats=repeats,
        layer=layer,
        layer_span_ns=layer_span,
        total_layers=total_layers,
        gaps=gaps,
        critical_path=path,
        timeline=lanes,
        gap_spans=gap_spans,
        path_segments=path_segments,
    )


def _lanes(con, key: list, streams: list[StreamRow], critical_ids: set, wall: tuple) -> list[TimelineLane]:
    """The timeline's lanes, one per stream: the step's activities, and the other steps' activities that run
    on that stream inside the step's wall (a previous step's GPU work still running: not idle)."""
    lanes = []
    kept = reads_report_rows(con, "report_lanes", key[0], key[2])  # the step's rows, kept: report_lanes
    for stream in streams:
        if kept:
            sql = """
            SELECT kernel_id, name, category, start_ns, end_ns, activity_step AS step FROM report_lanes
            WHERE run_id = ? AND rank = ? AND step = ? AND stream IS NOT DISTINCT FROM ?
            ORDER BY start_ns, kernel_id LIMIT 8000"""
            params = key + [stream.stream]
        else:  # the same rows, computed over the whole run
            sql = """
            SELECT kernel_id, name, category, start_ns, end_ns, step FROM _kernel_facts
            WHERE run_id = ? AND rank = ? AND stream IS NOT DISTINCT FROM ?
              AND (step = ? OR (step IS DISTINCT FROM ? AND end_ns > ? AND start_ns < ?))
            ORDER BY start_ns, kernel_id LIMIT 8000"""
            params = key[:2] + [stream.stream, key[2], key[2], wall[0], wall[1]]
        rows = _rows(con, sql, params)
        acts = [
            TimelineActivity(
                r["name"], r["category"], r["start_ns"], r["end_ns"], r["kernel_id"] in critical_ids
            )
            for r in rows
            if r["step"] == key[2]
        ]
        others = [
            TimelineActivity(
                f"step {r['step']}: {r['name']}", r["category"], r["start_ns"], r["end_ns"], False
            )
            for r in rows
            if r["step"] != key[2]
        ]
        lanes.append(TimelineLane(stream.name or f"stream {stream.stream}", stream.critical, acts, others))
    return lanes


@dataclass(frozen=True)
class RunParams:
    """What `tracehouse report` asks for: a resolved run id, a phase, a graph-off mapping run."""

    run_id: str
    phase: str | None = None
    mapping_run: str | None = None


def build(con, params: RunParams) -> RunReport:
    """The run report's context (reports.render: every report is build(connection, params) -> context)."""
    return build_run_report(con, params.run_id, params.phase, params.mapping_run)


def render_run_report(report: RunReport, fmt: str, template_dir: str | Path | None = None) -> str:
    return render("run", report, fmt, template_dir, data=report_json(report) if fmt == "json" else None)


def report_json(report: RunReport) -> dict:
    """The JSON form: the same content as the Markdown and HTML (reports/run_report.schema.json)."""
    data = asdict(report)
    data["mode_note"] = report.mode_note
    if data.get("step"):
        for drawing in ("timeline", "gap_spans", "path_segments"):  # drawing data, not figures
            data["step"].pop(drawing, None)
    return data
