"""Export situations: the shapes a timeline export must carry without dropping or bending anything.

Real traces have two activities of one stream overlapping in time (programmatic dependent launch: b200_eager
has 74 such pairs; a kernel entirely inside another's span; zero-length records), which a Perfetto track
cannot hold (its slices nest, and the JSON importer drops overlapping `X` slices). The export puts each
activity that overlaps an earlier one on a sub-track; `expect` gives, per stream, the activities and the
number of lanes a first-fit placement in start order needs (the most activities open at one instant, with an
activity ending at t free for one starting at t), and the launches that connect to several activities.
Times in `expect` are absolute ns (T0_NS + the Timeline time).
"""

from __future__ import annotations

from pathlib import Path

from . import situation
from .timeline import T0_NS, Timeline

US = 1_000
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off"
NORM = (
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float)"
)
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16> >(int)"
PDL = "void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>, true>(Flash_fwd_params)"


@situation(
    "overlap-same-stream",
    "activities of one stream that overlap in time: PDL pairs (the next kernel starts 3 us before the "
    "previous ends), a kernel inside another's span, two with identical times, a zero-length record, "
    "plus a graph launch whose one call feeds five kernels on two streams and a <&> name to escape",
)
def overlap_same_stream(out: Path) -> dict:
    tl = Timeline(device_name="NVIDIA H100 80GB HBM3")
    step = tl.op("ProfilerStep#0", 0, 400 * US, cat="user_annotation")
    acts = []  # (stream, start, end) of every GPU activity
    t = 20 * US
    # 1. back to back, no overlap
    for i in range(3):
        acts.append(tl.launch(GEMM, 5 * US + i * 5 * US, t, 20 * US))
        t += 20 * US
    # 2. PDL: each next kernel starts 3 us before the previous one ends (two open at once)
    for i in range(4):
        acts.append(tl.launch(PDL, 30 * US + i * 5 * US, t - 3 * US, 20 * US))
        t += 17 * US
    t += 10 * US
    # 3. a long kernel with two kernels entirely inside its span (three open at once), and a twin of the second
    long_start = t
    acts.append(tl.launch(GEMM, 60 * US, long_start, 50 * US))
    acts.append(tl.launch(NORM, 62 * US, long_start + 5 * US, 10 * US))
    acts.append(tl.launch(ADD, 64 * US, long_start + 5 * US, 10 * US))  # identical times, another kernel
    acts.append(tl.launch(NORM, 66 * US, long_start + 30 * US, 10 * US))
    # 4. a zero-length activity at the long kernel's end (free lane: an end at t frees it for a start at t)
    acts.append(tl.launch("Memset (Device)", 70 * US, long_start + 50 * US, 0, kind="memset"))
    t = long_start + 60 * US
    # 5. a graph launch replaying 5 kernels on streams 7 and 9: one call, five flows
    graph_kernels = [
        (GEMM, 7, t, 10 * US),
        ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL<&>", 9, t, 15 * US),
        (NORM, 7, t + 10 * US, 5 * US),
        (GEMM, 7, t + 15 * US, 10 * US),
        (NORM, 9, t + 15 * US, 5 * US),
    ]
    graph = tl.graph(80 * US, graph_kernels)
    acts += graph
    # 6. a copy on its own stream, not linked to any call (no flow)
    tl.gpu.append(
        type(graph[0])("memcpy", "Memcpy DtoH (Device -> Pinned)", 11, t + 30 * US, t + 40 * US, None, None)
    )
    acts.append(tl.gpu[-1])
    step.end = max(g.end for g in acts) + 10 * US
    tl.write(out / "rank-0.pt.trace.json.gz")

    def lanes(intervals: list[tuple[int, int]]) -> int:
        ends: list[int] = []
        for s, e in sorted(intervals):
            free = [i for i, x in enumerate(ends) if x <= s]
            if free:
                ends[free[0]] = e
            else:
                ends.append(e)
        return len(ends)

    streams: dict[int, list[tuple[int, int]]] = {}
    for g in acts:
        streams.setdefault(g.stream, []).append((g.start, g.end))
    return {
        "streams": {
            str(s): {
                "activities": len(v),
                "lanes": lanes(v),
                "starts_ns": sorted(T0_NS + a for a, _ in v),
                "durs_ns": sorted(b - a for a, b in v),
            }
            for s, v in sorted(streams.items())
        },
        "graph_launch_flows": len(graph_kernels),
        "linked": sum(1 for g in acts if g.corr is not None),
    }
