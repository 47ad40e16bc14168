"""Flow endpoints that tie: two runtime calls starting in the same microsecond on one thread."""

from __future__ import annotations

from pathlib import Path

from tracehouse.synth.situations import situation
from tracehouse.synth.situations.timeline import Timeline

US = 1_000
LAUNCHES = (
    600  # at 8 launches DuckDB's ASOF join happened to pick the launch; at 600 it picked the zero-length call
)


@situation(
    "flow-tie-zero-length-call",
    f"each of {LAUNCHES} kernel launches starts in the same microsecond as a zero-length "
    "cudaFuncSetAttribute on its thread (written before the launch for half of them, after it for the "
    "other half): every launch's CPU->GPU flow starts on the cudaLaunchKernel",
)
def flow_tie_zero_length_call(out: Path) -> dict:
    tl = Timeline()
    t = 10 * US
    tl.op("ProfilerStep#0", 0, (LAUNCHES + 1) * 40 * US, cat="user_annotation")
    for i in range(LAUNCHES):
        tl.op("aten::mm", t - 1 * US, t + 6 * US)
        if i % 2:
            tl.call("cudaFuncSetAttribute", t, t)
        tl.launch(f"gemm_kernel_{i % 4}", t, t + 20 * US, 8 * US)
        if not i % 2:
            tl.call("cudaFuncSetAttribute", t, t)
        t += 40 * US
    tl.write(out / "rank-0.pt.trace.json.gz")
    return {"launches": LAUNCHES, "flow_sources": {"cudaLaunchKernel": LAUNCHES}}
