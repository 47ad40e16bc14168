"""The run report's typed context (RunReport and its sections): what reports.run builds from the views and
the templates lay out; JSON is the same context as data."""

from __future__ import annotations

from dataclasses import dataclass, field

from tracehouse.reports.takeaways import FindingWindow, Takeaway, WithheldTakeaway


@dataclass
class KernelRow:
    name: str
    category: str
    gpu_time_ns: int
    share: float
    launches: int
    median_ns: float
    python_site: str | None
    python_site_share: float | None
    launch_call: str | None


@dataclass
class CategoryRow:
    category: str
    gpu_time_ns: int
    share: float


@dataclass
class PhaseSection:
    phase: str
    gpu_time_ns: int
    activities: int
    kernels: list[KernelRow]
    categories: list[CategoryRow]


@dataclass
class OverlapRow:
    phase: str
    name: str
    category: str
    share: float
    exclusive_ratio: float | None
    hidden_ratio: float | None
    verdict: str
    priority: str
    dependency_risk: str
    recommendation: str
    python_site: str | None
    # the report's step with this kernel 2x faster (WhatIfGain.text); None: not replayed
    gain: str | None = None
    fusion_pattern: str | None = None  # the fusion_match row behind "try fusion" (its pattern name)


@dataclass
class FusionRow:
    phase: str
    pattern_name: str
    framework: str
    status: str
    share: float | None
    occurrences: int
    evidence: str | None
    fused_kernel: str | None
    source_path: str | None
    python_site: str | None
    pattern_id: str | None = None
    # the report's step with the row's chains fused (WhatIfGain.text); None: not replayed
    gain: str | None = None


@dataclass
class WhatIfGain:
    """The report's step replayed with a category `speedup` times faster or a fusion row fused
    (warehouse.whatif.whatif_gains): its GPU span observed and predicted. Where sped-up collectives' peers
    are not all in the run (peers_missing > 0) and that changes the step (the two ends differ: the step if
    all of their time were waiting, and if all of it were transfer) there is no prediction (predicted_ns,
    change_ns, change_pct, path_changes None): the trace cannot tell their wait for a peer from their
    transfer."""

    kind: str  # category | kernel | fusion
    subject: str  # the category, the kernel name, or the fusion row's pattern_id
    speedup: float | None  # None for a fusion
    observed_ns: int
    predicted_ns: int | None
    change_ns: int | None
    change_pct: float | None
    path_changes: str | None
    peers_missing: int = 0  # sped-up communication activities of the step whose peers are not all in the run
    predicted_if_waiting_ns: int | None = None  # the step if all of their time were waiting for a peer
    predicted_if_transfer_ns: int | None = None  # the step if all of it were transfer

    @property
    def predicted(self) -> bool:
        """False where the peers missing from the run leave the step unknown (the two ends differ)."""
        return self.predicted_ns is not None and self.change_ns is not None

    @property
    def text(self) -> str:
        """'−1.234 ms of 25.000 ms, −4.9 %' (the change of the step time, of the observed step time); with
        peers missing, no prediction: 'not predicted, peers missing: ' and range_text."""
        if not self.predicted:
            return f"not predicted, peers missing: {self.range_text}"
        sign = _sign(self.change_ns)
        pct = f", {sign}{abs(self.change_pct):.1f} %" if self.change_pct is not None else ""
        return f"{sign}{abs(self.change_ns) / 1e6:.3f} ms of {self.observed_ns / 1e6:.3f} ms{pct}"

    @property
    def range_text(self) -> str:
        """The two ends where the step is not predicted: '±0.000 ms (all waiting) to −1.234 ms (all
        transfer) of 25.000 ms, ±0.0 to −4.9 %'."""
        obs = self.observed_ns
        ends = [
            (p if p is not None else obs) - obs
            for p in (self.predicted_if_waiting_ns, self.predicted_if_transfer_ns)
        ]
        ms = [f"{_sign(c)}{abs(c) / 1e6:.3f} ms" for c in ends]
        pct = [f"{_sign(c)}{abs(round(100.0 * c / obs, 2)):.1f}" for c in ends] if obs else []
        shares = f", {pct[0]} to {pct[1]} %" if pct else ""
        return f"{ms[0]} (all waiting) to {ms[1]} (all transfer) of {obs / 1e6:.3f} ms{shares}"


