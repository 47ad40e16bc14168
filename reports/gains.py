"""The report's predicted gains (warehouse.whatif.whatif_gains) on its step: the step's largest categories
and the overlap rows' kernels GAIN_SPEEDUP times faster, and each fusion row that is not fused yet replayed
as fused. The takeaways, the overlap table and the fusion table carry them ("moe 2× faster: −0.067 ms of
0.515 ms, −13.0 %"): a kernel hidden beside other streams gains nothing, one on the path gains."""

from __future__ import annotations

from tracehouse.reports.run_model import RunReport, WhatIfGain
from tracehouse.warehouse.whatif import whatif_gains

GAIN_SPEEDUP = 2.0
#: categories replayed: those of at least this share of the step phase's GPU time, at most GAIN_CATEGORIES
GAIN_SHARE = 0.05
GAIN_CATEGORIES = 5
#: overlap rows replayed (their kernel GAIN_SPEEDUP times faster): the first GAIN_KERNELS of the step's phase
GAIN_KERNELS = 12


def add_gains(con, report: RunReport) -> None:
    """Fill report.whatif and the fusion rows' gain for the report's step (nothing without a step)."""
    s = report.step
    if s is None:
        return
    phase = next((p for p in report.phases if p.phase == s.phase), None)
    categories = [c.category for c in (phase.categories if phase else []) if c.share >= GAIN_SHARE]
    fusions = [
        f.pattern_id for f in report.fusion if f.status != "Fused" and f.phase == s.phase and f.pattern_id
    ]
    kernels = [o.name for o in report.overlap if o.phase == s.phase][:GAIN_KERNELS]
    rows = whatif_gains(
        con,
        report.run_id,
        s.rank,
        s.step,
        categories[:GAIN_CATEGORIES],
        list(dict.fromkeys(fusions)),
        list(dict.fromkeys(kernels)),
        GAIN_SPEEDUP,
    )
    report.whatif = [WhatIfGain(**r) for r in rows]
    gains = {(g.kind, g.subject): g for g in report.whatif}
    for f in report.fusion:
        g = gains.get(("fusion", f.pattern_id)) if f.phase == s.phase else None
        f.gain = g.text if g else None
    for o in report.overlap:
        g = gains.get(("kernel", o.name)) if o.phase == s.phase else None
        o.gain = g.text if g else None
