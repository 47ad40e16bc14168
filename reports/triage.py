"""The triage view (`tracehouse report --format triage`): three Markdown tables per phase (kernels, overlap
opportunities, fuse opportunities) laid out as the public `llm-torch-profiler-analysis` skill prints its
"Triage View", so that a reader of the skill's output reads tracehouse's unchanged.

The layout is the skill's: the `Triage View` header lines, then `Kernel Table`, `Overlap Opportunity Table`
and `Fuse Opportunity Table`, each with one `##### <stage>` block per phase that has rows (no heading when the
only phase is the unknown one, the skill's `all`), the skill's column names and number formats (`2.42 ms`,
`24.9%`), and only rows at or above the reporting bar (report_params.report_bar: 1 %). The figures are
tracehouse's, read from the views (kernel_summary, kernel_site_summary, overlap_opportunity, fusion_match,
mapping_sites); where a definition differs from the skill's, docs/interpretation.md ("The triage view")
says how. `build` reads the figures into a typed context (TriageView); the template
reports/templates/triage.md.j2 lays out its tables.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tracehouse.reports.charts import md_cell
from tracehouse.reports.render import render_template
from tracehouse.reports.run import check_phase
from tracehouse.warehouse.engine import Connection, focused

from tracehouse.errors import TracehouseError

KERNEL_COLUMNS = (
    "Kernel",
    "Category",
    "GPU time",
    "Share",
    "Launches",
    "Python location (site share)",
    "CPU op",
)
OVERLAP_COLUMNS = (
    "Priority",
    "Verdict",
    "Kernel",
    "Python scope",
    "Formal signal",
    "Dep risk",
    "Recommendation",
)
FUSE_COLUMNS = (
    "Pattern",
    "Confidence",
    "Related GPU time",
    "Share",
    "Evidence kernels",
    "Current kernel Python location",
    "Candidate fused Python path",
    "Rationale",
)
KERNEL_ALIGN = ("---", "---", "---:", "---:", "---:", "---", "---")
OVERLAP_ALIGN = ("---",) * 7
FUSE_ALIGN = ("---", "---", "---:", "---:", "---", "---", "---", "---")

# the skill's stage names for our phases, in its order (extend/prefill, decode, then the rest; `all` last)
STAGE_LABELS = {"prefill": "extend/prefill", "decode": "decode", "mixed": "mixed", "unknown": "all"}
STAGE_ORDER = ("prefill", "decode", "mixed", "unknown")
FRAMEWORK_LABELS = {"sglang": "SGLang", "vllm": "vLLM", "tensorrt-llm": "TensorRT-LLM"}
# the two verdicts the skill's overlap table shows (ours also has `neutral` and `single-stream`)
OVERLAP_VERDICTS = ("headroom", "low-roi-hidden")
UNKNOWN = "-"


def gpu_time(ns: float) -> str:
    """A GPU time as the skill prints it: milliseconds with two decimals (`2.42 ms`)."""
    return f"{ns / 1e6:.2f} ms"


def percent(share: float | None) -> str:
    """A share (0..1) as the skill prints it: one decimal, no space (`24.9%`)."""
    return UNKNOWN if share is None else f"{100 * share:.1f}%"


def location(site: str | None) -> str:
    """Our launch site `file(line): function` in the skill's form `file:line function`; a site without a
    file (a bare frame name) as it is; no site: `unresolved`, the skill's word for it."""
    if not site:
        return "unresolved"
    where, sep, func = site.rpartition("): ")
    file, paren, line = where.rpartition("(")
    if not sep or not paren or not line.isdigit():
        return site
    return f"{file}:{line} {func}"


def fusion_location(site: str | None) -> str:
    """A launch site in the skill's fuse-table form `function @ file:line` (`-` when none)."""
    shown = location(site)
    if not site or shown == site:
        return site or UNKNOWN
    where, _, func = shown.partition(" ")
    return f"{func} @ {where}"


def joined(parts: list[str]) -> str:
    """Several values in one cell, as the skill joins them: escaped each, then `<br>` between."""
    return "<br>".join(md_cell(p) for p in parts) if parts else UNKNOWN


@dataclass
class TriageSite:
    """One launch site of a kernel: its share of the kernel's GPU time and the host op launching it."""

    site: str | None
    share: float | None
    cpu_op: str | None


