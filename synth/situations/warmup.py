"""Warm-up situations: one-time setup inside the profiled window, and a launch slowed by module loading.

Real traces from the field were read as if their first iteration were the steady state: CUDA context
creation, allocator growth (cudaFree 1.02 s), a 720 ms cudaEventCreate and a 1.57 s first launch became
"the GPU idles 81 %, host-bound" with advice to overlap the next step's preparation, while the steady
steps were 64 % busy; and the Runtime Triggered Module Loading record inside a first cudaLaunchKernel
(34.5 ms) was called GPU queueing ("queued behind unseen work or clock offset").

Each situation here is *executed* by a small simulator (`_Sim`): a host thread whose clock advances
through its calls, and GPU streams on which an activity starts when the stream is free and its launch
call has enqueued it (a fixed driver latency after the enqueue point inside the call). The simulator
writes the trace through a Timeline and keeps the schedule; the ground truth (which steps are warm-up,
the setup time, the steady steps' GPU busy share, the first launch's delay) is computed from that
schedule, never from the rules under test.

expect keys read by tests/test_warmup.py:
  warmup_steps            the steps the simulation ran as its first iteration with one-time setup ([]: none)
  setup_ns                the host time of the one-time calls the program made (they do not overlap)
  setup_calls             {what: ns} of each one-time call, as the flag's message names it
  steady_busy             {step: GPU busy / the step's GPU window} of each steady step, from the
                          simulated timeline
  steady_steps            the steps that are not warm-up (the report must show one of these)
  step_marks              whether the trace marks steps (False: one whole-trace step)
  first_launch_call_ns    {step: ns} the duration of the step's first launch call (host-side launch delay)
  gpu_queued              {step: bool} whether the step's first activity waited on the GPU after its
                          launch call returned (from the simulated enqueue and stream times)
"""

from __future__ import annotations

from pathlib import Path

from ..intervals import union_ns
from . import situation
from .timeline import Timeline

US = 1_000
MS = 1_000_000
LATENCY = 2 * US  # from the enqueue point inside a launch call to the activity's earliest start
GEMM = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_tn"
NORM = "void at::native::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float)"


class _Sim:
    """One host thread and its GPU streams, executed in program order (integer ns)."""

    def __init__(self, tl: Timeline):
        self.tl = tl
        self.h = 0  # the host clock
        self.ready: dict[int, int] = {}  # stream -> when it is free
        self.acts: list[tuple[int, int, int]] = []  # (start, end, step) of every GPU activity
        self.setup: list[tuple[str, int, int]] = []  # (what, start, dur) of each one-time call
        self.first_call: dict[
            int, tuple[int, int, int]
        ] = {}  # step -> first launch (call start, dur, gpu start)
        self.step = -1

    def call(self, name: str, dur: int, *, one_time: str | None = None) -> None:
        """A runtime call that holds the host for `dur` (one_time: what it sets up, for the truth)."""
        self.tl.call(name, self.h, self.h + dur)
        if one_time:
            self.setup.append((one_time, self.h, dur))
        self.h += dur

    def host(self, dur: int) -> None:
        self.h += dur

    def launch(
        self,
        name: str,
        gpu_dur: int,
        *,
        stream: int = 7,
        module_load: int = 0,
        lazy_init: int = 0,
        op: str = "aten::mm",
    ) -> None:
        """cudaLaunchKernel inside an aten op. The call enqueues the activity 2 us after it starts, plus
        the module loading (a Runtime Triggered Module Loading record inside the call) or the lazy
        initialization (no record: an older CUPTI) that it does first; it returns 5 us after the enqueue."""
        start = self.h
        enqueue = start + 2 * US + module_load + lazy_init
        call_dur = enqueue + 5 * US - start
        self.tl.op(op, start - 1 * US, start + call_dur + 1 * US)
        gpu_start = max(enqueue + LATENCY, self.ready.get(stream, 0))
        self.tl.launch(name, start, gpu_start, gpu_dur, stream=stream, call_dur=call_dur)
        if module_load:
            r = self.tl.op(
                "Runtime Triggered Module Loading",
                start + 2 * US,
                start + 2 * US + module_load,
                cat="overhead",
                tid=0,
            )
            r.pid = -1
            self.setup.append(("module loading", start + 2 * US, module_load))
        if lazy_init:
            self.setup.append(("cudaLaunchKernel", start, call_dur))
        self.ready[stream] = gpu_start + gpu_dur
        self.acts.append((gpu_start, gpu_start + gpu_dur, self.step))
        self.first_call.setdefault(self.step, (start, call_dur, gpu_start))
        self.h = start + call_dur + 1 * US

    def sync(self, stream: int = 7) -> None:
        """cudaStreamSynchronize: returns 1 us after the stream drains."""
        start = self.h
        end = max(start + 2 * US, self.ready.get(stream, 0) + 1 * US)
        self.tl.stream_sync(start, end, stream)
        self.h = end

    def run_step(self, step: int, body, *, mark: bool) -> tuple[int, int]:
        """One iteration: `body(self)`; a ProfilerStep#N around it when `mark`. Its host window."""
        self.step = step
        s0 = self.h
        self.h += 5 * US
        body(self)
        self.h += 5 * US
        if mark:
            self.tl.op(f"ProfilerStep#{step}", s0, self.h, cat="user_annotation")
        return s0, self.h

    def busy_share(self, step: int, host: tuple[int, int]) -> float:
        """The device's busy time (union of every activity) in the step's GPU window, over that window: the
        window ends at the step's last GPU end and starts at the end of the earlier steps' GPU work where
        the host began the step before it ended, else at the step's first GPU start (the one GPU busy %)."""
        spans = [(a, b) for a, b, s in self.acts if s == step]
        earlier = [b for _, b, s in self.acts if s < step]
        gpu_start, gpu_end = min(a for a, _ in spans), max(b for _, b in spans)
        lo = min(max(earlier), gpu_end) if earlier and host[0] < max(earlier) else gpu_start
        busy = union_ns([(a, b) for a, b, _ in self.acts], lo, gpu_end)
        return busy / (gpu_end - lo)


