"""Host waits on the GPU that no CUDA call names (issue 37): a host thread spin-waiting inside a library call
until GPU work ends, a blocking device-to-host copy (under 1 ms) held by a collective on another stream
through a wait the trace does not record, and a graph launch whose call blocks until a pipeline receive on
its stream ends.

The trace is written by a small discrete-event simulation (`_Sim`), not placed by hand: one host thread
issues calls in program order; each stream runs its activities in order, each starting when its launch
was submitted, its stream is free and the work it waits on has ended; a spin-wait, a blocking copy and a
blocked launch return when the GPU work they wait on ends. Every start and every return keeps its cause
(the one constraint that was satisfied last), so the ground truth (`expect`) is what the simulation did:
the GPU activities on each step's critical path, and each wait with the activity it waited for.

In `blocking-copy-waits-on-collective` the copy's stream is GPU-bound (its pace is about a microsecond), so
the inferred-wait rule found this 0.87 ms wait before the blocking-copy rule too. In
`blocking-copy-on-a-waiting-stream` the copy runs on a copy stream whose other copies (offloads, each
waiting unrecorded for the compute stream) start long after their launch: that stream's own pace is long,
longer than half the blocking copy's wait, so its resume window alone cannot tell this wait from its pace.

expect keys read by tests/test_host_waits.py:
  steps                 number of steps
  path_gpu[step]        names of the GPU activities on the step's critical path (walked back from its
                        last-ending activity along the causes)
  waits[step]           [[waiter, awaited]]: the host call (or activity) held and the activity it waited
                        for, each on the path
"""

from __future__ import annotations

from pathlib import Path

from . import situation
from .timeline import Timeline

US = 1_000
GEMM = "void cutlass_gemm_bf16_128x128()"
NORM = "void rmsnorm_kernel<bf16>()"
NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
RECV = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"


