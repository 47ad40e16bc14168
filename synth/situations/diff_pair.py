"""Diff situations: a before/after pair of the same workload where the after trace holds fewer iterations
and one kernel got slower per launch, with step markers and without.

The shape of a real Nsight pair (mfu_2gpu_before/after): every kernel's launch count fell by the share of
iterations the after window lost, and one NCCL send/recv kernel took ~41 % longer per launch. Without step
markers the "step" is the whole window, so comparing GPU time per step compares two windows holding
different work: the after run looks faster (it holds fewer iterations) and the real change is buried.

One rank, one iteration = the same kernels on the compute stream (two GEMMs, flash attention, three adds)
and one send/recv on a second stream; BEFORE_ITERS iterations before, AFTER_ITERS after; the send/recv lasts
SENDRECV_BEFORE ns per launch before and SENDRECV_AFTER after, every other kernel the same. Marked: each
iteration is a ProfilerStep#N. Unmarked: no marker and launch calls at one steady pace across iterations
(no host idle period, so no step is inferred either): each rank's one step is the whole window.

Truth from these parameters (ns): each run's steps and launches; per kernel its time per launch on each
side, its launches per step (marked) or per window (unmarked); the diff's basis and verdict; each kernel's
change split as reports/diff.py's module doc defines (per launch: (p_t - p_b) × (n_b + n_t) / 2, count:
(n_t - n_b) × (p_b + p_t) / 2); the weighted per-launch ratio; and the kernel whose change per launch is the
real change.
"""

from __future__ import annotations

from pathlib import Path

from . import situation
from .timeline import Timeline

US = 1_000
DEVICE = "NVIDIA H100 80GB HBM3"
GEMM_A = "nvjet_tst_192x192_64x4_2x1_v_bz_coopB_bias_TNN"
GEMM_B = "nvjet_tst_192x208_64x4_1x1_h_bz_coopB_bias_TNT"
FLASH = "void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4> >(flash::Flash_fwd_params)"
ADD = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
    "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3>)"
)
SENDRECV = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
# one iteration's compute-stream kernels in launch order: (name, ns per launch), the same before and after
COMPUTE = [
    (GEMM_A, 100 * US),
    (FLASH, 60 * US),
    (ADD, 6 * US),
    (GEMM_B, 80 * US),
    (ADD, 6 * US),
    (ADD, 6 * US),
]
SENDRECV_BEFORE = 40 * US
SENDRECV_AFTER = 56_400  # 1.41 × SENDRECV_BEFORE: the real change
BEFORE_ITERS, AFTER_ITERS = 10, 9
ITERATION = 420 * US  # host pace: one iteration's launches spread evenly over it
COMM_STREAM = 13


def _per_iteration(sendrecv_ns: int) -> dict[str, tuple[int, int]]:
    """name -> (launches per iteration, ns per launch)."""
    out: dict[str, tuple[int, int]] = {}
    for name, ns in COMPUTE:
        out[name] = (out.get(name, (0, ns))[0] + 1, ns)
    out[SENDRECV] = (1, sendrecv_ns)
    return out


def _write(out: Path, iterations: int, sendrecv_ns: int, marked: bool) -> None:
    tl = Timeline(device_name=DEVICE)
    launches = [*COMPUTE, (SENDRECV, sendrecv_ns)]
    pace = ITERATION // len(launches)  # the same gap between every two launch calls, across iterations too
    for i in range(iterations):
        t0 = i * ITERATION
        if marked:
            tl.op(f"ProfilerStep#{i}", t0, t0 + ITERATION - US, cat="user_annotation")
        gpu = t0 + 20 * US
        for j, (name, ns) in enumerate(launches):
            host = t0 + j * pace + US
            if name == SENDRECV:
                tl.launch(name, host, max(host + 5 * US, t0 + 30 * US), ns, stream=COMM_STREAM)
            else:
                tl.launch(name, host, max(gpu, host + 5 * US), ns)
                gpu = max(gpu, host + 5 * US) + ns
    tl.write(out / "rank-0.pt.trace.json.gz")


def _run_truth(iterations: int, sendrecv_ns: int, marked: bool) -> dict:
    per = _per_iteration(sendrecv_ns)
    launches = iterations * sum(n for n, _ in per.values())
    ns = iterations * sum(n * p for n, p in per.values())
    return {
        "run_comparability": {
            "hardware": DEVICE,
            "step_basis": "marked" if marked else "whole",
            "steps": iterations if marked else 1,
        },
        "run_step_time": {"launches": launches, "in_steps_ns": ns, "ns_per_launch": ns / launches},
        "kernels": {name: {"launches": iterations * n, "ns_per_launch": p} for name, (n, p) in per.items()},
    }