@dataclass
class TriageKernel:
    """A kernel_summary row (at or above the bar) and its top two launch sites (kernel_site_summary)."""

    name: str
    category: str
    gpu_time_ns: int
    share: float
    launches: int
    sites: list[TriageSite] = field(default_factory=list)

    @property
    def cells(self) -> list[str]:
        where = [
            location(s.site)
            + (f" (site share {100 * s.share:.0f}%)" if s.share is not None and s.share < 1 else "")
            for s in self.sites
        ]
        ops = [s.cpu_op for s in self.sites if s.cpu_op]
        return [
            md_cell(self.name),
            md_cell(self.category),
            gpu_time(self.gpu_time_ns),
            percent(self.share),
            str(self.launches),
            joined(where) if where else "unresolved",
            joined(ops),
        ]


@dataclass
class TriageOverlap:
    """An overlap_opportunity row the skill's table would show: reportable, headroom or low-roi-hidden."""

    priority: str
    verdict: str
    name: str
    python_site: str | None
    gpu_time_ns: int
    share: float
    exclusive_ratio: float | None
    hidden_ratio: float | None
    dependency_risk: str
    recommendation: str

    @property
    def formal_signal(self) -> str:
        """The skill's `Formal signal`: total time in µs, share, exclusive and hidden shares of its time."""
        return (
            f"{self.gpu_time_ns / 1e3:.1f} us, share {100 * self.share:.1f}%, "
            f"excl {100 * (self.exclusive_ratio or 0):.1f}% / hid {100 * (self.hidden_ratio or 0):.1f}%"
        )

    @property
    def cells(self) -> list[str]:
        scope = location(self.python_site) if self.python_site else "unmapped"
        return [
            self.priority,
            self.verdict,
            md_cell(self.name),
            md_cell(scope),
            self.formal_signal,
            self.dependency_risk,
            self.recommendation,
        ]


@dataclass
class TriageFusion:
    """A fusion_match row at or above the bar; evidence kernels with their share of the phase."""

    pattern: str
    status: str
    related_gpu_time_ns: int
    share: float
    evidence: list[tuple[str, float]]
    python_site: str | None
    source_path: str | None
    rationale: str | None

    @property
    def cells(self) -> list[str]:
        paths = [p.strip() for p in (self.source_path or "").split(";") if p.strip()]
        return [
            md_cell(self.pattern),
            self.status,
            gpu_time(self.related_gpu_time_ns),
            percent(self.share),
            joined([f"{name} ({100 * share:.1f}%)" for name, share in self.evidence]),
            md_cell(fusion_location(self.python_site)),
            joined(paths),
            md_cell(self.rationale or UNKNOWN),
        ]


@dataclass
class TriageStage:
    """One phase's rows of the three tables."""

    phase: str
    kernels: list[TriageKernel]
    overlap: list[TriageOverlap]
    fusion: list[TriageFusion]

    @property
    def label(self) -> str:
        return STAGE_LABELS.get(self.phase, self.phase)


@dataclass
class TriageBlock:
    """A table's block of one stage: its heading (None: the skill prints none) and its rows' cells."""

    label: str | None
    rows: list[list[str]]


@dataclass
class TriageTable:
    title: str
    columns: tuple[str, ...]
    align: tuple[str, ...]
    blocks: list[TriageBlock]


@dataclass
class TriageView:
    """Everything `--format triage` prints."""

    run_id: str
    framework: str | None
    model: str | None
    files: list[str]
    bar: float
    stages: list[TriageStage]
    streams_with_work: int
    mapping_run: str | None = None
    mapping_files: list[str] = field(default_factory=list)

    @property
    def mode(self) -> str:
        return "mapping-formal" if self.mapping_run else "single-trace"

    @property
    def framework_label(self) -> str:
        return FRAMEWORK_LABELS.get(self.framework or "", self.framework or UNKNOWN)

    @property
    def tables(self) -> list[TriageTable]:
        bar = f"{100 * self.bar:.1f}%"
        no_overlap = (
            f"Only {self.streams_with_work} GPU stream carries work: nothing runs beside any kernel to overlap with."
            if self.streams_with_work <= 1
            else f"No headroom or low-roi-hidden kernel at or above {bar} share."
        )
        return [
            self._table(
                "Kernel Table", KERNEL_COLUMNS, KERNEL_ALIGN, "kernels", f"No kernel at or above {bar} share."
            ),
            TriageTable(
                "Overlap Opportunity Table",
                OVERLAP_COLUMNS,
                OVERLAP_ALIGN,
                self._blocks("overlap", [UNKNOWN, UNKNOWN, no_overlap] + [UNKNOWN] * 4),
            ),
            self._table(
                "Fuse Opportunity Table",
                FUSE_COLUMNS,
                FUSE_ALIGN,
                "fusion",
                f"No known fusion pattern at or above {bar} share has evidence in this run.",
            ),
        ]

    def _table(self, title, columns, align, rows: str, empty: str) -> TriageTable:
        return TriageTable(
            title, columns, align, self._blocks(rows, [empty] + [UNKNOWN] * (len(columns) - 1))
        )

    def _blocks(self, rows: str, empty: list[str]) -> list[TriageBlock]:
        """The stages with rows of this table, each a block; none: one block, the `empty` row, no heading.
        A single block of the unknown phase (the skill's `all`) has no heading either."""
        blocks = [
            TriageBlock(s.label, [r.cells for r in getattr(s, rows)]) for s in self.stages if getattr(s, rows)
        ]
        if not blocks:
            return [TriageBlock(None, [empty])]
        if len(blocks) == 1 and blocks[0].label == STAGE_LABELS["unknown"]:
            blocks[0].label = None
        return blocks