class _Sim:
    """One host thread and its streams; `cause` maps every node to what it waited for last."""

    def __init__(self) -> None:
        self.tl = Timeline()
        self.h = 0
        self.ready: dict[int, int] = {}
        self.last: dict[int, object] = {}
        self.pending: dict[int, object] = {}  # stream -> activity its next activity waits for (unrecorded)
        self.cause: dict[int, tuple] = {}  # id(node) -> ("gpu" | "call", node) of its last dependency
        self.prev_call = None
        self.label: dict[int, str] = {}
        self.stream_prev: dict[int, object] = {}

    def _call_done(self, call, waited=None) -> None:
        self.cause[id(call)] = ("gpu", waited) if waited is not None else ("call", self.prev_call)
        self.label[id(call)] = call.name
        self.prev_call = call

    def _run(self, g, stream: int, submit: int, submit_cause: tuple) -> None:
        """Place activity g: it starts at the latest of its submission, its stream's previous end and the
        end of the work it waits on (+ the device's reaction), keeping which one that was."""
        cands = [(submit, 2, submit_cause)]
        if stream in self.last:
            cands.append((self.ready[stream] + 1_200, 0, ("gpu", self.last[stream])))
        dep = self.pending.pop(stream, None)
        if dep is not None:
            cands.append((dep.end + 1_500, 1, ("gpu", dep)))
        start, _, cause = max(cands, key=lambda c: (c[0], -c[1]))
        dur = g.end - g.start
        g.start, g.end = start, start + dur
        self.cause[id(g)] = cause
        self.label[id(g)] = g.name
        self.ready[stream] = g.end
        self.last[stream] = g

    def launch(self, name: str, stream: int, dur: int, think: int = 3 * US) -> object:
        g = self.tl.launch(name, self.h, 0, dur, stream=stream, call_dur=4 * US)
        self._call_done(g.call, self._held)
        self._held = None
        self._run(g, stream, g.call.end + 2_500, ("call", g.call))
        self.h = g.call.end + think
        return g

    _held = None

    def spin(self, op: str, stream: int) -> object:
        """The host polls inside library call `op` until `stream`'s last work ends (no CUDA call)."""
        awaited = self.last[stream]
        resume = max(self.h + 20 * US, awaited.end + 2 * US)
        self.tl.op(op, self.h, resume + 1 * US)
        self._held = awaited  # the thread's next call waited for it
        self.h = resume + 2 * US
        return awaited

    def blocking_copy(self, stream: int, waits_on) -> object:
        """cudaMemcpy device-to-host: the copy waits (unrecorded) for `waits_on`; the call returns after it."""
        self.pending[stream] = waits_on
        c = self.tl.op("aten::_local_scalar_dense", self.h, 0)
        g = self.tl.launch(
            "Memcpy DtoH (Device -> Pinned)",
            self.h + 1 * US,
            0,
            3 * US,
            stream=stream,
            kind="memcpy",
            call="cudaMemcpy",
            call_dur=1,
        )
        self.cause[id(g.call)] = ("call", self.prev_call)  # the issuing part follows program order
        self._run(g, stream, g.call.start + 2_000, ("call", g.call))
        g.call.end = g.end + 2 * US  # returns once its copy is done
        self.cause[id(g.call)] = ("gpu", g)
        self.label[id(g.call)] = g.call.name
        self.prev_call = g.call
        c.end = g.call.end + 1 * US
        self.h = c.end + 2 * US
        return g

    def async_copy(self, stream: int, waits_on) -> object:
        """cudaMemcpyAsync device-to-host on `stream` that waits (unrecorded) for `waits_on` (an offload of
        the activation it produced); the host does not wait."""
        self.pending[stream] = waits_on
        g = self.tl.launch(
            "Memcpy DtoH (Device -> Pinned)",
            self.h,
            0,
            40 * US,
            stream=stream,
            kind="memcpy",
            call_dur=4 * US,
        )
        self._call_done(g.call)
        self._run(g, stream, g.call.end + 2_000, ("call", g.call))
        self.h = g.call.end + 3 * US
        return g

    def held_graph_launch(self, kernels: list[tuple[str, int, int]]) -> tuple[object, list]:
        """cudaGraphLaunch on the stream of kernels[0] that returns only once that stream's previous work
        (a pipeline receive) ends; the replay's activities are submitted at that return."""
        stream = kernels[0][1]
        awaited = self.last[stream]
        gs = self.tl.graph(self.h, [(n, s, 0, d) for n, s, d in kernels], call_dur=4 * US)
        call = gs[0].call
        call.end = max(call.end, awaited.end + 3 * US)
        self._call_done(call, self._held)
        self._held = None
        self.cause[id(call)] = ("gpu", awaited)
        submit = call.end - 2 * US  # submitted when the receive ended, before the call returned
        for i, g in enumerate(gs):
            self._run(
                g,
                g.stream,
                submit + i * 500,
                ("gpu", awaited) if awaited.end > call.start else ("call", call),
            )
        self.h = call.end + 3 * US
        return awaited, gs

    def truth(self, acts: list, s0: int) -> tuple[list[str], list[list[str]]]:
        """Walk back from the last-ending activity along each node's cause, within the step (from s0)."""
        node = max(acts, key=lambda g: (g.end, g.start))
        gpu, waits = [], []
        in_step = {id(a) for a in acts}
        while node is not None:
            is_gpu = not hasattr(node, "cat")
            if (is_gpu and id(node) not in in_step) or (not is_gpu and node.start < s0):
                break
            if is_gpu:
                gpu.append(node.name)
            kind, pred = self.cause.get(id(node), (None, None))
            if (
                kind == "gpu"
                and pred is not None
                and (not is_gpu or self.cause[id(node)] != ("gpu", self.last_on(node)))
            ):
                waits.append([self.label[id(node)], pred.name])
            node = pred
        return gpu[::-1], waits[::-1]

    def last_on(self, g):  # stream predecessor causes are stream order, not waits
        return self.stream_prev.get(id(g))


def _prev_on_stream(acts: list) -> dict:
    out, last = {}, {}
    for g in sorted(acts, key=lambda g: g.start):
        out[id(g)] = last.get(g.stream)
        last[g.stream] = g
    return out


