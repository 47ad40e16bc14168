"""Steps as a serving engine runs them, not one per graph launch, and their GPU busy % in the GPU window.

Field results: on vLLM with piecewise CUDA graphs (tens of graph launches per engine step) the report
showed hundreds of 1 ms "steps" at 15 % GPU utilization where the engine ran 10 steps at 82-94 % busy;
on an SGLang decode trace the card said 2 % GPU utilization of a 474 ms step while the device was 93.5 %
busy: the host of an async engine enqueues a step long before the GPU runs it, and busy / host wall
counted that launch-ahead as idle GPU.

Each situation here is *simulated* (EngineSim below): the host clock advances call by call, and every GPU
activity starts at max(its launch call + LAUNCH_LATENCY, its stream free), so queueing, launch-ahead and
host-bound gaps come out of the schedule, not from the rule under test. The ground truth is read off
the simulated schedule: which engine step launched each activity, each step's GPU window (from the end
of the previous step's GPU work when the host began the step before that end, else from the step's own
first GPU start, to the step's last GPU end) and the device's busy time (union of every activity) in it.

- `vllm-piecewise-graphs`: a synchronous vLLM v1 engine with Python stacks: `core.py: step` ->
  `gpu_model_runner.py: execute_model`; inside, 32 layers as 32 piecewise graph launches with eager
  attention between them, one prefill step and nine decode steps; vLLM's
  `execute_context_<c>(..)_generation_<g>(..)` annotation around the forward states the phase.
- `vllm-piecewise-graphs-bare`: the same engine without that annotation (the field trace): steps from
  `execute_model` frames alone, phase unknown.
- `async-launch-ahead`: an SGLang overlap-scheduler loop: `step[EXTEND ..]` then `step[DECODE ..]`
  annotations; in step i the host launches step i's graph, then blocks until step i-1's result is on
  the host, so its host window opens while the GPU still runs step i-1.
- `host-bursts`: no step marker at all: six repeating bursts of eager launches (and one graph launch
  each) separated by host idle (a blocking sync and host work): six steps, the graph launch inside its
  burst's step.
"""

from __future__ import annotations

from pathlib import Path

from ..intervals import union_ns
from . import situation
from .timeline import Timeline

US = 1_000
LAUNCH_LATENCY = 3 * US  # from a launch call's start to the earliest start of its activity
CALL = 5 * US  # a kernel launch call on the host
GRAPH_CALL = 15 * US  # a graph launch call on the host

GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off"
NORM = "void vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, c10::BFloat16*, long, float, int, int)"
ATTN = "void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false>, true>"
SAMPLE = "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, at::native::(anonymous namespace)::SoftMaxForwardEpilogue>"
ELEM = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<long>, std::array<char*, 1> >"
)


class EngineSim:
    """One host thread and its streams, simulated in integer ns; records each activity's engine step."""

    def __init__(self, tl: Timeline):
        self.tl = tl
        self.t = 0  # the host clock
        self.free: dict[int, int] = {}  # stream -> when its last activity ends
        self.acts: list[tuple[int, int, int]] = []  # (engine step, start, end)
        self.host_start: dict[int, int] = {}  # engine step -> when the host began it

    def host(self, ns: int) -> None:
        self.t += ns

    def _start(self, call_at: int, stream: int) -> int:
        return max(call_at + LAUNCH_LATENCY, self.free.get(stream, 0))

    def launch(self, step: int, name: str, dur: int, stream: int = 7) -> None:
        start = self._start(self.t, stream)
        self.tl.launch(name, self.t, start, dur, stream=stream, call_dur=CALL)
        self.free[stream] = start + dur
        self.acts.append((step, start, start + dur))
        self.t += CALL

    def graph(self, step: int, kernels: list[tuple[str, int]], stream: int = 7) -> None:
        start = self._start(self.t, stream)
        placed = []
        for name, dur in kernels:
            placed.append((name, stream, start, dur))
            self.acts.append((step, start, start + dur))
            start += dur
        self.tl.graph(self.t, placed, call_dur=GRAPH_CALL)
        self.free[stream] = start
        self.t += GRAPH_CALL

    def wait_until(self, gpu_t: int, stream: int = 7) -> None:
        """The host blocks (cudaStreamSynchronize) until the GPU reaches gpu_t."""
        end = max(self.t + 2 * US, gpu_t + 2 * US)
        self.tl.stream_sync(self.t, end, stream)
        self.t = end

    def step_end(self, step: int) -> int:
        return max(e for s, _, e in self.acts if s == step)

    def truth(self, phases: dict[int, str]) -> dict:
        """Per engine step: phase, GPU window and the device's busy % in it, from the schedule."""
        out = {}
        prev_end = None
        for step in sorted(phases):
            mine = [(s, e) for k, s, e in self.acts if k == step]
            gpu_start, gpu_end = min(s for s, _ in mine), max(e for _, e in mine)
            began_before = prev_end is not None and self.host_start[step] < prev_end
            w_start = min(prev_end, gpu_end) if began_before else gpu_start
            busy = union_ns([(s, e) for _, s, e in self.acts], w_start, gpu_end)
            out[str(step)] = {
                "phase": phases[step],
                "activities": len(mine),
                "gpu_window_start_ns": w_start,
                "gpu_window_ns": gpu_end - w_start,
                "gpu_busy_pct": 100.0 * busy / (gpu_end - w_start),
                "host_start_ns": self.host_start[step],
            }
            prev_end = gpu_end if prev_end is None else max(prev_end, gpu_end)
        return out