def _sign(change_ns: int) -> str:
    """− (the typographic minus), + or ± (no change)."""
    return "\u2212" if change_ns < 0 else ("+" if change_ns > 0 else "\u00b1")


@dataclass
class StreamRow:
    device: int | None
    stream: int | None
    name: str | None
    activities: int
    busy_ns: int
    exclusive_ns: int
    share_of_span: float | None
    critical: bool


@dataclass
class LayerPosition:
    position: int
    name: str
    category: str
    median_ns: float | None


@dataclass
class PathRow:
    kind: str
    category: str | None
    time_ns: int
    share: float


@dataclass
class ComponentPath:
    """A component's GPU time in the step, on the critical path and hidden beside it (sql/component_path)."""

    component: str
    gpu_time_ns: int
    share_of_wall: float | None
    path_ns: int | None
    path_share: float | None
    hidden_ns: int | None
    hidden_stream: int | None  # where most of the hidden time ran
    hidden_stream_ns: int | None


@dataclass
class PathComm:
    """The communication on the step's critical path split into waiting for peers and transfer
    (sql/path_comm_split), and the sentence the step section shows."""

    time_ns: int  # communication activities' time on the path
    wait_ns: int  # waiting for a later rank to arrive (instances matched on peer ranks of the run)
    transfer_ns: int  # after every rank had arrived
    unknown_ns: int  # instances no other rank of the run ran: waiting or transfer cannot be told
    waited_for: list[dict]  # {rank, wait_ns}: the ranks waited for, the longest wait first
    # instances whose group has ranks not in the run: the part after the last arrival in the run (waiting
    # for a rank not in the run, or transfer: cannot be told); their wait_ns counts the ranks in the run only
    open_ns: int = 0
    text: str = ""


@dataclass
class FamilyRow:
    """One kernel family on one stream in the step (sql/stream_families)."""

    family: str
    category: str
    calls: int
    time_ns: int
    share_of_wall: float | None
    share_of_stream: float | None


@dataclass
class StreamFamilies:
    """A stream of the step: its role against the critical path (sql/stream_path) and its kernel families,
    the largest first (the first `shown` of `families_total`)."""

    stream: int | None
    name: str | None
    role: str | None  # critical | parallel (None: the step has no path)
    activities: int
    gpu_ns: int
    path_ns: int | None
    hidden_ns: int | None
    families: list[FamilyRow]
    families_total: int


@dataclass
class LayerTime:
    """One layer on one stream (sql/layer_path): its wall on the stream, GPU time and time on the path."""

    layer: int
    span_ns: int
    gpu_ns: int
    path_ns: int | None
    path_share: float | None


@dataclass
class LayerStream:
    stream: int | None
    name: str | None
    role: str | None
    layers: list[LayerTime]


@dataclass
class StepPart:
    """setup, layers or tail of the step's wall, with the GPU's utilization in it (sql/step_parts)."""

    part: str
    start_ns: int
    dur_ns: int
    busy_ns: int
    comm_ns: int
    utilization: float | None


@dataclass
class SkewRow:
    rank: int
    instances: int
    times_last: int
    mean_start_lateness_ns: float | None
    wait_ns: int | None
    wait_share: float | None = None  # wait_ns / its collectives' time (rank_skew_summary)
    imposed_wait_ns: int | None = None  # the other ranks' wait for this one
    imposed_wait_share: float | None = None  # of all collective wait of the run
    others_waiting_share: float | None = None  # imposed_wait_ns / the other ranks' collective time


