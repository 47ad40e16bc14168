"""Report-figure situations: the run report's step components and uncategorized share, and the diff's
time per step, each placed at exact ns so every figure of sql/step_components, sql/uncategorized,
sql/step_kernel_time and sql/run_step_time is known before the views run.

Two ProfilerSteps of 400 us each on one rank: GEMM, flash attention, a norm, rope, an elementwise add,
a kernel no category rule knows and torch.cuda._sleep's spin kernel (filed `other` on purpose) on the
compute stream, an NCCL all-reduce on a second stream; after the last step a GEMM outside any step.
Times in `expect` are ns.
"""

from __future__ import annotations

from pathlib import Path

from . import situation
from .timeline import Timeline

US = 1_000

GEMM = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_tn"
FLASH = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64, 64, 4> >(Flash_fwd_params)"
NORM = (
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float)"
)
ROPE = "void vllm::rotary_embedding_kernel<c10::BFloat16, true>(long const*, c10::BFloat16*, int)"
ADD = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
    "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3>)"
)
UNKNOWN = "zqx_bespoke_kernel_v2"
SPIN = "at::cuda::(anonymous namespace)::spin_kernel(long)"
NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
STEP = 400 * US
# per step: (name, dur) on the compute stream in launch order, then the all-reduce's duration
STEPS = [
    (
        [
            (GEMM, 100 * US),
            (FLASH, 60 * US),
            (NORM, 10 * US),
            (ROPE, 8 * US),
            (ADD, 6 * US),
            (UNKNOWN, 12 * US),
            (SPIN, 5 * US),
        ],
        40 * US,
    ),
    (
        [
            (GEMM, 120 * US),
            (FLASH, 50 * US),
            (NORM, 10 * US),
            (ROPE, 8 * US),
            (ADD, 4 * US),
            (UNKNOWN, 6 * US),
        ],
        30 * US,
    ),
]
CATEGORY = {
    GEMM: "gemm",
    FLASH: "attention",
    NORM: "norm",
    ROPE: "rope",
    ADD: "elementwise",
    UNKNOWN: "other",
    SPIN: "other",
    NCCL: "communication",
}
OUTSIDE_GEMM = 20 * US


def _components(work: list[tuple[str, int]], comm: int) -> list[dict]:
    """The step's component rows as sql/step_components defines them, by hand."""
    ns: dict[str, int] = {"communication": comm}
    for name, dur in work:
        ns[CATEGORY[name]] = ns.get(CATEGORY[name], 0) + dur
    named = {"attention", "moe", "gemm", "communication", "norm", "other"}
    rows = [{"component": c, "categories": [c], "gpu_time_ns": t} for c, t in ns.items() if c in named]
    rest = sorted(((t, c) for c, t in ns.items() if c not in named), key=lambda x: (-x[0], x[1]))
    rows.append(
        {
            "component": f"rest ({', '.join(c for _, c in rest)})",
            "categories": [c for _, c in rest],
            "gpu_time_ns": sum(t for t, _ in rest),
        }
    )
    for r in rows:
        r["share_of_wall"] = r["gpu_time_ns"] / STEP
    return sorted(rows, key=lambda r: (-r["gpu_time_ns"], r["component"]))


@situation(
    "report-step-figures",
    "two 400 us steps of GEMM, flash attention, norm, rope, add, an unknown kernel and the spin kernel "
    "on one stream and an all-reduce on another, then a GEMM outside any step: the report's step "
    "components and uncategorized share, the diff's time per step",
)
def report_step_figures(out: Path) -> dict:
    tl = Timeline()
    for i, (work, comm) in enumerate(STEPS):
        t0 = i * STEP
        tl.op(f"ProfilerStep#{i}", t0, t0 + STEP, cat="user_annotation")
        gpu = t0 + 50 * US
        for j, (name, dur) in enumerate(work):
            tl.launch(name, t0 + 10 * US + j * 5 * US, gpu, dur)
            gpu += dur
        tl.launch(NCCL, t0 + 48 * US, t0 + 60 * US, comm, stream=13)
    tl.op("aten::mm", 2 * STEP + 10 * US, 2 * STEP + 20 * US)
    tl.launch(GEMM, 2 * STEP + 12 * US, 2 * STEP + 30 * US, OUTSIDE_GEMM)
    tl.write(out / "rank-0.pt.trace.json.gz")

    per_name: dict[str, list[int]] = {}
    for work, comm in STEPS:
        for name, dur in [*work, (NCCL, comm)]:
            per_name.setdefault(name, []).append(dur)
    rank_steps = len(STEPS)
    in_steps = sum(sum(v) for v in per_name.values())
    total = in_steps + OUTSIDE_GEMM
    other = sum(sum(per_name[n]) for n in (UNKNOWN, SPIN))
    return {
        "step_components": {str(i): _components(work, comm) for i, (work, comm) in enumerate(STEPS)},
        "uncategorized": {
            "gpu_time_ns": total,
            "other_ns": other,
            "known_other_ns": sum(per_name[SPIN]),
            "uncategorized_ns": sum(per_name[UNKNOWN]),
            "uncategorized_share": sum(per_name[UNKNOWN]) / total,
        },
        "step_kernel_time": {
            name: {
                "category": CATEGORY[name],
                "gpu_time_ns": sum(v),
                "launches": len(v),
                "rank_steps": rank_steps,
                "ns_per_step": sum(v) / rank_steps,
                "launches_per_step": len(v) / rank_steps,
                "ns_per_launch": sum(v) / len(v),
            }
            for name, v in per_name.items()
        },
        "stream_share": {
            "7": {"gpu_time_ns": sum(d for w, _ in STEPS for _, d in w) + OUTSIDE_GEMM},
            "13": {"gpu_time_ns": sum(comm for _, comm in STEPS)},
        },
        "run_step_time": {
            "rank_steps": rank_steps,
            "ranks": 1,
            "gpu_time_ns": total,
            "in_steps_ns": in_steps,
            "outside_steps_ns": OUTSIDE_GEMM,
            "gpu_ns_per_step": in_steps / rank_steps,
            "launches": sum(len(v) for v in per_name.values()),
            "ns_per_launch": in_steps / sum(len(v) for v in per_name.values()),
        },
    }