def _diff_truth(marked: bool) -> dict:
    """What `tracehouse diff BEFORE AFTER` must say, from the parameters alone."""
    before, after = _per_iteration(SENDRECV_BEFORE), _per_iteration(SENDRECV_AFTER)
    # the unit: a step (one iteration) when marked, else the rank's window (all its iterations)
    unit_b, unit_t = (1, 1) if marked else (BEFORE_ITERS, AFTER_ITERS)
    kernels = {}
    for name in before:
        nb, pb = before[name][0] * unit_b, before[name][1]
        nt, pt = after[name][0] * unit_t, after[name][1]
        kernels[name] = {
            "base_launches": nb,
            "target_launches": nt,
            "base_ns_per_launch": pb,
            "target_ns_per_launch": pt,
            "per_launch_ratio": pt / pb,
            "delta_ns": nt * pt - nb * pb,
            "per_launch_effect_ns": (pt - pb) * (nb + nt) / 2,
            "count_effect_ns": (nt - nb) * (pb + pt) / 2,
        }
    weight = {name: (k["base_launches"] + k["target_launches"]) / 2 for name, k in kernels.items()}
    base_pl = sum(weight[n] * k["base_ns_per_launch"] for n, k in kernels.items()) / sum(weight.values())
    target_pl = sum(weight[n] * k["target_ns_per_launch"] for n, k in kernels.items()) / sum(weight.values())
    total_b = sum(k["base_launches"] * k["base_ns_per_launch"] for k in kernels.values())
    total_t = sum(k["target_launches"] * k["target_ns_per_launch"] for k in kernels.values())
    return {
        "base": "diff-fewer-iterations-before" + ("" if marked else "-unmarked"),
        "basis": "per_step" if marked else "per_launch",
        # marked: same model, hardware, phases; the steps differ in number (10 → 9), a caveat
        "status": "comparable with caveats" if marked else "not comparable per step",
        "unit": "step" if marked else "rank window",
        "steps": [BEFORE_ITERS, AFTER_ITERS] if marked else [1, 1],
        "total_base_ns": total_b,
        "total_target_ns": total_t,
        "total_delta_ns": total_t - total_b,
        "base_ns_per_launch": base_pl,
        "target_ns_per_launch": target_pl,
        "per_launch_ratio": target_pl / base_pl,
        "slower_per_launch": SENDRECV,
        "kernels": kernels,
    }


@situation(
    "diff-fewer-iterations-before",
    "the 'before' of a diff pair: 10 marked iterations (ProfilerStep#N) of two GEMMs, flash attention, "
    "three adds and an NCCL send/recv of 40 us on one rank",
)
def before_marked(out: Path) -> dict:
    _write(out, BEFORE_ITERS, SENDRECV_BEFORE, True)
    return _run_truth(BEFORE_ITERS, SENDRECV_BEFORE, True)


@situation(
    "diff-fewer-iterations-after",
    "the 'after' of a diff pair: 9 marked iterations, the send/recv 41 % slower per launch (56.4 us), every "
    "other kernel the same: per step only the send/recv changed",
)
def after_marked(out: Path) -> dict:
    _write(out, AFTER_ITERS, SENDRECV_AFTER, True)
    return {**_run_truth(AFTER_ITERS, SENDRECV_AFTER, True), "diff": _diff_truth(True)}


@situation(
    "diff-fewer-iterations-before-unmarked",
    "the 'before' pair run without step markers: 10 iterations at a steady launch pace, no ProfilerStep: "
    "the whole window is the one step",
)
def before_unmarked(out: Path) -> dict:
    _write(out, BEFORE_ITERS, SENDRECV_BEFORE, False)
    return _run_truth(BEFORE_ITERS, SENDRECV_BEFORE, False)


@situation(
    "diff-fewer-iterations-after-unmarked",
    "the 'after' pair run without step markers: 9 iterations, the send/recv 41 % slower per launch; its "
    "window holds 10 % fewer launches, so per window it looks faster though nothing got faster",
)
def after_unmarked(out: Path) -> dict:
    _write(out, AFTER_ITERS, SENDRECV_AFTER, False)
    return {**_run_truth(AFTER_ITERS, SENDRECV_AFTER, False), "diff": _diff_truth(False)}