@dataclass(frozen=True)
class TriageParams:
    """What `tracehouse report --format triage` asks for: a resolved run id, a phase, a mapping run."""

    run_id: str
    phase: str | None = None
    mapping_run: str | None = None


def _rows(con, query: str, params: list) -> list[dict]:
    cursor = con.execute(query, params)
    columns = [d[0] for d in cursor.description]
    return [dict(zip(columns, row)) for row in cursor.fetchall()]


def build(con: Connection, params: TriageParams) -> TriageView:
    """The triage view's figures, computed for the run (and the mapping run) only."""
    if params.mapping_run == params.run_id:
        raise TracehouseError(
            f"--mapping names the run itself ({params.run_id})",
            hint="give a graph-off (eager) run of the same workload",
        )
    runs = [params.run_id] + ([params.mapping_run] if params.mapping_run else [])
    with focused(con, runs, compute_once=True) as on:
        return _build(on, params)


def _build(con, params: TriageParams) -> TriageView:
    run_id, phase, mapping_run = params.run_id, params.phase, params.mapping_run
    if phase:
        check_phase(con, run_id, phase)
    run = _rows(con, "SELECT framework, model, files FROM runs WHERE run_id = ?", [run_id])[0]
    bar = con.execute("SELECT report_bar FROM report_params").fetchone()[0]  # sql/report/report_params
    have = {
        r[0]
        for r in con.execute(
            "SELECT DISTINCT phase FROM kernel_summary WHERE run_id = ?", [run_id]
        ).fetchall()
    }
    phases = sorted((p for p in have if phase in (None, p)), key=_stage_key)
    mapped = _mapped_sites(con, run_id, mapping_run) if mapping_run else {}
    shares = {
        (r[0], r[1]): r[2]
        for r in con.execute(
            "SELECT phase, name, share FROM kernel_summary WHERE run_id = ?", [run_id]
        ).fetchall()
    }
    stages = [
        TriageStage(
            ph,
            _kernels(con, run_id, ph, bar, mapped),
            _overlap(con, run_id, ph, bar, mapped),
            _fusion(con, run_id, ph, bar, mapped, shares),
        )
        for ph in phases
    ]
    streams = int(
        con.execute(
            "SELECT count(*) FILTER (WHERE carries_work) FROM stream_share WHERE run_id = ?", [run_id]
        ).fetchone()[0]
        or 0
    )
    if streams <= 1:  # one stream carries work: no kernel has anything beside it (as the run report says)
        for stage in stages:
            stage.overlap = []
    mapping_files = []
    if mapping_run:
        found = _rows(con, "SELECT files FROM runs WHERE run_id = ?", [mapping_run])[0]
        mapping_files = _file_names(found["files"])
    return TriageView(
        run_id=run_id,
        framework=run["framework"],
        model=run["model"],
        files=_file_names(run["files"]),
        bar=float(bar),
        stages=stages,
        streams_with_work=streams,
        mapping_run=mapping_run,
        mapping_files=mapping_files,
    )


def _stage_key(phase: str) -> tuple[int, str]:
    return (STAGE_ORDER.index(phase) if phase in STAGE_ORDER else len(STAGE_ORDER), phase)


def _file_names(files) -> list[str]:
    return [f["name"] for f in (files or [])]


def _mapped_sites(con, run_id: str, mapping_run: str) -> dict[tuple[str, str], TriageSite]:
    """Mapping mode: (phase, name) -> the site mapping_sites borrows from the mapping run, its share of the
    kernel's GPU time, and the host op that launched the same kernel from that site in the mapping run."""
    ops = {}
    for name, site, op in con.execute(
        "SELECT name, site, cpu_op FROM kernel_site_summary WHERE run_id = ? AND site IS NOT NULL "
        "AND cpu_op IS NOT NULL ORDER BY gpu_time_ns DESC, phase",
        [mapping_run],
    ).fetchall():
        ops.setdefault((name, site), op)
    return {
        (r["phase"], r["name"]): TriageSite(r["site"], r["site_share"], ops.get((r["name"], r["site"])))
        for r in _rows(
            con,
            "SELECT phase, name, site, site_share FROM mapping_sites "
            "WHERE target_run = ? AND mapping_run = ? AND site IS NOT NULL",
            [run_id, mapping_run],
        )
    }


