"""Takeaways of the run report: short sentences chosen by rules from the report's figures.

Each rule reads the typed context, tests one threshold, and fills one fixed sentence; no free text.
The thresholds are named here so that a reader can see why a sentence appears.
"""

from __future__ import annotations

EXPOSED_COMM_BAR = 0.15  # exposed communication as a share of the step's wall
IDLE_BAR = 0.20  # GPU idle inside the step's GPU span, as a share of the wall
HOST_SETUP_BAR = 0.20
DOMINANT_CATEGORY_BAR = 0.30
OTHER_BAR = 0.05
COVERAGE_BAR = 0.90
STRAGGLER_BAR = 0.75  # a rank that arrives last at this share of the collectives


def takeaways(r) -> list[str]:
    out: list[str] = []
    s = r.step
    if s is not None and s.wall_ns:
        comm = next((c.share for c in s.components if c.category == "communication"), 0.0)
        exposed = s.exposed_comm_ns / s.wall_ns
        if exposed >= EXPOSED_COMM_BAR:
            where = " and sits on the critical stream" if any(
                p.kind == "gpu" and p.category == "communication" and p.share >= 0.1 for p in s.critical_path) else ""
            out.append(f"Communication is {100 * comm:.0f} % of the step's wall in GPU time; {100 * exposed:.0f} % "
                       f"of the wall is exposed communication{where}.")
        idle = s.gpu_idle_ns / s.wall_ns
        if idle >= IDLE_BAR:
            host = sum(g["total_ns"] for g in s.gaps if g["class"] == "host_bound")
            cause = "the host launching too late (host-bound gaps)" if host >= 0.5 * s.gpu_idle_ns else "dependencies and syncs"
            out.append(f"The GPU idles {100 * idle:.0f} % of the step, mostly waiting for {cause}.")
        if s.host_setup_ns / s.wall_ns >= HOST_SETUP_BAR:
            out.append(f"Host setup before the first GPU activity takes {100 * s.host_setup_ns / s.wall_ns:.0f} % "
                       "of the step: overlap the next step's preparation or capture it in the graph.")
    for phase in r.phases:
        if phase.categories and phase.categories[0].share >= DOMINANT_CATEGORY_BAR:
            top = phase.categories[0]
            kernel = next((k for k in phase.kernels if k.category == top.category), None)
            detail = f"; its largest kernel is {kernel.name[:80]} ({100 * kernel.share:.1f} %)" if kernel else ""
            out.append(f"{phase.phase}: {top.category} is {100 * top.share:.0f} % of GPU time{detail}.")
    confirmed = [f for f in r.fusion if f.status == "Confirmed"]
    if confirmed:
        share = sum(f.share or 0 for f in confirmed)
        out.append(f"{len(confirmed)} known fusion(s) apply directly (split kernels adjacent on one stream), "
                   f"covering {100 * share:.1f} % of GPU time: {', '.join(f.pattern_name for f in confirmed[:3])}.")
    headroom = [o for o in r.overlap if o.verdict == "headroom" and o.recommendation == "try overlap"]
    if headroom:
        out.append(f"{len(headroom)} kernel(s) above the 1 % bar run mostly alone and could overlap with other "
                   f"streams, the largest {headroom[0].name[:60]} ({100 * headroom[0].share:.1f} %).")
    if r.other_share is not None and r.other_share > OTHER_BAR:
        out.append(f"{100 * r.other_share:.1f} % of GPU time is in kernels no category rule knows: extend the "
                   "rule table (sql/rules/kernel_categories.csv or a user file).")
    if r.attributed_share is not None and r.attributed_share < COVERAGE_BAR:
        out.append(f"Only {100 * r.attributed_share:.0f} % of GPU time has a Python launch site; pass capture "
                   "traces (--capture) to attribute CUDA-graph replays.")
    for row in r.rank_skew:
        if row.instances and row.times_last / row.instances >= STRAGGLER_BAR and len(r.rank_skew) > 1:
            out.append(f"Rank {row.rank} arrives last at {100 * row.times_last / row.instances:.0f} % of the "
                       "collectives: it is the straggler.")
    return out
