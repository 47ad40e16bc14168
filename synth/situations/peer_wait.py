"""Waiting for a peer: a rank that is late at most of the collectives, but not at three in four of them.

Four ranks run two steps of four all-reduces each. Before each all-reduce every rank computes (a GEMM) for
a base time plus its own delay; its all-reduce kernel starts when its compute ends (it arrives) and ends on
every rank at the same instant: the last arrival plus the transfer. Rank 2 is slow in five of the eight
collectives (by 400 µs); in the other three a different rank is last by a few µs. Rank 2 arrives last at
62.5 % of the collectives, under a "last at 75 %" bar, yet the other ranks spend almost all their
collective wait waiting for it.

The ground truth is what the simulation did: per collective instance, each rank's arrival and the wait of
each rank (last arrival minus its own), the wait imposed by the last rank (the others' waits), and per rank
the share of all imposed wait; per instance, each rank's wait and transfer (`collectives`).
"""

from __future__ import annotations

from pathlib import Path

from . import situation
from .timeline import Timeline

US = 1_000
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off"
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
RANKS, STEPS, PER_STEP = 4, 2, 4
SLOW_RANK = 2
# per collective instance (step-major): (the rank that is late, its delay beyond the base compute)
LATE = [
    (2, 400 * US),
    (0, 15 * US),
    (2, 400 * US),
    (2, 400 * US),
    (1, 20 * US),
    (2, 400 * US),
    (3, 10 * US),
    (2, 400 * US),
]
COMPUTE_US, TRANSFER_US, STEP_US = 150, 60, 3_000
COMM_ARGS = {
    "Collective name": "allreduce",
    "Process Group Name": "0",
    "Group size": RANKS,
    "In msg nelems": 1 << 22,
    "Out msg nelems": 1 << 22,
    "dtype": "BFloat16",
}


def _simulate() -> list[dict]:
    """Each instance: every rank's compute start and arrival, and the common end."""
    instances = []
    for i, (late_rank, delay) in enumerate(LATE):
        step, c = divmod(i, PER_STEP)
        begin = step * STEP_US * US + 100 * US + c * 700 * US
        compute = {r: COMPUTE_US * US + 3 * US * r + (delay if r == late_rank else 0) for r in range(RANKS)}
        arrive = {r: begin + compute[r] for r in range(RANKS)}
        end = max(arrive.values()) + TRANSFER_US * US
        instances.append({"step": step, "begin": begin, "compute": compute, "arrive": arrive, "end": end})
    return instances


@situation(
    "peer-wait-straggler",
    "four ranks, eight all-reduces: rank 2 arrives 400 µs late at five of them (62.5 %), another rank a few "
    "µs late at the rest; the others' collective wait is almost all waiting for rank 2",
)
def peer_wait_straggler(out: Path) -> dict:
    instances = _simulate()
    for rank in range(RANKS):
        tl = Timeline(rank=rank, world_size=RANKS, device_name="NVIDIA H100 80GB HBM3")
        for step in range(STEPS):
            t0 = step * STEP_US * US
            tl.op(f"ProfilerStep#{step}", t0, t0 + (STEP_US - 100) * US, cat="user_annotation")
        for inst in instances:
            host = inst["begin"] - 20 * US
            tl.launch(GEMM, host, inst["begin"], inst["compute"][rank])
            tl.op("record_param_comms", host + 6 * US, host + 14 * US, args=COMM_ARGS)
            start = inst["arrive"][rank]
            tl.launch(ALLREDUCE, host + 8 * US, start, inst["end"] - start, stream=20, args=COMM_ARGS)
        tl.write(out / f"rank-{rank}.pt.trace.json.gz")
    waits = {r: 0 for r in range(RANKS)}
    imposed = {r: 0 for r in range(RANKS)}
    times_last = {r: 0 for r in range(RANKS)}
    for inst in instances:
        last_at = max(inst["arrive"].values())
        last = min(r for r, t in inst["arrive"].items() if t == last_at)
        times_last[last] += 1
        for r, t in inst["arrive"].items():
            waits[r] += last_at - t
            if r != last:
                imposed[last] += last_at - t
    total = sum(imposed.values())
    # per instance, as simulated: its step, its number in the step (1..), each rank's arrival, the common
    # end, the last rank, and each rank's wait (its kernel held until the last arrival) and transfer
    simulated = []
    for i, inst in enumerate(instances):
        last_at = max(inst["arrive"].values())
        simulated.append(
            {
                "step": inst["step"],
                "n": i % PER_STEP + 1,
                "last_rank": min(r for r, t in inst["arrive"].items() if t == last_at),
                "wait_ns": {str(r): last_at - t for r, t in inst["arrive"].items()},
                "transfer_ns": {str(r): inst["end"] - last_at for r in inst["arrive"]},
            }
        )
    return {
        "collectives": simulated,
        "straggler_rank": SLOW_RANK,
        "instances": len(instances),
        "times_last": {str(r): n for r, n in times_last.items()},
        "wait_ns": {str(r): w for r, w in waits.items()},
        "imposed_wait_ns": {str(r): w for r, w in imposed.items()},
        "imposed_wait_share": {str(r): w / total for r, w in imposed.items()},
    }