def _steady(sim: _Sim) -> None:
    """A steady iteration: 8 launches (a GEMM of 60 us, a norm of 20 us, alternating), the host preparing
    each for 40 us in its op, then a sync: the GPU is busy about three quarters of the
    step's wall and 87 % of its GPU window."""
    for i in range(8):
        sim.host(40 * US)
        sim.launch(GEMM if i % 2 == 0 else NORM, 60 * US if i % 2 == 0 else 20 * US)
    sim.sync()


def _first_iteration(sim: _Sim) -> None:
    """The first iteration: context creation and allocator growth before the first launch, a first
    launch that loads its kernel lazily (1.57 s inside the call), then the steady body."""
    sim.call("cudaFree", 1_020 * MS, one_time="cudaFree")  # cudaFree(0): context creation, pool growth
    sim.host(30 * US)
    sim.call("cudaEventCreateWithFlags", 720 * MS, one_time="cudaEventCreateWithFlags")
    sim.host(30 * US)
    sim.call("cudaMalloc", 5 * MS, one_time="cudaMalloc")  # the caching allocator's first block
    sim.host(40 * US)
    sim.launch(GEMM, 60 * US, lazy_init=1_570 * MS)
    _steady(sim)


def _warmup_run(out: Path, *, mark: bool) -> dict:
    tl = Timeline()
    sim = _Sim(tl)
    hosts = {0: sim.run_step(0, _first_iteration, mark=mark)}
    for step in range(1, 5):
        sim.host(20 * US)
        hosts[step] = sim.run_step(step, _steady, mark=mark)
    tl.write(out / "rank-0.pt.trace.json.gz")
    setup: dict[str, int] = {}
    for what, _, dur in sim.setup:
        setup[what] = setup.get(what, 0) + dur
    if not mark:
        return {
            "warmup_steps": [],
            "setup_ns": sum(setup.values()),
            "setup_calls": setup,
            "steady_busy": {},
            "steady_steps": [],
            "step_marks": False,
        }
    return {
        "warmup_steps": [0],
        "setup_ns": sum(setup.values()),
        "setup_calls": setup,
        "steady_busy": {str(s): sim.busy_share(s, hosts[s]) for s in range(1, 5)},
        "steady_steps": [1, 2, 3, 4],
        "step_marks": True,
        "first_launch_call_ns": {str(s): sim.first_call[s][1] for s in hosts},
        "gpu_queued": {
            str(s): sim.first_call[s][2] - (sim.first_call[s][0] + sim.first_call[s][1]) >= MS for s in hosts
        },
    }


@situation(
    "warmup-in-window",
    "a training loop profiled from its first iteration: context creation (cudaFree 1.02 s), a 720 ms "
    "cudaEventCreate, allocator growth and a 1.57 s first launch, then four steady steps about three "
    "quarters GPU-busy: the report must show a steady step and draw nothing from the setup",
)
def warmup_in_window(out: Path) -> dict:
    return _warmup_run(out, mark=True)


@situation(
    "warmup-whole-trace",
    "the same program without step markers: the one whole-trace step holds the one-time setup, so its "
    "host setup and idle figures are not the steady state's and no takeaway is drawn from them",
)
def warmup_whole_trace(out: Path) -> dict:
    return _warmup_run(out, mark=False)


@situation(
    "module-loading-in-launch",
    "the first cudaLaunchKernel of a run loads its kernel's module inside the call (a 34.5 ms Runtime "
    "Triggered Module Loading record) and its kernel starts before the call returns: launch delay, not GPU "
    "queueing",
)
def module_loading_in_launch(out: Path) -> dict:
    tl = Timeline()
    sim = _Sim(tl)

    def first(s: _Sim) -> None:
        s.host(40 * US)
        s.launch(GEMM, 60 * US, module_load=34_500 * US)
        _steady(s)

    hosts = {0: sim.run_step(0, first, mark=True)}
    for step in range(1, 4):
        sim.host(20 * US)
        hosts[step] = sim.run_step(step, _steady, mark=True)
    tl.write(out / "rank-0.pt.trace.json.gz")
    setup: dict[str, int] = {}
    for what, _, dur in sim.setup:
        setup[what] = setup.get(what, 0) + dur
    _, call_dur, _ = sim.first_call[0]
    return {
        "warmup_steps": [0],
        # the module loading lies inside the first launch call, which is itself a slow first launch: the
        # one-time time is that call's (the union of the two)
        "setup_ns": call_dur,
        "setup_calls": setup,
        "steady_busy": {str(s): sim.busy_share(s, hosts[s]) for s in range(1, 4)},
        "steady_steps": [1, 2, 3],
        "step_marks": True,
        "first_launch_call_ns": {str(s): sim.first_call[s][1] for s in hosts},
        "gpu_queued": {
            str(s): sim.first_call[s][2] - (sim.first_call[s][0] + sim.first_call[s][1]) >= MS for s in hosts
        },
    }
