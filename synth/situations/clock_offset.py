"""Clock situations: ranks of one run recorded on two hosts whose clocks are offset.

Kineto stamps each rank with its own host's clock, so ranks of one host share a time base and ranks of
another host are off by a constant (seconds to days on a monotonic clock). The n-th instance of a
collective ends at nearly the same instant on every rank of its group: the export estimates each rank's
offset from those ends (sql/export_clock_offset) and shifts the ranks of the other host back by it.
"""

from __future__ import annotations

from pathlib import Path

from . import situation
from .timeline import T0_NS, Timeline

US = 1_000
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off"
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
# host B's clock runs this far ahead of host A's (ranks 0, 1 on host A; ranks 2, 3 on host B): 1 h 12 min
# and an odd number of ns, so a shift that is off by one ns shows
HOST_B_OFFSET_NS = 4_321_987_654_321
OFFSETS = {0: 0, 1: 0, 2: HOST_B_OFFSET_NS, 3: HOST_B_OFFSET_NS}
STEPS, COLLECTIVES = 3, 3
# how much later than rank 0 each rank's n-th all-reduce ends (ns), besides the clock offset: a few µs, as
# collectives of one group end. Rank 1 (host A) ends 2 µs late in the median: a systematic difference of
# one clock, below the rule's 20 µs floor, so not shifted. Ranks 2 and 3: median exactly 0, so the
# estimate is exactly the host's offset.
END_JITTER = {
    0: [0] * 9,
    1: [2_000, 1_000, 3_000, 2_000, 2_500, 1_500, 2_000, 4_000, 0],
    2: [-3_000, 1_000, 0, 2_000, -1_000, 4_000, 0, -2_000, 3_000],
    3: [1_000, -2_000, 0, 3_000, 0, -1_000, 2_000, -4_000, 5_000],
}


@situation(
    "ranks-two-hosts-clock-offset",
    "four ranks on two hosts: ranks 2 and 3 stamped by a clock 4321.987654321 s ahead of ranks 0 and 1; "
    "three steps with three all-reduces each, whose ends agree within a few µs once the offset is "
    "taken out",
)
def ranks_two_hosts_clock_offset(out: Path) -> dict:
    for rank in range(4):
        off = OFFSETS[rank]
        tl = Timeline(rank=rank, world_size=4, device_name="NVIDIA H100 80GB HBM3")
        i = 0
        for step in range(STEPS):
            t0 = off + step * 1_000 * US
            tl.op(f"ProfilerStep#{step}", t0, t0 + 900 * US, cat="user_annotation")
            # compute of a rank-dependent length, then the all-reduces: the ranks arrive at different times
            tl.launch(GEMM, t0 + 10 * US, t0 + 40 * US, (100 + 7 * rank) * US)
            for c in range(COLLECTIVES):
                end = off + step * 1_000 * US + (300 + 150 * c) * US + END_JITTER[rank][i]
                start = off + step * 1_000 * US + (160 + 150 * c + 5 * rank) * US
                host = t0 + (150 + 150 * c) * US
                tl.op(
                    "record_param_comms",
                    host,
                    host + 8 * US,
                    args={
                        "Collective name": "allreduce",
                        "Process Group Name": "0",
                        "Group size": 4,
                        "In msg nelems": 1 << 20,
                        "Out msg nelems": 1 << 20,
                        "dtype": "BFloat16",
                    },
                )
                tl.launch(
                    ALLREDUCE,
                    host + 2 * US,
                    start,
                    end - start,
                    stream=20,
                    args={
                        "Collective name": "allreduce",
                        "Process Group Name": "0",
                        "Group size": 4,
                        "In msg nelems": 1 << 20,
                        "Out msg nelems": 1 << 20,
                        "dtype": "BFloat16",
                    },
                )
                i += 1
        tl.write(out / f"rank-{rank}.pt.trace.json.gz")
    return {
        "host_b_offset_ns": HOST_B_OFFSET_NS,
        "t0_ns": T0_NS,
        # the shift the export applies to each rank's times (subtracted), and the view's estimate
        "shift_ns": {str(r): off for r, off in OFFSETS.items()},
        "estimate_ns": {"1": 2_000, "2": HOST_B_OFFSET_NS, "3": HOST_B_OFFSET_NS},
        "significant": {"1": False, "2": True, "3": True},
        "matched": STEPS * COLLECTIVES,
    }
