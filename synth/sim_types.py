"""What the simulation (synth.sim) is configured with, `Cfg`, and what it schedules, `Act`: one GPU activity."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .catalog import Kernel


@dataclass(slots=True)
class Act:
    """One GPU activity (kernel, memcpy or memset) of the schedule."""

    kind: str  # "kernel" | "gpu_memcpy" | "gpu_memset"
    name: str
    category: str
    stream: int
    start: int
    dur: int
    corr: int
    ext: int | None  # External id of the enclosing cpu_op (None under graph replay / no op)
    site: tuple[str, int, str] | None
    seq: int  # launch order inside the step
    k: Kernel | None = None
    replay: bool = False
    nbytes: int = 0
    copy_kind: str = ""
    coll: str = ""  # collective instance key ("" when not a collective)
    coll_meta: dict | None = None
    # critical-path ground truth: activities on other streams this one waits for through a traced
    # cudaEventRecord -> cudaStreamWaitEvent (the first activity launched on the stream after the wait)
    event_deps: list | None = None
    graph_node: int | None = None  # its place in the graph launch's body (replayed activities only)
    fqn: str | None = None  # the module it was launched from, as a dotted FQN (workloads set sim.fqn)
    # ... and the activities it waits for through an event wait the trace does not record (inside a graph
    # replay, or on ROCm, which writes no cuda_sync record): dependencies only timing can reveal
    hidden_deps: list | None = None

    @property
    def end(self) -> int:
        return self.start + self.dur


@dataclass
class Cfg:
    scenario: str
    vendor: str
    ranks: int
    layers: int
    batch_size: int
    seed: int
    straggler: tuple[int, float] | None = None
    host_stall_us: float = 0.0
    slow_kernel: tuple[str, float] | None = None
    t0_ns: int = 1_765_432_100_000_000_000
    slow_re: Any = None
    graph_nodes: bool = False  # write Kineto's `graph id` / `graph node id` and mark_kernels annotations
    slow_node: tuple[int, float] | None = None  # (graph body index, factor): that replayed node runs slower
    fuse: tuple[str, ...] | None = None  # a fusion pattern's step regexes: its chains run fused
    fuse_re: tuple = ()

    def __post_init__(self) -> None:
        if self.slow_kernel:
            self.slow_re = re.compile(self.slow_kernel[0])
        self.fuse_re = tuple(re.compile(x) for x in self.fuse or ())