def _vllm(out: Path, annotate: bool) -> dict:
    tl = Timeline()
    sim = EngineSim(tl)
    layers = 32
    phases = {0: "prefill"} | {i: "decode" for i in range(1, 10)}
    for step, phase in phases.items():
        sim.host(900 * US if step else 200 * US)  # the scheduler between engine steps
        sim.host_start[step] = sim.t
        outer = sim.t
        sim.host(40 * US)
        runner = sim.t
        sim.host(250 * US)  # _prepare_inputs
        sim.launch(step, ELEM, 6 * US)
        fwd = sim.t
        gemm, attn = (380 * US, 210 * US) if phase == "prefill" else (22 * US, 9 * US)
        for _ in range(layers):
            sim.graph(step, [(GEMM, gemm), (NORM, 4 * US), (GEMM, gemm // 2)])
            op = sim.t
            sim.host(40 * US)  # eager attention: Python around its launch (host-bound in decode)
            sim.launch(step, ATTN, attn)
            tl.op("vllm::unified_attention", op, sim.t)
        fwd_end = sim.t
        sim.launch(step, SAMPLE, 15 * US)
        sim.wait_until(sim.free[7])  # the sampled tokens back on the host: a synchronous engine
        sim.host(60 * US)
        if annotate:
            ctx, gen = (4, 0) if phase == "prefill" else (0, 4)
            q = 2048 if phase == "prefill" else 4
            name = f"execute_context_{ctx}({q if ctx else 0})_generation_{gen}({q if gen else 0})"
            tl.op(name, fwd - 1 * US, fwd_end, cat="user_annotation")
        tl.frame("vllm/v1/worker/gpu_model_runner.py", 2145, "execute_model", runner, sim.t - 10 * US)
        tl.frame("vllm/v1/engine/core.py", 236, "step", outer, sim.t)
        sim.host(10 * US)
    tl.write(out / "rank-0.pt.trace.json.gz")
    truth = sim.truth(phases if annotate else dict.fromkeys(phases, "unknown"))
    return {"engine_steps": {"source": "vllm_execute_model", "steps": truth}}


@situation(
    "vllm-piecewise-graphs",
    "a synchronous vLLM engine with piecewise CUDA graphs (32 graph launches per step): 10 engine steps "
    "(execute_model), one prefill and nine decodes, phase from vLLM's execute_context_.. annotation; busy % "
    "of each step in its GPU window",
)
def vllm_piecewise_graphs(out: Path) -> dict:
    return _vllm(out, annotate=True)


@situation(
    "vllm-piecewise-graphs-bare",
    "the vLLM engine with piecewise CUDA graphs and no serving annotation: 10 steps from the execute_model "
    "frames alone, never one per graph launch",
)
def vllm_piecewise_graphs_bare(out: Path) -> dict:
    return _vllm(out, annotate=False)


@situation(
    "async-launch-ahead",
    "an SGLang overlap scheduler: the host opens step i while the GPU still runs step i-1, so the step's "
    "GPU window starts at the end of step i-1's GPU work, and the launch-ahead is not GPU idle",
)
def async_launch_ahead(out: Path) -> dict:
    tl = Timeline()
    sim = EngineSim(tl)
    phases = {0: "prefill"} | {i: "decode" for i in range(1, 8)}
    for step, phase in phases.items():
        sim.host_start[step] = sim.t
        start = sim.t
        # host preparation; step 4's is slow (host-bound: the device runs dry inside step 4's window)
        sim.host((5200 if step == 4 else 300) * US)
        sim.launch(step, ELEM, 8 * US)
        if phase == "prefill":
            for _ in range(8):
                sim.launch(step, GEMM, 1500 * US)
                sim.launch(step, ATTN, 700 * US)
        else:
            sim.graph(step, [(GEMM, 140 * US), (ATTN, 60 * US), (NORM, 5 * US)] * 16)
        if step:
            sim.wait_until(sim.step_end(step - 1))  # resolve the previous batch's tokens
        sim.host(120 * US)
        sim.launch(step, SAMPLE, 20 * US)
        sim.host(40 * US)
        label = "EXTEND bs=4 toks=2048" if phase == "prefill" else "DECODE bs=4"
        tl.op(f"step[{label}]", start, sim.t, cat="user_annotation")
        sim.host(5 * US)
    tl.write(out / "rank-0.pt.trace.json.gz")
    return {"engine_steps": {"source": "sglang_step", "steps": sim.truth(phases)}}


@situation(
    "host-bursts",
    "no step marker: six repeating bursts of launches (one graph launch in each) separated by host idle "
    "are six steps; a graph launch is never a step by itself",
)
def host_bursts(out: Path) -> dict:
    tl = Timeline(with_stack=False)
    sim = EngineSim(tl)
    phases = dict.fromkeys(range(6), "unknown")
    for step in phases:
        sim.host_start[step] = sim.t
        for i in range(24):
            sim.launch(step, GEMM if i % 2 else NORM, (90 if i % 2 else 8) * US)
            sim.host(4 * US + (i % 3) * US)  # Python between launches: 4-6 us
            if i == 11:
                sim.graph(step, [(GEMM, 60 * US), (ATTN, 30 * US)])
        sim.wait_until(sim.free[7])
        sim.host(3000 * US)  # host work with no launch: the gap between bursts
    tl.write(out / "rank-0.pt.trace.json.gz")
    return {"engine_steps": {"source": "host_burst", "steps": sim.truth(phases)}}
