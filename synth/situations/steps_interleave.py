"""Steps whose GPU work interleaves: the host runs ahead, so one step's kernels still run while the next
step's first activities start on another stream.

A real pipeline-parallel A100 trace (compute, NCCL and copy streams) showed "GPU idle 300 ms, 80 % of the
step" while 60 ms of the previous step's kernels ran inside that step's GPU span: step_breakdown counted
the device as idle whenever none of *this* step's activities ran, though another step's did. The device
was busy; the step's idle share (and the takeaway drawn from it) was too high. step_breakdown now splits
that time out as `other_steps_ns`.

`steps-interleaved`: 3 ProfilerSteps of 300 us on the host, back to back. Each launches one 20 us NCCL
all-reduce on stream 20 (it starts at once) and four 100 us GEMMs on stream 7, which queue behind the
previous step's GEMMs. Step 0's last two GEMMs are launched late (host-bound: a 50 us gap on the device).
Hand-computed (us, from the trace's start; each launch call lasts 4 us, a kernel starts 10 us after its
call begins or when its stream frees):

| step | host     | GPU span    | own busy | other steps' work | idle | setup | queued | wall |
|------|----------|-------------|----------|-------------------|------|-------|--------|------|
| 0    | 0-300    | 20-490      | 420      | 0                 | 50   | 14    | 6      | 490  |
| 1    | 300-600  | 320-890     | 420      | 150 (320-490)     | 0    | 14    | 6      | 590  |
| 2    | 600-900  | 620-1290    | 420      | 250 (640-890)     | 0    | 14    | 6      | 690  |

Step 2's span [620, 1290]: its NCCL [620, 640] and GEMMs [890, 1290] are its own (420 us); step 1's GEMMs
run until 890 on stream 7, and [640, 890] (250 us) of that has no activity of step 2. Compute is 400 us in
every step and the all-reduce is exposed (20 us): it overlaps only another step's compute, and the
exposed figures classify a step's own activities (sql/steps/step_breakdown.sql). host_tail is 0 (the GPU ends
after the host leaves each step).
"""

from __future__ import annotations

from pathlib import Path

from . import situation
from .timeline import Timeline

US = 1_000

GEMM = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_tn"
NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


@situation(
    "steps-interleaved",
    "the host runs ahead: each step's GEMMs queue behind the previous step's on one stream while its "
    "all-reduce starts at once on another, so a step's GPU span holds the previous step's work "
    "(busy, not idle)",
)
def steps_interleaved(out: Path) -> dict:
    tl = Timeline()
    free7 = 0
    # host launch times of the four GEMMs, per step (step 0's last two are late: host-bound)
    gemm_launches = {0: [30, 40, 280, 290], 1: [330, 340, 350, 360], 2: [630, 640, 650, 660]}
    for step in range(3):
        t0 = 300 * step
        tl.op(f"ProfilerStep#{step}", t0 * US, (t0 + 300) * US - 1, cat="user_annotation")
        op = tl.op("c10d::allreduce_", (t0 + 8) * US, (t0 + 16) * US)
        tl.launch(NCCL, op.start + 2 * US, (t0 + 20) * US, 20 * US, stream=20)
        for at in gemm_launches[step]:
            op = tl.op("aten::mm", at * US - 1 * US, at * US + 6 * US)
            start = max((at + 10) * US, free7)
            tl.launch(GEMM, at * US, start, 100 * US, stream=7)
            free7 = start + 100 * US
    tl.write(out / "rank-0.pt.trace.json.gz")
    rows = {
        0: (0, 490, 14, 6, 400, 20, 0, 50),
        1: (300, 890, 14, 6, 400, 20, 150, 0),
        2: (600, 1290, 14, 6, 400, 20, 250, 0),
    }
    cols = [
        "wall_start_us",
        "wall_end_us",
        "host_setup_us",
        "gpu_queued_us",
        "compute_us",
        "exposed_comm_us",
        "other_steps_us",
        "gpu_idle_us",
    ]
    return {
        "step_breakdown": {str(step): dict(zip(cols, r)) | {"host_tail_us": 0} for step, r in rows.items()}
    }