def _steps(write_step, steps: int = 2) -> tuple[Timeline, dict]:
    sim = _Sim()
    path_gpu, waits = {}, {}
    for step in range(steps):
        s0 = sim.h
        op = sim.tl.op(f"ProfilerStep#{step}", s0, 0, cat="user_annotation")
        sim.h += 10 * US
        before = len(sim.tl.gpu)
        write_step(sim)
        acts = sim.tl.gpu[before:]
        sim.stream_prev = _prev_on_stream(sim.tl.gpu)
        path_gpu[str(step)], waits[str(step)] = sim.truth(acts, s0)
        op.end = max(sim.h, max(g.end for g in acts)) + 20 * US
        sim.h = op.end + 30 * US
    return sim.tl, {"steps": steps, "path_gpu": path_gpu, "waits": waits}


def _gemms(sim: _Sim, n: int, stream: int = 7) -> None:
    for i in range(n):
        sim.launch(GEMM if i % 2 == 0 else NORM, stream, 60 * US if i % 2 == 0 else 20 * US)


@situation(
    "spin-wait-in-library",
    "an expert-parallel dispatch library spins on the host (no CUDA call) until the GPU work queued "
    "before it ends, while the GPU is busy; then the host launches the next layer",
)
def spin_wait_in_library(out: Path) -> dict:
    def step(sim: _Sim) -> None:
        _gemms(sim, 12)
        sim.spin("ep_dispatch::wait_for_recv_counts", 7)
        _gemms(sim, 6)

    tl, expect = _steps(step)
    tl.write(out / "rank-0.pt.trace.json.gz")
    return expect


@situation(
    "blocking-copy-waits-on-collective",
    "a blocking device-to-host cudaMemcpy (the loss value) held 0.87 ms by an all-reduce on the "
    "communication stream through a wait the trace does not record",
)
def blocking_copy_waits_on_collective(out: Path) -> dict:
    def step(sim: _Sim) -> None:
        _gemms(sim, 4)
        coll = sim.launch(NCCL, 13, 0)
        coll.end = coll.start + 0  # placed below: it waits for a peer
        _gemms(sim, 2)
        copy_issue = sim.h + 1 * US
        coll.end = copy_issue + 870 * US - 1_500 - 2_000  # the copy starts 0.87 ms after its issue
        sim.ready[13] = coll.end
        sim.blocking_copy(7, coll)
        _gemms(sim, 2)

    tl, expect = _steps(step)
    tl.write(out / "rank-0.pt.trace.json.gz")
    return expect


@situation(
    "graph-launch-held-by-recv",
    "a pipeline stage's cudaGraphLaunch blocks 0.79 ms until the receive on its stream (waiting for the "
    "previous stage) ends; the replay's branch on a second stream starts only then",
)
def graph_launch_held_by_recv(out: Path) -> dict:
    def step(sim: _Sim) -> None:
        _gemms(sim, 2)
        sim.launch(RECV, 7, 790 * US)
        sim.held_graph_launch([(GEMM, 7, 40 * US), (GEMM.replace("128x128", "64x64"), 9, 300 * US)])
        _gemms(sim, 1)

    tl, expect = _steps(step)
    tl.write(out / "rank-0.pt.trace.json.gz")
    return expect


COPY_STREAM = 20


@situation(
    "blocking-copy-on-a-waiting-stream",
    "a blocking device-to-host cudaMemcpy held 0.87 ms by an all-reduce, on a copy stream whose other "
    "copies (activation offloads) each wait about 0.5 ms, unrecorded, for the compute stream: the copy "
    "stream's own pace is longer than half this wait",
)
def blocking_copy_on_a_waiting_stream(out: Path) -> dict:
    def step(sim: _Sim) -> None:
        for _ in range(2):
            _gemms(sim, 14)
            sim.async_copy(COPY_STREAM, sim.last[7])  # offload the activation the last GEMM wrote
        coll = sim.launch(NCCL, 13, 0)
        _gemms(sim, 2)
        # the copy starts 0.87 ms after the later of its issue and its stream's previous copy
        free = max(sim.h + 1 * US + 2_000, sim.ready[COPY_STREAM] + 1_200)
        coll.end = free + 870 * US - 1_500
        sim.ready[13] = coll.end
        sim.blocking_copy(COPY_STREAM, coll)
        _gemms(sim, 2)

    tl, expect = _steps(step, steps=3)
    tl.write(out / "rank-0.pt.trace.json.gz")
    return expect
