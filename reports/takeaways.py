"""Takeaways of the run report: short sentences chosen by rules from the report's figures.

Each rule reads the typed context, tests one threshold, and fills one fixed sentence; no free text.
The thresholds are named here so that a reader can see why a sentence appears.

Every takeaway carries its evidence (Takeaway): the figure it rests on (data_quality's figure
names), the value tested, the kernel / call / pattern / rank it names, and the time window in which a
reader can check it (ns from the trace's start). A rule whose figure is flagged by sql/data_quality (a
warning or an error on that figure) draws nothing: the report lists it as withheld, with the flags.

A rule whose advice depends on what bounds the step is also withheld where the step says the advice
would not pay, with the reason and its figures: overlapping kernels across streams shortens a step only
where the GPU is the bound, so in a host-bound step (GPU idle >= IDLE_BAR of the wall, and host-bound gaps
at least half of that idle time, the same test that names the idle takeaway's cause) the overlap rule is
withheld (synth/situations/takeaway_bounds.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from tracehouse.reports.names import short_name

EXPOSED_COMM_BAR = 0.15  # exposed communication as a share of the step's wall
IDLE_BAR = 0.20  # GPU idle inside the step's GPU span, as a share of the wall
HOST_SETUP_BAR = 0.20
DOMINANT_CATEGORY_BAR = 0.30
PHASE_BAR = 0.10  # a phase under this share of the run's GPU time draws no category takeaway
OTHER_BAR = 0.05
COVERAGE_BAR = 0.90
# the straggler: a rank that imposes at least half of all collective wait (rank_skew_summary.imposed_wait_share),
# and whose lateness matters: the others spend at least a quarter of their collective time waiting for it
# (others_waiting_share; synthesized runs without a straggler stay under 0.2, with one of 5-50 µs over 0.35)
STRAGGLER_WAIT_SHARE = 0.5
STRAGGLER_OTHERS_WAITING = 0.25
# what the GPU waited for, by the class of idle gap (sql/timeline/idle_gaps.sql) holding the most of the step's idle
# time: the idle takeaway names the largest one
IDLE_CAUSES = {
    "host_bound": "the host launching too late (host-bound gaps)",
    "sync_wait": "blocking synchronization (sync-wait gaps)",
    "other": "work already launched that started late (queued gaps: a dependency on another stream "
    "or rank, a graph replay's own pace, or no launch call in the trace)",
}


@dataclass
class FindingWindow:
    """Where a finding can be seen in the timeline: the rank (None: every rank), the step (None: not one
    step), start–end in the trace's own time base (absolute ns, as kernels.start_ns: the trace's `ts` × 1000),
    and the `tracehouse export` command that writes exactly that window (reports/export/)."""

    rank: int | None
    step: int | None
    start_ns: int | None
    end_ns: int | None
    command: str


@dataclass
class Takeaway:
    """A takeaway with the evidence a reader needs to check it: the figure it rests on, the kernel or call
    it names, and the time window (ns from the trace's start) in which to look."""

    text: str
    figure: str  # the report figure it is drawn from (data_quality's names)
    value: float | None  # the figure's value the rule tested
    subject: str | None  # the kernel, call, pattern or rank it names
    window_start_ns: int | None  # relative to the trace's start (runs.trace_start_ns)
    window_end_ns: int | None
    window_of: str  # what the window is: trace | step | setup (the step's host setup) | kernel | gap | call
    rank: int | None = None  # the rank the window is on (None: every rank)
    step: int | None = None  # the step it is about (None: not one step)
    where: FindingWindow | None = None  # the window in the trace's time base, and its export command


@dataclass
class WithheldTakeaway:
    """A takeaway rule that fired but is not drawn: its figure is flagged (`flags`), or the trace shows that
    its advice would not pay (`reason`, a sentence naming the figures it rests on; flags then empty)."""

    figure: str
    flags: list[str]
    reason: str | None = None


def export_command(
    run_id: str, rank: int | None, step: int | None, start: int | None, end: int | None
) -> str:
    """The command that exports exactly this window (a step's own window when it is the whole step)."""
    parts = ["tracehouse export", run_id[:16]]
    if rank is not None:
        parts.append(f"--rank {rank}")
    if start is not None and end is not None and end > start:
        parts.append(f"--window {start}:{end}")
        name = f"{run_id[:8]}-r{rank if rank is not None else 'all'}-{start}.pftrace"
    elif step is not None:
        parts.append(f"--step {step}")
        name = f"{run_id[:8]}-r{rank if rank is not None else 'all'}-step{step}.pftrace"
    else:
        name = f"{run_id[:8]}.pftrace"
    return " ".join(parts + ["-o", name])


# Ways to launch faster, by runs.framework: torch.compile only where PyTorch runs (a CUDA application's
# export, framework "cuda", gets the generic ones).
LAUNCH_REMEDIES = {
    fw: "CUDA graphs, torch.compile, less host work per step"
    for fw in ("pytorch", "sglang", "vllm", "tensorrt-llm")
}


# what the host did before a step's first GPU activity, by the host range that covers most of the gap
# that activity ends (idle_gaps.host_op): the remedy for that kind of host work; first match wins
SETUP_REMEDIES = (
    (
        "DataLoader",
        (
            "load batches in DataLoader worker processes (num_workers > 0, pin_memory=True) so the next "
            "batch is ready when the step starts"
        ),
    ),
)
SETUP_REMEDY = "overlap the next step's preparation or capture it in the graph"


def host_setup_cause(s) -> tuple[str, str]:
    """(what the host did during the step's host setup, the remedy for it): the longest gap of the step,
    where it is host-bound and ends at the step's first GPU activity, names the host range that covered
    most of it (idle_gaps.host_op, e.g. the DataLoader's __next__); else nothing, and the generic remedy."""
    gap = s.largest_gap
    first_gpu_ns = s.wall_start_ns + s.host_setup_ns + s.gpu_queued_ns
    if (
        not gap
        or gap.get("class") != "host_bound"
        or not gap.get("host_op")
        or not gap.get("host_op_ns")
        or gap["host_op"] == s.name
        or not (s.wall_start_ns < gap["end_ns"] <= first_gpu_ns)
    ):
        return "", SETUP_REMEDY
    remedy = next((text for key, text in SETUP_REMEDIES if key in gap["host_op"]), SETUP_REMEDY)
    return f", the host in {gap['host_op'][:60]} for {gap['host_op_ns'] / 1e6:.3f} ms", remedy


@dataclass
class _Draft:
    """What a rule found: a takeaway before its figure's flags are checked (takeaways())."""

    figure: str
    text: str
    value: float | None
    subject: str | None
    window: tuple[int | None, int | None]
    window_of: str

    def takeaway(self, r) -> Takeaway:
        # the step's windows (step, its gap, its host setup) are on the step's rank; kernel and trace windows
        # span every rank
        on_step = self.window_of in ("step", "setup", "gap") and r.step is not None
        return Takeaway(
            self.text,
            self.figure,
            self.value,
            self.subject,
            self.window[0],
            self.window[1],
            self.window_of,
            rank=r.step.rank if on_step else None,
            step=r.step.step if on_step else None,
        )


def _timed_step(r):
    """The report's step when it has a wall to take shares of, else None (the step rules then draw nothing)."""
    s = r.step
    return s if s is not None and s.wall_ns else None


def _step_window(s, windows) -> tuple[int | None, int | None]:
    return windows.rel(s.wall_start_ns), windows.rel(s.wall_end_ns)


def host_bound_idle(r) -> float | None:
    """The step's GPU idle share when the step is host-bound (idle >= IDLE_BAR of the wall and host-bound gaps
    at least half of the idle time, its idle gaps not flagged), else None."""
    s = _timed_step(r)
    if s is None:
        return None
    host = sum(g["total_ns"] for g in s.gaps if g["class"] == "host_bound")
    if s.gpu_idle_ns / s.wall_ns >= IDLE_BAR and host >= 0.5 * s.gpu_idle_ns and not r.flagged("idle_gaps"):
        return s.gpu_idle_ns / s.wall_ns
    return None


def missing_ranks(r, rank: int) -> tuple[int, list[str]]:
    """With one rank (or some) of a larger world in the run: the ranks present and the ranks (up to 8, then
    "...") whose traces would tell waiting for a peer from transfer."""
    present = {f["rank"] for f in r.files if f.get("rank") is not None} or {rank}
    if not r.world_size or r.world_size <= len(present):
        return len(present), []
    missing = [str(x) for x in range(r.world_size) if x not in present]
    return len(present), missing[:8] + (["..."] if len(missing) > 8 else [])


def _peer_wait(r, rank: int) -> str:
    """How much of the rank's collective time is waiting for a peer (rank_skew_summary: against the ranks in
    the run, so at least that much where ranks of the world are missing), or, with one rank of a larger
    world in the run, that it may be; and which ranks would tell."""
    row = next((x for x in r.rank_skew if x.rank == rank), None)
    present, missing = missing_ranks(r, rank)
    if len(r.rank_skew) > 1 and row is not None and row.wait_share is not None:
        straggler = next((x for x in r.rank_skew if x.rank != rank and _is_straggler(x)), None)
        by = f", mostly for rank {straggler.rank}" if straggler else ""
        share = f"{100 * row.wait_share:.0f} % of rank {rank}'s collective time over the run"
        if missing:  # waiting for the ranks in the run only: the rest may be waiting for the others
            return (
                f"; at least {share} is waiting for peers to arrive{by}; with {present} of {r.world_size} "
                f"ranks in the run the rest may be waiting for a rank not in the run, not transfer: ingest "
                f"ranks {', '.join(missing)} with it to tell"
            )
        return f"; {share} is waiting for peers to arrive{by}, the rest transfer"
    if missing:
        return (
            f"; with {present} of {r.world_size} ranks in the run it may be waiting for a peer, "
            f"not transfer: ingest ranks {', '.join(missing)} with it to tell"
        )
    return ""


def exposed_comm_rule(r, windows) -> _Draft | None:
    """Exposed communication >= EXPOSED_COMM_BAR of the step's wall."""
    s = _timed_step(r)
    if s is None or s.exposed_comm_ns / s.wall_ns < EXPOSED_COMM_BAR:
        return None
    comm = next((c.share for c in s.components if c.category == "communication"), 0.0)
    exposed = s.exposed_comm_ns / s.wall_ns
    critical = any(
        p.kind == "gpu" and p.category == "communication" and p.share >= 0.1 for p in s.critical_path
    )
    where = " and sits on the critical stream" if critical and not r.flagged("critical_path") else ""
    return _Draft(
        "step_breakdown.exposed_comm",
        f"Communication is {100 * comm:.0f} % of the wall of {r.step_words(s.step, s.rank)} in GPU time; "
        f"{100 * exposed:.0f} % of that wall is exposed communication{where}{_peer_wait(r, s.rank)}.",
        exposed,
        s.name,
        _step_window(s, windows),
        "step",
    )


def _idle_cause(s) -> str:
    """What the GPU waited for: the class of idle gap holding the most of the step's idle time (IDLE_CAUSES)."""
    largest = max(
        (g for g in s.gaps if g["class"] in IDLE_CAUSES), key=lambda g: g["total_ns"], default={"class": None}
    )
    return IDLE_CAUSES.get(largest["class"], "a cause the idle gaps do not show")


def idle_rule(r, windows) -> _Draft | None:
    """GPU idle >= IDLE_BAR of the step's wall: its main cause and the longest gap (the window, when known)."""
    s = _timed_step(r)
    if s is None or s.gpu_idle_ns / s.wall_ns < IDLE_BAR:
        return None
    idle = s.gpu_idle_ns / s.wall_ns
    gap = s.largest_gap
    detail = ""
    window, window_of = _step_window(s, windows), "step"
    if gap:
        host_op = (
            f", the host in {gap['host_op'][:60]} for {gap['host_op_ns'] / 1e6:.3f} ms"
            if gap.get("host_op") and gap.get("host_op_ns") and gap["host_op"] != s.name
            else ""
        )
        detail = (
            f"; the longest gap ({gap['class']}, {gap['gap_ns'] / 1e6:.3f} ms{host_op}) ends at "
            f"{short_name(gap['next_name'], 60) or '?'}"
        )
        window, window_of = (windows.rel(gap["start_ns"]), windows.rel(gap["end_ns"])), "gap"
    return _Draft(
        "idle_gaps",
        f"The GPU idles {100 * idle:.0f} % of {r.step_words(s.step, s.rank)}, mostly waiting for {_idle_cause(s)}{detail}.",
        idle,
        gap["next_name"] if gap else None,
        window,
        window_of,
    )


def host_setup_rule(r, windows) -> _Draft | None:
    """Host setup before the step's first GPU activity >= HOST_SETUP_BAR of its wall, with its remedy."""
    s = _timed_step(r)
    if s is None or s.host_setup_ns / s.wall_ns < HOST_SETUP_BAR:
        return None
    doing, remedy = host_setup_cause(s)
    return _Draft(
        "step_breakdown.host_setup",
        f"Host setup before the first GPU activity takes {100 * s.host_setup_ns / s.wall_ns:.0f} % "
        f"of {r.step_words(s.step, s.rank)}{doing}: {remedy}.",
        s.host_setup_ns / s.wall_ns,
        s.name,
        (windows.rel(s.wall_start_ns), windows.rel(s.wall_start_ns + s.host_setup_ns)),
        "setup",
    )


def _of_gpu_span(r) -> str:
    """What a what-if gain is a share of: the GPU span of the report's step (first to last GPU activity),
    which a host-bound step's wall exceeds, so the two never read as the same "step"."""
    return f"of the GPU span of {r.step_words(r.step.step, r.step.rank)}"


def gain_words(r, gain) -> str:
    """A what-if gain as a takeaway says it: 'moe 2× faster: −0.067 ms of 0.515 ms, −13.0 % of the GPU span
    of step N (what-if)'; where sped-up collectives' peers are missing from the run, that it is not
    predicted, why, and the two ends (WhatIfGain)."""
    head = f"{gain.subject} {gain.speedup:g}\u00d7 faster"
    if gain.predicted:
        return f"{head}: {gain.text} {_of_gpu_span(r)} (what-if)"
    present, missing = missing_ranks(r, r.step.rank)
    if missing:
        why = f"with {present} of {r.world_size} ranks in the run"
    elif present <= 1:
        why = "with no peer rank in the run"
    else:
        why = f"{gain.peers_missing} of its collectives not found on every rank of their group"
    tell = f"; ingest ranks {', '.join(missing)} with it to tell" if missing else ""
    return (
        f"{head}: not predicted ({why}, the trace cannot tell how much of its collectives' time is waiting "
        f"for a peer, which a faster transfer does not shorten): {gain.range_text}, {_of_gpu_span(r)} "
        f"(what-if{tell})"
    )


def category_gain(r, category: str):
    """The report's what-if gain (reports/gains.py) for this category on its step, else None."""
    return next((g for g in r.whatif if g.kind == "category" and g.subject == category), None)


def dominant_category_rule(r, windows, phase) -> _Draft | None:
    """In a phase of at least PHASE_BAR of the run's GPU time (a sliver, such as a kernel outside the steps,
    is no phase to draw a lesson from), its largest known category (not `other`), when >= DOMINANT_CATEGORY_BAR
    of its GPU time."""
    if phase.gpu_time_ns < PHASE_BAR * (r.gpu_time_ns or 1):
        return None
    # `other` (kernels no rule knows) is no category to draw a lesson from: other_category_rule says how much
    # is unknown; this rule names the largest known category
    top = next((c for c in phase.categories if c.category != "other"), None)
    if top is None or top.share < DOMINANT_CATEGORY_BAR:
        return None
    kernel = next((k for k in phase.kernels if k.category == top.category), None)
    detail = (
        f"; its largest kernel is {short_name(kernel.name, 80)} ({100 * kernel.share:.1f} %)"
        if kernel
        else ""
    )
    gain = category_gain(r, top.category) if r.step is not None and r.step.phase == phase.phase else None
    if gain is not None:
        detail += f"; {gain_words(r, gain)}"
    return _Draft(
        "category_summary",
        f"{r.phase_label(phase.phase)}: {top.category} is {100 * top.share:.0f} % of GPU time{detail}.",
        top.share,
        kernel.name if kernel else None,
        windows.kernel(kernel.name) if kernel else windows.trace(),
        "kernel" if kernel else "trace",
    )


def dominant_category_rules(r, windows) -> list[_Draft | None]:
    return [dominant_category_rule(r, windows, phase) for phase in r.phases]


def fusion_rule(r, windows) -> _Draft | None:
    """Known fusions that apply directly (status Confirmed)."""
    confirmed = [f for f in r.fusion if f.status == "Confirmed"]
    if not confirmed:
        return None
    share = sum(f.share or 0 for f in confirmed)
    gained = next((f for f in confirmed if f.gain), None)
    gain = (
        f" Fusing {gained.pattern_name}: {gained.gain} {_of_gpu_span(r)} (what-if)."
        if gained and r.step
        else ""
    )
    return _Draft(
        "fusion_match",
        f"{len(confirmed)} known fusion(s) apply directly (split kernels adjacent on one stream) and "
        f"would remove up to {100 * share:.1f} % of GPU time: {', '.join(f.pattern_name for f in confirmed[:3])}.{gain}",
        share,
        ", ".join(f.pattern_name for f in confirmed[:3]),
        windows.trace(),
        "trace",
    )


def overlap_rule(r, windows) -> _Draft | WithheldTakeaway | None:
    """Kernels with overlap headroom, on a run of several streams (with one stream, nothing runs beside any
    kernel: "runs alone" is true of all of them and says nothing); withheld with its reason in a host-bound
    step (host_bound_idle), where overlapping would not shorten it."""
    headroom = [o for o in r.overlap if o.verdict == "headroom" and o.recommendation == "try overlap"]
    if not headroom or r.n_streams <= 1:
        return None
    bound = host_bound_idle(r)
    if bound is not None and not r.flagged("overlap_opportunity"):
        return WithheldTakeaway(
            "overlap_opportunity",
            [],
            (
                f"step {r.step.step} is host-bound: the GPU idles {100 * bound:.0f} % of it waiting for launches "
                f"(idle_gaps), so overlapping the {len(headroom)} kernel(s) that run alone would not shorten it; "
                f"launch faster first ({LAUNCH_REMEDIES.get(r.framework, 'CUDA graphs, less host work per step')})"
            ),
        )
    return _Draft(
        "overlap_opportunity",
        f"{len(headroom)} kernel(s) above the 1 % bar run mostly alone and could overlap "
        f"with other streams, the largest {short_name(headroom[0].name, 60)} ({100 * headroom[0].share:.1f} %).",
        headroom[0].share,
        headroom[0].name,
        windows.kernel(headroom[0].name),
        "kernel",
    )


def other_category_rule(r, windows) -> _Draft | None:
    """More than OTHER_BAR of GPU time in kernels no category rule knows."""
    if r.other_share is None or r.other_share <= OTHER_BAR:
        return None
    kernel = next((k for p in r.phases for k in p.kernels if k.category == "other"), None)
    return _Draft(
        "category_summary",
        f"{100 * r.other_share:.1f} % of GPU time is in kernels no category rule knows "
        f"(`other`){', the largest ' + short_name(kernel.name, 60) if kernel else ''}: extend the rule table "
        "(sql/rules/kernel_categories.csv or a user file).",
        r.other_share,
        kernel.name if kernel else None,
        windows.kernel(kernel.name) if kernel else windows.trace(),
        "kernel" if kernel else "trace",
    )


def launch_site_rule(r, windows) -> _Draft | None:
    """Less than COVERAGE_BAR of GPU time with a Python launch site. The whole-trace causes (no stacks at all,
    replays without captures) are flags that withhold this; what remains is a part of the launches without a
    frame."""
    if r.attributed_share is None or r.attributed_share >= COVERAGE_BAR:
        return None
    fix = (
        "pass capture traces (--capture) for the graph replays"
        if r.capture_mode in ("graph", "mixed")
        else "the rest was launched outside any recorded Python frame (another thread, the autograd "
        "engine or C++ code): its launch call and cpu op are its best site"
    )
    return _Draft(
        "launch_sites",
        f"Only {100 * r.attributed_share:.0f} % of GPU time has a Python launch site; {fix}.",
        r.attributed_share,
        None,
        windows.trace(),
        "trace",
    )


def _is_straggler(row) -> bool:
    """The rank the others wait for, and long enough to matter (STRAGGLER_WAIT_SHARE, STRAGGLER_OTHERS_WAITING)."""
    imposed, others = row.imposed_wait_share or 0.0, row.others_waiting_share or 0.0
    return imposed >= STRAGGLER_WAIT_SHARE and others >= STRAGGLER_OTHERS_WAITING


def straggler_rule(r, windows, row) -> _Draft | None:
    """A rank (of several) that the others wait for (_is_straggler), named with its share of all wait."""
    if len(r.rank_skew) <= 1 or not _is_straggler(row):
        return None
    last = row.times_last / row.instances
    text = (
        f"Rank {row.rank} imposes {100 * row.imposed_wait_share:.0f} % of all collective wait: the other "
        f"ranks waited {row.imposed_wait_ns / 1e6:.3f} ms for it, {100 * row.others_waiting_share:.0f} % of "
        f"their collective time (it arrived last at {100 * last:.0f} % of {row.instances} collectives). It is "
        "the straggler: the others' exposed communication is mostly waiting for it; look at what it runs "
        "before its collectives."
    )
    return _Draft(
        "rank_skew_summary.imposed_wait_share",
        text,
        row.imposed_wait_share,
        f"rank {row.rank}",
        windows.trace(),
        "trace",
    )


def straggler_rules(r, windows) -> list[_Draft | None]:
    return [straggler_rule(r, windows, row) for row in r.rank_skew]


# The rules in the order their takeaways are listed: each reads the report's figures (r, reports.run) and
# returns a draft, a withheld rule, None, or a list of those (a rule applied per phase or per rank)
RULES = (
    straggler_rules,
    exposed_comm_rule,
    idle_rule,
    host_setup_rule,
    dominant_category_rules,
    fusion_rule,
    overlap_rule,
    other_category_rule,
    launch_site_rule,
)


def takeaways(r, windows) -> tuple[list, list]:
    """(takeaways drawn, rules withheld because their figure is flagged or their advice would not pay).
    `windows` (reports.run._Windows) places a kernel or the trace in time."""
    out: list[Takeaway] = []
    withheld: list[WithheldTakeaway] = []
    for rule in RULES:
        found = rule(r, windows)
        for item in found if isinstance(found, list) else [found]:
            if item is None:
                continue
            if isinstance(item, WithheldTakeaway):
                withheld.append(item)
                continue
            flags = r.flagged(item.figure)
            if not flags:
                out.append(item.takeaway(r))
            elif not any(w.figure == item.figure for w in withheld):
                withheld.append(WithheldTakeaway(item.figure, flags))
    return out, withheld