def _kernels(con, run_id: str, phase: str, bar: float, mapped: dict) -> list[TriageKernel]:
    kernels = [
        TriageKernel(**r)
        for r in _rows(
            con,
            """
        SELECT name, category, gpu_time_ns, share, launches FROM kernel_summary
        WHERE run_id = ? AND phase = ? AND share >= ? ORDER BY gpu_time_ns DESC, name""",
            [run_id, phase, bar],
        )
    ]
    sites: dict[str, list[TriageSite]] = {}
    for r in _rows(
        con,
        """
        SELECT name, site, site_share, coalesce(cpu_op, launch_call) AS cpu_op FROM kernel_site_summary
        WHERE run_id = ? AND phase = ? AND site_rank <= 2 ORDER BY name, site_rank""",
        [run_id, phase],
    ):
        sites.setdefault(r["name"], []).append(TriageSite(r["site"], r["site_share"], r["cpu_op"]))
    for k in kernels:
        k.gpu_time_ns = int(k.gpu_time_ns)
        borrowed = mapped.get((phase, k.name))
        k.sites = [borrowed] if borrowed else sites.get(k.name, [])
    return kernels


def _overlap(con, run_id: str, phase: str, bar: float, mapped: dict) -> list[TriageOverlap]:
    """The skill's rows: headroom first (most exclusive time first), then low-roi-hidden (most hidden time
    first); reportable rows of overlap_opportunity only (at or above the bar, not single-stream)."""
    rows = _rows(
        con,
        """
        SELECT priority, verdict, name, python_site, gpu_time_ns, share, exclusive_ratio, hidden_ratio,
               dependency_risk, recommendation
        FROM overlap_opportunity
        WHERE run_id = ? AND phase = ? AND reportable AND share >= ? AND verdict IN (?, ?)
        ORDER BY CASE verdict WHEN 'headroom' THEN 0 ELSE 1 END,
                 CASE verdict WHEN 'headroom' THEN exclusive_ns ELSE hidden_ns END DESC, name""",
        [run_id, phase, bar, *OVERLAP_VERDICTS],
    )
    found = []
    for r in rows:
        r["gpu_time_ns"] = int(r["gpu_time_ns"])
        borrowed = mapped.get((phase, r["name"]))
        if borrowed:
            r["python_site"] = borrowed.site
        found.append(TriageOverlap(**r))
    return found


def _fusion(con, run_id: str, phase: str, bar: float, mapped: dict, shares: dict) -> list[TriageFusion]:
    """fusion_match rows at or above the bar (framework rows of the run's framework, or generic ones), most
    related GPU time first; evidence kernels at or above the bar with their share of the phase."""
    rows = _rows(
        con,
        """
        SELECT pattern_name, status, related_gpu_time_ns, share, evidence_1, evidence_2, evidence_3,
               fused_kernel, python_site, source_path, rationale
        FROM fusion_match
        WHERE run_id = ? AND phase = ? AND coalesce(framework_match, true) AND share >= ?
        ORDER BY related_gpu_time_ns DESC, pattern_name, pattern_framework""",
        [run_id, phase, bar],
    )
    found = []
    for r in rows:
        names = (
            [r["fused_kernel"]]
            if r["status"] == "Fused"
            else [r["evidence_1"], r["evidence_2"], r["evidence_3"]]
        )
        evidence = [(n, shares[(phase, n)]) for n in names if n and shares.get((phase, n), 0) >= bar]
        borrowed = mapped.get((phase, names[0])) if names and names[0] else None
        found.append(
            TriageFusion(
                pattern=r["pattern_name"],
                status=r["status"],
                related_gpu_time_ns=int(r["related_gpu_time_ns"]),
                share=r["share"],
                evidence=evidence,
                python_site=borrowed.site if borrowed else r["python_site"],
                source_path=r["source_path"],
                rationale=r["rationale"],
            )
        )
    return found


def render_triage(view: TriageView, template_dir: str | Path | None = None) -> str:
    """The triage view as Markdown text (reports/templates/triage.md.j2, from template_dir first)."""
    return render_template("triage.md.j2", view, html=False, template_dir=template_dir)
