"""What bounds the step decides which takeaways hold: overlap saves time only where the GPU is the bound.

A real eager training trace (two streams: compute and NCCL) had the GPU idle 75 % of its step, waiting for
the host, and the report still said "7 kernels run mostly alone and could overlap with other streams". In
a host-bound step, moving a kernel beside another stream's work does not end the step sooner: the GPU
would only wait longer for the next launch. The overlap rows are still true (the kernel ran alone); the
*recommendation* drawn from them is not. These two situations have the same kernels on the same two
streams; only the host's pace differs:

- `overlap-host-bound`: the host launches a kernel every 200 us, each runs 40 us, so the GPU idles ~80 %
  of each step, all of it host-bound. The idle takeaway is drawn; the overlap takeaway is withheld, with
  the reason (host-bound step) and the figures it rests on.
- `overlap-gpu-bound`: the host launches far ahead (every 8 us), the GPU runs the kernels back to back,
  and the overlap takeaway is drawn, naming the largest kernel that runs alone.

Both: 3 ProfilerSteps; per step, 8 kernels on stream 7 alternating a GEMM (40 us) and a layer norm
(20 us): neighbours of another category and no producer -> consumer pair between them (gemm -> norm is
none in sql/timeline/overlap_opportunity.sql), so the GEMM's dependency risk is `low`; one 10 us NCCL all-reduce
on stream 20 at the step's start, so the device has a second stream. The GEMM is 4 x 40 of 4 x 60 + 10
us = 64 % of the step's GPU time and at least 75 % exclusive: verdict headroom, `try overlap`.
"""

from __future__ import annotations

from pathlib import Path

from . import situation
from .timeline import Timeline

US = 1_000

GEMM = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_tn"
NORM = (
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float)"
)
NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


def _steps(tl: Timeline, launch_every: int) -> dict:
    """3 steps of 8 alternating GEMM / norm launches `launch_every` ns apart, plus one all-reduce on a side
    stream; a kernel starts 10 us after its launch call or when its stream is free, whichever is later.
    Returns the GPU idle and wall of each step (ns)."""
    t = 0
    steps = []
    for step in range(3):
        s0 = t
        host = s0 + 20 * US
        tl.launch(NCCL, host - 10 * US, host, 10 * US, stream=20)
        free = host
        busy = 10 * US
        for i in range(8):
            dur = 40 * US if i % 2 == 0 else 20 * US
            op = tl.op("aten::mm" if i % 2 == 0 else "aten::layer_norm", host, host + 6 * US)
            start = max(host + 10 * US, free)
            tl.launch(GEMM if i % 2 == 0 else NORM, op.start + 1 * US, start, dur, stream=7)
            free = start + dur
            busy += dur
            host += launch_every
        end = free + 10 * US
        tl.op(f"ProfilerStep#{step}", s0, end, cat="user_annotation")
        steps.append({"wall_ns": end - s0})
        t = end + 10 * US
    return {"steps": steps}


@situation(
    "overlap-host-bound",
    "two streams, kernels that run alone on the compute stream, but the host launches one every 200 us "
    "for 40 us of work: the step is host-bound, so the report must not recommend overlapping them",
)
def overlap_host_bound(out: Path) -> dict:
    tl = Timeline()
    _steps(tl, 200 * US)
    tl.write(out / "rank-0.pt.trace.json.gz")
    return {
        "drawn": ["idle_gaps"],
        "not_drawn": ["overlap_opportunity"],
        "withheld_reasons": {"overlap_opportunity": "host_bound"},
        "overlap_row": {"name": GEMM, "verdict": "headroom", "recommendation": "try overlap"},
    }


@situation(
    "overlap-gpu-bound",
    "the same kernels on the same two streams, launched far ahead of the GPU: the step is GPU-bound and "
    "the GEMM that runs alone is a real overlap opportunity",
)
def overlap_gpu_bound(out: Path) -> dict:
    tl = Timeline()
    _steps(tl, 8 * US)
    tl.write(out / "rank-0.pt.trace.json.gz")
    return {
        "drawn": ["overlap_opportunity"],
        "not_drawn": ["idle_gaps"],
        "withheld_reasons": {},
        "overlap_row": {"name": GEMM, "verdict": "headroom", "recommendation": "try overlap"},
        "overlap_subject": GEMM,
    }


# kernels of an application's own code that no category rule knows (a stencil solver, as in an HPC code)
UNKNOWN = (
    "void hydro::sweep_faces_kernel<double, 3>(double*, double const*, int, int)",
    "void hydro::accumulate_cells_kernel<double>(double*, double const*, int)",
)


@situation(
    "unknown-kernels-dominate",
    "most GPU time in kernels no category rule knows (an application's own solver) beside GEMMs: `other` "
    "is no category to draw a lesson from, so the report says how much is unknown and names the largest "
    "known category instead",
)
def unknown_kernels_dominate(out: Path) -> dict:
    """3 steps; per step, the host launches 8 kernels 8 us apart on one stream, back to back on the GPU:
    the two solver kernels (UNKNOWN, 60 us each) twice and four GEMMs of 50 us. `other` is the largest
    "category" (240 of 440 us); the GEMMs are 200 of 440 us, over the dominant-category bar. The shares are
    the durations written here, summed."""
    tl = Timeline()
    t = 0
    for step in range(3):
        s0, host, free = t, t + 20 * US, t + 30 * US
        for i in range(8):
            name, dur, op = (
                (UNKNOWN[(i // 2) % 2], 60 * US, "hydro::sweep")
                if i % 2 == 0
                else (GEMM, 50 * US, "aten::mm")
            )
            call = tl.op(op, host, host + 6 * US)
            tl.launch(name, call.start + 1 * US, max(free, host + 10 * US), dur, stream=7)
            free = max(free, host + 10 * US) + dur
            host += 8 * US
        end = free + 10 * US
        tl.op(f"ProfilerStep#{step}", s0, end, cat="user_annotation")
        t = end + 10 * US
    tl.write(out / "rank-0.pt.trace.json.gz")
    kernel_ns = [g.end - g.start for g in tl.gpu]
    unknown_ns = sum(g.end - g.start for g in tl.gpu if g.name in UNKNOWN)
    gemm_ns = sum(g.end - g.start for g in tl.gpu if g.name == GEMM)
    return {
        "other_share": unknown_ns / sum(kernel_ns),
        "gemm_share": gemm_ns / sum(kernel_ns),
        "largest_unknown": UNKNOWN[0],
    }
