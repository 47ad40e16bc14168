"""Communication made faster, with the peers missing from the run: one rank of a training run of four.

The simulator (synth/sim.py) runs a training job on four ranks in lockstep: each bucket all-reduce starts
on a rank when that rank arrives and ends on every rank at the last arrival plus the transfer. Rank 3 is a
straggler (STRAGGLER_US late before every collective), so rank 0's all-reduces are mostly waiting for it.
Only rank 0's trace is written, as when one rank's trace is all that was shared.

What a 2x faster communication gains is the simulator run again with the same seed and the collectives'
transfer 2x faster (`slow_kernel` on the NCCL kernels, factor 0.5: the transfer is what it scales; each
rank still waits for the last arrival). From rank 0's trace alone the wait cannot be told from the
transfer: a correct analysis does not predict the gain; halving the whole kernel (wait included) would
claim several times the true gain.

The ground truth (`expect`): the world and the written rank, the straggler, and per step of rank 0 (in
order) its GPU span as simulated, its span with the transfer 2x faster, and its collectives' wait and
transfer as the simulator had them.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from ..scenario import write_scenario
from ..truth import load_truth
from . import situation

WORLD, RANK = 4, 0
STRAGGLER_US = 900.0
NCCL = "nccl"  # the simulator's collective kernels (ncclDevKernel_AllReduce_...)
SHAPE = {"ranks": WORLD, "steps": 2, "layers": 2, "seed": 7, "straggler": (WORLD - 1, STRAGGLER_US)}


def simulate(out: Path, *, transfer_factor: float = 1.0, write_ranks: tuple[int, ...] | None = None) -> dict:
    """The training run of SHAPE written into `out` (the ranks `write_ranks`, else all), the collectives'
    transfer `transfer_factor` times as long; its ground truth (synth/truth.py)."""
    slow = (NCCL, transfer_factor) if transfer_factor != 1.0 else None
    write_scenario("training", out, slow_kernel=slow, write_ranks=write_ranks, **SHAPE)
    return load_truth(out)


def truth_steps(seen: dict, faster: dict, rank: int) -> list[dict]:
    """Per step of `rank` (in order): its span as simulated, with the transfer faster, and its collectives'
    wait and transfer (the simulator's, per collective: wait = last arrival - its arrival)."""
    steps = []
    spans = {s["step"]: s["span_ns"] for s in faster["steps"] if s["rank"] == rank}
    for s in sorted((s for s in seen["steps"] if s["rank"] == rank), key=lambda s: s["step"]):
        colls = [c for c in seen["collectives"] if c["step"] == s["step"]]
        steps.append(
            {
                "span_ns": s["span_ns"],
                "span_transfer_2x_ns": spans[s["step"]],
                "collectives": len(colls),
                "wait_ns": sum(c["wait_ns"][rank] for c in colls),
                "transfer_ns": sum(c["transfer_ns"][rank] for c in colls),
            }
        )
    return steps


@situation(
    "comm-whatif-missing-peers",
    "rank 0 of a training run of four whose rank 3 straggles: its all-reduces are mostly waiting; with the "
    "peers missing, 'communication 2x faster' cannot be predicted (halving the kernels overstates it)",
)
def comm_whatif_missing_peers(out: Path) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        seen = simulate(Path(tmp) / "seen", write_ranks=(RANK,))
        faster = simulate(Path(tmp) / "faster", transfer_factor=0.5, write_ranks=(RANK,))
        [name] = seen["files"].values()
        shutil.copy(Path(tmp) / "seen" / name, out / name)
    return {
        "world_size": WORLD,
        "ranks_written": [RANK],
        "straggler": {"rank": WORLD - 1, "late_us": STRAGGLER_US},
        "speedup": 2.0,
        "steps": truth_steps(seen, faster, RANK),
        # what a correct analysis concludes: the gain of a faster transfer is not in this trace
        "predicted": False,
    }