@dataclass
class TimelineActivity:
    name: str
    category: str
    start_ns: int
    end_ns: int
    critical: bool


@dataclass
class TimelineLane:
    label: str
    critical: bool
    activities: list[TimelineActivity]
    # other steps' activities on this stream inside the step's wall (drawn apart: not this step's, not idle)
    others: list[TimelineActivity] = field(default_factory=list)


@dataclass
class StepSection:
    rank: int
    step: int
    name: str
    phase: str
    steps_in_run: int
    wall_start_ns: int  # absolute ns, as in step_breakdown (the report's windows subtract trace_start_ns)
    wall_end_ns: int
    wall_ns: int
    host_setup_ns: int
    gpu_queued_ns: int  # before the first GPU activity, launched and waiting on the GPU (not host time)
    compute_ns: int
    exposed_comm_ns: int
    exposed_memory_ns: int
    gpu_idle_ns: int
    host_tail_ns: int
    gpu_utilization: float | None
    activities: int
    components: list[CategoryRow]  # GPU time per component as a share of the wall
    streams: list[StreamRow]
    critical_stream: int | None
    layer_period: int | None
    layer_repeats: int | None
    layer: list[LayerPosition]
    gaps: list[dict]  # per class: gaps, total_ns, share of wall
    critical_path: list[PathRow]
    timeline: list[TimelineLane]
    layer_span_ns: int | None = None  # median wall time of one layer (layer_pattern_summary.layer_span_ns)
    total_layers: int | None = None  # layers found in the step, every repeated block counted
    largest_gap: dict | None = (
        None  # the step's longest device gap: class, start_ns, end_ns, gap_ns, next_name
    )
    # inside the GPU span, the device busy with other steps' work only (steps that interleave): not idle
    other_steps_ns: int = 0
    # the step's GPU window (steps.gpu_window_ns: the end of the previous step's GPU work, or the step's
    # first GPU start, to its last GPU end), the span its GPU utilization is measured over
    gpu_window_ns: int | None = None
    window: FindingWindow | None = None  # the step (its breakdown, critical path), with its export command
    gap_window: FindingWindow | None = None  # the longest gap, with its export command
    # the step as the layers and the path show it (reports/step_path.py)
    path_components: list[ComponentPath] = field(default_factory=list)
    stream_families: list[StreamFamilies] = field(default_factory=list)
    layer_streams: list[LayerStream] = field(default_factory=list)
    parts: list[StepPart] = field(default_factory=list)
    path_comm: PathComm | None = None  # communication on the path: waiting for peers and transfer
    # drawing data of the HTML timeline (not figures: left out of the JSON, like timeline)
    gap_spans: list[dict] = field(default_factory=list)  # device gaps >= 1 µs: class, start_ns, end_ns
    path_segments: list[dict] = field(
        default_factory=list
    )  # critical path: kind, category, name, start_ns, end_ns


@dataclass
class QualityFlag:
    """One row of sql/data_quality: why some figures cannot be trusted as they stand."""

    flag: str
    severity: str  # error | warning | info
    rank: int | None
    step: int | None
    affects: list[str]
    evidence: dict[str, float]
    message: str
    where: FindingWindow | None = None  # its step's window (or the rank's, the run's) and export command


@dataclass
class RunReport:
    """Everything the run report shows; rendered as Markdown, HTML or JSON."""

    run_id: str
    mode: str  # single-trace | mapping/formal
    framework: str | None
    model: str | None
    hardware: str | None
    world_size: int | None
    n_ranks: int
    parallelism: str
    phase_filter: str | None
    capture_mode: str | None
    commit: str | None
    labels: dict[str, str]
    files: list[dict]
    warnings: dict[str, int]
    gpu_time_ns: int
    attributed_share: float | None  # GPU time with a Python launch site
    other_share: float | None
    phases: list[PhaseSection]
    overlap: list[OverlapRow]
    fusion: list[FusionRow]
    step: StepSection | None
    rank_skew: list[SkewRow]
    takeaways: list[Takeaway] = field(default_factory=list)
    mapping_run: str | None = None  # mapping/formal mode: Python locations come from this graph-off run
    quality: list[QualityFlag] = field(default_factory=list)  # sql/data_quality rows of the run and its step
    withheld: list[WithheldTakeaway] = field(default_factory=list)
    trace_start_ns: int | None = None  # the origin of every *_ns window of the report
    n_streams: int = 0  # streams that carry work (sql/stream_share: >= 1 % of the run's GPU time)
    serving: dict | None = None  # reports/serving.py: step time by batch size, roofline, collectives
    trace_file: str | None = None  # `report --with-trace`: the exported Perfetto file beside the report
    versions: str | None = None  # the framework's, runtime's and NCCL's versions the trace names (run_header)
    whatif: list[WhatIfGain] = field(default_factory=list)  # predicted gains on the report's step

    @property
    def mode_note(self) -> str:
        """What the mode means, and which rank the step figures are for."""
        note = (
            f"launch sites of graph replays from run `{self.mapping_run}`"
            if self.mapping_run
            else "every figure from this run's own trace(s)"
        )
        if self.n_ranks > 1:
            shown = f"rank {self.step.rank}" if self.step else "one rank"
            note += f"; {self.n_ranks} ranks: kernel tables sum all ranks, the step breakdown shows {shown}"
        return note

    def flags_for(self, *figures: str) -> list[QualityFlag]:
        """The flags that affect any of these figures (a flag on `x` covers `x.y`; a section `x` shows the
        flags of its columns `x.y`)."""

        def hit(a: str, f: str) -> bool:
            return a == f or f.startswith(a + ".") or a.startswith(f + ".")

        return [q for q in self.quality if any(hit(a, f) for a in q.affects for f in figures)]

    def notes_for(self, *figures: str) -> list[dict]:
        """flags_for, one note per flag: the places it holds merged ("ranks 0, 1"), its first message."""
        notes: dict[str, dict] = {}
        for q in self.flags_for(*figures):
            where = (
                "run"
                if q.rank is None
                else f"rank {q.rank}" + (f", step {q.step}" if q.step is not None else "")
            )
            if q.flag in notes:
                notes[q.flag]["where"].append(where)
            else:
                notes[q.flag] = {
                    "flag": q.flag,
                    "severity": q.severity,
                    "where": [where],
                    "message": q.message,
                }
        for n in notes.values():
            n["where"] = ", ".join(n["where"])
        return list(notes.values())

    def step_words(self, step: int, rank: int | None = None) -> str:
        """How a takeaway names a step: `step N`, or `the whole trace window` where the trace marks no step
        (the no_step_markers flag on that step: its one step is the whole profiled window, so a share "of
        step 0" would read as a per-iteration figure it is not)."""
        whole = any(
            q.flag == "no_step_markers" and q.step == step and (rank is None or q.rank in (None, rank))
            for q in self.quality
        )
        return "the whole trace window (no step markers)" if whole else f"step {step}"

    def phase_label(self, phase: str) -> str:
        """`unknown` is no heading: the whole run when it is the only phase, else the work outside the steps
        whose phase was found."""
        if phase != "unknown":
            return phase
        return "all GPU work (phase not detected)" if len(self.phases) <= 1 else "outside the detected phases"

    def flagged(self, figure: str) -> list[str]:
        """Names of the flags (warning or error) that make this figure untrustworthy: a flag on `x` covers
        `x.y` (not the other way: a flag on a column leaves the rest of the table standing)."""
        return sorted(
            {
                q.flag
                for q in self.quality
                if q.severity in ("error", "warning")
                and any(figure == a or figure.startswith(a + ".") for a in q.affects)
            }
        )
